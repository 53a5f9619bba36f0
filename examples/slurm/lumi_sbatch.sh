#!/usr/bin/env bash
# hvdcore MNIST on a LUMI-like HPE Cray EX partition with AMD MI250X GPUs (ROCm).
#
# standard-g nodes: 4x MI250X = 8 GPU dies (GCDs), one rank per GCD; each rank is bound to the
# CPU cores closest to its GCD (the mask below is LUMI-G's topology, applied only there), and
# RCCL talks over the Slingshot NICs. Submit from the repository root:
#     sbatch examples/slurm/lumi_sbatch.sh
# Set VENV_DIR to use a virtual environment instead of the modules.
#SBATCH --job-name=hvdcore-mnist
#SBATCH --account=project_465000000
#SBATCH --partition=standard-g
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out
set -euo pipefail

if [ -n "${VENV_DIR:-}" ]; then
    # shellcheck source=/dev/null
    source "$VENV_DIR/bin/activate"
else
    module load LUMI/23.09 partition/G hvdcore/0.2.0-cpeGNU-23.09-rocm-5.6.1
fi
cd "${SLURM_SUBMIT_DIR:-.}"
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3
export NCCL_NET_GDR_LEVEL=3
export MIOPEN_USER_DB_PATH="/tmp/${USER:-user}-miopen-cache-${SLURM_JOB_ID}"
export MIOPEN_CUSTOM_CACHE_DIR="$MIOPEN_USER_DB_PATH"

CPU_BIND=()
if [ "${SLURM_JOB_PARTITION:-}" = "standard-g" ]; then
    # GCD i is closest to these 7-core groups (LUMI-G topology).
    CPU_BIND=(--cpu-bind="mask_cpu:fe000000000000,fe00000000000000,fe0000,fe000000,fe,fe00,fe00000000,fe0000000000")
fi
HVDCORERUN="$(command -v hvdcorerun || echo python3 -m hvdcore.runner)"

$HVDCORERUN --check-build --require "${REQUIRE:-mpi,torch}"

srun --mpi=pmix "${CPU_BIND[@]}" python3 examples/pytorch_mnist.py \
    --epochs "${EPOCHS:-1}" --batch-size 64 --lr 0.05 --seed 1234 \
    --max-steps-per-epoch "${STEPS:-100}"
