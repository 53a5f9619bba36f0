"""Turn a ReFrame run (JSON report, or perflogs) into a Markdown summary and a scaling plot.

The nightly job publishes both::

    python checks/tools/report.py --report run-report.json -o summary.md --plot scaling.png
    python checks/tools/report.py --perflogs perflogs/ -o summary.md --plot scaling.png
    python checks/tools/report.py --latest -o summary.md     # newest ~/.reframe/reports/*.json

The summary has one row per check and partition (pass/fail/skip and the failure reason), then
every performance variable against its reference and bounds, then the MNIST scaling table
(ranks, images/s, efficiency vs the 1-rank baseline), one series per partition+environment,
framework (torch, tensorflow) and hvdcore module. The plot shows total images/s and scaling
efficiency against the number of ranks: one colour per partition+environment (and module), one
line style and marker per framework (torch: solid, circles; tensorflow: dashed, squares).
Perflogs must use the line format of checks/config/common.py (``logging_config``).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Case",
    "PerfVar",
    "load_report",
    "load_perflogs",
    "markdown_summary",
    "scaling_points",
    "series_framework",
    "plot_scaling",
    "main",
]

MNIST_PREFIXES = ("HvdcoreMnist", "MnistBaseline")
#: Line style and marker of each framework's series in the plot.
FRAMEWORK_STYLES = {"torch": ("-", "o"), "tensorflow": ("--", "s")}


@dataclass
class PerfVar:
    """One performance variable of one test case."""

    name: str
    value: float | None
    unit: str = ""
    reference: float | None = None
    lower: float | None = None  # relative thresholds, as ReFrame stores them (e.g. -0.1)
    upper: float | None = None

    def bounds(self) -> tuple[float | None, float | None]:
        """Absolute (low, high) bounds; None where unbounded."""
        if self.reference is None:
            return None, None
        ref = self.reference
        low = ref * (1 + self.lower) if self.lower is not None else None
        high = ref * (1 + self.upper) if self.upper is not None else None
        return low, high

    def within(self) -> bool | None:
        """Whether the value is inside its bounds (None when there is no value)."""
        if self.value is None:
            return None
        low, high = self.bounds()
        return (low is None or self.value >= low) and (high is None or self.value <= high)


@dataclass
class Case:
    """One test case of a run: a check variant on one partition and environment."""

    name: str
    system: str
    partition: str
    environ: str
    result: str
    fail_reason: str = ""
    fail_phase: str = ""
    num_tasks: int | None = None
    fixture: bool = False
    params: dict[str, str] = field(default_factory=dict)
    perfvars: list[PerfVar] = field(default_factory=list)

    @property
    def check(self) -> str:
        """The check's class name (first word of the display name)."""
        return self.name.split()[0]

    @property
    def sysenv(self) -> str:
        return f"{self.system}:{self.partition}+{self.environ}"

    def param(self, name: str) -> str | None:
        """A parameter of the case, its own (``%framework=``) or its baseline fixture's
        (``%baseline.framework=``)."""
        return self.params.get(name) or self.params.get(f"baseline.{name}")

    @property
    def framework(self) -> str:
        """The MNIST case's framework (older reports: from the class name)."""
        found = self.param("framework")
        if found:
            return found
        return "tensorflow" if "Tensorflow" in self.check else "torch"

    def perf(self, name: str) -> float | None:
        for pv in self.perfvars:
            if pv.name == name:
                return pv.value
        return None


def _num(value: Any) -> float | None:
    if value is None or value == "" or value == "null":
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _params(name: str) -> dict[str, str]:
    return dict(re.findall(r"%([\w.]+)=(\S+)", name))


def _perfvars_from_report(tc: dict[str, Any]) -> list[PerfVar]:
    out = []
    perfvalues = tc.get("perfvalues") or {}
    for key, val in perfvalues.items():
        # key: "system:partition:var"; val: [value, reference, lower, upper, unit, result]
        name = key.split(":")[-1]
        seq = list(val) + [None] * 6
        ref, low, high = _num(seq[1]), _num(seq[2]), _num(seq[3])
        if ref == 0 and low is None and high is None:
            ref = None  # ReFrame stores "no reference" as 0 without bounds
        out.append(PerfVar(name, _num(seq[0]), seq[4] or "", ref, low, high))
    for pv in tc.get("perfvars") or []:  # older report layouts
        out.append(PerfVar(pv.get("name", "?"), _num(pv.get("value")), pv.get("unit") or "",
                           _num(pv.get("reference")), _num(pv.get("thres_lower")),
                           _num(pv.get("thres_upper"))))
    return out


