#!/usr/bin/env python3
"""Cut an hvdcore release, or check that a recorded release rebuilds to its checksums.

Versions follow PEP 440. Between releases, main carries a *development* version, the next
release's with ``.devN`` (``0.3.0.dev0`` after 0.2.0), so that nothing built from main (sdist,
wheel, ``hvdcore --version``, an EasyBuild module, a container label) can pass for a release.
One cycle, from main at ``0.3.0.dev0``::

    python scripts/release.py set-version 0.3.0   # hvdcore/__init__.py and the copies of it
    # write CHANGELOG.md's "## [0.3.0] - DATE" section and the hvdcore-0.3.0-*.eb easyconfigs
    git commit -m "release 0.3.0: version and changelog" -- ...
    python scripts/release.py cut 0.3.0           # builds from HEAD, writes checksums and record
    git commit -m "release 0.3.0: checksums" -- easyconfigs releases
    python scripts/release.py set-version 0.4.0.dev0   # main goes on as the next development
    git commit -m "main is 0.4.0.dev0" -- hvdcore/__init__.py containers

``set-version`` takes a release (``1.2.3``, ``1.2.3rc1``) or a development version
(``1.2.3.dev0``); it refuses a version already released and a development version that does not
sort after the newest release (``0.2.0.dev0`` after 0.2.0). The copies (``COPIES``: the
container labels and the Kubernetes manifest's label and image tag) carry the same version, a
development one included: an image built from main is a development build too.

``cut`` takes the release's inputs from a commit (``--commit``, default ``HEAD``), never from
the working tree, and refuses a development version. It checks that the commit's version, its
copies and changelog name the release, builds the sdist and a pure-Python wheel from
``git archive`` of that commit with ``SOURCE_DATE_EPOCH`` set to the commit's date, writes the
sdist's sha256 into ``easyconfigs/h/hvdcore/hvdcore-VERSION-*.eb`` and records commit, date,
build tools and checksums in ``releases/VERSION.json``. The sdist therefore never contains its
own checksum. ``verify`` rebuilds a recorded release from its commit and compares (the newest
release by default); it exits non-zero on any difference.

A released version's easyconfigs are never rewritten afterwards. Development builds use
``easyconfigs/build_sdist.py --ec-outdir DIR``: it writes ``hvdcore-0.3.0.dev0-*.eb``,
generated from the newest release's easyconfigs with the development sdist's checksum.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / "releases"
EASYCONFIGS = ROOT / "easyconfigs" / "h" / "hvdcore"
VERSION_FILE = "hvdcore/__init__.py"
VERSION_LINE = re.compile(r'^__version__ = "([^"]+)"$', re.M)
#: files that repeat the version for tools that cannot read hvdcore/__init__.py, with the pattern
#: of the repeated version (group 1 of every match is replaced)
COPIES = {
    **{f"containers/{n}.def": re.compile(r"^    version (\S+)$", re.M)
       for n in ("hvdcore-cpu", "hvdcore-cuda", "hvdcore-rocm", "hvdcore-hostmpi")},
    # the label and both image tags (launcher, worker)
    "containers/k8s/hvdcore-mpijob.yaml": re.compile(
        r'(?:app\.kubernetes\.io/version: "|/hvdcore-cuda:)([^"\s]+)'),
}
CHECKSUM_LINE = re.compile(r"^checksums = \['([0-9a-f]{64})'\]$", re.M)
#: a release (1.2.3, 1.2.3rc1) or a development version (1.2.3.dev0, 1.2.3rc1.dev0), PEP 440


class ReleaseError(SystemExit):
    """A release that cannot be cut or does not verify (the message says why)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"release: {message}")


