#!/usr/bin/env bash
# Install hvdcore with one of the hand-written modules in modules/all/hvdcore/, in the EESSI /
# EasyBuild layout: <PREFIX>/software/hvdcore/<modver>/ and <PREFIX>/modules/all/hvdcore/<modver>.lua.
#
#   modules/install.sh prefix    PREFIX SDIST [MODVER]   # pip install --prefix, default 0.2.0-foss-2023a
#   modules/install.sh apptainer PREFIX IMAGE [MODVER]   # Apptainer image, default 0.2.0-apptainer
#
# 'prefix' builds SDIST (from easyconfigs/build_sdist.py) with the 'python' on PATH (or $PYTHON):
# load the framework and mpi4py modules first (for EESSI: module load EESSI/2023.06
# PyTorch/2.1.2-foss-2023a mpi4py/3.1.4-gompi-2023a). It installs into the prefix only: whatever
# that Python already has (an hvdcore included) is neither uninstalled nor changed. It refuses a
# PREFIX that is that Python's own prefix or lies in a directory it imports from, and refuses to
# run while the install it would replace is on that Python's path (the module is loaded).
# An earlier install of the same MODVER in PREFIX is replaced.
# Then: module use PREFIX/modules/all.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
  exit 2
}

die() {
  echo "install.sh: $*" >&2
  exit 2
}

[ $# -ge 3 ] || usage
kind=$1 prefix=$2 src=$3
case $kind in
  prefix) modver=${4:-0.2.0-foss-2023a} ;;
  apptainer) modver=${4:-0.2.0-apptainer} ;;
  *) usage ;;
esac
modfile=$here/all/hvdcore/$modver.lua
[ -f "$modfile" ] || die "no module file $modfile (available: $(cd "$here/all/hvdcore" && ls))"
[ -e "$src" ] || die "$src not found"
# the module file describes one release; a checkout's development sdist installed under its
# name would pass for that release (EasyBuild builds of main get their own dev version instead)
srcver=$(basename "$src" | sed -n 's/^hvdcore-\(.*\)\.tar\.gz$/\1/p')
if [ "$kind" = prefix ] && [ -n "$srcver" ] && [ "$srcver" != "${modver%%-*}" ]; then
  echo "install.sh: warning: $src is hvdcore $srcver, installed as the module hvdcore/$modver" \
       "(whose file describes ${modver%%-*})" >&2
fi

# Refuse, before anything is written, a target pip cannot install into without touching what
# $python already has: its own prefix, a directory on its sys.path (site-packages, PYTHONPATH,
# .pth entries) or one below it, or an install dir one of those lies in (the module is loaded).
isolation_check() {
  "$1" - "$2" "$3" <<'EOF'
import os, sys

prefix, root = (os.path.realpath(p) for p in sys.argv[1:3])


def within(path, top):
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


homes = {os.path.realpath(p) for p in
         (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix)}
if prefix in homes:
    sys.exit(f"install.sh: {sys.argv[1]} is the installation prefix of {sys.executable}: "
             "pip would install into the Python that runs it. Choose a separate PREFIX "
             "(e.g. $HOME/hvdcore-stack).")
for entry in filter(None, sys.path):  # '' is the working directory of 'python -'
    path = os.path.realpath(entry)
    if not os.path.isdir(path):  # zip files, path-hook placeholders, missing entries
        continue
    if within(root, path) or within(prefix, path):
        sys.exit(f"install.sh: {sys.argv[1]} is inside {path}, a directory {sys.executable} "
                 "imports from (sys.path): installing there changes what that Python "
                 "imports. Choose a PREFIX outside its installation and PYTHONPATH.")
    if within(path, root):
        sys.exit(f"install.sh: {sys.executable} imports from {path} (sys.path; is the module "
                 "loaded?), inside the install this would replace. Run 'module unload hvdcore' "
                 "(or remove it from PYTHONPATH) first.")
EOF
}

if [ "$kind" = prefix ]; then
  python=${PYTHON:-python}
  command -v "$python" >/dev/null ||
    die "no '$python' on PATH: load the PyTorch and mpi4py modules (or set PYTHON)"
  # Debian's own /usr/bin/python3 installs --prefix into <prefix>/local/...: refuse it
  if [ "$("$python" -c 'import sys; print(sys.prefix == sys.base_prefix and sys.prefix == "/usr")')" = True ]; then
    die "$python is the distribution's Python; use a venv or an EasyBuild/EESSI Python"
  fi
  pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  grep -q "python$pyver" "$modfile" || die "$python is Python $pyver but $modfile expects another version"
  isolation_check "$python" "$prefix" "$prefix/software/hvdcore/$modver" || exit 2
fi

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
root=$prefix/software/hvdcore/$modver

case $kind in
  prefix)
    site=$root/lib/python$pyver/site-packages
    # a fresh directory: files of an earlier install must not linger; put back on failure
    previous=""
    if [ -e "$root" ]; then
      previous=$root.previous.$$
      mv "$root" "$previous"
    fi
    restore() {
      rm -rf "$root"
      if [ -n "$previous" ]; then mv "$previous" "$root"; fi
    }
    # --ignore-installed: never uninstall the hvdcore (or anything else) $python already has;
    # --isolated: no PIP_* variables or user config (PIP_USER, PIP_TARGET, ...) change the target
    if ! "$python" -m pip --isolated --disable-pip-version-check install --quiet --no-deps \
        --ignore-installed --no-build-isolation --no-index --no-cache-dir \
        --prefix "$root" "$src"; then
      restore
      die "pip could not install $src into $root"
    fi
    # the install is complete: package files, the console script, and 'import hvdcore' finds
    # it first with the module's PYTHONPATH (found, not run: the dependencies may be modules
    # not loaded now; cwd $root, so no checkout's hvdcore/ shadows it)
    found=$(cd "$root" && PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH} "$python" -c \
      'import importlib.util, os; print(os.path.realpath(importlib.util.find_spec("hvdcore").origin))' \
      2>&1) || true
    if [ ! -f "$site/hvdcore/__init__.py" ] || [ ! -x "$root/bin/hvdcorerun" ] ||
        [ "$found" != "$(cd "$site" && pwd -P)/hvdcore/__init__.py" ]; then
      restore
      die "the install in $root is incomplete (expected $site/hvdcore and $root/bin/hvdcorerun; 'import hvdcore' finds: $found)"
    fi
    if [ -n "$previous" ]; then rm -rf "$previous"; fi
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
