"""Turn a ReFrame run (JSON report, or perflogs) into a Markdown summary and a scaling plot.

The nightly job publishes both::

    python checks/tools/report.py --report run-report.json -o summary.md --plot scaling.png
    python checks/tools/report.py --perflogs perflogs/ -o summary.md --plot scaling.png
    python checks/tools/report.py --latest -o summary.md     # newest ~/.reframe/reports/*.json

The summary has one row per check and partition (pass/fail/skip and the failure reason), then
every performance variable of every test case, failed ones included, with its reference, its
absolute bounds and a verdict: ``pass``, ``**FAIL**``, ``**invalid**`` (an efficiency above
105 % widened by 3 x the case's recorded ``timing_noise``, or any efficiency of a case whose
noise is above 0.3, as the checks' validity rule does; or a case whose sanity failure starts
"invalid measurement: "; an efficiency above 105 % but within the noise passes with a note
saying so), ``not judged (no reference)`` (no reference, or ReFrame's 0 without bounds),
``not judged (no bounds)`` (a reference with both bounds unbounded: reported, never failed),
or ``no value`` (the case failed before its performance stage). Then the MNIST scaling table
(ranks, images/s, efficiency vs the 1-rank baseline, verdict), one series per
partition+environment, framework (torch, tensorflow) and hvdcore module. The plot shows
total images/s and scaling efficiency against the number of ranks: one colour per
partition+environment (and module), one line style and marker per framework (torch: solid,
circles; tensorflow: dashed, squares); failed points get a red x, invalid ones a hollow marker
labelled "invalid" off the line (never drawn as a result).
Perflogs must use the line format of checks/config/common.py (``logging_config``).
"""

# Over 400 lines on purpose: a single script sites copy and run; the summary table, the verdicts
# and the plot read the same parsed run.

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
    "cases_from_report",
    "load_perflogs",
    "markdown_summary",
    "ScalingPoint",
    "perf_verdict",
    "scaling_rows",
    "scaling_points",
    "series_framework",
    "plot_scaling",
    "scaling_figure",
    "main",
]

MNIST_PREFIXES = ("HvdcoreMnist", "MnistBaseline")
#: A scaling efficiency above this (%), widened by NOISE_SIGMAS x the case's recorded
#: ``timing_noise`` (the checks' rule, checks/hvdcore_checks/validity.py), is an invalid
#: measurement, never a result. Perflogs carry no noise: 105 % there.
MAX_VALID_EFFICIENCY = 105.0
NOISE_SIGMAS = 3.0
#: Recorded timing noise above which the case's efficiency is no measurement (the checks' rule).
MAX_TIMING_NOISE = 0.3
#: Verdicts of a performance variable that mean it was not judged.
NOT_JUDGED = ("not judged (no reference)", "not judged (no bounds)")
FAILED_RESULTS = ("fail", "failure", "error", "abort", "aborted")
#: The failure reason of an invalid measurement: ReFrame's ``sanity error: `` and the message
#: the checks' validity rules start with (``hvdcore_checks.validity.INVALID_MARKER``). Only
#: that prefix: "Invalid account" (sbatch) or "invalid device ordinal" (CUDA) are failures.
INVALID_REASON = re.compile(r"^(?:sanity error: )?invalid measurement: ")
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
    result: str | None = None  # ReFrame's own verdict of this variable, when the report has it

    def bounds(self) -> tuple[float | None, float | None]:
        """Absolute (low, high) bounds, as ReFrame computes them; None where unbounded."""
        if self.reference is None:
            return None, None
        ref = self.reference

        def bound(thres: float | None) -> float | None:
            if thres is None:
                return None
            if ref == 0:  # ReFrame: thresholds around a 0 reference are absolute
                return thres
            return ref * (1 + (-thres if ref < 0 else thres))

        return bound(self.lower), bound(self.upper)

    @property
    def judged(self) -> bool:
        """Whether a reference with at least one bound applies."""
        return self.reference is not None and (self.lower is not None or self.upper is not None)

    def within(self) -> bool | None:
        """Whether the value is inside its bounds (None: no value, or nothing to judge by)."""
        if self.value is None or not self.judged:
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
    #: Combined relative timing noise of the scaled run and its baseline (the check's sanity
    #: records it; None: not recorded, as in perflogs).
    timing_noise: float | None = None
    #: The case's stage directory (JSON reports; "" from perflogs).
    stagedir: str = ""
    #: ReFrame's hash of the case (``-n /<hash>`` selects it again).
    hashcode: str = ""

    @property
    def too_noisy(self) -> bool:
        """The recorded timing noise is above :data:`MAX_TIMING_NOISE`."""
        return self.timing_noise is not None and self.timing_noise > MAX_TIMING_NOISE

    @property
    def efficiency_bound(self) -> float:
        """The efficiency (%) above which this case's figure is an invalid measurement."""
        noise = self.timing_noise if self.timing_noise and self.timing_noise > 0 else 0.0
        return round(MAX_VALID_EFFICIENCY * (1.0 + NOISE_SIGMAS * noise), 2)

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

    @property
    def failed(self) -> bool:
        return self.result in FAILED_RESULTS

    @property
    def invalid(self) -> bool:
        """The case failed as an invalid measurement (:data:`INVALID_REASON`)."""
        return self.failed and bool(INVALID_REASON.match(self.fail_reason))

    def perf(self, name: str) -> float | None:
        for pv in self.perfvars:
            if pv.name == name:
                return pv.value
        return None

    def perfvar(self, name: str) -> PerfVar | None:
        return next((pv for pv in self.perfvars if pv.name == name), None)


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
        result = seq[5] if seq[5] in ("pass", "fail") else None
        out.append(PerfVar(name, _num(seq[0]), seq[4] or "", ref, low, high, result))
    for pv in tc.get("perfvars") or []:  # older report layouts
        out.append(PerfVar(pv.get("name", "?"), _num(pv.get("value")), pv.get("unit") or "",
                           _num(pv.get("reference")), _num(pv.get("thres_lower")),
                           _num(pv.get("thres_upper"))))
    return out


