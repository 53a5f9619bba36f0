"""The checks through discovered Lmod modules, with no environment entry written for them.

A small EESSI-layout tree is made with real Lmod: stand-ins for EESSI's Python, mpi4py and
PyTorch or TensorFlow modules (backed by the test's venv, since EESSI is not reachable here), and
hvdcore installed into it with ``modules/install.sh prefix`` from a real sdist, as one of the
hand-written modules: ``hvdcore/0.1.0-foss-2023a`` (PyTorch) or
``hvdcore/0.1.0-foss-2023a-TensorFlow-2.13.0``. ReFrame then runs with a config whose only
environment discovers ``hvdcore`` modules (``tests/reframe_configs/lmod_modules.py``; it declares
torch): the checks must find the module, give it the framework its name says, load it in the job,
run the examples the module installed under ``$EBROOTHVDCORE/share/hvdcore/examples``, and pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from discovered_runs import assert_ran_the_module, mnist_cases, run_discovered
from lmod_shell import install_hvdcore_tree
from reframe_helpers import QUICK_TORCH_MNIST, ROOT

pytestmark = [pytest.mark.reframe, pytest.mark.lmod, pytest.mark.mpi, pytest.mark.slow]

MODULE = "hvdcore/0.1.0-foss-2023a"
TF_MODULE = "hvdcore/0.1.0-foss-2023a-TensorFlow-2.13.0"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<tree>/modules/all (stand-ins + hvdcore) and <tree>/software/hvdcore/0.1.0-foss-2023a."""
    return install_hvdcore_tree(tmp_path_factory.mktemp("eessi-rfm"), MODULE)


@pytest.fixture(scope="module")
def tf_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with the TensorFlow-flavoured module (TensorFlow stand-in instead of PyTorch)."""
    pytest.importorskip("tensorflow", reason="the TensorFlow stand-in is this venv's TensorFlow")
    return install_hvdcore_tree(tmp_path_factory.mktemp("eessi-rfm-tf"), TF_MODULE)


def _examples(tree: Path, module: str) -> Path:
    return tree / "software" / module / "share" / "hvdcore" / "examples"


@pytest.mark.torch
def test_install_ships_the_examples(tree: Path) -> None:
    shipped = _examples(tree, MODULE)
    for script in ("pytorch_mnist.py", "keras_mnist.py"):
        assert (shipped / script).read_text() == (ROOT / "examples" / script).read_text()


@pytest.mark.torch
def test_mnist_check_runs_with_a_discovered_module(tree: Path, tmp_path: Path) -> None:
    # The DDP peer is left out (2 launches instead of 7): this test is about discovery, the
    # module's examples and the figures hvdcore's own runs give; the peer from a module's
    # examples trains in test_easybuild_install.py::test_mnist_check_runs_the_installed_examples.
    run = run_discovered(["hvdcore_mnist.py"], [tree / "modules" / "all"], tmp_path,
                         options=[*QUICK_TORCH_MNIST, "-S", "HvdcoreMnistCheck.peer="])
    # Discovery found the module; only its torch variants exist (the environment declares
    # torch, and the module's name does not say otherwise). Both run and pass sanity; whether
    # the speed is within its bounds depends on the machine and its load (tests assert
    # results, not speed: see test_reframe_local.py), so a case may fail in the performance
    # stage only.
    assert sorted(run.cases) == mnist_cases(MODULE, "torch"), run.out[-3000:]
    assert_ran_the_module(run, MODULE, _examples(tree, MODULE))
    assert (run.returncode == 0) == all(tc["result"] == "pass" for tc in run.cases.values())
    check = run.case("HvdcoreMnistCheck")
    assert check["num_tasks"] == 2
    perf = {k.split(":")[-1]: v[0] for k, v in check["perfvalues"].items()}
    assert perf["efficiency"] > 0 and perf["images_per_sec"] > 0
    assert "ddp_ratio" not in perf  # the peer was left out


@pytest.mark.tensorflow
def test_tensorflow_module_through_discovery(tf_tree: Path, tmp_path: Path) -> None:
    """Capability and MNIST checks with the TensorFlow-flavoured module: tensorflow variants
    only (its name says so, although the environment declares torch)."""
    # The raw-mpi4py peer is left out: this test is about discovery and the module's examples,
    # not the measurement (the main job's test trains it), and it halves the MNIST job.
    run = run_discovered(["hvdcore_capabilities.py", "hvdcore_mnist.py"],
                         [tf_tree / "modules" / "all"], tmp_path,
                         options=["-S", "HvdcoreMnistCheck.peer="])
    assert sorted(run.cases) == sorted([
        f"HvdcoreCapabilitiesCheck %framework=tensorflow %hvdcore_module={TF_MODULE}",
        *mnist_cases(TF_MODULE, "tensorflow"),
    ]), run.out[-3000:]
    assert_ran_the_module(run, TF_MODULE, _examples(tf_tree, TF_MODULE))
    capability = run.case("HvdcoreCapabilitiesCheck")
    assert capability["result"] == "pass", capability["fail_reason"]
    assert "--require=mpi,tensorflow" in " ".join(capability["executable_opts"])
    check = run.case("HvdcoreMnistCheck")
    assert check["num_tasks"] == 2
    assert any("keras_mnist.py" in opt for opt in check["executable_opts"])
    assert not any(k.endswith(":mpi_ratio") for k in check["perfvalues"] or {})  # no peer ran
