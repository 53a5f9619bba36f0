#!/usr/bin/env bash
# Run the whole test suite (does its own setup first). Extra arguments go to pytest,
# e.g. scripts/test.sh -m "not tensorflow and not slurm" for a quick local subset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# --durations: the 40 slowest tests in the log (CI time is budgeted; this says where it goes).
exec "${VENV:-.venv}/bin/python" -m pytest -ra --durations=40 "$@"
