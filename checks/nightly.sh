#!/usr/bin/env bash
# The scheduled entry point of the nightly suite: one night, kept, judged against history.
#
#   checks/nightly.sh --results DIR [--config checks/config/<site>.py] [-- reframe options]
#
# Runs checks/tools/nightly.py (its --help is the manual) with the Python that has ReFrame:
# $VENV/bin/python (VENV defaults to the checkout's .venv), else the python beside the reframe
# on PATH (a loaded ReFrame module). Exit status: nightly.py's (0 clean, 1 failure or
# regression, 2 ReFrame did not run).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv=${VENV:-$here/../.venv}
if [ -x "$venv/bin/reframe" ]; then
    python="$venv/bin/python"
else
    reframe=$(command -v reframe) || { echo "nightly.sh: reframe not found (pip install -e .[reframe], or load a ReFrame module)" >&2; exit 2; }
    python=$(dirname "$(readlink -f "$reframe")")/python3
    [ -x "$python" ] || python=python3
fi
exec "$python" "$here/tools/nightly.py" "$@"
