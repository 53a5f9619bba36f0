#!/usr/bin/env python3
"""Build hvdcore's sdist and inject its sha256 into the hvdcore easyconfigs.

The easyconfigs in ``easyconfigs/h/hvdcore/`` install the project's own sdist
(``hvdcore-<version>.tar.gz``). This script

1. builds that sdist from this checkout (``setuptools.build_meta.build_sdist`` run by the given
   Python, without build isolation, from a clean copy of the tree so the checkout is not touched),
   optionally leaving sub-packages out (``--exclude hvdcore/torch``: used by the tests to prove that
   the sanity check catches a build without the torch binding);
2. runs ``eb --inject-checksums=sha256 --force`` on easyconfigs of the checkout's version
   (``hvdcore-<version>-*.eb``), written to ``--ec-outdir``.

Between releases main carries a development version (``0.3.0.dev0``, see scripts/release.py).
Its easyconfigs are not committed: they are generated into ``--ec-outdir`` from the committed
easyconfigs they descend from (:func:`current_easyconfigs`: the next release's
``hvdcore-0.3.0-*.eb`` once written, else the newest release's), with ``version`` and the
checksum replaced, so the module is ``hvdcore/0.3.0.dev0-<suffix>``. Easyconfigs named on the
command line are retargeted the same way. ``--in-place`` rewrites committed easyconfigs of an
unreleased version only: a released version's (``releases/VERSION.json``) are never rewritten
(their checksum is that release's, written by ``scripts/release.py cut``), and a development
version has none to rewrite.

Examples::

    # a checkout's sdist into dist/, its easyconfigs (hvdcore-0.3.0.dev0-*.eb on main) into ecs/
    python easyconfigs/build_sdist.py --outdir dist --ec-outdir ecs

    # one variant only: ecs/hvdcore-0.3.0.dev0-Python-3.11.eb
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
    "ROOT", "EASYCONFIG_DIR", "VERSION", "project_version", "is_development", "version_key",
    "easyconfig_version", "current_easyconfigs", "retarget", "build_sdist", "normalize_tarball",
    "eb_env", "inject_checksums",
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


#: PEP 440 versions as hvdcore uses them: 1.2.3, 1.2.3rc1, 1.2.3.dev0 (as scripts/release.py)
#: hvdcore's version grammar: 1.2.3, 1.2.3rc1, 1.2.3.dev0 (``scripts/release.py`` uses it too)
VERSION = r"(\d+)\.(\d+)\.(\d+)(?:(a|b|rc)(\d+))?(?:\.dev(\d+))?"
_EC_NAME = re.compile(rf"hvdcore-({VERSION})-.*\.eb")
_EC_VERSION_LINE = re.compile(r"^version = '([^']+)'$", re.M)


def is_development(version: str) -> bool:
    """Whether ``version`` is a development version (``0.3.0.dev0``): main's between releases."""
    match = re.fullmatch(VERSION, version)
    return bool(match and match.group(6) is not None)


def version_key(version: str) -> tuple:
    """PEP 440 order of hvdcore's versions: 0.2.0 < 0.3.0.dev0 < 0.3.0a1.dev0 < 0.3.0a1 <
    0.3.0rc1 < 0.3.0. Raises ValueError for a string that is not such a version."""
    match = re.fullmatch(VERSION, version)
    if match is None:
        raise ValueError(f"{version!r} is not a version like 1.2.3, 1.2.3rc1 or 1.2.3.dev0")
    major, minor, patch, pre, pre_n, dev = match.groups()
    if pre is not None:
        pre_key = ({"a": 0, "b": 1, "rc": 2}[pre], int(pre_n))
    else:  # a final release sorts after its pre-releases; its .devN before them
        pre_key = (-1, 0) if dev is not None else (3, 0)
    return (int(major), int(minor), int(patch)), pre_key, (0, int(dev)) if dev else (1, 0)


def easyconfig_version(path: Path) -> str:
    """The version in an hvdcore easyconfig's file name, ``hvdcore-<version>-<suffix>.eb``."""
    match = _EC_NAME.fullmatch(Path(path).name)
    if match is None:
        raise SystemExit(f"build_sdist: {path} is not named hvdcore-<version>-<suffix>.eb")
    return match.group(1)


