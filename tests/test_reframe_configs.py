"""Every ReFrame config in checks/config is valid: --show-config, --list and --dry-run accept it."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from reframe_helpers import (
    CHECKS,
    CONFIGS,
    LMOD_CMD,
    SITE_CONFIGS,
    reframe_env,
    run_reframe,
    write_site_modules,
)

pytestmark = pytest.mark.reframe


def _env_for(config: str, tmp_path: Path) -> dict[str, str]:
    extra = {}
    if config not in ("local.py", "slurm.py"):
        if not os.path.exists(LMOD_CMD):
            pytest.skip(f"Lmod missing ({LMOD_CMD}): apt-get install lmod")
        mods = tmp_path / "modules"
        write_site_modules(CONFIGS / config, mods)
        extra = {"LMOD_CMD": LMOD_CMD, "MODULEPATH": str(mods)}
    return reframe_env(extra)


@pytest.mark.parametrize("config", sorted(SITE_CONFIGS))
def test_show_config_and_list(config: str, tmp_path: Path) -> None:
    system = SITE_CONFIGS[config]
    env = _env_for(config, tmp_path)
    base = ["-C", str(CONFIGS / config), "--system", system]
    shown = run_reframe([*base, "--show-config"], tmp_path, env)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert f'"name": "{system}"' in shown.stdout

    listed = run_reframe([*base, "-c", str(CHECKS), "--list"], tmp_path, env)
    out = listed.stdout + listed.stderr
    assert listed.returncode == 0, out
    assert "WARNING: skipping test file" not in out, out
    for check in ("HvdcoreCapabilitiesCheck", "HvdcoreCollectivesCheck",
                  "HvdcoreMnistCheck %scale=1_node %baseline.framework=torch"):
        assert check in out, out


@pytest.mark.parametrize("config", sorted(SITE_CONFIGS))
def test_dry_run_generates_job_scripts(config: str, tmp_path: Path) -> None:
    system = SITE_CONFIGS[config]
    env = _env_for(config, tmp_path)
    res = run_reframe(["-C", str(CONFIGS / config), "--system", system, "-c", str(CHECKS),
                       "--dry-run"], tmp_path, env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-5000:]
    assert "PASSED" in out
    scripts = list((tmp_path / "rfm" / "stage").rglob("rfm_job.sh"))
    assert scripts, "no job script generated"
    text = "\n".join(s.read_text() for s in scripts)
    assert "HVDCORERUN" in text and "hvdcore_collectives.py" in text
    if config != "local.py":
        assert "srun" in text and "--mpi=pmix" in text
    if system in ("alvis",):
        assert "--gpus-per-node=A100:" in text  # typed GPU requests, even for 1 rank
    if system == "alvis":
        # EESSI-style discovery found the hvdcore modules in the environment that asks for it.
        assert "module load hvdcore/0.2.0-foss-2023a-CUDA-12.1.1" in text
        # ... also for the MNIST check, with no environment entry of its own for the module
        mnist = [s.read_text() for s in scripts if "HvdcoreMnistCheck_" in str(s)]
        assert any("module load hvdcore/0.2.0-foss-2023a-CUDA-12.1.1" in t
                   and "$EBROOTHVDCORE/share/hvdcore/examples" in t for t in mnist)


def test_tensorflow_variants_follow_the_environment(tmp_path: Path) -> None:
    """The MNIST check has a tensorflow variant (with its own 1-rank baseline) exactly where
    the environment provides TensorFlow: the local venv declares what it can import."""
    local = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS), "--list"], tmp_path)
    assert local.returncode == 0, local.stdout + local.stderr
    tf_check = "HvdcoreMnistCheck %scale=1_node %baseline.framework=tensorflow"
    tf_baseline = "MnistBaseline %framework=tensorflow %hvdcore_module=env"
    if importlib.util.find_spec("tensorflow") is None:
        assert tf_check not in local.stdout
        return
    assert tf_check in local.stdout and tf_baseline in local.stdout, local.stdout
    assert "HvdcoreMnistCheck %scale=1_node %baseline.framework=torch" in local.stdout
    # An environment that declares torch only (CHECKS_VENV-style site config): no TF variant.
    config = tmp_path / "torch_only.py"
    config.write_text(
        "from reframe.utility import import_module_from_file\n"
        f"site_configuration = import_module_from_file({str(CONFIGS / 'local.py')!r}, "
        "load_parents=True).site_configuration\n"
        "site_configuration['environments'][0]['features'] = ['hvdcore', 'torch']\n")
    torch_only = run_reframe(["-C", str(config), "-c", str(CHECKS), "--list"], tmp_path)
    assert torch_only.returncode == 0, torch_only.stdout + torch_only.stderr
    assert "framework=tensorflow" not in torch_only.stdout
    assert "%baseline.framework=torch" in torch_only.stdout


def test_scale_selection_follows_the_partition(tmp_path: Path) -> None:
    """Local: one node of 2 ranks -> only 1_node; generic:cpu, 2 nodes -> 1_node and 2_nodes."""
    local = run_reframe(["-C", str(CONFIGS / "local.py"), "-c", str(CHECKS), "--list"], tmp_path)
    assert "%scale=1_node" in local.stdout and "%scale=2_nodes" not in local.stdout
    slurm = run_reframe(["-C", str(CONFIGS / "slurm.py"), "--system", "generic:cpu", "-c",
                         str(CHECKS), "--list"], tmp_path)
    assert "%scale=1_node" in slurm.stdout and "%scale=2_nodes" in slurm.stdout
    assert "%scale=2_ranks" not in slurm.stdout  # == 1_node on 2-core nodes
    assert "%scale=4_nodes" not in slurm.stdout


@pytest.mark.parametrize("config", sorted(SITE_CONFIGS))
def test_every_partition_takes_its_recorded_references(config: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """extras["references"] of each partition is what checks/config/references/<system>.json
    (here: $CHECKS_REFERENCES_DIR) records for it, {} where nothing is recorded."""
    import runpy

    system = SITE_CONFIGS[config]
    monkeypatch.setenv("CHECKS_REFERENCES_DIR", str(tmp_path))
    monkeypatch.delenv("CHECKS_SLURM_ONE_HOST", raising=False)
    conf = runpy.run_path(str(CONFIGS / config))["site_configuration"]
    parts = [p for s in conf["systems"] for p in s["partitions"]]
    assert parts and all(p["extras"]["references"] == {} for p in parts)
    assert all("mnist_efficiency_ref" not in p["extras"] for p in parts)
    recorded = {p["name"]: {"HvdcoreCollectivesCheck": {"busbw": [i + 1.0, -0.3, None, "GB/s"]}}
                for i, p in enumerate(parts)}
    (tmp_path / f"{system}.json").write_text(json.dumps(recorded))
    conf = runpy.run_path(str(CONFIGS / config))["site_configuration"]
    for part in (p for s in conf["systems"] for p in s["partitions"]):
        assert part["extras"]["references"] == recorded[part["name"]], part["name"]


def test_one_host_slurm_reports_every_figure_unjudged(tmp_path: Path) -> None:
    """CHECKS_SLURM_ONE_HOST=1: ReFrame's view of generic:cpu has every MNIST scale's
    efficiency and the checks' ratios unbounded, and recorded entries lose their bounds."""
    (tmp_path / "generic.json").write_text(json.dumps({"cpu": {
        "HvdcoreMnistCheck@scale=2_nodes@framework=torch": {
            "efficiency": [91.0, -0.2, None, "%"], "images_per_sec": [900.0, -0.3, None, "img/s"]},
    }}))
    env = reframe_env({"CHECKS_SLURM_ONE_HOST": "1", "CHECKS_REFERENCES_DIR": str(tmp_path)})
    res = run_reframe(["-C", str(CONFIGS / "slurm.py"), "--system", "generic:cpu",
                       "--show-config=systems/0/partitions/0/extras"], tmp_path, env)
    assert res.returncode == 0, res.stdout + res.stderr
    refs = json.loads(res.stdout[res.stdout.index("{"):])["references"]
    assert refs["HvdcoreMnistCheck@scale=2_nodes@framework=torch"] == {
        "efficiency": [91.0, None, None, "%"], "images_per_sec": [900.0, None, None, "img/s"]}
    assert refs["HvdcoreMnistCheck"]["ddp_ratio"][1:3] == [None, None]
    assert refs["HvdcoreMnistCheck"]["mpi_ratio"][1:3] == [None, None]
    assert all(refs["HvdcoreCollectivesCheck"][v][1:3] == [None, None]
               for v in ("busbw_ratio", "latency_ratio"))
    for scale in ("2_ranks", "4_ranks", "1_node", "2_nodes", "4_nodes", "8_nodes", "16_nodes"):
        assert refs[f"HvdcoreMnistCheck@scale={scale}"]["efficiency"][1:3] == [None, None]
    planes = refs["HvdcoreDataPlanesCheck"]
    assert planes["host_alltoall_ratio"] == [1.0, None, None, "x"]
    assert planes["device_allreduce_link_fraction"][1:3] == [None, None]
    # a real cluster (no CHECKS_SLURM_ONE_HOST) judges what was recorded
    res = run_reframe(["-C", str(CONFIGS / "slurm.py"), "--system", "generic:cpu",
                       "--show-config=systems/0/partitions/0/extras"], tmp_path,
                      reframe_env({"CHECKS_REFERENCES_DIR": str(tmp_path)}))
    refs = json.loads(res.stdout[res.stdout.index("{"):])["references"]
    assert list(refs) == ["HvdcoreMnistCheck@scale=2_nodes@framework=torch"]
    assert refs["HvdcoreMnistCheck@scale=2_nodes@framework=torch"]["efficiency"][1] == -0.2


