"""Record a system's performance references from a known-good ReFrame run.

Run the suite once on a quiet, healthy machine, keep its JSON report, and record::

    reframe -C checks/config/<site>.py -c checks/ -r --report-file good.json
    python checks/tools/record_references.py --report good.json
    python checks/tools/record_references.py --report n1.json --report n2.json --tolerance 0.2

It writes ``checks/config/references/<system>.json`` for every system in the report(s)::

    {"<partition>": {"<key>": {"<variable>": [reference, lower, upper, "unit"]}}}

and prints a table of what it recorded. The site configs load a partition's part into its
``extras["references"]`` (``config/common.py``, ``recorded_references``), where the checks find
it; commit the file with the config.

What is recorded
    Only test cases that passed, and only absolute variables (``busbw``, ``latency``,
    ``images_per_sec``, ``images_per_sec_per_rank``, ``efficiency``): ratios to a peer measured
    in the same job (``*_ratio``) are machine-independent and the checks carry their references
    (``--include-ratios`` records them too, for a site that wants its own). An efficiency above
    105 % is never recorded, even where the run's timing noise made the check accept it: a
    reference is taken from a run that needs no allowance for noise. ``efficiency`` is recorded
    without bounds: the checks show it beside the value and never judge it (its 1-rank
    baseline is an earlier job).
Keys
    ``<CheckClassName>[@scale=<scale>][@framework=<framework>]`` from the test's display name
    (``%scale=``; ``%framework=`` or ``%baseline.framework=``), e.g.
    ``HvdcoreMnistCheck@scale=1_node@framework=torch``, ``MnistBaseline@framework=torch``,
    ``HvdcoreCollectivesCheck`` (``hvdcore_checks/references.py``: ``reference_key``).
Bounds
    Relative, on the bad side only: ``lower = -tolerance`` for higher-is-better variables,
    ``upper = +tolerance`` for lower-is-better ones (``latency``, ``latency_ratio``, and any
    ``--lower-is-better VAR``); the other side is unbounded (``null``). A lower threshold is
    at most ``-1`` (ReFrame's limit).
Several values for one key
    (several ``--report`` files, environments or hvdcore modules of one partition): the
    reference is their median, and the tolerance widens where needed so that every value
    given would have passed; the table says so.
``--merge``
    keeps what the file already holds and this run did not record (other partitions, and other
    checks of a recorded partition); without it the file holds only this run's partitions.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from report import MAX_VALID_EFFICIENCY, Case, load_report


def _load_references() -> ModuleType:
    # By path: the hvdcore_checks package itself imports ReFrame, this module does not.
    path = Path(__file__).resolve().parent.parent / "hvdcore_checks" / "references.py"
    spec = importlib.util.spec_from_file_location("_hvdcore_references", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


references = _load_references()

__all__ = ["Recorded", "collect", "record", "by_system", "merge", "dumps", "write", "table",
           "main"]


@dataclass
class Recorded:
    """One recorded reference: ``[value, lower, upper, unit]`` of ``var`` for ``key``."""

    system: str
    partition: str
    key: str
    var: str
    value: float
    lower: float | None
    upper: float | None
    unit: str
    observed: list[float] = field(default_factory=list)
    widened_from: float | None = None  # the tolerance asked for, when the spread needed more

    def entry(self) -> list[float | str | None]:
        return [self.value, self.lower, self.upper, self.unit]


Observations = dict[tuple[str, str, str, str], tuple[list[float], str]]


def collect(cases: Iterable[Case], include_ratios: bool = False) -> tuple[Observations, list[str]]:
    """The values of passing test cases per (system, partition, key, variable), and notes on
    what was left out."""
    obs: Observations = {}
    notes: list[str] = []
    for case in cases:
        if case.result != "pass":
            continue
        key = references.key_of_test(case.name)
        for pv in case.perfvars:
            if pv.value is None:
                continue
            if pv.name.endswith("_ratio") and not include_ratios:
                continue
            if pv.name == "efficiency" and pv.value > MAX_VALID_EFFICIENCY:
                notes.append(f"{case.system}:{case.partition} {key} efficiency {pv.value:.1f}% "
                             f"> {MAX_VALID_EFFICIENCY:.0f}%: invalid measurement, not recorded")
                continue
            values, _ = obs.setdefault((case.system, case.partition, key, pv.name), ([], pv.unit))
            values.append(pv.value)
    return obs, notes


def _sig(value: float, digits: int = 6) -> float:
    return float(f"{value:.{digits}g}")


def _ceil_hundredth(value: float) -> float:
    return math.ceil(value * 100 - 1e-9) / 100


def record(obs: Observations, tolerance: float = 0.3,
           lower_is_better: Iterable[str] = references.LOWER_IS_BETTER
           ) -> tuple[list[Recorded], list[str]]:
    """References (median) with bad-side bounds that cover every observed value."""
    smaller_better = set(lower_is_better)
    out: list[Recorded] = []
    notes: list[str] = []
    for (system, part, key, var), (values, unit) in sorted(obs.items()):
        ref = _sig(statistics.median(values))
        if ref <= 0:
            notes.append(f"{system}:{part} {key} {var}: median {ref} <= 0, no relative bound: "
                         "not recorded")
            continue
        if var in smaller_better:
            needed = (max(values) - ref) / ref
        else:
            needed = (ref - min(values)) / ref
        tol = max(tolerance, _ceil_hundredth(needed))
        rec = Recorded(system, part, key, var, ref, None, None, unit, sorted(values),
                       tolerance if tol > tolerance else None)
        if var in references.INFORMATION_ONLY:
            rec.widened_from = None  # no bounds: the checks show it, never judge it
        elif var in smaller_better:
            rec.upper = tol
        else:
            rec.lower = -min(tol, 1.0)
        out.append(rec)
    return out, notes


def by_system(recorded: Iterable[Recorded]) -> dict[str, dict]:
    """``{system: {partition: {key: {var: [ref, lower, upper, unit]}}}}``."""
    out: dict[str, dict] = {}
    for rec in recorded:
        part = out.setdefault(rec.system, {}).setdefault(rec.partition, {})
        part.setdefault(rec.key, {})[rec.var] = rec.entry()
    return out


def merge(old: dict, new: dict) -> dict:
    """``new`` over ``old``: a key recorded now replaces the old one; the rest is kept."""
    out = {part: dict(keys) for part, keys in old.items()}
    for part, keys in new.items():
        out.setdefault(part, {}).update(keys)
    return out


def dumps(data: dict) -> str:
    """The file's JSON: sorted, one line per variable (reviewable diffs)."""
    parts = []
    for part, keys in sorted(data.items()):
        entries = []
        for key, variables in sorted(keys.items()):
            lines = [f"      {json.dumps(var)}: {json.dumps(ref)}"
                     for var, ref in sorted(variables.items())]
            entries.append(f"    {json.dumps(key)}: {{\n" + ",\n".join(lines) + "\n    }")
        parts.append(f"  {json.dumps(part)}: {{\n" + ",\n".join(entries) + "\n  }")
    return "{\n" + ",\n".join(parts) + "\n}\n" if parts else "{}\n"