def current_easyconfigs(root: Path = ROOT) -> list[Path]:
    """The committed easyconfigs this checkout's sdist installs with: ``hvdcore-<version>-*.eb``
    for a release (or a release being prepared). For a development version ``X.Y.Z.devN`` they
    are the ones its easyconfigs are generated from (:func:`retarget`): ``hvdcore-X.Y.Z-*.eb``
    once the next release's are written, else the newest release's below it. Earlier releases'
    easyconfigs stay beside them with their own release's checksum."""
    version = project_version(root)
    ec_dir = root / "easyconfigs" / "h" / "hvdcore"
    by_version: dict[str, list[Path]] = {}
    for ec in sorted(ec_dir.glob("hvdcore-*.eb")):
        if _EC_NAME.fullmatch(ec.name):
            by_version.setdefault(easyconfig_version(ec), []).append(ec)
    if version in by_version:
        return by_version[version]
    if is_development(version):
        base = version.split(".dev")[0]
        older = [v for v in by_version
                 if not is_development(v) and version_key(v) <= version_key(base)]
        if older:
            return by_version[max(older, key=version_key)]
    raise SystemExit(f"build_sdist: no easyconfigs hvdcore-{version}-*.eb in {ec_dir}"
                     + (" nor any release's to generate them from" if is_development(version)
                        else ""))


def retarget(easyconfig: Path, version: str, dest_dir: Path) -> Path:
    """Write ``easyconfig`` as ``dest_dir/hvdcore-<version>-<suffix>.eb``, its ``version`` set
    to ``version`` (the checksum is injected afterwards); return the new file."""
    easyconfig = Path(easyconfig)
    old = easyconfig_version(easyconfig)
    text = easyconfig.read_text()
    if len(_EC_VERSION_LINE.findall(text)) != 1:
        raise SystemExit(f"build_sdist: {easyconfig}: expected one line version = '...'")
    if old != version:
        what = "a development build, not a release" if is_development(version) else "a build"
        text = (f"# {what}: generated by easyconfigs/build_sdist.py from\n# {easyconfig.name}, "
                f"not to be committed\n{_EC_VERSION_LINE.sub(f'version = {version!r}', text)}")
    dest = Path(dest_dir) / f"hvdcore-{version}-{easyconfig.name[len(f'hvdcore-{old}-'):]}"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(text)
    return dest


def _released(root: Path = ROOT) -> set[str]:
    return {p.stem for p in (root / "releases").glob("*.json")}


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


def _in_place_refusal(ecs: Sequence[Path], version: str, root: Path = ROOT) -> str | None:
    """Why ``--in-place`` must not rewrite ``ecs`` (None: it may)."""
    if is_development(version):
        return (f"{version} is a development version: its easyconfigs are generated, not "
                "committed; write them with --ec-outdir DIR")
    released = _released(root)
    for ec in ecs:
        if easyconfig_version(ec) in released:
            return (f"{Path(ec).name} belongs to the release {easyconfig_version(ec)} "
                    f"(releases/{easyconfig_version(ec)}.json): its checksum is that release's "
                    "sdist's and is never rewritten; use --ec-outdir DIR")
        if easyconfig_version(ec) != version:
            return f"{Path(ec).name} is not for this checkout's version {version}"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("easyconfigs", nargs="*", type=Path,
                        help="easyconfigs to start from (default: current_easyconfigs(), the "
                             "version's own or, for a development version, the newest release's)")
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist",
                        help="where the sdist goes; also the --sourcepath for eb (default: dist/)")
    parser.add_argument("--exclude", action="append", default=[], metavar="PATH",
                        help="leave this path (relative to the project root) out of the sdist")
    ec_mode = parser.add_mutually_exclusive_group()
    ec_mode.add_argument("--in-place", action="store_true",
                         help="update the committed easyconfigs of an unreleased, non-development "
                              "version in place")
    ec_mode.add_argument("--ec-outdir", type=Path,
                         help="write the checkout's version's easyconfigs here")
    ec_mode.add_argument("--no-inject", action="store_true", help="only build the sdist")
    parser.add_argument("--eb", help="eb command (default: the one next to this Python)")
    args = parser.parse_args(argv)

    version = project_version()
    if not (args.in_place or args.no_inject or args.ec_outdir):
        parser.error("say where the easyconfigs go: --in-place or --ec-outdir DIR (or --no-inject)")
    ecs = args.easyconfigs or ([] if args.no_inject else current_easyconfigs())
    if args.in_place and (why := _in_place_refusal(ecs, version)):
        raise SystemExit(f"build_sdist: --in-place refused: {why}")
    if args.ec_outdir and args.ec_outdir.resolve() == EASYCONFIG_DIR.resolve():
        raise SystemExit(f"build_sdist: --ec-outdir {args.ec_outdir} is the committed easyconfigs' "
                         "directory: name another one")
    sdist = build_sdist(args.outdir, exclude=args.exclude)
    print(f"sdist: {sdist}")
    if args.no_inject:
        return 0
    if not args.in_place:
        ecs = [retarget(ec, version, args.ec_outdir) for ec in ecs]
    for ec in inject_checksums(ecs, args.outdir, eb=args.eb):
        print(f"checksum injected: {ec}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
