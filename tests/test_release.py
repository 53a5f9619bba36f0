"""Releases: every recorded one (``releases/*.json``, the newest and the earlier ones whose
easyconfigs stay in ``easyconfigs/h/hvdcore/``) rebuilds from its recorded commit to its recorded
checksums, and the easyconfigs of each released version carry that sdist's sha256; the sdist and
the wheel carry the licence, and one version source feeds every copy.

The rebuild is ``scripts/release.py``'s own ``verify``: ``git archive`` of the recorded commit,
the sdist and the pure-Python wheel built with ``SOURCE_DATE_EPOCH`` from the commit's date
(about a second a release). A source differing from the commit by one byte must give a mismatch
(the check can fail).

Between releases the checkout carries a development version (``0.3.0.dev0``): the whole cycle,
``set-version`` of the release, ``cut``, ``verify``, ``set-version`` of the next development
version, with ``build_sdist.py`` generating development easyconfigs and never rewriting a
released one, runs for real (the scripts as commands) in a temporary clone of this commit.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lmod_shell import lmod_shell, require_eb, require_lmod

ROOT = Path(__file__).resolve().parent.parent


def _release_module():
    spec = importlib.util.spec_from_file_location("hvdcore_release", ROOT / "scripts" / "release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


release = _release_module()


def _needs_history() -> None:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the release's commit cannot be archived")


@dataclass
class Rebuilt:
    version: str
    record: dict
    problems: list[str]
    sdist: Path
    wheel: Path


RELEASES = sorted(p.stem for p in (ROOT / "releases").glob("*.json"))


def _rebuild(version: str, out: Path) -> Rebuilt:
    _needs_history()
    record = json.loads((ROOT / "releases" / f"{version}.json").read_text())
    problems = release.verify(version, outdir=out)
    return Rebuilt(version, record, problems, out / record["sdist"]["name"],
                   out / record["wheel"]["name"])


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rebuilt]:
    """The newest release rebuilt from its recorded commit (one build for the module)."""
    yield _rebuild(release.newest(), tmp_path_factory.mktemp("rebuilt"))


@pytest.fixture(scope="module", params=RELEASES)
def each_release(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rebuilt]:
    """Every recorded release rebuilt from its commit (the newest one reuses ``rebuilt``)."""
    if request.param == release.newest():
        yield request.getfixturevalue("rebuilt")
    else:
        yield _rebuild(request.param, tmp_path_factory.mktemp(f"rebuilt-{request.param}"))


def test_every_release_rebuilds_to_its_recorded_checksums(each_release: Rebuilt) -> None:
    assert each_release.problems == [], "\n".join(each_release.problems)
    assert release.sha256(each_release.sdist) == each_release.record["sdist"]["sha256"]
    # the commit is in this checkout's history (a merge keeps it), and not the checksums' commit
    subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor",
                    each_release.record["commit"], "HEAD"], check=True)


def test_released_easyconfigs_carry_the_sdist_checksum(each_release: Rebuilt) -> None:
    """Each release's easyconfigs stay, with that release's checksum (an earlier release's too:
    easyconfigs/README.md)."""
    ecs = sorted((ROOT / "easyconfigs" / "h" / "hvdcore").glob(
        f"hvdcore-{each_release.version}-*.eb"))
    assert ecs, f"no easyconfigs of release {each_release.version}"
    for ec in ecs:
        assert release.CHECKSUM_LINE.findall(ec.read_text()) == [
            each_release.record["sdist"]["sha256"]], ec.name
        assert f"version = '{each_release.version}'" in ec.read_text(), ec.name


def test_sdist_and_wheel_carry_the_licence(rebuilt: Rebuilt) -> None:
    licence = (ROOT / "LICENSE").read_bytes()
    assert b"Apache License" in licence and b"Version 2.0, January 2004" in licence
    stem = rebuilt.sdist.name[:-len(".tar.gz")]
    with tarfile.open(rebuilt.sdist) as sdist:
        assert sdist.extractfile(f"{stem}/LICENSE").read() == licence
        assert b"License-File: LICENSE" in sdist.extractfile(f"{stem}/PKG-INFO").read()
    with zipfile.ZipFile(rebuilt.wheel) as wheel:
        info = f"hvdcore-{rebuilt.version}.dist-info"
        metadata = wheel.read(f"{info}/METADATA").decode()
        assert re.search(r"^License-File: LICENSE$", metadata, re.M), metadata[:2000]
        assert wheel.read(f"{info}/licenses/LICENSE") == licence


def test_one_changed_byte_is_a_mismatch(rebuilt: Rebuilt, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """A source one byte away from the recorded commit does not verify."""
    archive = release._archive

    def one_byte_off(commit: str, dest: Path, root: Path = ROOT) -> None:
        archive(commit, dest, root)
        target = dest / "hvdcore" / "errors.py"
        data = bytearray(target.read_bytes())
        data[-2] ^= 0x01
        target.write_bytes(bytes(data))

    monkeypatch.setattr(release, "_archive", one_byte_off)
    problems = release.verify(rebuilt.version, outdir=tmp_path)
    assert any(p.startswith("sdist: rebuilt") for p in problems), problems
    assert any(p.startswith("wheel: rebuilt") for p in problems), problems
    assert any("checksums" in p for p in problems), problems  # the easyconfigs' no longer match


def test_one_changed_checksum_byte_is_a_mismatch(rebuilt: Rebuilt, tmp_path: Path) -> None:
    digest = rebuilt.record["sdist"]["sha256"]
    ecs = tmp_path / "ecs"
    ecs.mkdir()
    ec = ecs / f"hvdcore-{rebuilt.version}-test.eb"
    ec.write_text(f"checksums = ['{digest}']\n")
    assert release.checksum_mismatches(rebuilt.version, digest, ecs) == []
    ec.write_text(f"checksums = ['{digest[:-1]}{'0' if digest[-1] != '0' else '1'}']\n")
    assert len(release.checksum_mismatches(rebuilt.version, digest, ecs)) == 1


def test_one_version_source_and_its_copies_agree() -> None:
    assert release.version_copies_disagree() == []
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r"^version\s*=\s*\"", pyproject, re.M) is None, "pyproject.toml repeats it"
    assert 'version = { attr = "hvdcore.__version__" }' in pyproject


def test_set_version_writes_the_source_and_its_copies(tmp_path: Path) -> None:
    for rel in [release.VERSION_FILE, *release.COPIES]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    changed = release.set_version("9.8.7", tmp_path)
    assert sorted(changed) == sorted([release.VERSION_FILE, *release.COPIES])
    assert release.read_version(tmp_path) == "9.8.7"
    assert release.version_copies_disagree(tmp_path) == []
    manifest = (tmp_path / "containers" / "k8s" / "hvdcore-mpijob.yaml").read_text()
    assert manifest.count("/hvdcore-cuda:9.8.7\n") == 2  # launcher and worker images
    assert 'app.kubernetes.io/version: "9.8.7"' in manifest
    (tmp_path / "containers" / "hvdcore-cpu.def").write_text(
        (ROOT / "containers" / "hvdcore-cpu.def").read_text())
    assert release.version_copies_disagree(tmp_path) == [
        f"containers/hvdcore-cpu.def: found {release.read_version()}, "
        f"{release.VERSION_FILE} says 9.8.7"]
    with pytest.raises(SystemExit, match="not a version"):
        release.set_version("nine", tmp_path)


def test_changelog_has_a_section_per_release() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    for record in (ROOT / "releases").glob("*.json"):
        assert release.changelog_section(text, record.stem), f"no CHANGELOG section {record.stem}"
    assert release.changelog_section("## [1.0.0] - 2026-01-01\n", "1.0.0") == ""
    assert release.changelog_section("## [1.0.0]\n- x\n", "1.0.0") is None  # no date


def test_cut_refuses_a_version_the_commit_does_not_name() -> None:
    _needs_history()
    with pytest.raises(SystemExit, match=r"hvdcore/__init__.py says .*, not 9\.9\.9"):
        release.cut("9.9.9")
    with pytest.raises(SystemExit, match="is released"):
        release.cut(release.newest())


def test_versions_sort_as_pep_440() -> None:
    order = ["0.1.0", "0.2.0", "0.3.0.dev0", "0.3.0.dev1", "0.3.0a1.dev0", "0.3.0a1", "0.3.0b2",
             "0.3.0rc1", "0.3.0", "0.3.1.dev0", "0.10.0"]
    assert sorted(reversed(order), key=release.version_key) == order
    assert [release.is_development(v) for v in ("0.3.0.dev0", "0.3.0rc1.dev2", "0.3.0")] == [
        True, True, False]
    for bad in ("0.3", "0.3.0-dev0", "0.3.0dev0", "v0.3.0", "0.3.0.post1"):
        with pytest.raises(SystemExit, match="not a version"):
            release.version_key(bad)


def test_the_checkout_never_claims_an_earlier_release() -> None:
    """The version is the newest release (a release commit), a release being prepared, or a
    development version after the newest release (main between releases: 0.3.0.dev0)."""
    version = release.read_version()
    assert release.version_key(version) >= release.version_key(release.newest()), version
    if version in release.released():
        assert version == release.newest(), f"{version} is an earlier release than the newest"


def test_cut_refuses_a_development_version() -> None:
    _needs_history()
    with pytest.raises(SystemExit, match=r"0\.3\.0\.dev0 is not a release version .*"
                                         r"set-version 0\.3\.0'"):
        release.cut("0.3.0.dev0")


def test_set_version_refuses_a_release_and_a_development_version_before_it(
        tmp_path: Path) -> None:
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases" / "0.2.0.json").write_text("{}")
    for version, message in [("0.2.0", r"0\.2\.0 is released .* e\.g\. 0\.3\.0\.dev0"),
                             ("0.2.0.dev1", r"sorts before the newest release 0\.2\.0"),
                             ("0.3.0-dev0", "not a version")]:
        with pytest.raises(SystemExit, match=message):
            release.set_version(version, tmp_path)


def _run(cmd: list[str], cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    assert (proc.returncode == 0) == ok, f"{cmd}: {proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc


def _easyconfigs(tree: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (tree / "easyconfigs" / "h" / "hvdcore").iterdir()}


@pytest.mark.easybuild
def test_a_release_cycle_in_a_clone(tmp_path: Path) -> None:
    """dev -> release -> next dev with the real commands, in a clone of this commit: set-version
    of the release, its commit, cut, verify, set-version of the next .dev0 (a released or an
    earlier version refused); build_sdist.py --in-place never touches a released easyconfig,
    and --ec-outdir writes the development version's from the newest release's."""
    _needs_history()
    require_eb()
    clone = tmp_path / "clone"
    _run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(clone)], tmp_path)
    git = ["git", "-c", "user.name=release test", "-c", "user.email=release@test.invalid"]
    script, build = [sys.executable, "scripts/release.py"], [sys.executable,
                                                             "easyconfigs/build_sdist.py"]
    start = release.read_version(clone)
    assert release.is_development(start) or start in release.released(clone / "releases"), start
    # the release: its version everywhere, its changelog section and easyconfigs, one commit
    nxt = release._next_minor_dev(release.newest(clone / "releases")).split(".dev")[0]
    _run([*script, "set-version", nxt], clone)
    assert release.read_version(clone) == nxt and release.version_copies_disagree(clone) == []
    changelog = clone / "CHANGELOG.md"
    changelog.write_text(changelog.read_text().replace(
        "## [Unreleased]\n", f"## [Unreleased]\n\n## [{nxt}] - 2099-01-01\n\n- test\n", 1))
    ecs = clone / "easyconfigs" / "h" / "hvdcore"
    base = release.newest(clone / "releases")
    for ec in sorted(ecs.glob(f"hvdcore-{base}-*.eb")):
        (ecs / ec.name.replace(f"-{base}-", f"-{nxt}-")).write_text(
            ec.read_text().replace(f"version = '{base}'", f"version = '{nxt}'"))
    _run([*git, "add", "--all", "."], clone)
    _run([*git, "commit", "--quiet", "-m", f"release {nxt}"], clone)
    proc = _run([*script, "cut", nxt, "--outdir", str(tmp_path / "out")], clone)
    assert f"set-version {release._next_minor_dev(nxt)}" in proc.stdout
    assert (clone / "releases" / f"{nxt}.json").exists()
    _run([*git, "add", "--all", "."], clone)
    _run([*git, "commit", "--quiet", "-m", f"release {nxt}: checksums"], clone)
    assert "OK" in _run([*script, "verify"], clone).stdout
    # at the release, --in-place leaves every easyconfig as it is (they are released)
    before = _easyconfigs(clone)
    proc = _run([*build, "--outdir", str(tmp_path / "d1"), "--in-place"], clone, ok=False)
    assert f"belongs to the release {nxt}" in proc.stderr and _easyconfigs(clone) == before
    # main goes on as the next development version; an earlier or released one is refused
    dev = release._next_minor_dev(nxt)
    for refused in (nxt, f"{nxt}.dev0", base):
        _run([*script, "set-version", refused], clone, ok=False)
    _run([*script, "set-version", dev], clone)
    assert release.read_version(clone) == dev and release.version_copies_disagree(clone) == []
    assert "not a release version" in _run([*script, "cut", dev], clone, ok=False).stderr
    proc = _run([*build, "--outdir", str(tmp_path / "d2"), "--in-place"], clone, ok=False)
    assert "development version" in proc.stderr and _easyconfigs(clone) == before
    _run([*build, "--outdir", str(tmp_path / "d3"), "--ec-outdir", str(tmp_path / "ecs")], clone)
    assert _easyconfigs(clone) == before
    digest = release.sha256(tmp_path / "d3" / f"hvdcore-{dev}.tar.gz")
    made = sorted(p.name for p in (tmp_path / "ecs").iterdir())
    assert made == sorted(n.replace(f"-{nxt}-", f"-{dev}-") for n in before if f"-{nxt}-" in n)
    for name in made:
        text = (tmp_path / "ecs" / name).read_text()
        assert f"\nversion = '{dev}'\n" in text and f"checksums = ['{digest}']" in text, name
        assert text.startswith("# a development build, not a release"), name


def test_lmod_ranks_a_development_build_between_releases(tmp_path: Path) -> None:
    """What easyconfigs/README.md and docs/admins/modules.md say a bare ``module load hvdcore``
    takes, with the installed Lmod: a development build ranks above the release before it (so
    it is the default in a shared tree) and below the pre-releases and release after it."""
    require_lmod()
    tree = tmp_path / "modules"
    (tree / "hvdcore").mkdir(parents=True)
    ranked = ["0.1.0-Python-3.11", "0.2.0-foss-2023a-PyTorch-2.1.2", "0.2.0-Python-3.11",
              "0.3.0.dev0-Python-3.11", "0.3.0rc1-Python-3.11", "0.3.0-Python-3.11"]

    def default(present: list[str]) -> str:
        shutil.rmtree(tree / "hvdcore")
        (tree / "hvdcore").mkdir()
        for name in present:
            (tree / "hvdcore" / f"{name}.lua").write_text(f'setenv("HVDCORE_PICKED", "{name}")\n')
        proc = lmod_shell(f"module use {tree}\nmodule load hvdcore\necho \"$HVDCORE_PICKED\"")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout.strip().splitlines()[-1]

    for top in range(2, len(ranked) + 1):
        assert default(ranked[:top]) == ranked[top - 1], ranked[:top]
