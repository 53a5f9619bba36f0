#!/usr/bin/env bash
# The GPU checks, for a machine with a GPU (CI has none): the device tests
# (tests/test_torch_gpu.py), the allreduce benchmark's NCCL tables at one rank per GPU, and,
# where a `reframe` is on PATH, the GPU-site checks through ReFrame (checks/config/local_gpu.py:
# capabilities, device/host-plane collectives per size, fabric).
# Logs go to DIR (default gpu-check/): env.txt, check_build.txt, test_torch_gpu.log,
# allreduce_gpu.log, allreduce_gpu.json and reframe/ (summary.md, planes.png, reframe.out).
#
#   scripts/gpu_check.sh [DIR]        PYTHON=... picks the interpreter (default python3)
#
# Uses the Python and MPI already on PATH (no setup.sh: GPU nodes bring their own CUDA torch).
# Exit status: the tests' (the benchmark's failure is reported, and also makes it non-zero).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-gpu-check}
PY=${PYTHON:-python3}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
gpus=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
{
  date -u
  nvidia-smi -L 2>&1 || echo "nvidia-smi: not available"
  "$PY" -c "import sys, torch, numpy, mpi4py; from mpi4py import MPI
print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda,
      'numpy', numpy.__version__, 'mpi4py', mpi4py.__version__)
print('nccl', torch.cuda.nccl.version() if torch.cuda.is_available() else '-', 'gpus', torch.cuda.device_count())
print(MPI.Get_library_version().splitlines()[0])"
  mpirun --version 2>&1 | head -1
} 2>&1 | tee "$out/env.txt"

"$PY" -m hvdcore.runner --check-build 2>&1 | tee "$out/check_build.txt"

"$PY" -m pytest -p no:cacheprovider -rA -v --timeout 600 tests/test_torch_gpu.py 2>&1 \
  | tee "$out/test_torch_gpu.log"
rc=${PIPESTATUS[0]}

np=$(( gpus > 0 ? gpus : 1 ))
mpirun -np "$np" --oversubscribe "$PY" benchmarks/allreduce.py --sizes 4KiB,1MiB,16MiB \
  --max-reps 200 --json "$out/allreduce_gpu.json" 2>&1 | tee "$out/allreduce_gpu.log"
brc=${PIPESTATUS[0]}
frc=skipped
if command -v reframe >/dev/null; then
  CONFIG=checks/config/local_gpu.py VENV=/nonexistent checks/run_suite.sh "$out/reframe" \
    -n 'HvdcoreCapabilitiesCheck|HvdcoreDataPlanesCheck|HvdcoreFabricCheck'
  frc=$?
else
  echo "gpu_check: no reframe on PATH: the GPU-site checks did not run"
fi
echo "gpu_check: tests rc=$rc, benchmark rc=$brc, checks rc=$frc (np $np, $gpus GPU(s)); logs in $out/"
[ "$rc" -ne 0 ] && exit "$rc"
[ "$brc" -ne 0 ] && exit "$brc"
[ "$frc" = skipped ] || exit "$frc"
