#!/usr/bin/env bash
# hvdcore MNIST on an Alvis-like cluster (C3SE style): GPU-only, typed GPU requests.
#
# The site's job_submit filter rejects jobs that do not ask for GPUs of a named type, so the
# request says --gpus-per-node=<TYPE>:<N>; one rank per GPU. Submit from the repository root:
#     sbatch examples/slurm/alvis_jobsubmit.sh
# Set VENV_DIR to use a virtual environment instead of the site modules.
#SBATCH --job-name=hvdcore-mnist
#SBATCH --account=NAISS2024-0-000
#SBATCH --partition=alvis
#SBATCH --nodes=2
#SBATCH --gpus-per-node=A100:4
#SBATCH --ntasks-per-node=4
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out
set -euo pipefail

if [ -n "${VENV_DIR:-}" ]; then
    # shellcheck source=/dev/null
    source "$VENV_DIR/bin/activate"
else
    module purge
    module load PyTorch/2.1.2-foss-2023a-CUDA-12.1.1 hvdcore/0.2.0-foss-2023a-CUDA-12.1.1
fi
cd "${SLURM_SUBMIT_DIR:-.}"
HVDCORERUN="$(command -v hvdcorerun || echo python3 -m hvdcore.runner)"

# Fail early, with the reason, when this node lacks what the job needs.
$HVDCORERUN --check-build --require "${REQUIRE:-mpi,torch}"

# One rank per GPU (or per task on CPU-only allocations), PMIx wire-up through srun.
srun --mpi=pmix python3 examples/pytorch_mnist.py \
    --epochs "${EPOCHS:-1}" --batch-size 64 --lr 0.05 --seed 1234 \
    --max-steps-per-epoch "${STEPS:-100}"
