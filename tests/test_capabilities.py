"""hvdcore.capabilities: built/available/version/reason per item, Horovod's boolean calls."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hvdcore.capabilities as caps

ROOT = Path(__file__).resolve().parent.parent


def run_py(code: str, extra_path: str | None = None,
           env_extra: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter (this checkout importable); return its JSON print."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, str(ROOT)) if p)
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_mpi_probe_imports_no_framework_and_no_mpi() -> None:
    out = run_py("""
        import json, sys
        import hvdcore.capabilities as caps
        heavy = ("torch", "tensorflow", "keras")
        before = sorted(m for m in heavy if m in sys.modules)
        r = caps.capabilities(["mpi"])
        after = sorted(m for m in heavy if m in sys.modules)
        assert "mpi4py.MPI" not in sys.modules  # libmpi was loaded in a probe subprocess
        mpi = r.item("controller", "mpi")
        print(json.dumps({"before": before, "after": after, "built": mpi.built,
                          "version": mpi.version, "names": [i.name for i in r.items],
                          "mpi_built": caps.mpi_built(), "mpi_enabled": caps.mpi_enabled()}))
    """)
    assert out["before"] == [] and out["after"] == []
    assert out["names"] == ["mpi", "mpi"]
    reference = run_py("""
        import json, mpi4py
        mpi4py.rc.initialize = False
        from mpi4py import MPI
        name, ver = MPI.get_vendor()
        print(json.dumps(name + " " + ".".join(map(str, ver))))
    """)
    assert out["built"] is True and out["mpi_built"] is True
    assert out["version"].startswith(reference + "; mpi4py ")
    assert out["mpi_enabled"] is False


def test_mpi_enabled_follows_hvdcore_init() -> None:
    out = run_py("""
        import json
        import hvdcore
        import hvdcore.capabilities as caps
        seen = [caps.mpi_enabled()]
        hvdcore.init()
        seen.append(caps.mpi_enabled())
        seen.append(caps.capabilities(["mpi"]).item("controller", "mpi").details["initialized"])
        hvdcore.shutdown()
        seen.append(caps.mpi_enabled())
        print(json.dumps(seen))
    """)
    assert out == [False, True, True, False]


@pytest.mark.torch
def test_torch_items_match_torch() -> None:
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    report = caps.capabilities(["torch", "gloo", "nccl", "cuda", "rocm"])
    t = report.item("framework", "torch")
    assert (t.built, t.available, t.version) == (True, True, torch.__version__)
    assert report.item("controller", "gloo").built == dist.is_gloo_available()
    assert caps.gloo_built() == dist.is_gloo_available()
    nccl = report.item("tensor_operation", "nccl")
    assert nccl.built == dist.is_nccl_available()
    assert (caps.nccl_built() > 0) == dist.is_nccl_available()
    if not nccl.built:
        assert caps.nccl_built() == 0
        assert "is_nccl_available() is False" in nccl.reason
        # the probe recorded why the NCCL version could not be read (no silent guard)
        assert nccl.details["nccl_version_error"]
    cuda = report.item("device", "cuda")
    assert cuda.available == (torch.cuda.is_available() and torch.version.hip is None
                              and torch.cuda.device_count() > 0)
    if torch.version.cuda is None and not cuda.built:
        assert caps.cuda_built() is False
        assert "torch.version.cuda = None" in cuda.reason
    assert caps.rocm_built() == (report.item("device", "rocm").built)
    assert caps.ddl_built() is False and caps.ccl_built() is False


@pytest.mark.torch
def test_gloo_enabled_means_the_gloo_controller(tmp_path: Path) -> None:
    """Horovod's gloo_enabled()/mpi_enabled(): which controller the running job is on."""
    pytest.importorskip("torch")
    out = run_py("""
        import json, os
        os.environ["HVDCORE_CONTROLLER"] = "gloo"
        import hvdcore as hvd
        import hvdcore.capabilities as caps
        seen = [caps.gloo_enabled()]
        hvd.init()
        seen += [caps.gloo_enabled(), caps.mpi_enabled()]
        hvd.shutdown()
        seen.append(caps.gloo_enabled())
        print(json.dumps(seen))
    """)
    assert out == [False, True, False, False]