def load_report(path: str | os.PathLike[str]) -> list[Case]:
    """Test cases of a ReFrame JSON report file (the last run of each case when retried)."""
    return cases_from_report(json.loads(Path(path).read_text()))


def cases_from_report(data: dict[str, Any]) -> list[Case]:
    """Test cases of a decoded ReFrame JSON report (the last run of each case when retried)."""
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
            case.timing_noise = _num(tc.get("timing_noise"))
            case.stagedir = tc.get("stagedir") or ""
            case.hashcode = tc.get("hashcode") or ""
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


def _percent(value: float) -> str:
    """105 -> "105", 118.37 -> "118.4"."""
    return f"{value:.1f}".removesuffix(".0")


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


_NUMBER = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"


def _value_in_reason(reason: str, var: str) -> float | None:
    """A number the failure reason gives for ``var`` (``efficiency 130.0% > 105%``)."""
    match = re.search(rf"\b{re.escape(var)}\b\s*[=:]?\s*{_NUMBER}", reason)
    return float(match[1]) if match else None


def _invalid_var(case: Case, pv: PerfVar) -> bool:
    """Whether ``pv`` is what made the case an invalid measurement."""
    if pv.name == "efficiency" and pv.value is not None and (
            pv.value > case.efficiency_bound or case.too_noisy):
        return True
    if not case.invalid:
        return False
    named = [v.name for v in case.perfvars if re.search(rf"\b{v.name}\b", case.fail_reason)]
    return pv.name in named or not named  # the reason names no variable: all of them


def perf_verdict(case: Case, pv: PerfVar) -> str:
    """``pass``, ``**FAIL**``, ``**invalid**``, ``not judged (...)`` or ``no value (...)``."""
    if _invalid_var(case, pv):
        return "**invalid**"
    if pv.value is None:
        return f"no value ({case.fail_phase or case.result} failed)" if case.failed else "no value"
    if pv.reference is None:
        return NOT_JUDGED[0]
    if not pv.judged:
        return NOT_JUDGED[1]
    ok = {"pass": True, "fail": False}.get(pv.result or "", pv.within())
    return "pass" if ok else "**FAIL**"


def _perf_rows(cases: Sequence[Case]) -> list[tuple[Case, PerfVar]]:
    """Every performance variable of every case; a failed case without any (older reports,
    perflogs) gets one row from its failure reason when its check reports performance."""
    perf_checks = {c.check for c in cases if c.perfvars}
    rows = [(c, pv) for c in cases for pv in c.perfvars]
    for c in cases:
        if c.perfvars or not c.failed or not (c.invalid or c.check in perf_checks):
            continue
        known = sorted({pv.name for o in cases if o.check == c.check for pv in o.perfvars})
        named = [v for v in known if re.search(rf"\b{v}\b", c.fail_reason)]
        if not named and "efficiency" in c.fail_reason:
            named = ["efficiency"]
        for var in named or ["-"]:
            rows.append((c, PerfVar(var, _value_in_reason(c.fail_reason, var))))
    return rows


