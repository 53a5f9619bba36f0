"""The checks through discovered Lmod modules, with no environment entry written for them.

A small EESSI-layout tree is made with real Lmod: stand-ins for EESSI's Python, mpi4py and
PyTorch or TensorFlow modules (backed by the test's venv, since EESSI is not reachable here), and
hvdcore installed into it with ``modules/install.sh prefix`` from a real sdist, as one of the
hand-written modules: ``hvdcore/0.2.0-foss-2023a`` (PyTorch) or
``hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0``. ReFrame then runs with a config whose only
environment discovers ``hvdcore`` modules (``tests/reframe_configs/lmod_modules.py``; it declares
torch): the checks must find the module, give it the framework its name says, load it in the job,
run the examples the module installed under ``$EBROOTHVDCORE/share/hvdcore/examples``, and pass.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from discovered_runs import assert_ran_the_module, mnist_cases, run_discovered
from lmod_shell import install_hvdcore_tree
from reframe_helpers import QUICK_TORCH_MNIST, ROOT, job_stdout

pytestmark = [pytest.mark.reframe, pytest.mark.lmod, pytest.mark.mpi, pytest.mark.slow]

MODULE = "hvdcore/0.2.0-foss-2023a"
TF_MODULE = "hvdcore/0.2.0-foss-2023a-TensorFlow-2.13.0"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """<tree>/modules/all (stand-ins + hvdcore) and <tree>/software/hvdcore/0.2.0-foss-2023a."""
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
    only (its name says so, although the environment declares torch). The Keras example's
    check (the main job's test leaves it to this one): sanity (both ranks, accuracy), its raw
    mpi4py peer in the same job (``mpi_ratio``, judged) and efficiency against its own 1-rank
    baseline (information: no bounds)."""
    # One chunk pair: hvdcore, then its peer, once.
    run = run_discovered(["hvdcore_capabilities.py", "hvdcore_mnist.py"],
                         [tf_tree / "modules" / "all"], tmp_path,
                         options=["-S", "HvdcoreMnistCheck.chunks=1"])
    assert sorted(run.cases) == sorted([
        f"HvdcoreCapabilitiesCheck %framework=tensorflow %hvdcore_module={TF_MODULE}",
        *mnist_cases(TF_MODULE, "tensorflow"),
    ]), run.out[-3000:]
    assert_ran_the_module(run, TF_MODULE, _examples(tf_tree, TF_MODULE))
    capability = run.case("HvdcoreCapabilitiesCheck")
    assert capability["result"] == "pass", capability["fail_reason"]
    assert "--require=mpi,tensorflow" in " ".join(capability["executable_opts"])
    check, base = run.case("HvdcoreMnistCheck"), run.case("MnistBaseline")
    for tc in (check, base):
        assert tc["result"] == "pass" or tc["fail_phase"] == "performance", tc["fail_reason"]
    assert (check["num_tasks"], base["num_tasks"]) == (2, 1)
    assert any("keras_mnist.py" in opt for opt in check["executable_opts"])
    perf = {k.split(":")[-1]: v for k, v in check["perfvalues"].items()}
    assert "ddp_ratio" not in perf and perf["mpi_ratio"][0] > 0  # Keras' peer: raw mpi4py
    assert perf["mpi_ratio"][2] is not None  # judged: a lower bound
    assert perf["efficiency"][2:4] == [None, None]  # information: no bounds
    base_ips = next(v[0] for k, v in base["perfvalues"].items() if k.endswith(":images_per_sec"))
    assert perf["efficiency"][0] == pytest.approx(
        100 * perf["images_per_sec_per_rank"][0] / base_ips, abs=0.01)
    text = job_stdout(check)
    match = re.search(r"hvdcore-mnist: ranks=2 epochs=\d+ test_accuracy=([0-9.]+) ", text)
    assert match and float(match[1]) > 0.5, text[-2000:]
    peers = re.findall(r"mpi-mnist: backend=mpi4py ranks=2 test_accuracy=([0-9.]+) "
                       r"images_per_sec=([0-9.]+) ", text)
    assert peers and all(float(acc) > 0.5 for acc, _ in peers), text[-2000:]
    # with one chunk pair the ratio is that pair's: hvdcore's images/s over its peer's
    ours = [float(x) for x in re.findall(r"hvdcore-mnist: ranks=2 .*?images_per_sec=([0-9.]+) ",
                                         text)]
    assert len(ours) == len(peers) == 1, (ours, peers)
    assert perf["mpi_ratio"][0] == pytest.approx(ours[0] / float(peers[0][1]), rel=1e-3)