def load_report(path: str | os.PathLike[str]) -> list[Case]:
    """Test cases of a ReFrame JSON report (the last run of each case when retried)."""
    data = json.loads(Path(path).read_text())
    cases: dict[str, Case] = {}
    for run in data.get("runs", []):
        for tc in run.get("testcases", []):
            name = tc.get("display_name") or tc.get("name") or "?"
            case = Case(
                name=name, system=tc.get("system") or "?", partition=tc.get("partition") or "?",
                environ=tc.get("environ") or "?", result=tc.get("result") or "?",
                fail_reason=(tc.get("fail_reason") or "").strip(),
                fail_phase=tc.get("fail_phase") or "",
                num_tasks=tc.get("num_tasks"), fixture=bool(tc.get("fixture")),
                params=_params(name), perfvars=_perfvars_from_report(tc),
            )
            for var in ("framework", "hvdcore_module"):  # the check's own fields, when logged
                if isinstance(tc.get(var), str):
                    case.params.setdefault(var, tc[var])
            cases[f"{name}@{case.sysenv}"] = case
    return list(cases.values())


def load_perflogs(directory: str | os.PathLike[str]) -> list[Case]:
    """The newest entry of each case found in the perflog files under ``directory``."""
    cases: dict[str, Case] = {}
    for path in sorted(glob.glob(os.path.join(str(directory), "**", "*.log"), recursive=True)):
        for line in Path(path).read_text(errors="replace").splitlines():
            fields = line.split("|")
            if len(fields) < 7 or fields[0] == "job_completion_time":
                continue
            _time, result, name, syspart, environ, ntasks = fields[:6]
            system, _, partition = syspart.partition(":")
            perf = fields[6:]
            pvs = []
            for i in range(0, len(perf) - 4, 5):  # var=value|ref|lower|upper|unit|
                var, _, value = perf[i].partition("=")
                ref, low, high = _num(perf[i + 1]), _num(perf[i + 2]), _num(perf[i + 3])
                if ref == 0 and low is None and high is None:
                    ref = None
                pvs.append(PerfVar(var, _num(value), perf[i + 4], ref, low, high))
            case = Case(name=name, system=system, partition=partition, environ=environ,
                        result=result, num_tasks=int(ntasks) if ntasks.isdigit() else None,
                        params=_params(name), perfvars=pvs,
                        fixture=name.startswith("MnistBaseline"))
            cases[f"{name}@{case.sysenv}"] = case  # later lines are newer
    return list(cases.values())


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "-"
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"
    return f"{value:.3e}"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def scaling_points(cases: Iterable[Case]) -> dict[str, list[tuple[int, float, float | None]]]:
    """MNIST series: ``{"<sys:part+env> <framework>[ <module>]": [(ranks, images/s, eff%), ...]}``.

    The 1-rank baseline is the point at 1 rank with 100% efficiency. The module is named when
    the case ran a discovered hvdcore module (``hvdcore_module`` other than ``env``).
    """
    series: dict[str, list[tuple[int, float, float | None]]] = {}
    for case in cases:
        if not case.check.startswith(MNIST_PREFIXES) or case.result != "pass":
            continue
        ips = case.perf("images_per_sec")
        if ips is None or case.num_tasks is None:
            continue
        key = f"{case.sysenv} {case.framework}"
        module = case.param("hvdcore_module")
        if module and module != "env":
            key += f" {module}"
        eff = 100.0 if case.check.startswith("MnistBaseline") else case.perf("efficiency")
        series.setdefault(key, []).append((case.num_tasks, ips, eff))
    for points in series.values():
        points.sort()
    return series


def series_framework(key: str) -> str:
    """The framework of a :func:`scaling_points` series key."""
    return key.split()[1]


def markdown_summary(cases: Sequence[Case], title: str = "hvdcore ReFrame validation",
                     source: str = "") -> str:
    """The Markdown summary (results, performance vs references, MNIST scaling)."""
    n_pass = sum(c.result == "pass" for c in cases)
    n_fail = sum(c.result in ("fail", "failure", "error", "abort", "aborted") for c in cases)
    n_skip = sum(c.result == "skip" for c in cases)
    lines = [f"# {title}", ""]
    if source:
        lines += [f"Source: `{source}`", ""]
    verdict = "PASSED" if n_fail == 0 and n_pass > 0 else "FAILED"
    lines += [f"**{verdict}**: {n_pass} passed, {n_fail} failed, {n_skip} skipped "
              f"({len(cases)} test cases).", "", "## Results", "",
              "| Check | Partition | Environment | Ranks | Result | Reason |",
              "|---|---|---|---:|---|---|"]
    for c in sorted(cases, key=lambda c: (c.check, c.system, c.partition, c.name)):
        reason = _md_escape(c.fail_reason)[:400]
        if c.fail_phase and reason:
            reason = f"{c.fail_phase}: {reason}"
        lines.append(f"| {_md_escape(c.name)} | {c.system}:{c.partition} | {c.environ} | "
                     f"{c.num_tasks if c.num_tasks is not None else '-'} | {c.result} | {reason} |")
    perf_rows = [(c, pv) for c in cases for pv in c.perfvars]
    if perf_rows:
        lines += ["", "## Performance", "",
                  "| Check | Partition | Variable | Value | Unit | Reference | Bounds | OK |",
                  "|---|---|---|---:|---|---:|---|---|"]
        for c, pv in sorted(perf_rows, key=lambda r: (r[0].check, r[0].sysenv, r[0].name,
                                                       r[1].name)):
            low, high = pv.bounds()
            bounds = f"[{_fmt(low)}, {_fmt(high)}]" if pv.reference is not None else "-"
            ok = {True: "yes", False: "**no**", None: "-"}[pv.within()]
            lines.append(f"| {_md_escape(c.name)} | {c.system}:{c.partition} | {pv.name} | "
                         f"{_fmt(pv.value, 4)} | {pv.unit} | {_fmt(pv.reference)} | {bounds} | "
                         f"{ok} |")
    series = scaling_points(cases)
    if series:
        lines += ["", "## MNIST scaling", "",
                  "| Series | Ranks | Images/s | Images/s per rank | Efficiency |",
                  "|---|---:|---:|---:|---:|"]
        for key, points in sorted(series.items()):
            for ranks, ips, eff in points:
                eff_txt = f"{eff:.1f}%" if eff is not None else "-"
                lines.append(f"| {key} | {ranks} | {ips:.1f} | {ips / ranks:.1f} | {eff_txt} |")
    return "\n".join(lines) + "\n"


