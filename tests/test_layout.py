"""The repository's layout rules (issue 15): the runtime package ships only what runs on compute
nodes, and no file edits ``sys.path`` (shared code is importable the normal way)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", ".git", "build", "dist", "reframe-results", "stage", "output", "perflogs"}


def _python_files() -> list[Path]:
    return [p for p in ROOT.rglob("*.py")
            if not SKIP.intersection(p.relative_to(ROOT).parts)]


def test_no_file_edits_sys_path() -> None:
    edits = re.compile(r"sys\.path\.(insert|append|extend)\(|sys\.path\s*(\+=|=)")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in _python_files()
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if edits.search(line) and not line.lstrip().startswith("#")]
    assert not found, "sys.path edited (use pythonpath / packages / ReFrame's loader): " \
        + ", ".join(found)


def test_runtime_package_has_no_build_or_test_tools() -> None:
    """Recipe tools live in containers/recipetools, test harnesses under tests/."""
    tools = {"rootfs.py", "defcheck.py", "deffile.py", "slurm_localhost.py"}
    shipped = [p.relative_to(ROOT).as_posix() for p in (ROOT / "hvdcore").rglob("*.py")
               if p.name in tools or p.name.startswith("faults_")]
    assert not shipped, shipped
    assert sorted(p.name for p in (ROOT / "hvdcore" / "tools").glob("*.py")) == [
        "__init__.py", "allreduce_check.py"]
    assert (ROOT / "containers" / "recipetools" / "rootfs.py").exists()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'include = ["hvdcore*"]' in pyproject