def write(system: str, data: dict, directory: str | os.PathLike[str]) -> Path:
    """Write ``<directory>/<system>.json``."""
    path = Path(directory) / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(data))
    return path


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _bounds(rec: Recorded) -> str:
    if rec.lower is not None:
        return f">= {_fmt(rec.value * (1 + rec.lower))} ({rec.lower * 100:+.0f}%)"
    if rec.upper is not None:
        return f"<= {_fmt(rec.value * (1 + rec.upper))} ({rec.upper * 100:+.0f}%)"
    if rec.var in references.INFORMATION_ONLY:
        return "none: information, never judged"
    return "unbounded"


def table(recorded: Sequence[Recorded]) -> str:
    """A plain-text table of the recorded references."""
    head = ("partition", "key", "variable", "reference", "unit", "bounds", "values", "note")
    rows = []
    for rec in recorded:
        if len(rec.observed) > 1:
            seen = f"{len(rec.observed)}: {_fmt(rec.observed[0])}..{_fmt(rec.observed[-1])}"
        else:
            seen = "1"
        note = (f"tolerance widened from {rec.widened_from:.2f} to cover the spread"
                if rec.widened_from is not None else "")
        rows.append((f"{rec.system}:{rec.partition}", rec.key, rec.var, _fmt(rec.value),
                     rec.unit, _bounds(rec), seen, note))
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [head, tuple("-" * w for w in widths), *rows]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line entry: 0 when references were written, 2 when there was nothing to record."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--report", action="append", required=True, metavar="FILE",
                        help="ReFrame JSON report of a known-good run (reframe --report-file); "
                             "repeat it to record the median of several runs")
    parser.add_argument("--tolerance", type=float, default=0.3,
                        help="relative bound on the bad side of each reference (default 0.3: "
                             "30%% below for higher-is-better, above for lower-is-better)")
    parser.add_argument("--include-ratios", action="store_true",
                        help="also record *_ratio variables (the checks own their references)")
    parser.add_argument("--lower-is-better", action="append", default=[], metavar="VAR",
                        help="another variable where smaller is better (besides "
                             f"{', '.join(sorted(references.LOWER_IS_BETTER))})")
    parser.add_argument("--merge", action="store_true",
                        help="keep the entries the file has that this run did not record "
                             "(other partitions, other checks)")
    parser.add_argument("--output-dir", default=str(references.REFERENCES_DIR), metavar="DIR",
                        help="where <system>.json goes (default: checks/config/references)")
    parser.add_argument("--dry-run", action="store_true", help="print the table, write nothing")
    args = parser.parse_args(argv)
    if not args.tolerance > 0:
        parser.error(f"--tolerance must be > 0, got {args.tolerance}")

    cases: list[Case] = []
    for path in args.report:
        try:
            cases.extend(load_report(path))
        except (OSError, ValueError) as exc:
            parser.error(f"cannot read the ReFrame report {path}: {exc}")
    passed = sum(c.result == "pass" for c in cases)
    obs, notes = collect(cases, args.include_ratios)
    recorded, more = record(obs, args.tolerance,
                            references.LOWER_IS_BETTER | set(args.lower_is_better))
    notes += more
    print(f"record_references: {len(args.report)} report(s), {len(cases)} test cases, "
          f"{passed} passed (only those are recorded), tolerance {args.tolerance:.2f} on the "
          "bad side" + ("" if args.include_ratios else "; *_ratio variables left to the checks"))
    for note in notes:
        print(f"note: {note}")
    if not recorded:
        print("record_references: nothing to record (no passing test case with performance "
              "values)", file=sys.stderr)
        return 2
    sys.stdout.write(table(recorded))
    for system, data in sorted(by_system(recorded).items()):
        old = references.load_recorded(system, args.output_dir)
        kept = sorted(set(old) - set(data)) if args.merge else []
        if args.merge:
            data = merge(old, data)
        path = Path(args.output_dir) / f"{system}.json"
        if args.dry_run:
            print(f"would write {path} (--dry-run)")
            continue
        write(system, data, args.output_dir)
        dropped = sorted(set(old) - set(data))
        print(f"wrote {path}: partitions {', '.join(sorted(data))}"
              + (f"; kept {', '.join(kept)} (--merge)" if kept else "")
              + (f"; dropped {', '.join(dropped)} that the file had (--merge keeps them)"
                 if dropped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
