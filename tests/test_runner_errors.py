"""hvdcorerun usage errors: one clear line on stderr, exit code 2, nothing launched."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hvdcore.runner.cli import main
from hvdcore.runner.hosts import HostSpecError, parse_host_list, parse_hostfile

ROOT = Path(__file__).resolve().parent.parent
OPENMPI = "mpirun (Open MPI) 4.1.4\n"


def _which(name: str) -> str:
    return f"/opt/mpi/bin/{name}"


def usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], **kw: object) -> str:
    """Run main(argv); assert exit 2, no stdout and exactly one stderr line; return it."""
    kw.setdefault("environ", {"PATH": "/usr/bin"})
    kw.setdefault("which", _which)
    kw.setdefault("mpi_version_output", OPENMPI)
    rc = main(argv, **kw)  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("hvdcorerun: error: ")
    return lines[0]


def test_np_above_slots(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["-np", "5", "-H", "a:2,b:2", "python", "x.py"])
    assert "-np 5 is more than the 4 slot(s) given (a:2,b:2)" in line


def test_np_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert "at least 1" in usage_error(capsys, ["-np", "0", "python", "x.py"])


def test_malformed_hostfile_line_names_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hf = tmp_path / "hosts"
    hf.write_text("node1 slots=2\n# fine\nnode2 slots=two\n")
    line = usage_error(capsys, ["-np", "2", "--hostfile", str(hf), "python", "x.py"])
    assert f"{hf}:3: slots must be a positive integer, got 'two'" in line
    hf.write_text("node1 slots=2\nnode2 cpus=2\n")
    assert f"{hf}:2: unexpected 'cpus=2'" in usage_error(
        capsys, ["-np", "2", "--hostfile", str(hf), "python", "x.py"])


def test_missing_hostfile(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = usage_error(capsys, ["-np", "2", "--hostfile", str(tmp_path / "nope"), "python"])
    assert "cannot read it (No such file or directory)" in line


def test_malformed_host_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert "slots must be a positive integer, got 'x'" in usage_error(
        capsys, ["-np", "2", "-H", "a:x", "python"])
    assert "malformed entry ''" in usage_error(capsys, ["-np", "2", "-H", "a:1,,b", "python"])


def test_unknown_flag_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["-np", "2", "--fusion-threshhold-mb", "4", "python", "x.py"])
    assert "unrecognized argument --fusion-threshhold-mb; did you mean --fusion-threshold-mb?" in line
    line = usage_error(capsys, ["--chek-build"])
    assert "did you mean --check-build?" in line


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert "no command given" in usage_error(capsys, ["-np", "2"])
    assert "no command given" in usage_error(capsys, ["-np", "2", "--"])


def test_gloo_and_mpi_together_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "not allowed with argument" in usage_error(capsys, ["--gloo", "--mpi", "-np", "2",
                                                               "python"])



@pytest.mark.parametrize("given", ["nosuch0", "lo,nosuch0"])
def test_gloo_interface_this_machine_lacks_is_one_line(capsys: pytest.CaptureFixture[str],
                                                       given: str) -> None:
    """Not an OSError traceback: one line naming the interface and those there are."""
    line = usage_error(capsys, ["--gloo", "--network-interfaces", given, "-np", "2", "python"])
    assert f"--network-interfaces {given}: 'nosuch0' is no interface" in line
    assert "(it has: " in line and "lo" in line


def test_gloo_launch_of_a_missing_program_is_one_clear_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")  # the launcher's rendezvous store is torch's
    rc = main(["--gloo", "-np", "2", "no-such-program-hvdcore"], environ={"PATH": "/usr/bin"})
    out, err = capsys.readouterr()
    assert rc == 127, (out, err)
    assert "hvdcorerun: cannot start rank 0 (no-such-program-hvdcore)" in err, err


def test_np_required_outside_slurm(capsys: pytest.CaptureFixture[str]) -> None:
    assert "-np N is required" in usage_error(capsys, ["python", "x.py"])


def test_no_mpi_launcher_on_path(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["-np", "2", "python", "x.py"], which=lambda name: None,
                       mpi_version_output=None)
    assert "no MPI launcher on PATH" in line
    assert "apt install openmpi-bin" in line and "module load OpenMPI" in line


def test_unknown_mpi(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["-np", "2", "python"], mpi_version_output="FooMPI 1.0\n")
    assert "not Open MPI, MPICH or Intel MPI" in line


@pytest.mark.parametrize("argv,expected", [
    (["--cycle-time-ms", "fast"], "--cycle-time-ms='fast' is not a valid float (ms)"),
    (["--cycle-time-ms", "-1"], "expected a number >= 0"),
    (["--fusion-threshold-mb", "big"], "--fusion-threshold-mb 'big' is not a number of MiB"),
    (["--fusion-threshold-mb", "-3"], "must be >= 0"),
    (["--stall-check-shutdown-time-seconds", "nan"], "expected a number >= 0"),
    (["--log-level", "loud"], "accepted values are trace, debug, info, warning, error, fatal"),
])
def test_invalid_knob_values(capsys: pytest.CaptureFixture[str], argv: list[str],
                             expected: str) -> None:
    assert expected in usage_error(capsys, ["-np", "2", *argv, "python", "x.py"])


def test_invalid_environment_knob(capsys: pytest.CaptureFixture[str]) -> None:
    env = {"PATH": "/usr/bin", "HVDCORE_CYCLE_TIM": "1"}
    line = usage_error(capsys, ["-np", "2", "python"], environ=env)
    assert "unknown configuration variable HVDCORE_CYCLE_TIM. Did you mean HVDCORE_CYCLE_TIME?" in line
    env = {"PATH": "/usr/bin", "HOROVOD_FUSION_THRESHOLD": "lots"}
    assert "HOROVOD_FUSION_THRESHOLD='lots' is not a valid int" in usage_error(
        capsys, ["-np", "2", "python"], environ=env)
    # a flag overrides (and so hides) a bad alias value, as at init()
    env = {"PATH": "/usr/bin", "HOROVOD_CYCLE_TIME": "soon"}
    assert main(["--dry-run", "-np", "2", "--cycle-time-ms", "3", "python"], environ=env,
                which=_which, mpi_version_output=OPENMPI) == 0


def test_unknown_require_name(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["--check-build", "--require", "mpi,horovod"])
    assert "--require: unknown capability horovod; accepted names: tensorflow, torch, keras, " \
           "mpi, gloo, nccl, ddl, ccl, cuda, rocm, cuda-aware-mpi" in line


def test_json_without_check_build(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--json goes with --check-build" in usage_error(capsys, ["--json"])


def test_bad_mpi_args_quoting(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--mpi-args" in usage_error(capsys, ["-np", "2", "--mpi-args", "'unterminated",
                                                "python"])


def test_srun_forced_without_srun(capsys: pytest.CaptureFixture[str]) -> None:
    line = usage_error(capsys, ["--launcher", "srun", "-np", "2", "python"],
                       which=lambda n: None)
    assert "srun is not on PATH" in line


def test_host_parsers_directly(tmp_path: Path) -> None:
    assert [(h.name, h.slots) for h in parse_host_list("a:2,b,a:1")] == [("a", 3), ("b", 1)]
    hf = tmp_path / "h"
    hf.write_text("n1 slots=2 slots=3\n")
    with pytest.raises(HostSpecError, match=r":1: slots given twice"):
        parse_hostfile(hf)
    hf.write_text("# nothing\n\n")
    with pytest.raises(HostSpecError, match="no hosts in hostfile"):
        parse_hostfile(hf)


def test_real_cli_usage_error_exit_code() -> None:
    """Through the real entry point: argparse-level error is one line and exit 2."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.run([sys.executable, "-m", "hvdcore.runner", "-np", "two", "python"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.strip() == ("hvdcorerun: error: argument -np/--num-proc: invalid int "
                                   "value: 'two'")


