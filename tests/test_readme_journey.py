"""README.md's commands, run from top to bottom as a newcomer types them.

The same runner and block convention as the manual's journeys (``tests/test_docs_journeys.py``:
one bash session, ``% journey: skip <reason>`` for what needs a cluster, ``% journey: file NAME``
for a script a later block runs). The session starts in a copy of the checkout (the README's
first commands are ``./scripts/...``) with the admins' site stand-in: the module ``Python/3.11``
(the test virtualenv, described to EasyBuild as an external module) and an ``eb``. So the
README's sdist build, its ``eb`` install of the SYSTEM variant, ``module load hvdcore``, its
``--check-build`` and its 2-rank ``train.py`` all run for real; the README's first block
(``validate.sh``, ``test.sh``: the whole suite, this test included) is marked, never run.

A copy of the README with one flag misspelt fails the journey, naming the README's line.
``HVDCORE_README`` runs another copy of the README.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from lmod_shell import (
    ROOT,
    build_sdist_module,
    eb_workdir,
    require_eb,
    require_lmod,
    require_venv,
)
from test_docs_journeys import (
    PYSHORT,
    WHICH_HVDCORE,
    Journey,
    _assert_imports_the_install,
    _copy_checkout,
    _site,
    extract_blocks,
    run_journey,
)

README = Path(os.environ.get("HVDCORE_README") or ROOT / "README.md")


@dataclass
class ReadmeRun:
    journey: Journey
    home: Path


@contextmanager
def _run_readme(text: str, name: str) -> Iterator[ReadmeRun]:
    """Run a README's blocks in a fresh site stand-in; yield the result, then clean up."""
    require_eb()
    require_venv()
    require_lmod()
    if PYSHORT != "3.11":
        pytest.skip(f"the README installs hvdcore-*-Python-3.11.eb; tests run on {PYSHORT}")
    blocks = extract_blocks(text, name)
    base = eb_workdir("hvdcore-readme-")
    try:
        prelude = _site(base) + "\ncd hvdcore"  # the README starts in the checkout
        home = base / "home"
        home.mkdir()
        _copy_checkout(home / "hvdcore")
        journey = run_journey(name, blocks, home, prelude, epilogue=WHICH_HVDCORE)
        print(f"\n{name} journey: {journey.ran} blocks in {journey.seconds:.1f} s "
              f"({journey.timings()})")
        yield ReadmeRun(journey, home)
    finally:
        if os.environ.get("HVDCORE_JOURNEY_KEEP"):
            print(f"\njourney kept in {base} (HVDCORE_JOURNEY_KEEP)")
        else:
            shutil.rmtree(base, ignore_errors=True)


def test_readme_follows_the_convention_and_marks_the_suite() -> None:
    """Fast (no eb): the README parses, its first block (the whole suite) is never run, and its
    run blocks do the install and the job it documents."""
    blocks = extract_blocks(README.read_text(), "README.md")
    first = blocks[0]
    assert "./scripts/validate.sh" in first.text and "./scripts/test.sh" in first.text
    assert first.action == "skip", "the journey must not run the suite that runs it"
    run = "".join(b.text for b in blocks if b.action == "run")
    for needed in ("easyconfigs/build_sdist.py", "--ec-outdir", "eb ", "--sourcepath=",
                   "module load hvdcore", "hvdcorerun --check-build", "hvdcorerun -np 2"):
        assert needed in run, f"README.md: no run block does {needed!r}"
    assert [b.arg for b in blocks if b.action == "file"] == ["train.py"]


@pytest.mark.easybuild
@pytest.mark.lmod
@pytest.mark.torch
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_readme_commands_run() -> None:
    with _run_readme(README.read_text(), "README.md") as result:
        journey = result.journey
        assert journey.ok, journey.report()
        assert "hvdcore" in journey.info, "README.md ends without an hvdcore module loaded"
        _assert_imports_the_install(journey, result.home)
        built = result.home / "easybuild" / "modules" / "all" / "hvdcore"
        # the checkout's version (a development one on main), not the release it follows
        version = build_sdist_module().project_version()
        assert sorted(p.name for p in built.glob("*.lua")) == [f"{version}-Python-{PYSHORT}.lua"]
        check = next(b for b in journey.blocks if "hvdcorerun --check-build" in b.text)
        out = "".join(journey.outputs[str(check.number)])
        assert "All required capabilities present: mpi, torch" in out, out[-3000:]


@pytest.mark.easybuild
@pytest.mark.lmod
@pytest.mark.timeout(900)
def test_a_misspelt_flag_in_the_readme_fails_the_journey() -> None:
    """The journey can fail: a README copy whose eb line says --sourcepth instead of
    --sourcepath stops at that block, and the report names the README's line."""
    text = README.read_text()
    good = 'eb ecs/hvdcore-*-Python-3.11.eb --installpath="$HOME/easybuild" --sourcepath='
    assert text.count(good) == 1
    broken = text.replace(good, good.replace("--sourcepath=", "--sourcepth="))
    blocks = extract_blocks(broken, "README-misspelt.md")
    eb_block = next(b for b in blocks if "--sourcepth=" in b.text)
    with _run_readme(broken, "README-misspelt.md") as result:
        journey = result.journey
        assert not journey.ok and journey.failed == str(eb_block.number), journey.report()
        report = journey.report()
        assert report.startswith(f"README-misspelt.md:{eb_block.line}: block {eb_block.number} "
                                 "(bash) failed"), report
        assert "sourcepth" in report, report
        assert not (result.home / "easybuild" / "modules").exists()  # nothing was installed
