#!/usr/bin/env bash
# Run the whole test suite (does its own setup first). Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not tensorflow and not slurm" for a quick local subset.
#
# Without arguments the suite runs on HVDCORE_TEST_WORKERS pytest-xdist workers (default 2;
# 0 = one process, as with arguments): most tests spend much of their time waiting on
# launches, imports and ReFrame polls, so two workers use the CPU that one leaves idle. The
# tests marked `quiet` (verdicts that rest on measured speed) run afterwards, alone.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
py="${VENV:-.venv}/bin/python"
workers="${HVDCORE_TEST_WORKERS:-2}"
# --durations: every test phase of 5 s or more in the log (CI time is budgeted; summed per
# file, this says where it goes).
if [ $# -gt 0 ] || [ "$workers" = 0 ]; then
  exec "$py" -m pytest -ra --durations=0 --durations-min=5 "$@"
fi
rc=0
"$py" -m pytest -ra --durations=0 --durations-min=5 -n "$workers" --dist loadscope -m "not quiet" || rc=$?
"$py" -m pytest -ra --durations=10 -m quiet || rc=$?
exit "$rc"
