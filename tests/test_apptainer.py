"""Where Apptainer is installed (clusters), build each recipe it can and run ``apptainer test``.

Apptainer is not packaged for Debian 12 nor on PyPI, so on the project's CI machine these tests
skip with that reason; the recipes are still linted (test_defcheck.py) and the CPU recipe is
executed under chroot (test_container_rootfs.py). GPU recipes also need the GPU they are for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.container, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
APPTAINER = shutil.which("apptainer") or shutil.which("singularity")
NO_APPTAINER = (
    "apptainer not on PATH (not packaged for Debian 12 nor on PyPI): recipes are checked by "
    "containers.recipetools.defcheck and the CPU recipe runs under chroot instead"
)


def _gpu_flag(recipe: str) -> tuple[list[str], str | None]:
    """Apptainer flags a recipe needs, and why it cannot run here (or None)."""
    if recipe == "hvdcore-cuda.def":
        if shutil.which("nvidia-smi") is None:
            return ["--nv"], "hvdcore-cuda needs an NVIDIA GPU and driver (no nvidia-smi here)"
        return ["--nv"], None
    if recipe == "hvdcore-rocm.def":
        if not os.path.exists("/dev/kfd"):
            return ["--rocm"], "hvdcore-rocm needs an AMD GPU (no /dev/kfd here)"
        return ["--rocm"], None
    return [], None


@pytest.mark.skipif(APPTAINER is None, reason=NO_APPTAINER)
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("recipe", sorted(p.name for p in (ROOT / "containers").glob("*.def")))
def test_apptainer_build_and_test(recipe: str, tmp_path: Path) -> None:
    assert APPTAINER is not None
    flags, why_not = _gpu_flag(recipe)
    if why_not:
        pytest.skip(why_not)
    ctx = tmp_path / "ctx"
    proc = subprocess.run(
        ["bash", str(ROOT / "containers" / "build-sdist.sh"), str(ctx / "dist")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    image = tmp_path / recipe.replace(".def", ".sif")
    build = subprocess.run(
        [APPTAINER, "build", "--fakeroot", str(image), str(ROOT / "containers" / recipe)],
        cwd=ctx,
        capture_output=True,
        text=True,
        timeout=3000,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    test = subprocess.run(
        [APPTAINER, "test", *flags, str(image)], capture_output=True, text=True, timeout=600
    )
    out = test.stdout + test.stderr
    assert test.returncode == 0, out[-4000:]
    assert "All required capabilities present" in out
    assert "allreduce_check: rank 1 of 2 OK" in out