def test_local_gpu_config(tmp_path: Path) -> None:
    """checks/config/local_gpu.py (run on a GPU host for real: see checks/README.md): one rank
    per GPU (CHECKS_LOCAL_GPUS here, where no GPU exists), features gpu + vendor + mpi; on one
    GPU the scaling checks have nothing to compare and are not listed, and the collectives
    job still runs 2 ranks; the data-plane job sweeps the device plane to 1 GiB and the host
    plane to 64 MiB; with no GPU at all the config refuses and says what to set."""
    base = ["-C", str(CONFIGS / "local_gpu.py"), "--system", "localgpu"]
    one = reframe_env({"CHECKS_LOCAL_GPUS": "1"})
    shown = run_reframe([*base, "--show-config"], tmp_path, one)
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert '"gpu"' in shown.stdout and '"mpi"' in shown.stdout, shown.stdout
    listed = run_reframe([*base, "-c", str(CHECKS), "--list"], tmp_path, one)
    out = listed.stdout + listed.stderr
    assert listed.returncode == 0, out
    assert "HvdcoreCapabilitiesCheck" in out and "HvdcoreCollectivesCheck" in out, out
    assert "HvdcoreMnistCheck" not in out and "HvdcoreSyntheticCheck" not in out, out
    two = run_reframe([*base, "-c", str(CHECKS), "--list"], tmp_path,
                      reframe_env({"CHECKS_LOCAL_GPUS": "2"}))
    assert "HvdcoreMnistCheck %scale=1_node" in two.stdout, two.stdout + two.stderr

    dry = run_reframe([*base, "-c", str(CHECKS), "-n",
                       "HvdcoreCollectivesCheck|HvdcoreDataPlanesCheck", "--dry-run"],
                      tmp_path, one)
    assert dry.returncode == 0, (dry.stdout + dry.stderr)[-5000:]
    stage = tmp_path / "rfm" / "stage"
    script = next(stage.rglob("HvdcoreCollectivesCheck*/rfm_job.sh")).read_text()
    assert "-np 2" in script and "hvdcore_collectives.py" in script, script
    planes = next(stage.rglob("HvdcoreDataPlanesCheck*/rfm_job.sh")).read_text()
    assert "--plane=device --max-bytes=1073741824" in planes, planes
    assert "--plane=host --max-bytes=67108864" in planes, planes

    none = run_reframe([*base, "--show-config"], tmp_path, reframe_env({"CHECKS_LOCAL_GPUS": "0"}))
    assert none.returncode != 0
    assert "CHECKS_LOCAL_GPUS" in none.stdout + none.stderr, none.stdout + none.stderr
