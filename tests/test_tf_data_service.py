"""``hvdcore.tensorflow.data``: a training job reading from a tf.data service that a separate
compute job serves (Horovod's ``horovod.tensorflow.data``), with real TensorFlow servers.

Each job pair: ``hvdcorerun -np 2 python -m hvdcore.tensorflow.data.compute_worker CONFIG``
started first, then the training job (tests/programs/tf_data_service.py, ``mpirun -np 2``),
which waits for CONFIG, reads the service and, on rank 0, shuts the compute job down; the
compute job must then exit 0 and remove CONFIG. Dispatchers on the compute side: each rank
reads the whole dataset once, then (``reuse_dataset``) the ranks share one epoch, every element
read once. On the training side (two dispatchers, one per training rank): each rank reads the
whole dataset from its own dispatcher and trains on batches the service made. The registry's
errors (wrong key, unknown dispatcher, a wait that times out) are checked in one process
against a real registry; a compute job whose size does not split among its dispatchers fails
on every rank.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PROGRAMS, ROOT, mpi_env, run_mpi, untag

pytest.importorskip("tensorflow")

pytestmark = [pytest.mark.tensorflow]

SQUARES = ",".join(str(i * i) for i in range(24))
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2"}


def _jobs(tmp_path: Path, mode: str, *flags: str) -> tuple[str, str]:
    """Run the compute job and the training job of ``mode``; both outputs."""
    config = tmp_path / "compute.json"
    hvdcorerun = str(Path(sys.executable).with_name("hvdcorerun"))
    compute = subprocess.Popen(
        [hvdcorerun, "-np", "2", sys.executable, "-m", "hvdcore.tensorflow.data.compute_worker",
         str(config), "--timeout", "60", *flags], env=mpi_env(QUIET), cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        training = run_mpi(2, [str(PROGRAMS / "tf_data_service.py"), str(config), mode],
                           env=QUIET, timeout=240)
        out, _ = compute.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(compute.pid, signal.SIGKILL)
        out, _ = compute.communicate()
        pytest.fail(f"the compute job did not end 60 s after the training job:\n{out[-6000:]}")
    finally:
        if compute.poll() is None:
            os.killpg(compute.pid, signal.SIGKILL)
            compute.wait()
    train_out = training.stdout + training.stderr
    assert training.returncode == 0, train_out[-6000:]
    assert compute.returncode == 0, out[-6000:]
    assert not config.exists()  # removed by the compute job's rank 0
    return untag(out), train_out


def _got(out: str, epoch: str) -> dict[int, list[int]]:
    found = re.findall(rf"^GOT {epoch} rank (\d+) (\S*)$", out, re.M)
    return {int(r): [int(v) for v in vals.split(",") if v] for r, vals in found}


def test_dispatchers_on_the_compute_side(tmp_path: Path) -> None:
    """send_to_data_service: a whole epoch per rank, then one shared epoch."""
    compute, out = _jobs(tmp_path, "compute")
    assert "1 dispatcher(s) on the compute side x 2 worker(s)" in compute, compute
    assert len(re.findall(r"tf\.data worker \S+ serving dispatcher 0 at grpc://", compute)) == 2
    own = _got(out, "own")
    assert sorted(own) == [0, 1], out[-4000:]
    assert all(",".join(map(str, v)) == SQUARES for v in own.values()), own
    shared = _got(out, "shared")
    assert sorted(shared) == [0, 1], out[-4000:]
    assert sorted(shared[0] + shared[1]) == [i * i for i in range(24)], shared


def test_dispatchers_on_the_training_side(tmp_path: Path) -> None:
    """tf_data_service: one dispatcher per training rank, each read whole, then a fit."""
    compute, out = _jobs(tmp_path, "training", "--dispatcher-side", "training",
                         "--dispatchers", "2")
    assert "2 dispatcher(s) on the training side x 1 worker(s)" in compute, compute
    serving = re.findall(r"serving dispatcher (\d) at grpc://", compute)
    assert sorted(serving) == ["0", "1"], compute
    own = _got(out, "own")
    assert sorted(own) == [0, 1] and all(
        ",".join(map(str, v)) == SQUARES for v in own.values()), out[-4000:]
    weights = set(re.findall(r"^WEIGHTS rank \d+ (\S+)$", out, re.M))
    assert len(weights) == 1, out[-4000:]  # the same model on both ranks after the fit


def test_a_size_that_does_not_split_fails_on_every_rank(tmp_path: Path) -> None:
    config = tmp_path / "compute.json"
    res = run_mpi(2, ["-m", "hvdcore.tensorflow.data.compute_worker", str(config),
                      "--dispatchers", "3"], env=QUIET, timeout=120)
    assert res.returncode != 0
    said = re.findall(r"2 rank\(s\) cannot be split among --dispatchers 3", res.stderr)
    assert len(said) == 2, res.stderr[-3000:]
    assert not config.exists()


def test_registry_errors_leave_it_serving() -> None:
    """Real registry and clients over TCP in this process."""
    from hvdcore.errors import ArgumentError
    from hvdcore.tensorflow.data.compute_registry import ComputeClient, ComputeService

    service = ComputeService(2, 1, b"k" * 32)
    try:
        with pytest.raises(ArgumentError, match="refused this client's key"):
            ComputeClient(service.addresses(), b"wrong" * 4, connect_timeout=5)
        client = ComputeClient(service.addresses(), b"k" * 32)
        with pytest.raises(ArgumentError, match=r"dispatcher id 2 is not within 0\.\.1"):
            client.register_dispatcher(2, "grpc://10.0.0.1:1")
        with pytest.raises(TimeoutError, match="no dispatcher 1 registered after 0.3 s"):
            client.wait_for_dispatcher_registration(1, 0.3)
        with pytest.raises(TimeoutError, match=r"1 worker\(s\) of dispatcher 0 registered \(0"):
            client.wait_for_dispatcher_worker_registration(0, 0.3)
        client.register_dispatcher(1, "grpc://10.0.0.1:1")  # still serving after the errors
        with pytest.raises(ArgumentError, match="registered at grpc://10.0.0.1:1 already"):
            client.register_dispatcher(1, "grpc://10.0.0.2:1")
        assert client.wait_for_dispatcher_registration(1, 5) == "grpc://10.0.0.1:1"
        client.register_worker_for_dispatcher(0, 0)
        client.wait_for_dispatcher_worker_registration(0, 5)
        client.shutdown()
        client.wait_for_shutdown()
        client.close()
    finally:
        service.shutdown()


def test_config_and_argument_errors(tmp_path: Path) -> None:
    import tensorflow as tf

    from hvdcore.errors import ArgumentError
    from hvdcore.tensorflow.data import TfDataServiceConfig, send_to_data_service

    with pytest.raises(ArgumentError, match="dispatcher_side must be 'compute' or 'training'"):
        TfDataServiceConfig(1, 1, "driver", {"lo": [("127.0.0.1", 1)]}, b"k")
    with pytest.raises(ArgumentError, match="workers_per_dispatcher must be a positive"):
        TfDataServiceConfig(1, 0, "compute", {"lo": [("127.0.0.1", 1)]}, b"k")
    config = TfDataServiceConfig(2, 3, "training", {"lo": [("127.0.0.1", 1)]}, b"\x00k", 9)
    config.write(str(tmp_path / "c.json"))
    assert TfDataServiceConfig.read(str(tmp_path / "c.json")) == config
    (tmp_path / "bad.json").write_text('{"dispatchers": 1}')
    with pytest.raises(ArgumentError, match="not a compute service config"):
        TfDataServiceConfig.read(str(tmp_path / "bad.json"))
    data = tf.data.Dataset.range(4)
    with pytest.raises(ArgumentError, match="needs the dispatchers on the compute side"):
        send_to_data_service(data, config, 0, 2)
    compute_side = TfDataServiceConfig(1, 1, "compute", {"lo": [("127.0.0.1", 1)]}, b"k")
    with pytest.raises(ArgumentError, match="round_robin=True .* needs reuse_dataset=True"):
        data.send_to_data_service(compute_side, 0, 2, round_robin=True)