def test_launcher_does_not_initialize_mpi() -> None:
    """hvdcorerun must not be an MPI process itself: a singleton MPI launcher costs ~1 s, fails
    where MPI cannot start outside a job, and (seen here) makes mpirun lose its MPI_ABORT
    report. ``--check-build`` must also work when libmpi cannot load."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HVDCORE_", "HOROVOD_"))}
    env["PYTHONPATH"] = str(ROOT)
    code = ("import sys, hvdcore.runner.cli; m = sys.modules.get('mpi4py.MPI'); "
            "print(bool(m and m.Is_initialized()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


@pytest.mark.parametrize("argv, says", [
    (["--gloo", "-np", "2", "--ssh-args", "-o 'unclosed", "python", "x.py"],
     "--ssh-args \"-o 'unclosed\": No closing quotation"),
    (["--gloo", "-np", "2", "--ssh-port", "70000", "python", "x.py"],
     "--ssh-port 70000: not a TCP port (1-65535)"),
    (["-np", "2", "-p", "70000", "python", "x.py"], "--ssh-port 70000: not a TCP port"),
    (["--launcher", "srun", "-np", "2", "-i", "/k", "python", "x.py"],
     "--ssh-port, --ssh-identity-file and --ssh-args: srun starts no ssh"),
], ids=["bad-quoting", "port", "mpi-port", "with-srun"])
def test_ssh_flags(capsys: pytest.CaptureFixture[str], argv: list[str], says: str) -> None:
    assert says in usage_error(capsys, argv)


HVDCORERUN = str(Path(sys.executable).with_name("hvdcorerun"))
READER_GONE = 128 + signal.SIGPIPE  # a shell's code for a writer killed by SIGPIPE
# argparse drops a failed write of --help/--version itself (exit 0 when nothing is left)
QUIET_EXITS = {"help": (0, READER_GONE), "version": (0, READER_GONE),
               "check-build": (READER_GONE,), "dry-run": (READER_GONE,)}
INFO_FLAGS = {"help": ["--help"], "version": ["--version"],
              "check-build": ["-cb", "--require", "mpi"],
              "dry-run": ["-np", "2", "--dry-run", "python", "x.py"]}


def _launcher_env(unbuffered: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HVDCORE_", "HOROVOD_")) and k != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = str(ROOT)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "unbuffered"])
@pytest.mark.parametrize("flag", list(INFO_FLAGS))
def test_reader_gone_ends_quietly(flag: str, unbuffered: bool) -> None:
    """``hvdcorerun -cb | head -3``: when the reader has closed the pipe, hvdcorerun ends
    without a BrokenPipeError traceback (nor Python's "Exception ignored" at exit), with the
    code of a writer killed by SIGPIPE (141, as ``seq 100000 | head -3``). The read end is
    closed before the launcher starts, so every write fails, whatever the timing."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = subprocess.run([HVDCORERUN, *INFO_FLAGS[flag]], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=_launcher_env(unbuffered),
                              cwd=ROOT, timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == "", proc.stderr
    assert proc.returncode in QUIET_EXITS[flag], proc.returncode


def test_check_build_into_head_is_quiet() -> None:
    """The reported pipeline itself, through a shell: head's three lines, no traceback. The
    report fits a pipe's buffer, so whether a write fails here is timing; the closed pipe
    above is the case that always fails."""
    script = f"set -o pipefail; {shlex.quote(HVDCORERUN)} -cb --require mpi | head -3"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                          env=_launcher_env(False), cwd=ROOT, timeout=120)
    assert proc.stderr == "", proc.stderr
    assert proc.returncode in (0, READER_GONE), proc.returncode
    assert len(proc.stdout.splitlines()) == 3, proc.stdout
