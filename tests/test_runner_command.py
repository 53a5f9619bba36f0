"""hvdcorerun command construction (--dry-run): Open MPI, MPICH, Intel MPI, srun in Slurm."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcore.runner.allocator_env import GLIBC_DEFAULT
from hvdcore.runner.cli import _parse, build_command, build_parser, main
from hvdcore.runner.mpi_command import detect_flavor, output_tags
from hvdcore.runner.tagged_lines import HYDRA, OPEN_MPI

ROOT = Path(__file__).resolve().parent.parent
GLIBC = f"GLIBC_TUNABLES={GLIBC_DEFAULT}"  # what every rank gets unless the environment says

MPICH_VERSION = """HYDRA build details:
    Version:                                 4.0.2
    Release Date:                            Thu Apr  7 12:34:45 CDT 2022
    Process Manager:                         pmi
    Launchers available:                     ssh rsh fork slurm ll lsf sge manual persist
"""
INTEL_VERSION = ("Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 "
                 "(id: c2e19c2f3e)\nCopyright 2003-2023, Intel Corporation.\n")
OPENMPI_VERSION = "mpirun (Open MPI) 5.0.3\n\nReport bugs to https://www.open-mpi.org/community/help/\n"


def _which(name: str) -> str:
    return f"/opt/mpi/bin/{name}"


def parse_args(argv: list[str]) -> object:
    """hvdcorerun's arguments as main() parses them."""
    return _parse(build_parser(), argv)


def dry_run(capsys: pytest.CaptureFixture[str], argv: list[str], **kw: object) -> list[str]:
    """Run main(--dry-run ...) and return the printed command as a list."""
    kw.setdefault("environ", {"PATH": "/usr/bin"})
    rc = main(["--dry-run", *argv], **kw)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert rc == 0, err
    return shlex.split(out)


def test_detect_flavor_from_version_texts() -> None:
    assert detect_flavor(OPENMPI_VERSION).family == "openmpi"
    assert detect_flavor(OPENMPI_VERSION).version == "5.0.3"
    assert (detect_flavor(MPICH_VERSION).family, detect_flavor(MPICH_VERSION).version) == (
        "mpich", "4.0.2")
    assert (detect_flavor(INTEL_VERSION).family, detect_flavor(INTEL_VERSION).version) == (
        "intelmpi", "2021.10")


def test_this_machines_mpirun_is_recognised() -> None:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not on PATH (apt install openmpi-bin)")
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True).stdout
    assert detect_flavor(out).family in ("openmpi", "mpich", "intelmpi")


