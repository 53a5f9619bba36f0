"""horovodrun's flags and values that hvdcorerun refused (exit 2) until these fixes: the
notices of the no-op flags, --jsrun's refusal, --tcp, --output-filename, timestamps,
--config-file, --stall-check, a repeated --network-interface, Horovod's numbers in HOROVOD_*
variables, and what a --gloo rank on another host receives of CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcore.config import load
from hvdcore.runner.cli import main

ROOT = Path(__file__).resolve().parent.parent
OPENMPI = "mpirun (Open MPI) 4.1.4\n"
MPICH = "HYDRA build details:\n    Version:                                 4.0.2\n"
KW: dict[str, object] = {"which": lambda name: f"/opt/mpi/bin/{name}",
                         "mpi_version_output": OPENMPI, "uid": 1000}


def run_main(capsys: pytest.CaptureFixture[str], argv: list[str],
             environ: dict[str, str] | None = None, **kw: object) -> tuple[int, str, str]:
    """main(argv) with a fake Open MPI; (exit code, stdout, stderr)."""
    rc = main(argv, environ=environ or {"PATH": "/usr/bin"}, **{**KW, **kw})  # type: ignore
    out, err = capsys.readouterr()
    return rc, out, err


def dry(capsys: pytest.CaptureFixture[str], argv: list[str], **kw: object) -> list[str]:
    """The printed command of ``--dry-run -np 2 ARGV python x.py`` (exit 0 asserted)."""
    rc, out, err = run_main(capsys, ["--dry-run", "-np", "2", *argv, "python", "x.py"], **kw)
    assert rc == 0, err
    return shlex.split(out)


def hvdcorerun(args: list[str], cwd: Path, env: dict[str, str] | None = None
               ) -> subprocess.CompletedProcess[str]:
    """A real ``python -m hvdcore.runner ARGS`` (this checkout), 120 s at most."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDCORE_", "HOROVOD_", "OMPI_", "PMIX_", "SLURM_"))}
    return subprocess.run([sys.executable, "-m", "hvdcore.runner", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**base, "PYTHONPATH": str(ROOT), "OMPI_ALLOW_RUN_AS_ROOT": "1",
                               "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", **(env or {})})


def _need_mpirun() -> None:
    if shutil.which("mpirun") is None:
        pytest.skip("mpirun not on PATH (apt install openmpi-bin)")


# --- Horovod's numbers in HOROVOD_* variables (strtol: "67108864.0" is 67108864, 2 is on)

@pytest.mark.parametrize("name,raw,attr,want", [
    ("HOROVOD_FUSION_THRESHOLD", "67108864.0", "fusion_threshold", 67108864),
    ("HOROVOD_CACHE_CAPACITY", "512.", "cache_capacity", 512),
    ("HOROVOD_HIERARCHICAL_ALLREDUCE", "2", "hierarchical_allreduce", True),
    ("HOROVOD_HIERARCHICAL_ALLGATHER", "-1", "hierarchical_allgather", False),
    ("HOROVOD_STALL_CHECK_DISABLE", "3", "stall_check_disable", True),
])
def test_horovods_numbers_are_read_as_horovod_reads_them(
        capsys: pytest.CaptureFixture[str], name: str, raw: str, attr: str, want: object
) -> None:
    assert getattr(load({name: raw}), attr) == want
    assert dry(capsys, [], environ={"PATH": "/usr/bin", name: raw})[-2:] == ["python", "x.py"]


@pytest.mark.parametrize("raw", ["6.4e7", "67108864.5"])
def test_a_number_horovod_would_cut_is_an_error(capsys: pytest.CaptureFixture[str],
                                                raw: str) -> None:
    rc, _, err = run_main(capsys, ["-np", "2", "python", "x.py"],
                          environ={"PATH": "/usr/bin", "HOROVOD_FUSION_THRESHOLD": raw})
    assert rc == 2 and "expected a whole number" in err, err


# --- flags

