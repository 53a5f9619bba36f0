"""hvdcorerun --check-build: Horovod layout with reasons, --json, --require/--require-available."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hotpath_status import compiled_status

ROOT = Path(__file__).resolve().parent.parent


def check_build(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "hvdcore.runner", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)


SEPARATOR = "=====8<====="


@pytest.fixture(scope="module")
def full_report() -> tuple[str, dict]:
    """(--check-build text, --check-build --json data) from one process: TensorFlow's ~6-20 s
    import is paid once; both go through the real entry point ``hvdcore.runner.cli.main``."""
    code = ("import sys; from hvdcore.runner.cli import main; a = main(['--check-build']); "
            f"print({SEPARATOR!r}); b = main(['--check-build', '--json']); sys.exit(a or b)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stderr
    text, data = proc.stdout.split(SEPARATOR + "\n")
    return text, json.loads(data)


def _torch_has_nccl() -> bool:
    torch = pytest.importorskip("torch")
    return bool(torch.distributed.is_available() and torch.distributed.is_nccl_available())


@pytest.mark.tensorflow
@pytest.mark.torch
def test_check_build_text_layout_and_reasons(full_report: tuple[str, dict]) -> None:
    out = full_report[0]
    lines = out.splitlines()
    for title in ("Available Frameworks:", "Available Controllers:",
                  "Available Tensor Operations:", "Available Devices:"):
        assert title in lines, out
    torch_version = importlib.metadata.version("torch")
    assert f"    [X] PyTorch {torch_version}" in lines
    assert any(re.fullmatch(r"    \[X\] MPI \(.+; mpi4py [\d.]+\)", ln) for ln in lines), out
    assert "    [ ] DDL" in lines and "    [ ] CCL" in lines
    # every [ ] row is followed by an indented reason line
    for i, line in enumerate(lines):
        if line.startswith("    [ ]"):
            reason = lines[i + 1]
            assert re.match(r"        (not built|built, not usable here)\b.*: \S", reason), (
                line, reason)
    if not _torch_has_nccl():
        idx = lines.index("    [ ] NCCL")
        assert "is_nccl_available() is False" in lines[idx + 1]
    assert re.search(r"^GPU tensors: (none|nccl|mpi-cuda-aware|mpi-host-staging) \(", out, re.M)


@pytest.mark.tensorflow
def test_check_build_json_is_the_full_report(full_report: tuple[str, dict]) -> None:
    data = full_report[1]
    names = [(i["category"], i["name"]) for i in data["items"]]
    assert ("framework", "tensorflow") in names and ("device", "cuda-aware-mpi") in names
    assert len(names) == 13
    for item in data["items"]:
        assert set(item) >= {"built", "available", "version", "reason", "details"}
        if not (item["built"] and item["available"]):
            assert item["reason"], item
    tf = next(i for i in data["items"] if i["name"] == "tensorflow")
    assert tf["built"] and tf["version"] == tf["details"]["version"]
    assert data["context"]["python"] == ".".join(map(str, sys.version_info[:3]))


def test_check_build_says_which_hot_path_repeated_allreduces_take(
        full_report: tuple[str, dict]) -> None:
    """The report says what the runtime decides (compiled where it is built and usable here,
    else mpi4py and the runtime's reason); tests/test_fallback_install.py checks an install
    built without it."""
    text, data = full_report
    usable, why = compiled_status()
    hot = data["tensor_paths"]["host_hot_path"]
    if usable:
        assert hot["path"] == "compiled", data["tensor_paths"]
        assert "Repeated host allreduces: compiled (" in text
    else:
        assert hot["path"] == "mpi4py" and hot["reason"].startswith(why), (hot, why)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    proc = subprocess.run([sys.executable, "-m", "hvdcore.runner", "--check-build", "--require",
                           "mpi"], capture_output=True, text=True, cwd=ROOT, timeout=240,
                          env={**env, "PYTHONPATH": str(ROOT), "HVDCORE_HOTPATH": "0"})
    assert proc.returncode == 0, proc.stderr
    assert "Repeated host allreduces: mpi4py (HVDCORE_HOTPATH turns it off)" in proc.stdout


@pytest.mark.torch
def test_require_present_items_passes_without_tensorflow() -> None:
    proc = check_build("--check-build", "--json", "--require", "mpi,pytorch")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    # only what was required is probed (TensorFlow is not imported for this)
    assert sorted({i["name"] for i in data["items"]}) == ["mpi", "torch"]
    assert data["required"] == {"built": ["mpi", "torch"], "available": [], "missing": []}


@pytest.mark.torch
def test_require_missing_item_fails_with_reason() -> None:
    if _torch_has_nccl():
        pytest.skip("this torch has NCCL: nothing is missing")
    proc = check_build("--check-build", "--require", "mpi,nccl,ddl")
    assert proc.returncode == 1
    err = proc.stderr.strip().splitlines()
    assert err[0] == "hvdcorerun: missing required capabilities:"
    assert err[1].startswith("  nccl: torch ") and "built without NCCL" in err[1]
    assert err[2] == ("  ddl: hvdcore has no IBM DDL backend (CPU tensors use MPI; GPU tensors "
                      "NCCL or MPI)")
    assert len(err) == 3  # mpi is present
    assert "    [ ] NCCL" in proc.stdout


@pytest.mark.torch
def test_require_available_needs_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    proc = check_build("--require-available", "cuda")
    if torch.cuda.is_available() and torch.version.cuda:
        assert proc.returncode == 0, proc.stderr
    else:
        assert proc.returncode == 1
        assert "cuda: not built with CUDA" in proc.stderr or "no CUDA GPU" in proc.stderr