def test_openmpi_as_root_localhost(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry_run(capsys, ["-np", "3", "--cycle-time-ms", "2.5", "--fusion-threshold-mb", "0.5",
                           "--", "python", "train.py", "--lr", "0.1"],
                  which=_which, mpi_version_output=OPENMPI_VERSION, uid=0)
    assert cmd == ["/opt/mpi/bin/mpirun", "--allow-run-as-root", "--tag-output", "-np", "3",
                   "-H", "localhost:3", "--bind-to", "none", "--map-by", "slot",
                   "-x", "THP_MEM_ALLOC_ENABLE=1", "-x", GLIBC,
                   "-x", "HVDCORE_FUSION_THRESHOLD=524288",
                   "-x", "HVDCORE_CYCLE_TIME=2.5",
                   "python", "train.py", "--lr", "0.1"]


def test_openmpi_non_root_hosts_and_passthrough(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"PATH": "/usr/bin", "PYTHONPATH": "/src", "HOROVOD_CYCLE_TIME": "3",
           "SECRET_THING": "s3cr3t"}
    cmd = dry_run(capsys, ["-np", "4", "-H", "node1:2,node2:2", "--mpi-args", "--mca btl tcp,self",
                           "--binding-args", "--bind-to core", "python", "x.py"],
                  environ=env, which=_which, mpi_version_output=OPENMPI_VERSION, uid=1000)
    assert "--allow-run-as-root" not in cmd
    text = shlex.join(cmd)
    # the whole environment, by name only (values stay off the command line), sorted
    assert "-np 4 -H node1:2,node2:2 --bind-to core -x THP_MEM_ALLOC_ENABLE=1 " \
           f"-x {GLIBC} -x HOROVOD_CYCLE_TIME -x PATH -x PYTHONPATH -x SECRET_THING " \
           "--mca btl tcp,self python x.py" in text
    assert "s3cr3t" not in text and "--map-by" not in text


def test_openmpi_forwards_the_environment_as_horovod(capsys: pytest.CaptureFixture[str]) -> None:
    """Remote hosts get every variable by name (horovodrun's -x NAME) but Horovod's ignore list
    and the variables of the remote side itself; one host that is this one gets none."""
    env = {"PATH": "/usr/bin", "NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "4",
           "CUDA_VISIBLE_DEVICES": "0,1", "MY_CUDA_VISIBLE_DEVICES": "1", "OLDPWD": "/",
           "BASH_FUNC_module%%": "() { :; }", "HOROVOD_SECRET_KEY": "k", "PWD": "/w",
           "SSH_CONNECTION": "a b", "THP_MEM_ALLOC_ENABLE": "0", "GLIBC_TUNABLES": ""}
    cmd = dry_run(capsys, ["-np", "4", "-H", "nodeA:2,nodeB:2", "python", "x.py"],
                  environ=env, which=_which, mpi_version_output=OPENMPI_VERSION, uid=0)
    names = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"]
    # (an empty GLIBC_TUNABLES is the launcher environment's way to leave glibc's defaults)
    assert names == ["THP_MEM_ALLOC_ENABLE=0", "GLIBC_TUNABLES=", "NCCL_DEBUG", "OMP_NUM_THREADS",
                     "PATH"]
    cmd = dry_run(capsys, ["-np", "2", "-H", "localhost:2", "python", "x.py"],
                  environ=env, which=_which, mpi_version_output=OPENMPI_VERSION, uid=0)
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"] == ["THP_MEM_ALLOC_ENABLE=0",
                                                                     "GLIBC_TUNABLES="]