def test_stall_check_is_horovods_opposite_of_no_stall_check(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert "HVDCORE_STALL_CHECK_DISABLE=0" in dry(capsys, ["--stall-check"])
    assert "HVDCORE_STALL_CHECK_DISABLE=1" in dry(capsys, ["--no-stall-check"])
    rc, _, err = run_main(capsys, ["-np", "2", "--stall-check", "--no-stall-check", "python"])
    assert rc == 2 and "not allowed with" in err


def test_autotune_flags_reach_every_rank_as_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_main(capsys, [
        "--dry-run", "-np", "2", "--autotune", "--autotune-log-file", "a.csv",
        "--autotune-warmup-samples", "2", "--autotune-steps-per-sample", "5",
        "--autotune-bayes-opt-max-samples", "12", "--autotune-gaussian-process-noise", "0.5",
        "python", "x.py"])
    assert (rc, err) == (0, "")
    cmd = shlex.split(out)
    for want in ("HVDCORE_AUTOTUNE=1", "HVDCORE_AUTOTUNE_LOG=a.csv",
                 "HVDCORE_AUTOTUNE_WARMUP_SAMPLES=2", "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE=5",
                 "HVDCORE_AUTOTUNE_BAYES_OPT_MAX_SAMPLES=12",
                 "HVDCORE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.5"):
        assert want in cmd, (want, cmd)
    assert "HVDCORE_AUTOTUNE=0" in dry(capsys, ["--no-autotune"])


@pytest.mark.parametrize("flags,named", [
    (["--mpi-threads-disable"], "--mpi-threads-disable"),
    (["--no-mpi-threads-disable"], "--mpi-threads-disable"),
    (["--num-nccl-streams", "2"], "--num-nccl-streams"),
    (["--thread-affinity", "1"], "--thread-affinity"),
    (["--log-without-timestamp"], "timestamp"),
    (["--log-with-timestamp"], "timestamp"),
    (["--log-hide-timestamp"], "timestamp"),
    (["--no-log-hide-timestamp"], "timestamp"),
])
def test_flags_without_meaning_here_are_accepted_with_a_note(
        capsys: pytest.CaptureFixture[str], flags: list[str], named: str) -> None:
    plain = dry(capsys, [])
    rc, out, err = run_main(capsys, ["--dry-run", "-np", "2", *flags, "python", "x.py"])
    assert rc == 0, err
    assert shlex.split(out) == plain
    notes = err.splitlines()
    assert len(notes) == 1 and notes[0].startswith("hvdcorerun: note: "), err
    assert named in notes[0] and "no effect" in notes[0]


@pytest.mark.parametrize("flags,expected", [
    (["--num-nccl-streams", "-1"], "must be >= 0"),
    (["--autotune-gaussian-process-noise", "1.5"], "expected a number in [0, 1]"),
    (["--autotune-warmup-samples", "-1"], "expected an integer >= 0"),
    (["--thread-affinity", "x"], "invalid"),
])
def test_no_op_values_are_checked_as_horovodrun_checks_them(
        capsys: pytest.CaptureFixture[str], flags: list[str], expected: str) -> None:
    rc, _, err = run_main(capsys, ["-np", "2", *flags, "python", "x.py"])
    assert rc == 2 and expected in err, err


def test_jsrun_is_refused_naming_lsf(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_main(capsys, ["-np", "2", "--jsrun", "python", "x.py"])
    assert (rc, out) == (2, "")
    assert "LSF/jsrun is not supported" in err and "mpirun" in err and "srun" in err


def test_network_interface_repeats_as_horovodrun(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry(capsys, ["--network-interface", "lo", "--network-interface", "eth0,lo"])
    assert "NCCL_SOCKET_IFNAME=lo,eth0" in cmd
    assert cmd[cmd.index("btl_tcp_if_include") + 1] == "lo,eth0"


def test_output_and_tcp_flags_in_the_mpirun_command(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = dry(capsys, ["--tcp", "-prefix-timestamp", "--output-filename", "logs"])
    joined = " ".join(cmd)
    assert "-mca pml ob1 -mca btl ^openib" in joined and "NCCL_IB_DISABLE=1" in cmd
    assert "--timestamp-output" in cmd and "--output-filename logs" in joined
    hydra = dry(capsys, ["--output-filename", "logs"], mpi_version_output=MPICH)
    assert hydra[hydra.index("-outfile-pattern") + 1] == "logs"


def test_output_filename_refused_under_srun_taken_for_elastic_jobs(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, _, err = run_main(capsys, ["--launcher", "srun", "-np", "2", "--output-filename", "d",
                                   "python"], environ={"PATH": "/usr/bin", "SLURM_JOB_ID": "1"},
                          which=lambda n: f"/usr/bin/{n}")
    assert rc == 2 and "--output-filename" in err and "srun" in err, err
    # elastic jobs write the files (tests/test_elastic_torch.py)
    rc, out, err = run_main(capsys, ["--min-np", "1", "--output-filename", "d",
                                     "-prefix-timestamp", "--dry-run", "python"])
    assert rc == 0 and "elastic job" in out, err
    (tmp_path / "file").write_text("")
    rc, _, err = run_main(capsys, ["--min-np", "1", "--output-filename",
                                   str(tmp_path / "file" / "d"), "python"])
    assert rc == 2 and "--output-filename" in err and "Not a directory" in err, err


def test_help_names_every_new_flag() -> None:
    from hvdcore.runner.cli import build_parser

    text = build_parser().format_help()
    for flag in ("--config-file", "--output-filename", "--prefix-output-with-timestamp", "--tcp",
                 "--jsrun", "--autotune", "--mpi-threads-disable", "--num-nccl-streams",
                 "--thread-affinity", "--log-without-timestamp", "--stall-check"):
        assert flag in text, flag
    assert text.count("no effect") >= 6


# --- --config-file

CONFIG = """\
controller: gloo
params: {fusion_threshold_mb: 32, cycle_time_ms: 10, cache_capacity: 2048,
         hierarchical_allreduce: true}
timeline: {filename: tl.json, mark_cycles: true}
stall_check: {enabled: false, warning_time_seconds: 120}
library_options: {gloo_timeout_seconds: 60}
logging: {level: INFO, colour: red}
autotune: {enabled: true, log_file: at.csv, steps_per_sample: 4, gaussian_process_noise: 0.3}
"""


def test_config_file_fills_the_flags_the_command_line_left_unset(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    cfg = tmp_path / "horovod.yaml"
    cfg.write_text(CONFIG)
    rc, out, err = run_main(capsys, ["--dry-run", "-np", "2", "--cycle-time-ms", "20",
                                     "--config-file", str(cfg), "--cache-capacity", "7",
                                     "--mpi", "python", "x.py"])
    assert rc == 0, err
    cmd = shlex.split(out)
    for want in ("HVDCORE_FUSION_THRESHOLD=33554432", "HVDCORE_CYCLE_TIME=20",
                 "HVDCORE_CACHE_CAPACITY=7", "HVDCORE_HIERARCHICAL_ALLREDUCE=1",
                 "HVDCORE_TIMELINE=tl.json", "HVDCORE_TIMELINE_MARK_CYCLES=1",
                 "HVDCORE_STALL_CHECK_DISABLE=1", "HVDCORE_STALL_CHECK_TIME_SECONDS=120",
                 "HVDCORE_RENDEZVOUS_TIMEOUT=60", "HVDCORE_LOG_LEVEL=info",
                 "HVDCORE_AUTOTUNE=1", "HVDCORE_AUTOTUNE_LOG=at.csv",
                 "HVDCORE_AUTOTUNE_STEPS_PER_SAMPLE=4",
                 "HVDCORE_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.3"):
        assert want in cmd, want
    assert err.splitlines() == [f"hvdcorerun: note: --config-file {cfg}: logging.colour "
                                "ignored (not one of horovodrun's keys)"]
    rc, out, _ = run_main(capsys, ["--dry-run", "-np", "2", "--config-file", str(cfg),
                                   "python", "x.py"])
    assert rc == 0 and out.startswith("rank 0: localhost"), out  # controller: gloo


@pytest.mark.parametrize("text,expected", [
    (None, "No such file"),
    ("params: [1", "not YAML"),
    ("- 1\n", "expected sections"),
    ("controller: jsrun\n", "expected gloo or mpi"),
    ("params: {fusion_threshold_mb: -1}\n", "must be >= 0"),
    ("params: {hierarchical_allreduce: maybe}\n", "is not true or false"),
])
def test_bad_config_file_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                          text: str | None, expected: str) -> None:
    pytest.importorskip("yaml")
    cfg = tmp_path / "c.yaml"
    if text is not None:
        cfg.write_text(text)
    rc, _, err = run_main(capsys, ["-np", "2", "--config-file", str(cfg), "python", "x.py"])
    assert rc == 2 and expected in err, err


# --- real launches

STAMP = r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}"
RANK_SAYS = ("import os, sys; r = os.environ.get('OMPI_COMM_WORLD_RANK') or "
             "os.environ['HOROVOD_RANK']; print('out', r, os.environ.get('NCCL_IB_DISABLE'), "
             "flush=True); print('err', r, file=sys.stderr, flush=True)")


@pytest.mark.mpi
def test_mpirun_tcp_timestamps_and_output_files(tmp_path: Path) -> None:
    _need_mpirun()
    proc = hvdcorerun(["-np", "2", "--tcp", "--prefix-output-with-timestamp",
                       "--output-filename", str(tmp_path / "logs"), sys.executable, "-c",
                       RANK_SAYS], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for rank in (0, 1):
        [stdout] = (tmp_path / "logs").glob(f"**/rank.{rank}/stdout")
        # Open MPI stamps and tags (horovodrun's --tag-output) every write it forwards, and a
        # print() may be several writes
        text = {kind: re.sub(STAMP + rf"\[1,{rank}\]<std(?:out|err)>:", "",
                             stdout.with_name(kind).read_text()) for kind in ("stdout", "stderr")}
        assert text["stdout"] == f"out {rank} 1\n", stdout.read_text()
        assert text["stderr"] == f"err {rank}\n", stdout.with_name("stderr").read_text()


@pytest.mark.parametrize("launch,tags", [
    ([], ("[1,0]<stdout>:", "[1,1]<stdout>:")),
    (["--gloo"], ("[0]<stdout>:", "[1]<stdout>:")),
], ids=["mpirun", "gloo"])
def test_each_rank_line_is_tagged_unless_no_tag_output(
        tmp_path: Path, launch: list[str], tags: tuple[str, str]) -> None:
    """horovodrun's terminal: each line tagged with its rank (Open MPI ``--tag-output``, the
    Gloo launcher's ``[R]<stdout>:``); ``--no-tag-output`` gives the lines as printed."""
    if launch:
        pytest.importorskip("torch")
    else:
        _need_mpirun()
    proc = hvdcorerun([*launch, "-np", "2", sys.executable, "-c", RANK_SAYS], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"{tags[r]}out {r} None" for r in (0, 1)]
    # untagged, a rank's line is kept whole only if it is one write (two ranks' writes
    # interleave as they come)
    whole = ("import os; r = os.environ.get('OMPI_COMM_WORLD_RANK') or "
             "os.environ['HOROVOD_RANK']; os.write(1, f'out {r}\\n'.encode()); "
             "os.write(2, f'err {r}\\n'.encode())")
    proc = hvdcorerun([*launch, "--no-tag-output", "-np", "2", sys.executable, "-c", whole],
                      tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(proc.stdout.splitlines()) == [f"out {r}" for r in (0, 1)]
    assert sorted(proc.stderr.splitlines()) == [f"err {r}" for r in (0, 1)]


@pytest.mark.torch
def test_gloo_output_files_and_timestamps(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    proc = hvdcorerun(["--gloo", "-np", "2", "--tcp", "-prefix-timestamp", "--output-filename",
                       str(tmp_path / "logs"), sys.executable, "-c", RANK_SAYS], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    stamp = STAMP
    for rank in (0, 1):
        line = f"[{rank}]<stdout>:out {rank} 1"
        assert re.search(f"^{stamp}{re.escape(line)}$", proc.stdout, re.M), proc.stdout
        folder = tmp_path / "logs" / f"rank.{rank}"
        assert re.fullmatch(f"{stamp}{re.escape(line)}\n", (folder / "stdout").read_text())
        assert (folder / "stderr").read_text().endswith(f"[{rank}]<stderr>:err {rank}\n")


FAKE_SSH = """#!/bin/sh
while [ "$1" != otherhost ]; do shift; done
shift
exec env -i PATH="$PATH" HOME="$HOME" sh -c "$*"
"""


@pytest.mark.torch
def test_gloo_rank_on_another_host_gets_no_cuda_visible_devices(tmp_path: Path) -> None:
    """As horovodrun's gloo launcher (its ignore list has .*CUDA_VISIBLE_DEVICES): another
    host's GPUs are not this one's; the rest of the environment travels."""
    pytest.importorskip("torch")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH)
    (bin_dir / "ssh").chmod(0o755)
    said = ("import os; print(os.environ.get('CUDA_VISIBLE_DEVICES', 'unset'), "
            "os.environ.get('MY_SETTING', 'unset'))")
    proc = hvdcorerun(["--gloo", "-np", "1", "-H", "otherhost:1", sys.executable, "-c", said],
                      tmp_path, {"PATH": f"{bin_dir}:{os.environ['PATH']}",
                                 "CUDA_VISIBLE_DEVICES": "3", "MY_SETTING": "42"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["[0]<stdout>:unset 42"], proc.stdout + proc.stderr
