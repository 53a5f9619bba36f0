"""Hypothesis fuzzing of hvdcorerun's command line, hostfiles and the HVDCORE_* environment.

Runs in-process through ``hvdcore.runner.cli.main(argv, environ=...)`` with ``--dry-run`` (the
launch command is built, nothing is started) and ``hvdcore.config.load(env)``. The promise
checked: every input ends as either a launch command (exit 0, one line on stdout) or a usage
error (exit 2, exactly one ``hvdcorerun: error: ...`` line on stderr); ``config.load`` returns
a Config or raises ConfigError naming the variable. Never another exception, never a hang.
Values that are valid by construction must be accepted with the value given.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hvdcore import config
from hvdcore.errors import ConfigError
from hvdcore.runner import cli

__all__ = ["FuzzStats", "fuzz_argv", "fuzz_hostfiles", "fuzz_environment", "run_all"]

_PROBING = {"-cb", "--check-build", "--require", "--require-available"}  # run slow probes


@dataclass
class FuzzStats:
    """Examples run, failures (with the input), worst seconds per example."""

    target: str
    examples: int = 0
    usage_errors: int = 0
    failures: list[str] = field(default_factory=list)
    worst_s: float = 0.0


def _mpi_version() -> str | None:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return None
    return subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                          timeout=60).stdout


def _call_main(argv: list[str], environ: dict[str, str], version: str | None
               ) -> tuple[Any, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc: Any = cli.main(argv, environ=environ, mpi_version_output=version)
        except SystemExit as exc:  # argparse --help
            rc = ("SystemExit", exc.code)
    return rc, out.getvalue(), err.getvalue()


def _judge(stats: FuzzStats, argv: list[str], environ: dict[str, str], version: str | None,
           must_succeed: bool = False) -> None:
    t0 = time.monotonic()
    try:
        rc, out, err = _call_main(argv, environ, version)
    except Exception as exc:  # noqa: BLE001 - what the fuzzer is looking for
        stats.failures.append(f"argv={argv!r} env={environ!r}: crashed with "
                              f"{type(exc).__name__}: {exc}")
        return
    finally:
        stats.worst_s = max(stats.worst_s, time.monotonic() - t0)
        stats.examples += 1
    help_asked = "-h" in argv or "--help" in argv
    if rc == ("SystemExit", 0) and help_asked:
        return
    if rc == 2:
        stats.usage_errors += 1
        lines = err.splitlines()
        if len(lines) != 1 or not lines[0].startswith("hvdcorerun: error: ") or out:
            stats.failures.append(f"argv={argv!r}: usage error not one line: {err!r} {out!r}")
        elif must_succeed:
            stats.failures.append(f"argv={argv!r} env={environ!r}: valid input rejected: "
                                  f"{lines[0]}")
        return
    if rc == 0:
        try:
            words = shlex.split(out)
        except ValueError:
            words = []
        # one shell-quoted command (it may quote newlines); on stderr only notes on flags that
        # have no effect here (``--thread-affinity``...)
        noise = [ln for ln in err.splitlines() if not ln.startswith("hvdcorerun: note: ")]
        if not words or noise:
            stats.failures.append(f"argv={argv!r}: exit 0 but stdout={out!r} stderr={err!r}")
        return
    stats.failures.append(f"argv={argv!r} env={environ!r}: exit {rc!r}, stderr={err[-300:]!r}")


def _settings(examples: int) -> Callable:
    return settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck),
                    print_blob=False)


_VALUES = st.one_of(
    st.integers(-5, 10**7).map(str),
    st.sampled_from(["", " ", "localhost:2", "localhost", "a:b:c", "h:0", "h:-1", ":", "x" * 300,
                     "1e3", "0.5", "nan", "inf", "-1", "--", "-np", "'unbalanced", "a b",
                     "localhost:2,localhost:3", "localhost slots=2", "true", "maybe", "debug",
                     "/nonexistent/file", "/", "mpi", "nccl", "bogus", "srun", "mpirun"]),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
            max_size=12),
)


def fuzz_argv(examples: int, version: str | None) -> FuzzStats:
    """Random flags (all of hvdcorerun's but the probing ones) with random values."""
    stats = FuzzStats("hvdcorerun flags")
    flags = sorted({s for a in cli.build_parser()._actions for s in a.option_strings}
                   - _PROBING)
    token = st.one_of(st.sampled_from(flags), _VALUES,
                      st.tuples(st.sampled_from(flags), _VALUES).map(lambda t: f"{t[0]}={t[1]}"))

    @_settings(examples)
    @given(tokens=st.lists(token, max_size=6), np_=st.sampled_from([None, "1", "2", "0", "x"]),
           command=st.sampled_from([[], ["python", "train.py"], ["--", "python", "-c", "1"],
                                    ["-x"]]))
    def run(tokens: list[str], np_: str | None, command: list[str]) -> None:
        argv = ["--dry-run", *(["-np", np_] if np_ else []), *tokens, *command]
        _judge(stats, argv, _clean_env(), version)

    run()
    return stats


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("HVDCORE_", "HOROVOD_", "SLURM_"))}