def test_hostfile_openmpi_and_colon_forms(tmp_path: os.PathLike[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    hostfile = os.path.join(tmp_path, "hosts")
    with open(hostfile, "w") as f:
        f.write("# cluster\nnode1 slots=2 max_slots=4\n\nnode2:3  # comment\nnode3\nnode1 slots=1\n")
    cmd = dry_run(capsys, ["--hostfile", hostfile, "python", "x.py"], which=_which,
                  mpi_version_output=OPENMPI_VERSION, uid=0)
    # -np defaults to the total slots; node1 appears twice: slots add up
    assert cmd[cmd.index("-np") + 1] == "7"
    assert cmd[cmd.index("-H") + 1] == "node1:3,node2:3,node3:1"


@pytest.mark.parametrize("version, want", [
    (OPENMPI_VERSION, ["-mca", "plm_rsh_args", "-p 12345 -i /k/id_a -J login1"]),
    (MPICH_VERSION, ["-bootstrap", "ssh", "-bootstrap-exec-args",
                     "-p 12345 -i /k/id_a -J login1"])], ids=["openmpi", "hydra"])
def test_ssh_port_and_key_go_to_the_mpi_launcher(capsys: pytest.CaptureFixture[str],
                                                 version: str, want: list[str]) -> None:
    """horovodrun's -p/-i under MPI (docs/docker.rst: -p 12345): the rsh/bootstrap ssh args."""
    cmd = dry_run(capsys, ["-np", "2", "-H", "a:1,b:1", "-p", "12345", "-i", "/k/id_a",
                           "--ssh-args", "-J login1", "python", "x.py"],
                  which=_which, mpi_version_output=version, uid=0)
    start = cmd.index(want[0])
    assert cmd[start:start + len(want)] == want


@pytest.mark.parametrize("version, want", [
    (OPENMPI_VERSION, ["-mca", "btl_tcp_if_include", "lo,eth0",
                       "-x", "NCCL_SOCKET_IFNAME=lo,eth0"]),
    (MPICH_VERSION, ["-genv", "NCCL_SOCKET_IFNAME", "lo,eth0"])], ids=["openmpi", "hydra"])
def test_network_interfaces_under_mpi_as_horovod(capsys: pytest.CaptureFixture[str],
                                                 version: str, want: list[str]) -> None:
    """horovodrun's --network-interfaces under mpirun: Open MPI's TCP and NCCL's sockets."""
    cmd = dry_run(capsys, ["-np", "2", "-H", "a:1,b:1", "--network-interface", "lo,eth0",
                           "python", "x.py"], which=_which, mpi_version_output=version, uid=0)
    found = [cmd[i - (1 if cmd[i - 1] == "-x" else 2):i + 1]
             for i, a in enumerate(cmd) if "lo,eth0" in a]
    assert sum(found, []) == want, shlex.join(cmd)


@pytest.mark.parametrize("version,family", [(MPICH_VERSION, "mpich"), (INTEL_VERSION, "intel")])
def test_hydra_command(capsys: pytest.CaptureFixture[str], version: str, family: str) -> None:
    cmd = dry_run(capsys, ["-np", "2", "-H", "a:1,b:1", "--no-stall-check",
                           "--timeline-filename", "/tmp/tl dir/t.json", "python", "x.py"],
                  which=_which, mpi_version_output=version, uid=0)
    assert cmd == ["/opt/mpi/bin/mpirun", "-l", "-n", "2", "-hosts", "a,b", "-ppn", "1",
                   "-genv", "THP_MEM_ALLOC_ENABLE", "1", "-genv", "GLIBC_TUNABLES", GLIBC_DEFAULT,
                   "-genv", "HVDCORE_STALL_CHECK_DISABLE", "1",
                   "-genv", "HVDCORE_TIMELINE", "/tmp/tl dir/t.json", "python", "x.py"]


def test_hydra_needs_equal_slots(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["-np", "3", "-H", "a:2,b:1", "python"], environ={"PATH": "/usr/bin"},
              which=_which, mpi_version_output=MPICH_VERSION)
    assert rc == 2
    assert "mpich: -hosts takes one slot count for all hosts (-ppn)" in capsys.readouterr().err


def test_mpiexec_used_when_no_mpirun(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry_run(capsys, ["-np", "2", "python", "x.py"],
                  which=lambda n: "/opt/bin/mpiexec" if n == "mpiexec" else None,
                  mpi_version_output=MPICH_VERSION)
    assert cmd[:4] == ["/opt/bin/mpiexec", "-l", "-n", "2"]


SLURM_ENV = {"PATH": "/usr/bin", "SLURM_JOB_ID": "42", "SLURM_NTASKS": "4",
             "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}


def test_srun_inside_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry_run(capsys, ["-np", "3", "--log-level", "INFO", "python", "x.py"],
                  environ=SLURM_ENV, which=_which)
    assert cmd == ["/opt/mpi/bin/srun", "--mpi=pmix", "--kill-on-bad-exit=1", "--label",
                   "-n", "3", f"--export=ALL,THP_MEM_ALLOC_ENABLE=1,{GLIBC},HVDCORE_LOG_LEVEL=info",
                   "python", "x.py"]


def test_srun_tasks_from_allocation_and_mpi_type(capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in SLURM_ENV.items() if k != "SLURM_NTASKS"}
    env["SLURM_MPI_TYPE"] = "pmi2"
    cmd = dry_run(capsys, ["--timeline-filename", "a,b.json", "python", "x.py"],
                  environ=env, which=_which)
    assert cmd == ["/opt/mpi/bin/srun", "--mpi=pmi2", "--kill-on-bad-exit=1", "--label",
                   "-n", "4", f"--export=ALL,THP_MEM_ALLOC_ENABLE=1,{GLIBC},HVDCORE_TIMELINE", "python",
                   "x.py"]
    cmd = dry_run(capsys, ["--slurm-mpi", "pmix_v4", "python", "x.py"], environ=SLURM_ENV,
                  which=_which)
    assert "--mpi=pmix_v4" in cmd and cmd[cmd.index("-n") + 1] == "4"


@pytest.mark.parametrize("launch,tag", [
    ({"mpi_version_output": OPENMPI_VERSION, "uid": 0}, "--tag-output"),
    ({"mpi_version_output": MPICH_VERSION}, "-l"),
    ({"environ": SLURM_ENV}, "--label"),
], ids=["openmpi", "hydra", "srun"])
def test_ranks_output_is_tagged_unless_no_tag_output(
        capsys: pytest.CaptureFixture[str], launch: dict, tag: str) -> None:
    """horovodrun always tags each rank's lines (``--tag-output``/``-l``); hvdcorerun does by
    default on every launcher, and ``--no-tag-output`` is the explicit way out."""
    cmd = dry_run(capsys, ["-np", "2", "python", "x.py"], which=_which, **launch)
    assert cmd.count(tag) == 1 and cmd.index(tag) < cmd.index("python"), cmd
    cmd = dry_run(capsys, ["-np", "2", "--no-tag-output", "python", "x.py"], which=_which,
                  **launch)
    assert tag not in cmd, cmd


def test_the_joiner_follows_the_tags_the_launcher_was_given() -> None:
    """Lines are joined by the tag format of the launcher's own arguments: ours, or the user's
    through --mpi-args; a program's own ``-l`` or ``--tag-output`` is not the launcher's."""
    ompi, hydra = detect_flavor(OPENMPI_VERSION), detect_flavor(MPICH_VERSION)
    assert output_tags(ompi, ["mpirun", "--tag-output", "-np", "2"]) is OPEN_MPI
    assert output_tags(ompi, ["mpirun", "-np", "2", "-l"]) is None
    assert output_tags(hydra, ["mpirun", "-l", "-n", "2"]) is HYDRA
    assert output_tags(hydra, ["mpirun", "-n", "2", "--tag-output"]) is None
    args = parse_args(["-np", "2", "--no-tag-output", "--mpi-args=-l", "python", "x.py", "-l"])
    assert build_command(args, {}, {}, which=_which, mpi_version_output=MPICH_VERSION)[2] is HYDRA
    args = parse_args(["-np", "2", "--no-tag-output", "python", "x.py", "-l", "--tag-output"])
    for version in (OPENMPI_VERSION, MPICH_VERSION):
        assert build_command(args, {}, {}, which=_which, mpi_version_output=version)[2] is None
    args = parse_args(["-np", "2", "python", "x.py"])
    assert build_command(args, SLURM_ENV, {}, which=_which)[2] is None  # srun: whole lines


def test_hosts_inside_allocation_use_mpirun(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry_run(capsys, ["-np", "2", "-H", "localhost:2", "python", "x.py"],
                  environ=SLURM_ENV, which=_which, mpi_version_output=OPENMPI_VERSION, uid=0)
    assert cmd[0].endswith("mpirun")
    cmd = dry_run(capsys, ["--launcher", "mpirun", "-np", "2", "python", "x.py"],
                  environ=SLURM_ENV, which=_which, mpi_version_output=OPENMPI_VERSION, uid=0)
    assert cmd[0].endswith("mpirun")


def test_srun_np_above_allocation(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["-np", "5", "python", "x.py"], environ=SLURM_ENV, which=_which)
    err = capsys.readouterr().err
    assert rc == 2
    assert "-np 5 is more than the 4 task(s) of Slurm job 42 (SLURM_NTASKS)" in err


def test_cli_dry_run_subprocess_prints_real_command() -> None:
    """The real entry point on this machine: exact command on stdout, nothing launched."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not on PATH (apt install openmpi-bin)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_", "SLURM_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "hvdcore.runner", "-np", "2", "--dry-run",
                           "--stall-check-warning-time-seconds", "5", "python", "-c", "print(1)"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    cmd = shlex.split(proc.stdout)
    assert os.path.basename(cmd[0]) == "mpirun"
    assert "HVDCORE_STALL_CHECK_TIME_SECONDS=5" in cmd
    assert cmd[-3:] == ["python", "-c", "print(1)"]
    assert ("--allow-run-as-root" in cmd) == (os.getuid() == 0)


ALLOCATOR = [("THP_MEM_ALLOC_ENABLE", "1", "0"), ("GLIBC_TUNABLES", GLIBC_DEFAULT, "")]


@pytest.mark.parametrize("name,default,off", ALLOCATOR)
def test_allocator_settings_on_by_default_and_user_value_kept(
        capsys: pytest.CaptureFixture[str], name: str, default: str, off: str) -> None:
    """Every launcher gets torch's huge-pages switch and glibc's malloc settings on its
    command line: hvdcore's value by default, the environment's (here the off value) when
    set."""
    cmd = dry_run(capsys, ["-np", "2", "python", "x.py"], which=_which,
                  mpi_version_output=OPENMPI_VERSION, uid=0)
    assert cmd[cmd.index(f"{name}={default}") - 1] == "-x"
    cmd = dry_run(capsys, ["-np", "2", "-H", "a:1,b:1", "python", "x.py"],
                  environ={"PATH": "/usr/bin", name: off}, which=_which,
                  mpi_version_output=OPENMPI_VERSION, uid=0)
    assert f"{name}={off}" in cmd and f"{name}={default}" not in cmd
    cmd = dry_run(capsys, ["-np", "2", "python", "x.py"],
                  environ={**SLURM_ENV, name: off}, which=_which)
    export = next(a for a in cmd if a.startswith("--export=ALL,"))
    assert f",{name}={off}," in export + ",", cmd


@pytest.mark.mpi
@pytest.mark.torch
@pytest.mark.parametrize("given", [None, "0"])
def test_ranks_receive_the_allocator_settings(given: str | None, tmp_path: Path) -> None:
    """A real 2-rank launch: each rank's torch sees the huge-pages switch and glibc's settings
    (hvdcore's by default, or the values the launcher's environment gave: ``0`` and empty)."""
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not on PATH (apt install openmpi-bin)")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_", "SLURM_", "THP_", "GLIBC_"))}
    env["PYTHONPATH"] = str(ROOT)
    if given is not None:
        env["THP_MEM_ALLOC_ENABLE"] = given
        env["GLIBC_TUNABLES"] = ""
    # (each rank writes a file: the ranks' stdout lines can interleave mid-line)
    probe = ("import os, sys, torch; from mpi4py import MPI; "
             "open(os.path.join(sys.argv[1], f'rank{MPI.COMM_WORLD.rank}'), 'w').write("
             "os.environ.get('THP_MEM_ALLOC_ENABLE', 'unset') + '|' + "
             "os.environ.get('GLIBC_TUNABLES', 'unset'))")
    proc = subprocess.run([sys.executable, "-m", "hvdcore.runner", "-np", "2", sys.executable,
                           "-c", probe, str(tmp_path)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = "0|" if given else f"1|{GLIBC_DEFAULT}"
    got = {f.name: f.read_text() for f in tmp_path.iterdir()}
    assert got == {"rank0": want, "rank1": want}, (got, proc.stdout + proc.stderr)


def test_harmless_horovodrun_flags_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    """--no-hierarchical-* set the knob to 0; --start-timeout and --disable-cache (horovodrun's
    pre-launch checks, which hvdcorerun does not run) change nothing; --min/max-num-proc are
    --min/max-np."""
    kw = {"which": _which, "mpi_version_output": OPENMPI_VERSION, "uid": 0}
    plain = dry_run(capsys, ["-np", "2", "python", "x.py"], **kw)
    cmd = dry_run(capsys, ["-np", "2", "--no-hierarchical-allreduce", "--hierarchical-allgather",
                           "--no-timeline-mark-cycles", "python", "x.py"], **kw)
    assert [a for a in cmd if a not in plain] == [
        "HVDCORE_TIMELINE_MARK_CYCLES=0", "HVDCORE_HIERARCHICAL_ALLREDUCE=0",
        "HVDCORE_HIERARCHICAL_ALLGATHER=1"]
    assert dry_run(capsys, ["-np", "2", "--start-timeout", "60", "--disable-cache", "python",
                            "x.py"], **kw) == plain
    assert main(["--min-num-proc", "1", "--max-num-proc", "3", "--dry-run", "python", "x.py"],
                environ={"PATH": "/usr/bin"}) == 0
    assert capsys.readouterr().out.startswith("elastic job (Gloo controller): 1 to 3 workers")
    assert main(["-np", "2", "--hierarchical-allreduce", "--no-hierarchical-allreduce",
                 "python"], environ={"PATH": "/usr/bin"}, **kw) == 2


def test_version_flag_prints_hvdcores_version() -> None:
    import hvdcore

    proc = subprocess.run([sys.executable, "-m", "hvdcore.runner", "-v"], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert (proc.returncode, proc.stdout.strip()) == (0, hvdcore.__version__), proc.stderr
