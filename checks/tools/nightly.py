"""One night of the hvdcore ReFrame suite, kept, judged against the site's own history.

Run it from a scheduler (``checks/schedule/``: scrontab, cron + sbatch, GitLab CI)::

    checks/nightly.sh --config checks/config/<site>.py --results /shared/hvdcore-nightly
    checks/nightly.sh --results DIR -- -n 'scale=1_node|scale=2_nodes' -S reps=60

Without a selection of its own after ``--`` (``-n``, ``-t``, ``-x``, ``--maintainer``, ...),
the night runs the checks tagged ``nightly`` (``checks/hvdcore_checks/selection.py``).

Every run gets its own directory ``DIR/nights/<UTC time>/`` (nothing of an earlier night is
overwritten) holding ReFrame's stage, output and perflog directories, its log, ``report.json``,
``reframe-junit.xml``, and what this tool writes:

``junit.xml``
    ReFrame's JUnit report, plus a test suite ``hvdcore-history`` with one test case per
    performance variable judged against history (a regression is a failure); a case that failed
    as an invalid measurement is reported as skipped, not as a failure.
``confirm/``
    when a value regressed against its history: the regressed checks run a second time (a
    second ReFrame session of the same night); the regression stands only when the second run
    is outside the band too, else it is reported as ``unconfirmed``.
``summary.md``
    the suite's summary (``report.py``) and tonight against history: value, band, change and
    which rule judged it (``history``, ``reference``, ``information``).
``scaling.png``
    the MNIST scaling plot, when the suite ran MNIST.
``planes.png``
    the data-plane check's busbw per size and collective (hvdcore and raw), when it ran.

``DIR/results.db`` is ReFrame's own results storage (``RFM_ENABLE_RESULTS_STORAGE``), one per
results directory, so ``reframe --list-stored-sessions`` and ``--performance-compare`` work on
it too; each session carries the extras ``hvdcore_night``, ``hvdcore_version``,
``hvdcore_commit`` and ``hvdcore_module``. ``DIR/trend.html`` (every night, one page, no
server; tonight's data-plane table and plot under tonight's verdicts) and ``DIR/latest`` (a link to tonight) are rewritten each night.

Exit status: 0 when every case passed (or was an invalid measurement) and no value regressed
against its history; 1 when a check failed (sanity, capability, a reference bound), a value
regressed, or ReFrame could not load a check file (its warning ``skipping test file ...``: the
file's checks did not run, and the night would otherwise pass as a subset); 2 when ReFrame did not run or stored no session, or is older than the suite needs
(``reframe_version.py``: refused at start with the version found and the one needed). One line
per check is logged as it finishes, then one line per regression and the verdict.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

import history
import planes_report
import reframe_version
import report
import trend

__all__ = ["main", "night_extras", "write_junit", "history_markdown"]

CHECKS_DIR = Path(__file__).resolve().parent.parent
REPO = CHECKS_DIR.parent
DEFAULT_CONFIG = CHECKS_DIR / "config" / "local.py"
DB_NAME = "results.db"
_STATUS = re.compile(r"^\[\s*(OK|FAIL|SKIP|ERROR|ABORT\w*)\s*\] \((\s*\d+/\d+)\) (.*)$")
_PERF = re.compile(r"^P: (\S+): (\S+) (\S*)")
#: ReFrame's warning for a check file it cannot load (an import error, an API it lacks): the
#: file's checks are left out of the run, which would otherwise pass as a subset of the suite.
_SKIPPED_FILE = re.compile(r"^WARNING: (skipping test file .*)$")


def log(msg: str) -> None:
    """One line of the nightly log (UTC time first)."""
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"nightly {stamp} {msg}", flush=True)


def _safe(value: str) -> str:
    # ReFrame splits --session-extras on ',' and the first '='.
    return re.sub(r"[,\s]+", "_", value.strip()) or "unknown"


def _hvdcore_version() -> str:
    if os.environ.get("EBVERSIONHVDCORE"):
        return os.environ["EBVERSIONHVDCORE"]
    try:
        from importlib.metadata import version
        return version("hvdcore")
    except Exception:  # noqa: BLE001 - not installed where ReFrame runs: say so
        return "unknown"


def _commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "unknown"
    if out.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "hvdcore"],
                           capture_output=True, text=True, timeout=30, check=False).stdout
    return out.stdout.strip() + ("-dirty" if dirty.strip() else "")


def _module(given: str | None) -> str:
    if given:
        return given
    loaded = [m for m in os.environ.get("LOADEDMODULES", "").split(":")
              if m.lower().startswith("hvdcore/")]
    return loaded[-1] if loaded else "env"


def night_extras(night: str, module: str | None = None) -> dict[str, str]:
    """The session extras naming tonight and the hvdcore under test."""
    return {history.NIGHT_EXTRA: night, "hvdcore_version": _safe(_hvdcore_version()),
            "hvdcore_commit": _safe(_commit()), "hvdcore_module": _safe(_module(module))}


def _night_dir(results: Path) -> tuple[str, Path]:
    base = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name, n = base, 1
    while (results / "nights" / name).exists():
        n += 1
        name = f"{base}-{n}"
    path = results / "nights" / name
    path.mkdir(parents=True)
    return name, path


def _reframe() -> str:
    here = Path(sys.executable).parent / "reframe"
    return str(here) if here.exists() else "reframe"


def run_reframe(cmd: Sequence[str], env: dict[str, str], cwd: Path, out: Path,
                skipped: list[str] | None = None) -> int:
    """Run ReFrame, its output to ``out``, one nightly log line per finished check; ReFrame's
    warnings about check files it could not load are appended to ``skipped``."""
    pending: list[str] = []

    def flush() -> None:
        if pending:
            log("  ".join(pending))
            pending.clear()

    with open(out, "w") as fp:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            fp.write(line)
            text = line.rstrip()
            m = _STATUS.match(text)
            p = _PERF.match(text)
            s = _SKIPPED_FILE.match(text)
            if s and skipped is not None:
                skipped.append(s[1])
            if m:
                flush()
                status = {"OK": "PASS"}.get(m[1], m[1])
                pending.append(f"{status:<5} ({m[2].strip()}) {m[3]}")
            elif p and pending:
                pending.append(f"{p[1]}={p[2]} {p[3]}".rstrip())
            else:
                flush()
        flush()
        return proc.wait()


#: ReFrame options that select checks: left out of the confirmation run, which selects by hash.
_SELECTION = ("-n", "--name", "-t", "--tag", "-x", "--exclude", "-p", "--prgenv",
              "--maintainer", "--failed", "--cpu-only", "--gpu-only")


def _without_selection(args: Sequence[str]) -> list[str]:
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in _SELECTION:
            skip = a not in ("--failed", "--cpu-only", "--gpu-only")
            continue
        if a.split("=", 1)[0] in _SELECTION:
            continue
        out.append(a)
    return out


def history_markdown(verdicts: Sequence[history.Verdict], params: str) -> str:
    """Tonight against history, as Markdown."""
    lines = ["## Against history", "", params, "",
             "| Case | Partition+environment | Variable | Value | History centre | Band | "
             "Change | Verdict | Judged by |",
             "|---|---|---|---:|---:|---|---:|---|---|"]
    for v in sorted(verdicts, key=lambda v: (v.case, v.sysenv, v.var)):
        b = v.band
        band_txt = f"[{trend.fmt(b.low)}, {trend.fmt(b.high)}]" if b else "-"
        change = f"{v.change:+.1%}" if v.change is not None else "-"
        verdict = f"**{v.verdict}**" if v.verdict in ("regression", "failed") else v.verdict
        lines.append(f"| {v.case} | {v.sysenv} | {v.var} | {trend.fmt(v.value)} {v.unit} | "
                     f"{trend.fmt(b.centre) if b else '-'} | {band_txt} | {change} | "
                     f"{verdict} | {v.rule} |")
    better = [v for v in verdicts if v.verdict == "improvement"]
    if better:
        lines += ["", "Improvements (record them as references once confirmed: "
                      "`python checks/tools/record_references.py --report report.json`): "
                  + ", ".join(f"{v.case} {v.var} {v.change:+.1%}" for v in better
                              if v.change is not None) + "."]
    return "\n".join(lines) + "\n"


def write_junit(reframe_xml: Path, out: Path, cases: Sequence[report.Case],
                verdicts: Sequence[history.Verdict]) -> None:
    """ReFrame's JUnit report with invalid measurements as skipped, plus the history suite."""
    invalid = {f"{c.name} @{c.sysenv}" for c in cases if c.invalid}
    if reframe_xml.exists():
        root = ET.parse(reframe_xml).getroot()
    else:
        root = ET.Element("testsuites")
    for suite in root.iter("testsuite"):
        for tc in suite.iter("testcase"):
            if tc.get("name") in invalid:
                for child in list(tc):
                    if child.tag in ("failure", "error"):
                        text = f"invalid measurement: {child.text or ''}"
                        tc.remove(child)
                        ET.SubElement(tc, "skipped", message="invalid measurement").text = text
                        suite.set("failures", str(max(0, int(suite.get("failures", "0")) - 1)))
    judged = [v for v in verdicts if v.rule.startswith("history")]
    fails = [v for v in judged if v.regression]
    suite = ET.SubElement(root, "testsuite", name="hvdcore-history", tests=str(len(judged)),
                          failures=str(len(fails)), errors="0")
    for v in judged:
        tc = ET.SubElement(suite, "testcase", classname=f"history.{v.sysenv}",
                           name=f"{v.case} {v.var}")
        if v.regression and v.band is not None:
            msg = (f"{v.var}={trend.fmt(v.value)} {v.unit} is outside its history band "
                   f"[{trend.fmt(v.band.low)}, {trend.fmt(v.band.high)}] (centre "
                   f"{trend.fmt(v.band.centre)}, {v.change:+.1%}, {v.band.nights} good nights)")
            ET.SubElement(tc, "failure", type="regression", message=msg).text = msg
    ET.indent(root)
    ET.ElementTree(root).write(out, encoding="utf-8", xml_declaration=True)


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module doc)."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after '--' go to ReFrame (e.g. -- -t nightly -S reps=10).")
    parser.add_argument("--results", required=True, type=Path,
                        help="results directory of this site (nights/, results.db, trend.html)")
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG,
                        help=f"ReFrame site config (default {DEFAULT_CONFIG.relative_to(REPO)})")
    parser.add_argument("--checks", action="append", type=Path,
                        help=f"check file or directory (repeatable; default {CHECKS_DIR})")
    parser.add_argument("--module", help="hvdcore module under test, for the session extras "
                        "(default: the loaded hvdcore/ module, else 'env')")
    parser.add_argument("--window", type=int, default=history.DEFAULT_WINDOW,
                        help="good nights a band is built from (default %(default)s)")
    parser.add_argument("--min-nights", type=int, default=history.DEFAULT_MIN_NIGHTS,
                        help="good nights before history judges (default %(default)s)")
    parser.add_argument("--sigmas", type=float, default=history.DEFAULT_SIGMAS,
                        help="robust standard deviations to the band's edge (default "
                             "%(default)s)")
    parser.add_argument("--min-band", type=float, default=history.DEFAULT_MIN_BAND,
                        help="smallest half-width of the band, relative to its centre "
                             "(default %(default)s)")
    parser.add_argument("--judge", default="*",
                        help="comma-separated patterns of the variables history judges "
                             "(default '*'; e.g. '*_ratio' on shared or virtualised nodes, "
                             "whose absolute figures swing from run to run); the others are "
                             "information")
    parser.add_argument("--no-confirm", dest="confirm", action="store_false",
                        help="do not run a regressed check a second time (by default a "
                             "regression stands only when the second run confirms it)")
    args, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    elif rest:
        parser.error(f"unknown arguments {rest} (ReFrame's go after '--')")

    too_old = reframe_version.check_reframe(_reframe())
    if too_old:  # refused at start: no night directory, no stored session
        print(f"nightly.py: {too_old}", file=sys.stderr)
        return 2
    if not any(a.split("=", 1)[0] in _SELECTION for a in rest):
        rest = ["-t", "nightly", *rest]  # the nightly set, unless the site selects its own
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    name, night = _night_dir(results)
    extras = night_extras(name, args.module)
    checks = [p.resolve() for p in (args.checks or [CHECKS_DIR])]
    cmd = [_reframe(), "-C", str(args.config.resolve()),
           *[a for c in checks for a in ("-c", str(c))], "-r", "--nocolor",
           "--prefix", str(night), "--report-file", str(night / "report.json"),
           "--report-junit", str(night / "reframe-junit.xml"),
           "--session-extras", ",".join(f"{k}={v}" for k, v in extras.items()), *rest]
    env = dict(os.environ, RFM_ENABLE_RESULTS_STORAGE="1",
               RFM_SQLITE_DB_FILE=str(results / DB_NAME))
    log(f"night {name}: hvdcore {extras['hvdcore_version']} commit "
        f"{extras['hvdcore_commit']} module {extras['hvdcore_module']}; results in {night}")
    skipped: list[str] = []
    rc = run_reframe(cmd, env, night, night / "reframe.out", skipped)
    log(f"ReFrame exited {rc} (log: {night / 'reframe.out'})")

    judge = dict(window=args.window, min_nights=args.min_nights, sigmas=args.sigmas,
                 min_band=args.min_band, judge=[p.strip() for p in args.judge.split(",")
                                                if p.strip()])
    nights = history.load_nights(results / DB_NAME)
    if not nights or nights[-1].info.get(history.NIGHT_EXTRA) != name:
        log(f"ERROR: ReFrame stored no session for night {name}: see {night / 'reframe.out'}")
        return 2
    verdicts = history.judge_nights(nights, **judge)
    again = sorted({c.hashcode for c in nights[-1].cases for v in verdicts[-1]
                    if v.regression and v.case == c.name and v.sysenv == c.sysenv
                    and c.hashcode and not c.fixture})
    if again and args.confirm:
        log(f"confirming {len(again)} regressed case(s): running them again")
        extras[history.ROLE_EXTRA] = "confirm"
        confirm = night / "confirm"
        confirm.mkdir()
        cmd2 = [_reframe(), "-C", str(args.config.resolve()),
                *[a for c in checks for a in ("-c", str(c))], "-r", "--nocolor",
                "--prefix", str(confirm), "--report-file", str(confirm / "report.json"),
                "--session-extras", ",".join(f"{k}={v}" for k, v in extras.items()),
                *_without_selection(rest), *[a for h in again for a in ("-n", f"/{h}")]]
        rc2 = run_reframe(cmd2, env, confirm, confirm / "reframe.out")
        log(f"confirmation run exited {rc2} (log: {confirm / 'reframe.out'})")
        nights = history.load_nights(results / DB_NAME)
        verdicts = history.judge_nights(nights, **judge)
    tonight, cases = verdicts[-1], nights[-1].cases
    params = (f"Band: the median of the last {args.window} good nights +/- max({args.sigmas:g} "
              f"x 1.4826 x MAD, {args.min_band:.0%} of the median); history judges after "
              f"{args.min_nights} good nights; variables judged: {args.judge}.")
    text = report.markdown_summary(cases, f"hvdcore nightly {name}", str(night / "report.json"))
    planes = planes_report.load_rows(night / "report.json")
    text += planes_report.markdown(planes)
    planes_report.plot(planes, night / "planes.png")
    (night / "summary.md").write_text(text + "\n" + history_markdown(tonight, params))
    report.plot_scaling(cases, night / "scaling.png")
    write_junit(night / "reframe-junit.xml", night / "junit.xml", cases, tonight)
    trend.write_page(results / "trend.html", nights, verdicts, results, params, planes)
    latest = results / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(Path("nights") / name)

    failed = [c for c in cases if c.failed and not c.invalid]
    invalid = [c for c in cases if c.invalid]
    regressions = [v for v in tonight if v.regression]
    for c in invalid:
        log(f"INVALID {c.name} @{c.sysenv}: {c.fail_reason[:300]}")
    for c in failed:
        log(f"FAILED {c.name} @{c.sysenv}: {c.fail_phase}: {c.fail_reason[:300]}")
    for s in skipped:
        log(f"FAILED to load a check file, its checks did not run: {s[:400]}")
    for v in regressions:
        assert v.band is not None
        log(f"REGRESSION {v.case} @{v.sysenv} {v.var}={trend.fmt(v.value)} {v.unit} outside "
            f"[{trend.fmt(v.band.low)}, {trend.fmt(v.band.high)}] ({v.change:+.1%} against "
            f"{v.band.nights} good nights)")
    verdict = "FAILED" if failed or regressions or skipped else "PASSED"
    unloaded = f", {len(skipped)} check files not loaded" if skipped else ""
    log(f"{verdict}: {len(cases)} cases, {len(failed)} failed, {len(invalid)} invalid, "
        f"{len(regressions)} regressions against history{unloaded}; summary "
        f"{night / 'summary.md'}, "
        f"trend {results / 'trend.html'}")
    return 1 if failed or regressions or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
