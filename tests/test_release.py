"""Releases: every recorded one (``releases/*.json``, the newest and the earlier ones whose
easyconfigs stay in ``easyconfigs/h/hvdcore/``) rebuilds from its recorded commit to its recorded
checksums, and the easyconfigs of each released version carry that sdist's sha256; the sdist and
the wheel carry the licence, and one version source feeds every copy.

The rebuild is ``scripts/release.py``'s own ``verify``: ``git archive`` of the recorded commit,
the sdist and the pure-Python wheel built with ``SOURCE_DATE_EPOCH`` from the commit's date
(about a second a release). A source differing from the commit by one byte must give a mismatch
(the check can fail).
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

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
