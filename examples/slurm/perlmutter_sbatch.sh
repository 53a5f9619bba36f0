#!/usr/bin/env bash
# hvdcore MNIST on a Perlmutter-like HPE Cray EX GPU partition (4x A100 per node).
#
# -C gpu selects GPU nodes, GPU jobs use the project's "_g" account, one rank per GPU with
# 32 cores each (SLURM_CPU_BIND=cores). Submit from the repository root:
#     sbatch examples/slurm/perlmutter_sbatch.sh
# Set VENV_DIR to use a virtual environment (e.g. on $SCRATCH) instead of the modules.
#SBATCH --job-name=hvdcore-mnist
#SBATCH --constraint=gpu
#SBATCH --qos=regular
#SBATCH --account=m0000_g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=32
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out
set -euo pipefail

if [ -n "${VENV_DIR:-}" ]; then
    # shellcheck source=/dev/null
    source "$VENV_DIR/bin/activate"
else
    module load PrgEnv-gnu cudatoolkit/12.2 craype-accel-nvidia80 hvdcore/0.2.0
    export MPICH_GPU_SUPPORT_ENABLED=1
fi
cd "${SLURM_SUBMIT_DIR:-.}"
export SLURM_CPU_BIND="cores"
HVDCORERUN="$(command -v hvdcorerun || echo python3 -m hvdcore.runner)"

$HVDCORERUN --check-build --require "${REQUIRE:-mpi,torch}"

srun --mpi=pmix python3 examples/pytorch_mnist.py \
    --epochs "${EPOCHS:-1}" --batch-size 64 --lr 0.05 --seed 1234 \
    --max-steps-per-epoch "${STEPS:-100}"