@dataclass
class ScalingPoint:
    """One MNIST test case on the scaling plot: ``status`` is pass, fail or invalid."""

    ranks: int
    images_per_sec: float | None
    efficiency: float | None
    status: str
    verdict: str


def _scaling_key(case: Case) -> str:
    key = f"{case.sysenv} {case.framework}"
    module = case.param("hvdcore_module")
    if module and module != "env":
        key += f" {module}"
    return key


def _scaling_point(case: Case) -> ScalingPoint | None:
    if case.num_tasks is None or case.result == "skip":
        return None
    baseline = case.check.startswith("MnistBaseline")
    ips = case.perf("images_per_sec")
    eff_var = case.perfvar("efficiency")
    eff = eff_var.value if eff_var else None
    if eff is None and case.failed:
        eff = _value_in_reason(case.fail_reason, "efficiency")
    if baseline and not case.failed and ips is not None:
        eff = 100.0
    verdicts = [(pv.name, perf_verdict(case, pv)) for pv in case.perfvars]
    if case.invalid or (eff is not None and (eff > case.efficiency_bound or case.too_noisy)):
        why = f": efficiency {eff:.1f}% > {_percent(case.efficiency_bound)}%" if eff else ""
        if case.too_noisy and eff is not None and eff <= case.efficiency_bound:
            why = f": timing noise {case.timing_noise:.3f} > {MAX_TIMING_NOISE:g}"
        return ScalingPoint(case.num_tasks, ips, eff, "invalid", f"**invalid**{why}")
    if case.failed:
        failed = [name for name, v in verdicts if v == "**FAIL**"]
        what = ", ".join(failed) if failed else (case.fail_phase or case.result)
        return ScalingPoint(case.num_tasks, ips, eff, "fail", f"**FAIL** ({what})")
    if ips is None:
        return None
    unjudged = [name for name, v in verdicts if v in NOT_JUDGED and name == "efficiency"]
    verdict = "pass" + (" (efficiency not judged)" if unjudged and not baseline else "")
    if eff is not None and eff > MAX_VALID_EFFICIENCY and not baseline:
        verdict += (f" (above {MAX_VALID_EFFICIENCY:g}% within the runs' timing noise "
                    f"{case.timing_noise or 0:.3f})")
    return ScalingPoint(case.num_tasks, ips, eff, "pass", verdict)


def scaling_rows(cases: Iterable[Case]) -> dict[str, list[ScalingPoint]]:
    """Every MNIST case as a point of its series (see :func:`scaling_points`), failed and
    invalid ones included, sorted by ranks."""
    series: dict[str, list[ScalingPoint]] = {}
    for case in cases:
        if not case.check.startswith(MNIST_PREFIXES):
            continue
        point = _scaling_point(case)
        if point is not None:
            series.setdefault(_scaling_key(case), []).append(point)
    for points in series.values():
        points.sort(key=lambda p: (p.ranks, ("pass", "fail", "invalid").index(p.status)))
    return series


def scaling_points(cases: Iterable[Case]) -> dict[str, list[tuple[int, float, float | None]]]:
    """MNIST series: ``{"<sys:part+env> <framework>[ <module>]": [(ranks, images/s, eff%), ...]}``.

    The measurements a line goes through: passed and failed cases with a value, never an
    invalid one. The 1-rank baseline is the point at 1 rank with 100% efficiency. The module is
    named when the case ran a discovered hvdcore module (``hvdcore_module`` other than ``env``).
    """
    out: dict[str, list[tuple[int, float, float | None]]] = {}
    for key, points in scaling_rows(cases).items():
        valid = [(p.ranks, p.images_per_sec, p.efficiency) for p in points
                 if p.status != "invalid" and p.images_per_sec is not None]
        if valid:
            out[key] = valid
    return out


def series_framework(key: str) -> str:
    """The framework of a :func:`scaling_points` series key."""
    return key.split()[1]


def _bounds_text(pv: PerfVar) -> str:
    if not pv.judged:
        return "-"
    low, high = pv.bounds()
    if low is not None and high is not None:
        return f"[{_fmt(low)}, {_fmt(high)}]"
    if low is not None:
        return f">= {_fmt(low)}"
    return f"<= {_fmt(high)}"


