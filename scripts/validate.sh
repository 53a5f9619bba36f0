#!/usr/bin/env bash
# The main job on this machine: the validation suite on localhost with 2 ranks.
#   1. the ReFrame suite with the embedded local config (checks/run_suite.sh): capability check,
#      collectives correctness + bus bandwidth/latency, MNIST scaling (1-rank baseline vs 2 ranks);
#      summary in reframe-results/summary.md and scaling plot in reframe-results/scaling.png
#   2. the capability report (hvdcorerun --check-build), requiring MPI and PyTorch
#   3. the allreduce benchmark (hvdcore vs raw mpi4py vs torch.distributed gloo)
# Does its own setup (scripts/setup.sh). NP=<ranks> changes the benchmark's rank count.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$PWD/${VENV:-.venv}/bin:$PATH"
NP=${NP:-2}
echo "== ReFrame validation suite (local, 2 ranks)"
checks/run_suite.sh reframe-results
cat reframe-results/summary.md
echo "== hvdcore capability report"
hvdcorerun --check-build --require mpi,torch
echo "== allreduce benchmark (${NP} ranks)"
hvdcorerun -np "$NP" python benchmarks/allreduce.py
