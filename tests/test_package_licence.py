"""The licence in the package metadata, in the form each setuptools that builds hvdcore knows.

``pyproject.toml`` lists ``license`` as dynamic and ``setup.py`` gives it: a PEP 639
License-Expression from setuptools 77 on, the License field before (setup.py's docstring says
why no single pyproject form serves both). Built with the running Python's setuptools (the
release's 84.2.1 in the project's venv), the sdist and a wheel built from that sdist must carry
LICENSE, state the licence, and raise no setuptools deprecation warning (the TOML-table form
``license = { text = ... }`` did: builds stop working after 2027-02-18).

The same build runs with EasyBuild foss/2023a's setuptools 67.7.2 (wheel 0.40.0), in a venv
made once and kept in ``$HVDCORE_OLD_SETUPTOOLS_VENV`` (default
``/var/tmp/hvdcore-setuptools-67.7.2``; making it needs the package index once).
``HVDCORE_OLD_SETUPTOOLS_PYTHON`` names another such Python instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LICENCE = "Apache-2.0"

#: One PEP 517 hook, run by the Python under test; prints what it built and the setuptools
#: deprecation warnings it raised.
HOOK = """
import contextlib, json, sys, warnings
import setuptools
from setuptools import build_meta
with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(sys.stderr):
    warnings.simplefilter("always")
    name = getattr(build_meta, sys.argv[1])(sys.argv[2])
print(json.dumps({"name": name, "setuptools": setuptools.__version__,
                  "deprecated": [str(w.message) for w in caught
                                 if w.category.__name__ == "SetuptoolsDeprecationWarning"]}))
"""


def _hook(python: str, hook: str, outdir: Path, cwd: Path) -> dict:
    proc = subprocess.run([python, "-c", HOOK, hook, str(outdir)], cwd=cwd, capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "HVDCORE_BUILD_HOTPATH": "0"})
    assert proc.returncode == 0, f"{hook} with {python} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _source(dest: Path) -> Path:
    """What the sdist is built from: the checkout's package and metadata files."""
    dest.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE", "CHANGELOG.md",
                 "MANIFEST.in"):
        shutil.copy2(ROOT / name, dest / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info")
    for package in ("hvdcore", "examples"):
        shutil.copytree(ROOT / package, dest / package, ignore=ignore)
    return dest


OLD_SETUPTOOLS = ("setuptools==67.7.2", "wheel==0.40.0")  # EasyBuild foss/2023a's


def _old_setuptools_python() -> str:
    """A Python whose setuptools is :data:`OLD_SETUPTOOLS` (the venv is made once, then kept)."""
    given = os.environ.get("HVDCORE_OLD_SETUPTOOLS_PYTHON")
    if given:
        return given
    venv = Path(os.environ.get("HVDCORE_OLD_SETUPTOOLS_VENV",
                               "/var/tmp/hvdcore-setuptools-67.7.2"))
    python = venv / "bin" / "python"
    stamp = venv / ".made"
    if not stamp.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *OLD_SETUPTOOLS], check=True, timeout=300)
        stamp.write_text(" ".join(OLD_SETUPTOOLS) + "\n")
    return str(python)


def _pythons() -> list:
    return [pytest.param(None, id="running-setuptools"),
            pytest.param("old", id="setuptools-67.7.2")]


def _licence_lines(metadata: str) -> list[str]:
    return [line for line in metadata.splitlines()
            if line.startswith(("License:", "License-Expression:", "License-File:"))]


@pytest.mark.parametrize("python", _pythons())
def test_sdist_and_wheel_state_the_licence_without_a_deprecation(python: str | None,
                                                                  tmp_path: Path) -> None:
    python = _old_setuptools_python() if python == "old" else sys.executable
    licence = (ROOT / "LICENSE").read_bytes()
    sdist = _hook(python, "build_sdist", tmp_path / "dist", _source(tmp_path / "src"))
    major = int(sdist["setuptools"].split(".")[0])
    field = f"License-Expression: {LICENCE}" if major >= 77 else f"License: {LICENCE}"
    assert sdist["deprecated"] == [], sdist
    stem = sdist["name"][:-len(".tar.gz")]
    with tarfile.open(tmp_path / "dist" / sdist["name"]) as tar:
        assert tar.extractfile(f"{stem}/LICENSE").read() == licence
        pkg_info = tar.extractfile(f"{stem}/PKG-INFO").read().decode()
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert _licence_lines(pkg_info) == [field, "License-File: LICENSE"], pkg_info[:1500]

    # the wheel from the sdist, as an EasyBuild or pip install of the sdist builds it
    wheel = _hook(python, "build_wheel", tmp_path / "wheel", tmp_path / "unpacked" / stem)
    assert wheel["deprecated"] == [], wheel
    with zipfile.ZipFile(tmp_path / "wheel" / wheel["name"]) as whl:
        info = next(n.split("/")[0] for n in whl.namelist() if ".dist-info/" in n)
        metadata = whl.read(f"{info}/METADATA").decode()
        shipped = [n for n in whl.namelist() if n.startswith(info) and n.endswith("/LICENSE")]
        assert shipped and all(whl.read(n) == licence for n in shipped), whl.namelist()
    assert _licence_lines(metadata) == [field, "License-File: LICENSE"], metadata[:1500]
