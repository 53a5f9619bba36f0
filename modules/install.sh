#!/usr/bin/env bash
# Install hvdcore with one of the hand-written modules in modules/all/hvdcore/, in the EESSI /
# EasyBuild layout: <PREFIX>/software/hvdcore/<modver>/ and <PREFIX>/modules/all/hvdcore/<modver>.lua.
#
#   modules/install.sh prefix    PREFIX SDIST [MODVER]   # pip install --prefix, default 0.1.0-foss-2023a
#   modules/install.sh apptainer PREFIX IMAGE [MODVER]   # Apptainer image, default 0.1.0-apptainer
#
# 'prefix' runs the 'python' on PATH: load the framework and mpi4py modules first (for EESSI:
# module load EESSI/2023.06 PyTorch/2.1.2-foss-2023a mpi4py/3.1.4-gompi-2023a), or set PYTHON.
# SDIST is the sdist from easyconfigs/build_sdist.py. Then: module use PREFIX/modules/all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 3 ] || usage
kind=$1 prefix=$2 src=$3
case $kind in
  prefix) modver=${4:-0.1.0-foss-2023a} ;;
  apptainer) modver=${4:-0.1.0-apptainer} ;;
  *) usage ;;
esac
modfile=$here/all/hvdcore/$modver.lua
if [ ! -f "$modfile" ]; then
  echo "install.sh: no module file $modfile (available: $(cd "$here/all/hvdcore" && ls))" >&2
  exit 2
fi
if [ ! -e "$src" ]; then
  echo "install.sh: $src not found" >&2
  exit 2
fi
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
root=$prefix/software/hvdcore/$modver

case $kind in
  prefix)
    python=${PYTHON:-python}
    if ! command -v "$python" >/dev/null; then
      echo "install.sh: no '$python' on PATH: load the PyTorch and mpi4py modules (or set PYTHON)" >&2
      exit 2
    fi
    # Debian's own /usr/bin/python3 installs --prefix into <prefix>/local/...: refuse it
    if [ "$("$python" -c 'import sys; print(sys.prefix == sys.base_prefix and sys.prefix == "/usr")')" = True ]; then
      echo "install.sh: $python is the distribution's Python; use a venv or an EasyBuild/EESSI Python" >&2
      exit 2
    fi
    pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if ! grep -q "python$pyver" "$modfile"; then
      echo "install.sh: $python is Python $pyver but $modfile expects another version" >&2
      exit 2
    fi
    "$python" -m pip install --quiet --no-deps --no-build-isolation --no-index \
      --prefix "$root" "$src"
    # the examples, next to the install ($EBROOTHVDCORE/share/hvdcore/examples): what the
    # ReFrame MNIST check (checks/hvdcore_mnist.py) runs when this module is loaded
    if [ -d "$here/../examples" ]; then
      mkdir -p "$root/share/hvdcore/examples"
      cp "$here/../examples/"*.py "$root/share/hvdcore/examples/"
    fi
    ;;
  apptainer)
    mkdir -p "$root/bin"
    cp -a "$src" "$root/hvdcore.sif"
    install -m 0755 "$here/libexec/hvdcore-apptainer-exec" "$root/bin/hvdcore-apptainer-exec"
    for cmd in hvdcorerun python python3; do
      ln -sf hvdcore-apptainer-exec "$root/bin/$cmd"
    done
    ;;
esac
mkdir -p "$prefix/modules/all/hvdcore"
install -m 0644 "$modfile" "$prefix/modules/all/hvdcore/$modver.lua"
echo "installed hvdcore/$modver: module use $prefix/modules/all; module load hvdcore/$modver"