def plot_scaling(cases: Sequence[Case], path: str | os.PathLike[str]) -> bool:
    """Write the PNG scaling plot; False (and no file) when there is no MNIST data."""
    series = scaling_points(cases)
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_ips, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2))
    # one colour per partition+environment(+module), one line style/marker per framework
    def place(key: str) -> str:
        words = key.split()
        return " ".join([words[0], *words[2:]])

    colours = {p: f"C{i % 10}" for i, p in enumerate(sorted({place(k) for k in series}))}
    for key, points in sorted(series.items()):
        ranks = [p[0] for p in points]
        line, marker = FRAMEWORK_STYLES.get(series_framework(key), (":", "^"))
        style = dict(linestyle=line, marker=marker, label=key,
                     color=colours[place(key)])
        ax_ips.plot(ranks, [p[1] for p in points], **style)
        effs = [(p[0], p[2]) for p in points if p[2] is not None]
        ax_eff.plot([e[0] for e in effs], [e[1] for e in effs], **style)
    all_ranks = sorted({p[0] for pts in series.values() for p in pts})
    for ax in (ax_ips, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_ranks, [str(r) for r in all_ranks])
        ax.set_xlabel("ranks")
        ax.grid(True, alpha=0.3)
    ax_ips.set_ylabel("images/s (all ranks)")
    ax_ips.set_title("MNIST training throughput")
    ax_ips.legend(fontsize=7, loc="best")
    ax_eff.axhline(88.0, color="grey", linestyle="--", linewidth=1, label="Horovod ~88%")
    ax_eff.set_ylabel("scaling efficiency (%)")
    top = max([120.0] + [p[2] * 1.1 for pts in series.values() for p in pts if p[2]])
    ax_eff.set_ylim(0, top)
    ax_eff.set_title("Efficiency vs the 1-rank baseline")
    ax_eff.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _latest_report() -> str:
    reports = sorted(glob.glob(os.path.expanduser("~/.reframe/reports/run-report-*.json")),
                     key=os.path.getmtime)
    if not reports:
        raise SystemExit("report.py: no report in ~/.reframe/reports: give --report or --perflogs")
    return reports[-1]


def main(argv: list[str] | None = None) -> int:
    """Command line entry; exit 0 when the summary was written (whatever the test results)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--report", help="ReFrame JSON run report (--report-file)")
    src.add_argument("--perflogs", help="ReFrame perflog directory")
    src.add_argument("--latest", action="store_true", help="newest ~/.reframe/reports/*.json")
    parser.add_argument("-o", "--output", default="-", help="Markdown file ('-': stdout)")
    parser.add_argument("--plot", help="PNG scaling plot to write")
    parser.add_argument("--title", default="hvdcore ReFrame validation")
    parser.add_argument("--fail-on-failure", action="store_true",
                        help="exit 1 when a test case failed")
    args = parser.parse_args(argv)

    if args.perflogs:
        if not os.path.isdir(args.perflogs):
            parser.error(f"--perflogs {args.perflogs}: not a directory")
        source = args.perflogs
        cases = load_perflogs(source)
    else:
        source = args.report or _latest_report()
        try:
            cases = load_report(source)
        except (OSError, ValueError) as exc:
            parser.error(f"cannot read the ReFrame report {source}: {exc}")
    if not cases:
        print(f"report.py: no test cases in {source}", file=sys.stderr)
        return 2
    text = markdown_summary(cases, args.title, source)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    if args.plot:
        if plot_scaling(cases, args.plot):
            print(f"report.py: wrote {args.plot}", file=sys.stderr)
        else:
            print("report.py: no passed MNIST cases: no scaling plot", file=sys.stderr)
    failed = any(c.result not in ("pass", "skip") for c in cases)
    return 1 if args.fail_on_failure and failed else 0


if __name__ == "__main__":
    sys.exit(main())
