#!/usr/bin/env bash
# The main job on this machine: the validation suite on localhost with 2 ranks.
#   1. the ReFrame suite with the embedded local config (checks/run_suite.sh): capability check,
#      collectives correctness + bus bandwidth/latency, MNIST scaling (hvdcore vs its peer in the
#      same job: torch DDP, raw mpi4py for Keras); summary in reframe-results/summary.md and
#      scaling plot in reframe-results/scaling.png
#   2. the capability report (hvdcorerun --check-build), requiring MPI and PyTorch
#   3. the allreduce benchmark (hvdcore vs raw mpi4py vs torch.distributed gloo)
# Every step runs, whatever the one before it said; each is reported as it ends and all of them
# at the end. Exit status: 1 when any step failed; else 3 when the suite's only trouble was an
# invalid measurement (reported as INVALID, not as a failure: measure again on a quieter
# machine; checks/run_suite.sh's status 3); else 0. Does its own setup (scripts/setup.sh).
# NP=<ranks> changes the benchmark's rank count.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
scripts/setup.sh || { echo "validate.sh: setup failed" >&2; exit 2; }
export PATH="$PWD/${VENV:-.venv}/bin:$PATH"
NP=${NP:-2}
declare -a names=() results=()

word() {  # word STATUS: how a step's exit status reads (3: an invalid measurement)
    case $1 in
        0) echo PASSED ;;
        3) echo "INVALID measurement (exit 3)" ;;
        *) echo "FAILED (exit $1)" ;;
    esac
}

step() {  # step NAME COMMAND...: run it, report it, remember it
    local name=$1 start rc
    shift
    echo "== $name"
    start=$(date +%s)
    "$@"
    rc=$?
    names+=("$name")
    results+=("$rc")
    echo "== $name: $(word "$rc") in $(( $(date +%s) - start ))s"
}

# shellcheck disable=SC2317  # called through step
suite() {
    local rc=0
    checks/run_suite.sh reframe-results || rc=$?
    [ -f reframe-results/summary.md ] && cat reframe-results/summary.md
    return "$rc"
}

step "ReFrame validation suite (local, 2 ranks)" suite
step "hvdcore capability report" hvdcorerun --check-build --require mpi,torch
# rank 0 prints the table: untagged, so it reads as one table
step "allreduce benchmark (${NP} ranks)" hvdcorerun -np "$NP" --no-tag-output python benchmarks/allreduce.py

echo "== validate.sh summary"
status=0
for i in "${!names[@]}"; do
    echo "   $(word "${results[$i]}")  ${names[$i]}"
    case ${results[$i]} in
        0) ;;
        3) [ "$status" = 0 ] && status=3 ;;
        *) status=1 ;;
    esac
done
exit "$status"