def markdown_summary(cases: Sequence[Case], title: str = "hvdcore ReFrame validation",
                     source: str = "") -> str:
    """The Markdown summary (results, performance vs references, MNIST scaling)."""
    n_pass = sum(c.result == "pass" for c in cases)
    n_fail = sum(c.failed for c in cases)
    n_skip = sum(c.result == "skip" for c in cases)
    lines = [f"# {title}", ""]
    if source:
        lines += [f"Source: `{source}`", ""]
    verdict = "PASSED" if n_fail == 0 and n_pass > 0 else "FAILED"
    perf_rows = _perf_rows(cases)
    verdicts = [perf_verdict(c, pv) for c, pv in perf_rows]
    lines += [f"**{verdict}**: {n_pass} passed, {n_fail} failed, {n_skip} skipped "
              f"({len(cases)} test cases)."]
    if perf_rows:
        count = {v: sum(x == v for x in verdicts) for v in ("pass", "**FAIL**", "**invalid**")}
        n_unjudged = sum(v in NOT_JUDGED for v in verdicts)
        n_none = sum(v.startswith("no value") for v in verdicts)
        lines += ["", f"Performance values: {count['pass']} within their bounds, "
                      f"{count['**FAIL**']} out of bounds, {count['**invalid**']} invalid, "
                      f"{n_unjudged} not judged (no reference or no bounds), "
                      f"{n_none} without a value (their case failed earlier)."]
    lines += ["", "## Results", "",
              "| Check | Partition | Environment | Ranks | Result | Reason |",
              "|---|---|---|---:|---|---|"]
    for c in sorted(cases, key=lambda c: (c.check, c.system, c.partition, c.name)):
        reason = _md_escape(c.fail_reason)[:400]
        if c.fail_phase and reason:
            reason = f"{c.fail_phase}: {reason}"
        lines.append(f"| {_md_escape(c.name)} | {c.system}:{c.partition} | {c.environ} | "
                     f"{c.num_tasks if c.num_tasks is not None else '-'} | {c.result} | {reason} |")
    if perf_rows:
        lines += ["", "## Performance", "",
                  "Bounds are absolute (reference and ReFrame's relative thresholds).", "",
                  "| Check | Partition | Environment | Variable | Value | Unit | Reference | Bounds "
                  "| Verdict |",
                  "|---|---|---|---|---:|---|---:|---|---|"]
        rows = sorted(zip(perf_rows, verdicts, strict=True),
                      key=lambda r: (r[0][0].check, r[0][0].sysenv, r[0][0].name, r[0][1].name))
        for (c, pv), verdict_text in rows:
            value = pv.value
            if value is None and verdict_text == "**invalid**":  # as the sanity message says
                value = _value_in_reason(c.fail_reason, pv.name)
            lines.append(f"| {_md_escape(c.name)} | {c.system}:{c.partition} | {c.environ} | "
                         f"{pv.name} | {_fmt(value, 4)} | {pv.unit} | {_fmt(pv.reference)} | "
                         f"{_bounds_text(pv)} | {verdict_text} |")
    series = scaling_rows(cases)
    if series:
        lines += ["", "## MNIST scaling", "",
                  f"Efficiency above {MAX_VALID_EFFICIENCY:.0f}% (widened by "
                  f"{NOISE_SIGMAS:g} x the runs' recorded timing noise) is an invalid "
                  "measurement, not a result.", "",
                  "| Series | Ranks | Images/s | Images/s per rank | Efficiency | Verdict |",
                  "|---|---:|---:|---:|---:|---|"]
        for key, points in sorted(series.items()):
            for p in points:
                ips = p.images_per_sec
                eff_txt = f"{p.efficiency:.1f}%" if p.efficiency is not None else "-"
                if p.status == "invalid" and p.efficiency is not None:
                    eff_txt += " (invalid)"
                ips_txt = f"{ips:.1f} | {ips / p.ranks:.1f}" if ips is not None else "- | -"
                lines.append(f"| {key} | {p.ranks} | {ips_txt} | {eff_txt} | {p.verdict} |")
    return "\n".join(lines) + "\n"