def _build_sdist_module(tree: Path):
    """``easyconfigs/build_sdist.py`` of ``tree``: a release is built by its own commit's tool."""
    spec = importlib.util.spec_from_file_location("hvdcore_build_sdist",
                                                  tree / "easyconfigs" / "build_sdist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


#: This checkout's build tool: its version grammar and order are the release tool's too.
_VERSIONS = _build_sdist_module(ROOT)
VERSION_RE = re.compile(_VERSIONS.VERSION)


def _git(*args: str, root: Path = ROOT) -> str:
    proc = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False, timeout=120)
    if proc.returncode != 0:
        raise ReleaseError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def sha256(path: Path) -> str:
    """The hex sha256 of a file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_version(root: Path = ROOT) -> str:
    """The version in ``hvdcore/__init__.py`` of a tree."""
    match = VERSION_LINE.search((root / VERSION_FILE).read_text())
    if match is None:
        raise ReleaseError(f"no __version__ line in {root / VERSION_FILE}")
    return match.group(1)


def is_development(version: str) -> bool:
    """Whether ``version`` is a development version (``1.2.3.dev0``), which is never released."""
    return _VERSIONS.is_development(version)


def version_key(version: str) -> tuple:
    """A PEP 440 sort key: 0.2.0 < 0.3.0.dev0 < 0.3.0a1.dev0 < 0.3.0a1 < 0.3.0rc1 < 0.3.0
    (``easyconfigs/build_sdist.py``'s, the one grammar both tools read)."""
    try:
        return _VERSIONS.version_key(version)
    except ValueError as exc:
        raise ReleaseError(str(exc)) from None


def released(releases: Path = RELEASES) -> list[str]:
    """The recorded releases (``releases/*.json``), oldest first."""
    return sorted((p.stem for p in releases.glob("*.json")), key=version_key)


def set_version(version: str, root: Path = ROOT) -> list[str]:
    """Write ``version`` into the version source and its copies; return the files changed.

    Refused: a malformed version, a released one (``root/releases/VERSION.json`` exists) and a
    development version that does not sort after the newest release."""
    if not VERSION_RE.fullmatch(version):
        raise ReleaseError(f"{version!r} is not a version like 1.2.3, 1.2.3rc1 or 1.2.3.dev0")
    done = released(root / "releases")
    if version in done:
        raise ReleaseError(f"{version} is released (releases/{version}.json): after a release "
                           "main takes the next development version, e.g. "
                           f"{_next_minor_dev(version)}")
    if is_development(version) and done and version_key(version) <= version_key(done[-1]):
        raise ReleaseError(f"{version} sorts before the newest release {done[-1]}: a development "
                           f"version leads to the next release, e.g. {_next_minor_dev(done[-1])}")
    changed = []
    for rel, pattern in {VERSION_FILE: VERSION_LINE, **COPIES}.items():
        path = root / rel
        text = path.read_text()
        matches = list(pattern.finditer(text))
        if not matches:
            raise ReleaseError(f"{rel}: no version to set (pattern {pattern.pattern})")
        new = text
        for match in reversed(matches):
            new = new[:match.start(1)] + version + new[match.end(1):]
        if new != text:
            path.write_text(new)
            changed.append(rel)
    return changed


def _next_minor_dev(version: str) -> str:
    major, minor = version_key(version)[0][:2]
    return f"{major}.{minor + 1}.0.dev0"


def version_copies_disagree(root: Path = ROOT) -> list[str]:
    """``file: found X, hvdcore/__init__.py says Y`` for each copy that differs."""
    want = read_version(root)
    bad = []
    for rel, pattern in COPIES.items():
        found = [m.group(1) for m in pattern.finditer((root / rel).read_text())] or [None]
        for version in found:
            if version != want:
                bad.append(f"{rel}: found {version}, {VERSION_FILE} says {want}")
                break
    return bad


def changelog_section(text: str, version: str) -> str | None:
    """The body of ``## [VERSION] - YYYY-MM-DD`` in a changelog, or None."""
    match = re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}\s*$", text, re.M)
    if match is None:
        return None
    rest = text[match.end():]
    end = re.search(r"^## ", rest, re.M)
    return rest[:end.start() if end else len(rest)].strip()


def _archive(commit: str, dest: Path, root: Path = ROOT) -> None:
    """``git archive`` of ``commit``, unpacked into ``dest``."""
    tar = dest.parent / "source.tar"
    with open(tar, "wb") as out:
        proc = subprocess.run(["git", "-C", str(root), "archive", "--format=tar", commit],
                              stdout=out, stderr=subprocess.PIPE, check=False, timeout=300)
    if proc.returncode != 0:
        raise ReleaseError(f"git archive {commit}: {proc.stderr.decode().strip()}")
    dest.mkdir()
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()


