#!/usr/bin/env bash
# The Python environment an EESSI test-suite run of hvdcore's checks needs: ReFrame and the
# `eessi-testsuite` package, in a venv of their own (default /var/tmp/hvdcore-eessi-venv, or
# $1, or $CHECKS_EESSI_VENV). Idempotent: a stamp of the pins below skips a venv already made.
#
# Why not the project's .venv: eessi-testsuite 1.1.0 refuses ReFrame >=4.10.1,<4.11 at import
# (its config probe, reframe-hpc/reframe#3723: scale features such as `1_core` and environment
# names such as `EESSI-2023.06` fail validation there), and .venv has reframe-hpc 4.10.4 (the
# newest on PyPI). 4.10.0 is the newest release the test suite accepts and is >=4.7, which the
# hvdcore checks need (checks/tools/reframe_version.py). The venv runs only the
# ReFrame front end: the jobs run the Python of the modules they load.
set -euo pipefail
VENV=${1:-${CHECKS_EESSI_VENV:-/var/tmp/hvdcore-eessi-venv}}
PYTHON=${PYTHON:-python3}
PINS=("reframe-hpc==4.10.0" "eessi-testsuite==1.1.0")

want=$(printf '%s\n' "${PINS[@]}" "$("$PYTHON" -c 'import sys; print(sys.version)')" \
       | sha256sum | cut -c1-16)
stamp="$VENV/.hvdcore-eessi-stamp"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$VENV/bin/reframe" ]; then
  echo "$VENV"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ]; then
  echo "setup_venv.sh: $VENV exists and is not a venv: not touching it" >&2
  exit 2
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}" >&2
"$VENV/bin/python" -c 'import eessi.testsuite.eessi_mixin, reframe' >&2
echo "$want" > "$stamp"
echo "$VENV"
