#!/usr/bin/env bash
# The main job on this machine: validate the installed stack on localhost with 2 ranks.
#   1. capability report (hvdcorerun --check-build), requiring MPI and PyTorch
#   2. a 2-rank smoke run of every collective, checked against NumPy
#   3. the allreduce benchmark (hvdcore vs raw mpi4py vs torch.distributed gloo)
# Does its own setup (scripts/setup.sh). NP=<ranks> to change the rank count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/${VENV:-.venv}/bin:$PATH"
NP=${NP:-2}
echo "== hvdcore capability report"
hvdcorerun --check-build --require mpi,torch
echo "== ${NP}-rank collective smoke run"
hvdcorerun -np "$NP" python examples/smoke_collectives.py
echo "== allreduce benchmark (${NP} ranks)"
hvdcorerun -np "$NP" python benchmarks/allreduce.py
