"""Build hook: the optional compiled hot path (hvdcore/backends/_hotpath.c).

Everything else is in pyproject.toml. The extension needs mpi.h and the MPI library that
mpi4py uses; its flags come from the MPI compiler wrapper (``$MPICC``, else ``mpicc``). Without
a wrapper, or when compiling fails, hvdcore installs without it and runs the same steady path
in Python (slower at small sizes, same results). ``HVDCORE_BUILD_HOTPATH=0`` skips it. The
round's constants come from ``_round_wire.h``, generated from hvdcore/backends/round_wire.py.

The licence (Apache-2.0; the text is LICENSE, shipped as License-File in sdist and wheel) is set
here too, because no one form in pyproject.toml suits every setuptools that builds hvdcore: the
table ``license = { text = ... }`` is deprecated from setuptools 77 (builds stop after
2027-02-18), while the PEP 639 string ``license = "..."`` is an error before 77, and EasyBuild's
foss/2023a-2025a toolchains build with their own setuptools 67.7.2-75.6.0 (no build isolation).
So pyproject.toml lists ``license`` as dynamic, and setup.py writes License-Expression where the
setuptools has it, the License field otherwise.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess

import setuptools
from setuptools import Extension, setup

LICENCE = "Apache-2.0"


def _wrapper_flags(wrapper: str) -> list[str] | None:
    """The compile and link flags an MPI compiler wrapper adds (Open MPI or MPICH style)."""
    for args in (["--showme:compile"], ["--showme:link"]), (["-compile_info"], ["-link_info"]):
        try:
            got = [subprocess.run([wrapper, *a], capture_output=True, text=True, timeout=30,
                                  check=True).stdout for a in args]
        except (OSError, subprocess.SubprocessError):
            continue
        words = shlex.split(" ".join(got))
        if words and not args[0][0].startswith("--"):
            words = words[1:]  # MPICH prints the compiler first
        return words
    return None


def _hotpath() -> list[Extension]:
    if os.environ.get("HVDCORE_BUILD_HOTPATH", "1") == "0":
        return []
    wrapper = shutil.which(os.environ.get("MPICC", "mpicc"))
    flags = _wrapper_flags(wrapper) if wrapper else None
    if not flags:
        print("hvdcore: no MPI compiler wrapper (mpicc): building without the compiled hot path")
        return []
    inc = [f[2:] for f in flags if f.startswith("-I")]
    libdirs = [f[2:] for f in flags if f.startswith("-L")]
    libs = [f[2:] for f in flags if f.startswith("-l")]
    other = [f for f in flags if not f.startswith(("-I", "-L", "-l"))]
    return [Extension(
        "hvdcore.backends._hotpath", ["hvdcore/backends/_hotpath.c"],
        depends=["hvdcore/backends/_round_wire.h"], include_dirs=inc,
        library_dirs=libdirs, runtime_library_dirs=[d for d in libdirs if d.startswith("/")],
        libraries=libs, extra_compile_args=["-O2", *[f for f in other if f.startswith("-D")]],
        extra_link_args=[f for f in other if f.startswith("-Wl,")], optional=True)]


def _licence() -> dict[str, str]:
    """The licence in the metadata field this setuptools knows (License-Expression from 77)."""
    try:
        major = int(setuptools.__version__.split(".")[0])
    except ValueError:
        major = 0
    return {"license_expression": LICENCE} if major >= 77 else {"license": LICENCE}


setup(ext_modules=_hotpath(), **_licence())
