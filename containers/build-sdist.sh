#!/usr/bin/env bash
# Build hvdcore's sdist from this checkout into dist/ (or $1), offline: it calls setuptools'
# PEP 517 hook directly with the Python that runs it, so neither 'build' nor a network is needed
# (only setuptools>=64, which every venv made by scripts/setup.sh has).
# The container recipes copy dist/hvdcore-*.tar.gz in through %files: run this first, from any
# directory, then 'apptainer build' from the repository root.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/dist}
python=${PYTHON:-python3}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -f "$out"/hvdcore-*.tar.gz
cd "$root"
# setuptools' chatter goes to a log, shown only when the build fails (with the reason in it)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! name=$("$python" -c 'import contextlib, sys
from setuptools import build_meta
with contextlib.redirect_stdout(sys.stderr):
    name = build_meta.build_sdist(sys.argv[1])
print(name)' "$out" 2>"$log"); then
    tail -n 40 "$log" >&2
    echo "build-sdist.sh: building the sdist with '$python' failed (output above); it needs a" \
         "Python 3 with setuptools>=64: set PYTHON=/path/to/python" >&2
    exit 1
fi
echo "$out/$name"