def plot_scaling(cases: Sequence[Case], path: str | os.PathLike[str]) -> bool:
    """Write the PNG scaling plot; False (and no file) when there is no MNIST data."""
    fig = scaling_figure(cases)
    if fig is None:
        return False
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def scaling_figure(cases: Sequence[Case]) -> Any:
    """The matplotlib figure of :func:`plot_scaling` (None without MNIST data): images/s and
    efficiency vs ranks; failed points get a red x, invalid ones a hollow, labelled marker."""
    series = scaling_rows(cases)
    if not series:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, (ax_ips, ax_eff) = plt.subplots(1, 2, figsize=(11, 4.2))

    # one colour per partition+environment(+module), one line style/marker per framework
    def place(key: str) -> str:
        words = key.split()
        return " ".join([words[0], *words[2:]])

    colours = {p: f"C{i % 10}" for i, p in enumerate(sorted({place(k) for k in series}))}
    effs_seen: list[float] = []
    statuses: set[str] = set()
    for key, points in sorted(series.items()):
        line, marker = FRAMEWORK_STYLES.get(series_framework(key), (":", "^"))
        colour = colours[place(key)]
        style = dict(linestyle=line, marker=marker, label=key, color=colour)
        valid = [p for p in points if p.status != "invalid"]
        drawn = [p for p in valid if p.images_per_sec is not None]
        ax_ips.plot([p.ranks for p in drawn], [p.images_per_sec for p in drawn], **style)
        with_eff = [p for p in valid if p.efficiency is not None]
        ax_eff.plot([p.ranks for p in with_eff], [p.efficiency for p in with_eff], **style)
        effs_seen += [p.efficiency for p in points if p.efficiency is not None]
        for p in points:
            statuses.add(p.status)
            if p.status == "fail":
                for ax, y in ((ax_ips, p.images_per_sec), (ax_eff, p.efficiency)):
                    if y is not None:
                        ax.plot([p.ranks], [y], linestyle="none", marker="x", color="red",
                                markersize=11, markeredgewidth=2.5, zorder=5)
            elif p.status == "invalid":
                # Off the line, hollow, labelled: the number is not a result.
                y_eff = p.efficiency if p.efficiency is not None else MAX_VALID_EFFICIENCY
                targets = [(ax_eff, y_eff)]
                if p.images_per_sec is not None:
                    targets.append((ax_ips, p.images_per_sec))
                for ax, y in targets:
                    ax.plot([p.ranks], [y], linestyle="none", marker=marker, markersize=9,
                            markerfacecolor="none", markeredgecolor=colour,
                            markeredgewidth=1.5, zorder=5)
                    ax.annotate("invalid", (p.ranks, y), textcoords="offset points",
                                xytext=(6, 4), fontsize=8, color=colour)
    all_ranks = sorted({p.ranks for pts in series.values() for p in pts})
    for ax in (ax_ips, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(all_ranks, [str(r) for r in all_ranks])
        ax.set_xlabel("ranks")
        ax.margins(x=0.1)  # room for the "invalid" labels at the edges
        ax.grid(True, alpha=0.3)
    ax_ips.set_ylabel("images/s (all ranks)")
    ax_ips.set_title("MNIST training throughput")
    ax_ips.legend(fontsize=7, loc="best")
    ax_eff.axhline(88.0, color="grey", linestyle="--", linewidth=1, label="Horovod ~88%")
    ax_eff.axhline(MAX_VALID_EFFICIENCY, color="grey", linestyle=":", linewidth=1,
                   label=f"> {MAX_VALID_EFFICIENCY:.0f}% (+ noise): invalid")
    handles, labels = ax_eff.get_legend_handles_labels()
    if "fail" in statuses:
        handles.append(Line2D([], [], linestyle="none", marker="x", color="red",
                              markeredgewidth=2.5))
        labels.append("failed")
    if "invalid" in statuses:
        handles.append(Line2D([], [], linestyle="none", marker="o", markerfacecolor="none",
                              markeredgecolor="black"))
        labels.append("invalid measurement")
    ax_eff.set_ylabel("scaling efficiency (%)")
    ax_eff.set_ylim(0, max([120.0] + [e * 1.1 for e in effs_seen]))
    ax_eff.set_title("Efficiency vs the 1-rank baseline")
    ax_eff.legend(handles, labels, fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


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
    parser.add_argument("--planes-plot", help="PNG of the data-plane check's busbw per size "
                        "(planes_report.py; JSON reports only)")
    parser.add_argument("--title", default="hvdcore ReFrame validation")
    parser.add_argument("--fail-on-failure", action="store_true",
                        help="exit 1 when a test case failed or a performance value is "
                             "invalid (efficiency above its bound)")
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
    if not args.perflogs:  # the data-plane check's per-size tables (its job output)
        import planes_report

        planes = planes_report.load_rows(source)
        text += planes_report.markdown(planes)
        if args.planes_plot and planes_report.plot(planes, args.planes_plot):
            print(f"report.py: wrote {args.planes_plot}", file=sys.stderr)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        Path(args.output).write_text(text)
    if args.plot:
        if plot_scaling(cases, args.plot):
            print(f"report.py: wrote {args.plot}", file=sys.stderr)
        else:
            print("report.py: no MNIST cases: no scaling plot", file=sys.stderr)
    failed = any(c.result not in ("pass", "skip") for c in cases)
    invalid = any(perf_verdict(c, pv) == "**invalid**" for c, pv in _perf_rows(cases))
    return 1 if args.fail_on_failure and (failed or invalid) else 0


if __name__ == "__main__":
    sys.exit(main())
