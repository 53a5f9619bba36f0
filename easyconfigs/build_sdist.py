#!/usr/bin/env python3
"""Build hvdcore's sdist and inject its sha256 into the hvdcore easyconfigs.

The easyconfigs in ``easyconfigs/h/hvdcore/`` install the project's own sdist
(``hvdcore-<version>.tar.gz``). This script

1. builds that sdist from this checkout (``setuptools.build_meta.build_sdist`` run by the given
   Python, without build isolation, from a clean copy of the tree so the checkout is not touched),
   optionally leaving sub-packages out (``--exclude hvdcore/torch``: used by the tests to prove that
   the sanity check catches a build without the torch binding);
2. runs ``eb --inject-checksums=sha256 --force`` on the easyconfigs of this version
   (``hvdcore-<version>-*.eb``; earlier releases' keep their own checksum), either in place (a
   development build: do not commit it; a release's checksums are written by
   ``scripts/release.py cut``) or on copies written to ``--ec-outdir`` (what the install test
   does).

Examples::

    # development build: dist/hvdcore-0.2.0.tar.gz, its checksum in the committed
    # hvdcore-0.2.0-*.eb (not to be committed: releases use scripts/release.py cut)
    python easyconfigs/build_sdist.py --outdir dist --in-place

    # test: sdist into /tmp/src, easyconfigs with the matching checksum into /tmp/ecs
    python easyconfigs/build_sdist.py --outdir /tmp/src --ec-outdir /tmp/ecs \\
        easyconfigs/h/hvdcore/hvdcore-0.2.0-Python-3.11.eb

``eb`` is looked up next to the Python running this script (``<venv>/bin/eb``) unless ``--eb`` is
given, and runs with ``EB_PYTHON`` set to that Python; the venv's ``bin/`` is never put on PATH.
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

__all__ = [
    "ROOT", "EASYCONFIG_DIR", "project_version", "current_easyconfigs", "build_sdist",
    "normalize_tarball", "eb_env", "inject_checksums",
]

ROOT = Path(__file__).resolve().parent.parent
EASYCONFIG_DIR = ROOT / "easyconfigs" / "h" / "hvdcore"
# what goes into the sdist: the package, its metadata and the files pyproject.toml refers to
_TREE_FILES = (
    "pyproject.toml", "setup.py", "README.md", "LICENSE", "CHANGELOG.md", "MANIFEST.in", "setup.cfg",
)
# the package, and the examples the easyconfigs install into share/hvdcore/examples
_TREE_DIRS = ("hvdcore", "examples")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def project_version(root: Path = ROOT) -> str:
    """hvdcore's version: ``__version__`` in ``hvdcore/__init__.py``, the one version source
    (``pyproject.toml`` reads it; the easyconfigs' ``version``)."""
    path = root / "hvdcore" / "__init__.py"
    match = re.search(r'^__version__ = "([^"]+)"$', path.read_text(), re.M)
    if match is None:
        raise SystemExit(f"build_sdist: no __version__ = \"...\" line in {path}")
    return match.group(1)


def current_easyconfigs(root: Path = ROOT) -> list[Path]:
    """The easyconfigs of the checkout's version, ``hvdcore-<version>-*.eb``: the ones its sdist
    installs. Earlier releases' easyconfigs stay beside them with their own release's checksum
    (their sdist is ``hvdcore-<old version>.tar.gz``, which this script does not build)."""
    version = project_version(root)
    ecs = sorted((root / "easyconfigs" / "h" / "hvdcore").glob(f"hvdcore-{version}-*.eb"))
    if not ecs:
        raise SystemExit(f"build_sdist: no easyconfigs hvdcore-{version}-*.eb in "
                         f"{root / 'easyconfigs' / 'h' / 'hvdcore'}")
    return ecs


def _copy_tree(root: Path, dest: Path, exclude: Sequence[str]) -> None:
    for name in _TREE_FILES:
        if (root / name).exists():
            shutil.copy2(root / name, dest / name)
    for package in _TREE_DIRS:
        shutil.copytree(root / package, dest / package, ignore=_IGNORE)
    for rel in exclude:
        target = dest / rel
        if not target.exists():
            raise SystemExit(f"build_sdist: --exclude {rel}: no such path under {root}")
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()


def build_sdist(
    outdir: Path,
    exclude: Sequence[str] = (),
    python: str = sys.executable,
    root: Path = ROOT,
    mtime: int | None = None,
) -> Path:
    """Build ``hvdcore-<version>.tar.gz`` into ``outdir`` and return its path.

    ``exclude`` lists paths relative to the project root (e.g. ``hvdcore/torch``) to leave out.
    ``python`` must have setuptools>=64 (the build backend); no network access is needed.
    ``mtime`` is every member's timestamp (see :func:`normalize_tarball`).
    """
    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    readme = root / "README.md"
    if not readme.exists():
        raise SystemExit(f"build_sdist: {readme} is missing (pyproject.toml names it as readme)")
    code = (
        "import sys\n"
        "from setuptools import build_meta\n"
        "print(build_meta.build_sdist(sys.argv[1]))\n"
    )
    with tempfile.TemporaryDirectory(prefix="hvdcore-sdist-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        _copy_tree(root, src, exclude)
        proc = subprocess.run(
            [python, "-c", code, str(outdir)],
            cwd=src,
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        raise SystemExit(f"build_sdist: building the sdist failed:\n{proc.stdout}\n{proc.stderr}")
    name = proc.stdout.strip().splitlines()[-1]
    path = outdir / name
    expected = f"hvdcore-{project_version(root)}.tar.gz"
    if name != expected:
        raise SystemExit(f"build_sdist: built {name}, the easyconfigs expect {expected}")
    normalize_tarball(path, mtime)
    return path


def normalize_tarball(path: Path, mtime: int | None = None) -> None:
    """Rewrite a .tar.gz so that its bytes depend only on the file contents.

    Members are sorted, owners cleared, permissions normalised and every timestamp (and the gzip
    header's) set to ``mtime`` (default: ``SOURCE_DATE_EPOCH``, else 1980-01-01, the earliest time a
    wheel (zip) can hold), so the same tree always gives
    the same sdist and the same sha256 in the easyconfigs.
    """
    if mtime is None:
        mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    with tarfile.open(path, "r:gz") as src:
        members = sorted(src.getmembers(), key=lambda m: m.name)
        data = {m.name: src.extractfile(m).read() for m in members if m.isfile()}
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw,
                                               mtime=mtime) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for member in members:
                member.mtime = mtime
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                member.mode = 0o755 if member.isdir() or member.mode & 0o111 else 0o644
                member.pax_headers = {}
                payload = data.get(member.name)
                dst.addfile(member, io.BytesIO(payload) if payload is not None else None)
    tmp.replace(path)


def eb_env(python: str = sys.executable, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for running ``eb``: EB_PYTHON points at ``python``, root is allowed."""
    env = dict(os.environ if base is None else base)
    env["EB_PYTHON"] = python
    env.setdefault("EASYBUILD_OUTPUT_STYLE", "basic")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["EASYBUILD_ALLOW_USE_AS_ROOT_AND_ACCEPT_CONSEQUENCES"] = "1"
    lmod = "/usr/share/lmod/lmod/libexec/lmod"
    if "LMOD_CMD" not in env and os.path.exists(lmod):
        env["LMOD_CMD"] = lmod
    return env


def default_eb(python: str = sys.executable) -> str:
    """The ``eb`` script installed next to ``python`` (same venv), else the one on PATH."""
    candidate = Path(sys.prefix if python == sys.executable else Path(python).parent.parent)
    eb = candidate / "bin" / "eb"
    if eb.exists():
        return str(eb)
    found = shutil.which("eb")
    if found is None:
        raise SystemExit("build_sdist: no 'eb' next to the Python or on PATH: pip install easybuild")
    return found


def inject_checksums(
    easyconfigs: Sequence[Path],
    sourcepath: Path,
    ec_outdir: Path | None = None,
    eb: str | None = None,
    python: str = sys.executable,
) -> list[Path]:
    """Write the sha256 of the sdist in ``sourcepath`` into each easyconfig; return their paths.

    With ``ec_outdir`` the easyconfigs are copied there first and the copies are updated;
    without it they are updated in place. EasyBuild's backup files are removed.
    """
    eb = eb or default_eb(python)
    targets: list[Path] = []
    for ec in easyconfigs:
        ec = Path(ec).resolve()
        if ec_outdir is not None:
            Path(ec_outdir).mkdir(parents=True, exist_ok=True)
            dest = Path(ec_outdir).resolve() / ec.name
            shutil.copy2(ec, dest)
            ec = dest
        targets.append(ec)
    with tempfile.TemporaryDirectory(prefix="hvdcore-ebtmp-") as tmp:
        env = eb_env(python)
        env["EASYBUILD_PREFIX"] = tmp
        cmd = [
            eb, "--inject-checksums=sha256", "--force",
            f"--sourcepath={Path(sourcepath).resolve()}", *map(str, targets),
        ]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(
            f"build_sdist: {' '.join(cmd)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    for ec in targets:
        for backup in ec.parent.glob(ec.name + ".bak_*"):
            backup.unlink()
    return targets


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("easyconfigs", nargs="*", type=Path,
                        help="easyconfigs to update (default: this version's, "
                             "easyconfigs/h/hvdcore/hvdcore-VERSION-*.eb)")
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist",
                        help="where the sdist goes; also the --sourcepath for eb (default: dist/)")
    parser.add_argument("--exclude", action="append", default=[], metavar="PATH",
                        help="leave this path (relative to the project root) out of the sdist")
    ec_mode = parser.add_mutually_exclusive_group()
    ec_mode.add_argument("--in-place", action="store_true", help="update the easyconfigs in place")
    ec_mode.add_argument("--ec-outdir", type=Path, help="write updated copies here")
    ec_mode.add_argument("--no-inject", action="store_true", help="only build the sdist")
    parser.add_argument("--eb", help="eb command (default: the one next to this Python)")
    args = parser.parse_args(argv)

    sdist = build_sdist(args.outdir, exclude=args.exclude)
    print(f"sdist: {sdist}")
    if args.no_inject:
        return 0
    if not args.in_place and args.ec_outdir is None:
        parser.error("say where the easyconfigs go: --in-place or --ec-outdir DIR (or --no-inject)")
    ecs = args.easyconfigs or current_easyconfigs()
    for ec in inject_checksums(ecs, args.outdir, args.ec_outdir if not args.in_place else None,
                               eb=args.eb):
        print(f"checksum injected: {ec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
