"""The Kubernetes MPIJob (kubeflow.org/v2beta1): schema-valid, consistent with the CUDA recipe,
and its launcher command is what ``hvdcorerun --dry-run`` turns into the right mpirun line for
the hostfile the MPI Operator writes."""

from __future__ import annotations

import copy
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from containers.recipetools.deffile import parse

pytestmark = pytest.mark.container

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "containers" / "k8s"
MANIFEST = K8S / "hvdcore-mpijob.yaml"
SCHEMA = K8S / "mpijob-v2beta1.schema.json"
HOSTFILE_IN_POD = "/etc/mpi/hostfile"


def load_job() -> dict[str, Any]:
    return yaml.safe_load(MANIFEST.read_text())


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(doc: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(doc)
    ]


def container(job: dict[str, Any], replica: str) -> dict[str, Any]:
    return job["spec"]["mpiReplicaSpecs"][replica]["template"]["spec"]["containers"][0]


def test_manifest_is_valid() -> None:
    assert errors(load_job()) == []


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split("/")
    node: Any = doc
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node[k]
    last = keys[-1]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()
LAUNCHER = "spec/mpiReplicaSpecs/Launcher"
WORKER = "spec/mpiReplicaSpecs/Worker"


@pytest.mark.parametrize(
    ("path", "value", "expect"),
    [
        ("apiVersion", "kubeflow.org/v1", "kubeflow.org/v2beta1"),
        ("kind", "TFJob", "MPIJob"),
        ("spec/slotPerWorker", 1, "Additional properties"),  # k8s would silently prune it
        ("spec/slotsPerWorker", 0, "less than the minimum"),
        ("spec/slotsPerWorker", "1", "not of type 'integer'"),
        ("spec/mpiImplementation", "openmpi", "is not one of"),
        ("spec/runPolicy/cleanPodPolicy", "Sometimes", "is not one of"),
        (
            "spec/mpiReplicaSpecs/Workers",
            {"template": {"spec": {"containers": [{"name": "w"}]}}},
            "Additional properties",
        ),
        (f"{LAUNCHER}/replicas", 2, "1 was expected"),
        (LAUNCHER, _DELETE, "'Launcher' is a required property"),
        (f"{WORKER}/restartPolicy", "Sometimes", "is not one of"),
        (f"{WORKER}/template/spec/containers", [], "should be non-empty"),
        (f"{WORKER}/template/spec/containers/0/name", "Worker_0", "does not match"),
        (f"{WORKER}/template/spec/containers/0/resources/limits/memory", "32GB", "is not valid"),
        (f"{WORKER}/template/spec/containers/0/resources/limts", {}, "Additional properties"),
        (
            f"{LAUNCHER}/template/spec/containers/0/command",
            "hvdcorerun -np 2",
            "not of type 'array'",
        ),
        (f"{LAUNCHER}/template/spec/containers/0/env/0/value", 120, "not of type 'string'"),
        ("metadata/name", "Hvdcore_Train", "does not match"),
        ("spec", _DELETE, "'spec' is a required property"),
    ],
)
def test_schema_rejects_bad_manifests(path: str, value: Any, expect: str) -> None:
    doc = copy.deepcopy(load_job())
    _set(doc, path, value)
    found = errors(doc)
    assert found, f"{path}={value!r} was accepted"
    assert any(expect in e for e in found), found


def test_run_ai_shape_workers_gpus_slots() -> None:
    job = load_job()
    spec = job["spec"]
    slots = spec.get("slotsPerWorker", 1)
    worker = container(job, "Worker")
    assert spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    # one rank per GPU: the GPUs a worker gets are its slots
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == slots
    assert worker["resources"]["requests"]["nvidia.com/gpu"] == slots
    launcher = container(job, "Launcher")
    assert "nvidia.com/gpu" not in launcher["resources"].get("limits", {})
    assert (
        worker["command"][0] == "/usr/sbin/sshd"
    )  # the operator's launcher reaches workers by ssh


def test_image_is_the_cuda_recipe() -> None:
    job = load_job()
    version = re.search(r'^__version__ = "([^"]+)"', (ROOT / "hvdcore" / "__init__.py").read_text(),
                        re.M)
    assert version
    for replica in ("Launcher", "Worker"):
        image = container(job, replica)["image"]
        assert image.endswith(f"/hvdcore-cuda:{version.group(1)}"), image
    cuda_from = parse(ROOT / "containers" / "hvdcore-cuda.def").final.get("from")
    docker_from = re.search(r"^FROM\s+(\S+)", (K8S / "Dockerfile.cuda").read_text(), re.M)
    assert docker_from and docker_from.group(1) == cuda_from


def operator_hostfile(job: dict[str, Any], namespace: str = "default") -> str:
    """The hostfile the MPI Operator (v2beta1, Open MPI) mounts at /etc/mpi/hostfile."""
    name = job["metadata"]["name"]
    slots = job["spec"].get("slotsPerWorker", 1)
    replicas = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    return "".join(
        f"{name}-worker-{i}.{name}.{namespace}.svc slots={slots}\n" for i in range(replicas)
    )


def dry_run(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hvdcore.runner", "--dry-run", *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )


@pytest.mark.mpi
def test_launcher_command_matches_hvdcorerun_dry_run(tmp_path: Path) -> None:
    job = load_job()
    launcher = container(job, "Launcher")
    command = launcher["command"] + launcher.get("args", [])
    assert command[0] == "hvdcorerun"
    assert HOSTFILE_IN_POD in command, "the launcher must use the operator's hostfile"
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(operator_hostfile(job))
    args = [str(hostfile) if a == HOSTFILE_IN_POD else a for a in command[1:]]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    env.update({e["name"]: e["value"] for e in launcher.get("env", [])})
    proc = dry_run(args, env)
    assert proc.returncode == 0, proc.stderr
    built = shlex.split(proc.stdout.strip().splitlines()[-1])
    assert Path(built[0]).name == "mpirun"  # mpiImplementation: OpenMPI
    assert job["spec"]["mpiImplementation"] == "OpenMPI"
    slots = job["spec"].get("slotsPerWorker", 1)
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    assert built[built.index("-np") + 1] == str(workers * slots)
    name = job["metadata"]["name"]
    hosts = built[built.index("-H") + 1].split(",")
    assert hosts == [f"{name}-worker-{i}.{name}.default.svc:{slots}" for i in range(workers)]
    program = command[command.index(HOSTFILE_IN_POD) + 1 :]
    assert built[-len(program) :] == program
    # the launcher's HVDCORE_* settings travel to the ranks on the workers
    for e in launcher.get("env", []):
        if e["name"].startswith("HVDCORE_"):
            assert built[built.index(e["name"]) - 1] == "-x"


@pytest.mark.mpi
def test_dry_run_rejects_more_ranks_than_worker_slots(tmp_path: Path) -> None:
    """If someone raises -np without adding workers, hvdcorerun says so instead of hanging."""
    job = load_job()
    launcher = container(job, "Launcher")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(operator_hostfile(job))
    command = [str(hostfile) if a == HOSTFILE_IN_POD else a for a in launcher["command"][1:]]
    command[command.index("-np") + 1] = "4"
    proc = dry_run(command, {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0
    assert "-np 4" in proc.stderr and "slot" in proc.stderr
