"""The code stays clean: ruff over the repository (its pyproject.toml rules: lines over 100
columns refused in the package) and mypy over the package, with no finding either way.

Each check also runs once on a known-bad input, so that a tool that checks nothing (a config
that selects no rule, a path that matches no file) fails here instead of passing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, input=stdin,
                          capture_output=True, text=True, timeout=300)


def test_ruff_finds_nothing() -> None:
    out = _run("ruff", "check", "--no-cache", ".")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_refuses_a_long_line_in_the_package_only() -> None:
    long_line = f"x = {'1' * 100!r}\n"
    inside = _run("ruff", "check", "--no-cache", "--stdin-filename", "hvdcore/probe.py", "-",
                  stdin=long_line)
    assert inside.returncode == 1 and "E501" in inside.stdout, inside.stdout + inside.stderr
    outside = _run("ruff", "check", "--no-cache", "--stdin-filename", "tests/probe.py", "-",
                   stdin=long_line)
    assert outside.returncode == 0, outside.stdout + outside.stderr


def test_mypy_finds_nothing_in_the_package() -> None:
    # its cache outside the checkout: other tests copy the tree while this one runs
    out = _run("mypy", "--cache-dir", "/var/tmp/hvdcore-mypy-cache", "hvdcore")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Success: no issues found" in out.stdout, out.stdout
    checked = int(out.stdout.split("in ")[-1].split()[0])
    assert checked > 100, out.stdout  # the package was read, not an empty path


def test_mypy_reports_a_type_error() -> None:
    out = _run("mypy", "--cache-dir", "/var/tmp/hvdcore-mypy-cache", "-c",
               "from hvdcore.errors import HvdcoreError\nx: int = HvdcoreError('a')")
    assert out.returncode == 1 and "Incompatible types in assignment" in out.stdout, out.stdout