def fuzz_hostfiles(examples: int, version: str | None) -> FuzzStats:
    """Random hostfile contents (and -H lists); well-formed local ones must be accepted."""
    stats = FuzzStats("hostfiles / -H")
    host = st.sampled_from(["localhost", "127.0.0.1", "node-1", "", "::1", "a b", "#c", "h:x"])
    slots = st.one_of(st.integers(-2, 64).map(str), st.sampled_from(["", "x", "1.5", "2 2"]))
    line = st.one_of(
        st.tuples(host, slots).map(lambda t: f"{t[0]} slots={t[1]}"),
        st.tuples(host, slots).map(lambda t: f"{t[0]}:{t[1]}"),
        host,
        st.text(max_size=20),
        st.just("# comment"),
        st.just(""),
    )

    @_settings(examples)
    @given(lines=st.lists(line, max_size=5), as_list=st.booleans(),
           np_=st.sampled_from([None, "1", "2", "3", "100"]),
           valid=st.lists(st.integers(1, 4), min_size=1, max_size=3), use_valid=st.booleans())
    def run(lines: list[str], as_list: bool, np_: str | None, valid: list[int],
            use_valid: bool) -> None:
        extra = ["-np", np_] if np_ else []
        if use_valid:
            lines = [f"localhost slots={n}" for n in valid]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "hosts")
            with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
                fh.write("\n".join(lines) + "\n")
            if as_list and not use_valid:
                spec = ",".join(ln.replace(" slots=", ":") for ln in lines)
                argv = ["--dry-run", "-H", spec, *extra, "python", "x.py"]
            else:
                argv = ["--dry-run", "--hostfile", path, *extra, "python", "x.py"]
            ok = use_valid and (np_ is None or int(np_) <= sum(valid))
            _judge(stats, argv, _clean_env(), version, must_succeed=ok)

    run()
    for special in ("/nonexistent/hosts", "/", "/dev/null"):
        _judge(stats, ["--dry-run", "--hostfile", special, "python", "x.py"], _clean_env(),
               version)
    return stats


def _valid_value(k: config.Knob) -> st.SearchStrategy:
    if k.choices:
        return st.sampled_from(k.choices).flatmap(
            lambda c: st.sampled_from([c, c.upper(), f" {c} "]))
    if k.kind == "bool":
        return st.sampled_from(["1", "0", "true", "FALSE", "yes", "no", "on", "off"])
    if k.kind.startswith("int"):
        return st.integers(0, 2**40).map(str)
    if k.kind.startswith("float"):
        low = 1e-3 if "> 0" in k.kind else 0.0  # e.g. a timeout: zero is not valid
        high = 1.0 if "[0, 1]" in k.kind else 1e6  # e.g. the autotuner's noise
        return st.floats(low, high).map(repr)
    return st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                          blacklist_characters="\0"), max_size=10)


def fuzz_environment(examples: int, version: str | None) -> FuzzStats:
    """Malformed and well-formed HVDCORE_*/HOROVOD_* values through config.load and the
    launcher's environment check."""
    stats = FuzzStats("HVDCORE_* environment")
    knobs = list(config.KNOBS)
    garbage = st.one_of(_VALUES, st.text(max_size=8))
    name = st.one_of(st.sampled_from([k.env for k in knobs] + [k.alias for k in knobs
                                                                if k.alias]),
                     st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ_", min_size=1, max_size=12)
                     .map(lambda s: "HVDCORE_" + s))

    @_settings(examples)
    @given(bad=st.dictionaries(name, garbage, max_size=3),
           knob_i=st.integers(0, len(knobs) - 1), data=st.data())
    def run(bad: dict[str, str], knob_i: int, data: Any) -> None:
        k = knobs[knob_i]
        good_raw = data.draw(_valid_value(k))
        # a valid value alone must be accepted with that value
        t0 = time.monotonic()
        try:
            cfg = config.load({k.env: good_raw})
            want = k.convert(good_raw, k.env)
            if getattr(cfg, k.attr) != want:
                stats.failures.append(f"{k.env}={good_raw!r} loaded as "
                                      f"{getattr(cfg, k.attr)!r}, want {want!r}")
        except Exception as exc:  # noqa: BLE001
            stats.failures.append(f"{k.env}={good_raw!r} (valid) rejected: "
                                  f"{type(exc).__name__}: {exc}")
        # garbage: ConfigError naming a variable, or accepted
        try:
            config.load(bad)
        except ConfigError as exc:
            if not any(var in str(exc) for var in bad):
                stats.failures.append(f"env {bad!r}: ConfigError names no variable: {exc}")
        except Exception as exc:  # noqa: BLE001
            stats.failures.append(f"env {bad!r}: config.load crashed with "
                                  f"{type(exc).__name__}: {exc}")
        stats.worst_s = max(stats.worst_s, time.monotonic() - t0)
        _judge(stats, ["--dry-run", "-np", "2", "python", "x.py"], {**_clean_env(), **bad},
               version)

    run()
    return stats


def run_all(examples: int) -> list[FuzzStats]:
    """Every launcher-side fuzz target with ``examples`` examples each."""
    version = _mpi_version()
    return [fuzz_argv(examples, version), fuzz_hostfiles(examples, version),
            fuzz_environment(examples, version)]


if __name__ == "__main__":
    for s in run_all(100):
        print(s.target, s.examples, s.usage_errors, len(s.failures), f"{s.worst_s:.3f}")
        for f in s.failures[:10]:
            print("  ", f[:400])