def test_broken_framework_is_reported_not_raised(tmp_path: Path) -> None:
    """A torch that fails to import (e.g. a missing shared library) becomes a reason."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text(
        "raise OSError('libtorch_cpu.so: cannot open shared object file')\n")
    out = run_py("""
        import json
        import hvdcore.capabilities as caps
        r = caps.capabilities(["torch", "gloo", "nccl", "cuda"])
        print(json.dumps([[i.name, i.built, i.available, i.reason] for i in r.items]
                         + [caps.gloo_built(), caps.nccl_built(), caps.cuda_built()]))
    """, extra_path=str(tmp_path))
    *rows, gloo_built, nccl_built, cuda_built = out
    assert (gloo_built, nccl_built, cuda_built) == (False, 0, False)
    for name, built, available, reason in rows:
        assert built is False and available is False, name
        assert "import torch failed: OSError: libtorch_cpu.so" in reason, (name, reason)


def test_unloadable_mpi_library_is_reported(tmp_path: Path) -> None:
    """An mpi4py whose MPI module cannot load libmpi gives a reason naming the fix."""
    from hvdcore.capability_probes import probe_mpi_library

    fake = tmp_path / "mpi4py"
    fake.mkdir()
    (fake / "__init__.py").write_text("__version__ = '0'\nclass _rc: pass\nrc = _rc()\n")
    (fake / "MPI.py").write_text("raise ImportError('libmpi.so.40: cannot open shared object')\n")
    facts = probe_mpi_library({**os.environ, "PYTHONPATH": str(tmp_path)})
    assert "library_version" not in facts
    assert facts["error"].startswith("loading mpi4py.MPI failed: ImportError: libmpi.so.40")
    assert "module load OpenMPI" in facts["error"]
    good = probe_mpi_library()
    assert "error" not in good and good["library_version"] and good["initialized"] is False


def test_cuda_aware_mpi_matches_ompi_info() -> None:
    ompi_info = shutil.which("ompi_info")
    if ompi_info is None:
        pytest.skip("ompi_info not on PATH (Open MPI not installed)")
    text = subprocess.run([ompi_info, "--parsable", "--all"], capture_output=True,
                          text=True).stdout
    expected = "mca:mpi:base:param:mpi_built_with_cuda_support:value:true" in text
    item = caps._cuda_aware_mpi()
    assert item.built == expected
    assert item.details["source"].startswith("ompi_info")
    if not expected:
        assert "not CUDA-aware" in item.reason


def test_unknown_names_rejected() -> None:
    with pytest.raises(ValueError, match="unknown capability name.*horovod.*accepted: "):
        caps.capabilities(["mpi", "horovod"])


def test_the_report_makes_the_runtimes_hot_path_decision() -> None:
    """The report's ``host_hot_path`` in a process where MPI is up says what the steady path
    chose there (both call hvdcore.backends.hotpath.decide)."""
    out = run_py("""
        import json
        from mpi4py import MPI
        import hvdcore.capabilities as caps
        from hvdcore.backends import mpi_steady
        module, why = mpi_steady.compiled_module()
        hot = caps.capabilities(["mpi"]).tensor_paths["host_hot_path"]
        print(json.dumps({"runtime": getattr(module, "__file__", None), "why": why,
                          "report": hot}))
    """)
    report = out["report"]
    if out["runtime"] is not None:
        assert report == {**report, "path": "compiled", "reason": out["runtime"]}, out
    else:
        assert report["path"] == "mpi4py" and report["reason"].startswith(out["why"]), out


# (HVDCORE_GPU_OPERATIONS, GPU visible, NCCL usable, MPI CUDA-aware) -> the path the torch
# binding takes at init() when every rank has these facts (tests/test_torch_dataplanes.py)
GPU_CASES = [
    ("auto", False, True, True, "none"), ("auto", True, True, False, "nccl"),
    ("auto", True, False, False, "mpi-host-staging"), ("auto", True, False, True, "mpi-cuda-aware"),
    ("nccl", True, True, True, "nccl"), ("nccl", True, False, True, "error"),
    ("mpi", True, True, False, "mpi-host-staging"), ("mpi", True, True, True, "mpi-cuda-aware"),
]


@pytest.mark.parametrize("setting,gpu,nccl,aware,path", GPU_CASES)
def test_the_report_predicts_the_gpu_path_by_the_bindings_rule(
        monkeypatch: pytest.MonkeyPatch, setting: str, gpu: bool, nccl: bool, aware: bool,
        path: str) -> None:
    from hvdcore.capability_paths import gpu_tensor_path
    from hvdcore.gpu_path import choose_gpu_path

    monkeypatch.setenv("HVDCORE_GPU_OPERATIONS", setting)
    items = {
        "cuda": caps.Capability("device", "cuda", "CUDA", True, gpu),
        "rocm": caps.Capability("device", "rocm", "ROCm", False, False, reason="no ROCm"),
        "nccl": caps.Capability("tensor_operation", "nccl", "NCCL", nccl, nccl, "2.21.5",
                                None if nccl else "no NCCL in this torch"),
        "cuda-aware-mpi": caps.Capability("device", "cuda-aware-mpi", "CUDA-aware MPI", aware,
                                          aware),
    }
    got = gpu_tensor_path(items)
    assert got["path"] == path, got
    if gpu:  # the binding's rule on a job of ranks like this one
        vote = (nccl and setting != "mpi", "why", aware)
        assert choose_gpu_path(setting, [vote, vote])[0] == path
    if path not in ("nccl", "none"):
        assert ("no NCCL in this torch" if setting != "mpi" else "HVDCORE_GPU_OPERATIONS=mpi") \
            in got["reason"], got


@pytest.mark.torch
def test_gpu_tensor_path(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    gpu_names = ["cuda", "rocm", "nccl", "cuda-aware-mpi"]
    path = caps.capabilities(gpu_names).gpu_tensors
    if not torch.cuda.is_available():
        assert path["path"] == "none" and "no GPU visible" in path["reason"]
    else:
        assert path["path"] in ("nccl", "mpi-cuda-aware", "mpi-host-staging")
    monkeypatch.setenv("HVDCORE_GPU_OPERATIONS", "infiniband")
    bad = caps.capabilities(gpu_names).gpu_tensors
    assert bad["path"] == "error"
    assert "HVDCORE_GPU_OPERATIONS='infiniband' is not valid: accepted values are auto, nccl, " \
           "mpi" in bad["reason"]


@pytest.mark.torch
def test_gpu_visible_items() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible (torch.cuda.is_available() is False)")
    r = caps.capabilities(["cuda", "nccl", "rocm", "cuda-aware-mpi"])
    assert r.item("device", "cuda").available or r.item("device", "rocm").available
    if torch.distributed.is_nccl_available():
        assert r.item("tensor_operation", "nccl").available
        assert r.gpu_tensors["path"] == "nccl"
        assert caps.nccl_built() >= 20000


@pytest.mark.torch
@pytest.mark.tensorflow
def test_full_report_every_missing_item_has_a_reason() -> None:
    tf = pytest.importorskip("tensorflow")
    report = caps.capabilities(refresh=True)
    assert [(i.category, i.name) for i in report.items] == [(c, n) for c, n, _ in caps.ITEMS]
    for it in report.items:
        if not (it.built and it.available):
            assert it.reason, f"{it.category}/{it.name} has no reason"
        if it.built:
            assert it.category in ("tensor_operation", "controller") or it.version, it.name
    data = json.loads(json.dumps(report.to_dict()))
    assert len(data["items"]) == len(caps.ITEMS)
    assert data["gpu_tensors"]["path"] in ("none", "nccl", "mpi-cuda-aware", "mpi-host-staging")
    tf_item = report.item("framework", "tensorflow")
    assert tf_item.version == tf.__version__
    assert tf_item.details["cuda_build"] == tf.test.is_built_with_cuda()
    # cached: a second report is the same without probing again
    assert caps.capabilities().to_dict()["items"] == data["items"]