def _build_wheel(sdist: Path, outdir: Path, epoch: int, python: str) -> Path:
    """A pure-Python wheel built from the sdist (the compiled hot path is left to sdist installs,
    which build it against the site's MPI)."""
    with tempfile.TemporaryDirectory(prefix="hvdcore-wheel-") as tmp:
        with tarfile.open(sdist) as t:
            t.extractall(tmp, filter="data")
        src = Path(tmp) / sdist.name[:-len(".tar.gz")]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch), "HVDCORE_BUILD_HOTPATH": "0"}
        code = ("import contextlib, sys\nfrom setuptools import build_meta\n"
                "with contextlib.redirect_stdout(sys.stderr):\n"
                "    name = build_meta.build_wheel(sys.argv[1])\nprint(name)\n")
        proc = subprocess.run([python, "-c", code, str(outdir)], cwd=src, env=env,
                              capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise ReleaseError(f"building the wheel failed:\n{proc.stderr[-4000:]}")
    return outdir / proc.stdout.strip().splitlines()[-1]


def _tools(python: str) -> dict[str, str]:
    code = ("import json, platform, setuptools\n"
            "print(json.dumps({'python': platform.python_version(), "
            "'setuptools': setuptools.__version__}))")
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def build_release(commit: str, outdir: Path, python: str = sys.executable,
                  root: Path = ROOT) -> dict:
    """Build the sdist and wheel of ``commit`` into ``outdir``; return the release record."""
    commit = _git("rev-parse", "--verify", f"{commit}^{{commit}}", root=root).strip()
    epoch = int(_git("log", "-1", "--format=%ct", commit, root=root).strip())
    outdir = Path(outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hvdcore-release-") as tmp:
        src = Path(tmp) / "src"
        _archive(commit, src, root)
        version = read_version(src)
        sdist = _build_sdist_module(src).build_sdist(outdir, python=python, root=src, mtime=epoch)
    wheel = _build_wheel(sdist, outdir, epoch, python)
    return {"version": version, "commit": commit, "source_date_epoch": epoch,
            "tools": _tools(python),
            "sdist": {"name": sdist.name, "sha256": sha256(sdist)},
            "wheel": {"name": wheel.name, "sha256": sha256(wheel)}}


def write_checksums(version: str, digest: str, easyconfigs: Path = EASYCONFIGS) -> list[Path]:
    """Put ``digest`` into every ``hvdcore-VERSION-*.eb``; return them (there must be some)."""
    files = sorted(easyconfigs.glob(f"hvdcore-{version}-*.eb"))
    if not files:
        raise ReleaseError(f"no easyconfigs hvdcore-{version}-*.eb in {easyconfigs}")
    for ec in files:
        text = ec.read_text()
        if len(CHECKSUM_LINE.findall(text)) != 1:
            raise ReleaseError(f"{ec}: expected one line checksums = ['<sha256>']")
        ec.write_text(CHECKSUM_LINE.sub(f"checksums = ['{digest}']", text))
    return files


def cut(version: str, commit: str = "HEAD", outdir: Path | None = None,
        python: str = sys.executable, root: Path = ROOT) -> dict:
    """Cut ``version`` from ``commit``: build, write the easyconfigs' checksum and the record."""
    if is_development(version) or not VERSION_RE.fullmatch(version):
        raise ReleaseError(f"{version} is not a release version (1.2.3 or 1.2.3rc1): a "
                           "development version (.devN) is main's between releases and is never "
                           f"cut; run 'scripts/release.py set-version {version.split('.dev')[0]}', "
                           "commit it with the changelog and easyconfigs, then cut that")
    record_path = root / "releases" / f"{version}.json"
    if record_path.exists():
        raise ReleaseError(f"{record_path} exists: {version} is released (verify it instead)")
    show = lambda rel: _git("show", f"{commit}:{rel}", root=root)  # noqa: E731
    found = VERSION_LINE.search(show(VERSION_FILE))
    if found is None or found.group(1) != version:
        raise ReleaseError(f"{commit}:{VERSION_FILE} says {found and found.group(1)}, not "
                           f"{version}: run 'scripts/release.py set-version {version}' and commit")
    if not changelog_section(show("CHANGELOG.md"), version):
        raise ReleaseError(f"{commit}:CHANGELOG.md has no non-empty section "
                           f"'## [{version}] - YYYY-MM-DD': write it and commit")
    with tempfile.TemporaryDirectory(prefix="hvdcore-copies-") as tmp:
        for rel in COPIES:
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_text(show(rel))
        (Path(tmp) / VERSION_FILE).parent.mkdir(parents=True, exist_ok=True)
        (Path(tmp) / VERSION_FILE).write_text(show(VERSION_FILE))
        if bad := version_copies_disagree(Path(tmp)):
            raise ReleaseError(f"at {commit}: " + "; ".join(bad))
    record = build_release(commit, outdir or root / "dist" / f"release-{version}", python, root)
    write_checksums(version, record["sdist"]["sha256"], root / "easyconfigs" / "h" / "hvdcore")
    record_path.parent.mkdir(exist_ok=True)
    record_path.write_text(json.dumps(record, indent=2) + "\n")
    return record


def newest(releases: Path = RELEASES) -> str:
    """The newest recorded release's version."""
    versions = released(releases)
    if not versions:
        raise ReleaseError(f"no release recorded in {releases}")
    return versions[-1]


def verify(version: str | None = None, outdir: Path | None = None,
           python: str = sys.executable, root: Path = ROOT) -> list[str]:
    """Rebuild a recorded release from its commit; return the differences (empty: it matches).

    Compared: the sdist's and wheel's sha256 with the record, and every
    ``hvdcore-VERSION-*.eb`` checksum of the working tree with the sdist's.
    """
    version = version or newest(root / "releases")
    record = json.loads((root / "releases" / f"{version}.json").read_text())
    with tempfile.TemporaryDirectory(prefix="hvdcore-verify-") as tmp:
        rebuilt = build_release(record["commit"], Path(outdir or tmp), python, root)
    problems = [f"{kind}: rebuilt {rebuilt[kind]}, recorded {record[kind]}"
                for kind in ("sdist", "wheel") if rebuilt[kind] != record[kind]]
    if problems and rebuilt["tools"] != record["tools"]:
        problems.append(f"built with {rebuilt['tools']}, the record says {record['tools']} "
                        "(other build tools can give other bytes)")
    problems += checksum_mismatches(version, rebuilt["sdist"]["sha256"],
                                    root / "easyconfigs" / "h" / "hvdcore")
    return problems


def checksum_mismatches(version: str, digest: str, easyconfigs: Path = EASYCONFIGS) -> list[str]:
    """One line per ``hvdcore-VERSION-*.eb`` whose checksums are not ``[digest]``."""
    problems = []
    for ec in sorted(easyconfigs.glob(f"hvdcore-{version}-*.eb")):
        found = CHECKSUM_LINE.findall(ec.read_text())
        if found != [digest]:
            problems.append(f"{ec.name}: checksums {found}, the sdist's sha256 is {digest}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("set-version", help="write VERSION (a release, or a development version "
                       "like 0.3.0.dev0) into hvdcore/__init__.py and its copies")
    p.add_argument("version")
    p = sub.add_parser("cut", help="build VERSION from a commit, write checksums and the record")
    p.add_argument("version")
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--outdir", type=Path, help="where the sdist and wheel go "
                   "(default dist/release-VERSION)")
    p = sub.add_parser("verify", help="rebuild a recorded release and compare its checksums")
    p.add_argument("version", nargs="?", help="default: the newest in releases/")
    p.add_argument("--outdir", type=Path, help="keep the rebuilt sdist and wheel here")
    args = parser.parse_args(argv)
    if args.command == "set-version":
        changed = set_version(args.version)
        print("changed: " + (", ".join(changed) or "nothing (already at that version)"))
        return 0
    if args.command == "cut":
        record = cut(args.version, args.commit, args.outdir)
        print(json.dumps(record, indent=2))
        print(f"now commit the checksums: git commit -m 'release {args.version}: checksums' -- "
              f"easyconfigs/h/hvdcore releases/{args.version}.json; then main's next development "
              f"version: scripts/release.py set-version {_next_minor_dev(args.version)}")
        return 0
    problems = verify(args.version, args.outdir)
    for line in problems:
        print(f"MISMATCH {line}", file=sys.stderr)
    print("OK: the release rebuilds to its recorded checksums" if not problems else
          f"{len(problems)} mismatch(es)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
