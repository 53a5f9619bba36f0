"""Tonight's performance against the site's own history, read from ReFrame's results storage.

Each night of ``checks/tools/nightly.py`` is one ReFrame session stored in the results
directory's database (``RFM_ENABLE_RESULTS_STORAGE=1``, ``RFM_SQLITE_DB_FILE``). This module
reads those sessions back (:func:`load_nights`: the JSON report ReFrame stores with each
session, through the same parser as ``report.py``) and judges every performance variable of
every test case against the same variable of the same case (system, partition, environment,
check with its parameters) over its last ``window`` *good* nights:

* centre: the median of those nights' values; spread: 1.4826 x their median absolute deviation
  (the standard deviation of normally distributed values, robust to an odd night);
* band: centre +/- max(``sigmas`` x spread, ``min_band`` x |centre|), the minimum width keeping a
  very steady history from alarming on noise;
* a value on the bad side of the band (below it, or above it for ``latency``-like variables) is
  a ``regression``; on the good side an ``improvement`` (offered to ``record_references.py``).
  When the night ran the regressed checks a second time (``nightly.py``'s confirmation run), a
  regression stands only if the second value is out of the band too; otherwise it is
  ``unconfirmed`` (reported, not a failure, and left out of the history).

A night is good for a variable when its case passed and the history did not call the value a
regression, so a regression never widens the band that judges the next night. With fewer than
``min_nights`` good nights the history does not judge: the recorded references and the checks'
ratio bounds judge alone (``rule`` says which rule judged each value). ``efficiency`` compares a
job with a baseline measured in an *earlier* job, so what changed between the two jobs reads
as a change of hvdcore: it is plotted and reported as information, never a verdict.

    >>> b = band([10.0, 10.2, 9.8, 10.1], sigmas=4.0, min_band=0.1)
    >>> round(b.low, 3), round(b.high, 3)
    (9.045, 11.055)
    >>> classify(8.0, b, lower_is_better=False)
    'regression'
    >>> band([1.2, 0.1, 2.9], sigmas=4.0, min_band=0.2).low  # a noisy rate: never below zero
    0.0
"""

from __future__ import annotations

import fnmatch
import json
import os
import sqlite3
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from report import Case, cases_from_report

__all__ = [
    "DEFAULT_MIN_BAND",
    "DEFAULT_MIN_NIGHTS",
    "DEFAULT_SIGMAS",
    "DEFAULT_WINDOW",
    "INFORMATION_ONLY",
    "LOWER_IS_BETTER",
    "Band",
    "Night",
    "Verdict",
    "band",
    "classify",
    "judge_nights",
    "load_nights",
    "series_key",
]

#: Good nights a band is built from (the newest ones).
DEFAULT_WINDOW = 10
#: Good nights needed before the history judges a variable.
DEFAULT_MIN_NIGHTS = 3
#: Robust standard deviations from the centre to the band's edge.
DEFAULT_SIGMAS = 4.0
#: Smallest half-width of the band, relative to the centre.
DEFAULT_MIN_BAND = 0.2
#: Variables where a smaller value is better (as ``hvdcore_checks/references.py``).
LOWER_IS_BETTER = frozenset({"latency", "latency_ratio"})
#: Variables measured against an earlier job: reported and plotted, never judged.
INFORMATION_ONLY = frozenset({"efficiency"})
#: ReFrame session extra naming the night (the night directory's name).
NIGHT_EXTRA = "hvdcore_night"
#: ReFrame session extra of a night's second session: ``confirm`` (the regressed checks again).
ROLE_EXTRA = "hvdcore_role"


@dataclass
class Night:
    """One stored ReFrame session: a night of the nightly job."""

    uuid: str
    start: float
    info: dict[str, Any]
    cases: list[Case]
    #: The cases of the night's confirmation run (the regressed checks run again), if any.
    confirm: list[Case] = field(default_factory=list)

    @property
    def label(self) -> str:
        """The night's name: its directory (session extra), else ReFrame's start time."""
        return str(self.info.get(NIGHT_EXTRA) or self.info.get("time_start") or self.uuid[:8])


@dataclass(frozen=True)
class Band:
    """The band of a variable's good nights."""

    centre: float
    low: float
    high: float
    spread: float
    nights: int


@dataclass
class Verdict:
    """One performance variable of one case on one night, judged against its history."""

    series: str
    case: str
    sysenv: str
    var: str
    unit: str
    value: float | None
    #: regression, improvement, pass, information, invalid, failed, no value, no history
    verdict: str
    rule: str
    band: Band | None = None
    #: ReFrame's own verdict of the variable (its reference bounds), when it judged it.
    reframe: str | None = None
    case_result: str = ""
    #: The value of the night's confirmation run (None: not run again).
    confirm_value: float | None = None

    @property
    def change(self) -> float | None:
        """Relative change against the history's centre (None: no band or no value)."""
        if self.band is None or self.value is None or self.band.centre == 0:
            return None
        return self.value / self.band.centre - 1.0

    @property
    def regression(self) -> bool:
        return self.verdict == "regression"


@dataclass
class _Series:
    good: list[float] = field(default_factory=list)


def series_key(case: Case, var: str) -> str:
    """The identity of a variable's series: partition, environment, check with parameters."""
    return f"{case.sysenv} | {case.name} | {var}"


def band(values: Sequence[float], sigmas: float = DEFAULT_SIGMAS,
         min_band: float = DEFAULT_MIN_BAND) -> Band:
    """The band of ``values`` (see the module doc)."""
    if not values:
        raise ValueError("band of no values")
    centre = statistics.median(values)
    spread = 1.4826 * statistics.median(abs(v - centre) for v in values)
    half = max(sigmas * spread, min_band * abs(centre))
    # A history of non-negative figures (every time, rate and ratio measured) never gets a band
    # that reaches below zero: a summary that prints a negative bandwidth reads as a bug.
    low = max(centre - half, 0.0) if min(values) >= 0 else centre - half
    return Band(centre, low, centre + half, spread, len(values))


def classify(value: float, b: Band, lower_is_better: bool) -> str:
    """``regression``, ``improvement`` or ``pass`` of ``value`` against band ``b``."""
    worse, better = (value > b.high, value < b.low) if lower_is_better else \
        (value < b.low, value > b.high)
    return "regression" if worse else "improvement" if better else "pass"


def _reframe_verdict(pv: Any) -> str | None:
    if pv.result in ("pass", "fail"):
        return pv.result
    ok = pv.within()
    return None if ok is None else "pass" if ok else "fail"


def judge_nights(nights: Sequence[Night], window: int = DEFAULT_WINDOW,
                 min_nights: int = DEFAULT_MIN_NIGHTS, sigmas: float = DEFAULT_SIGMAS,
                 min_band: float = DEFAULT_MIN_BAND,
                 judge: Sequence[str] = ("*",)) -> list[list[Verdict]]:
    """The verdicts of every night, oldest first, each against the good nights before it.

    Only variables matching one of the ``judge`` patterns (``fnmatch``: ``*_ratio``) get a
    history verdict; the others are information.
    """
    if window < 1 or min_nights < 1:
        raise ValueError("window and min_nights must be at least 1")
    series: dict[str, _Series] = {}
    out: list[list[Verdict]] = []
    for night in nights:
        verdicts = []
        confirm = {series_key(c, pv.name): pv.value for c in night.confirm
                   if not c.invalid for pv in c.perfvars if pv.value is not None}
        for case in night.cases:
            for pv in case.perfvars:
                key = series_key(case, pv.name)
                hist = series.setdefault(key, _Series())
                good = hist.good[-window:]
                b = band(good, sigmas, min_band) if len(good) >= min_nights else None
                rf = _reframe_verdict(pv)
                v = Verdict(key, case.name, case.sysenv, pv.name, pv.unit, pv.value, "",
                            "", b, rf, case.result)
                if pv.value is None:
                    v.verdict, v.rule = "no value", f"case {case.result}"
                elif case.invalid:
                    v.verdict, v.rule = "invalid", "sanity: invalid measurement"
                elif pv.name in INFORMATION_ONLY:
                    v.verdict = "information"
                    v.rule = "information: measured against an earlier job"
                elif not any(fnmatch.fnmatchcase(pv.name, p) for p in judge):
                    v.verdict = {"pass": "pass", "fail": "failed"}.get(rf or "", "information")
                    v.rule = "reference (not in --judge)" if rf else "information: not in --judge"
                elif b is None:
                    v.verdict = "no history" if rf is None else (
                        "pass" if rf == "pass" else "failed")
                    v.rule = (f"{'reference' if rf else 'none'} ({len(good)} of "
                              f"{min_nights} good nights)")
                else:
                    lower = pv.name in LOWER_IS_BETTER
                    v.verdict = classify(pv.value, b, lower)
                    v.rule = f"history ({b.nights} nights)"
                    again = confirm.get(key)
                    if v.verdict == "regression" and again is not None:
                        v.confirm_value = again
                        if classify(again, b, lower) == "regression":
                            v.rule += ", confirmed by a second run"
                        else:
                            v.verdict = "unconfirmed"
                            v.rule += f", not confirmed: a second run gave {again:.4g}"
                    if rf == "fail" and v.verdict != "regression":
                        v.verdict, v.rule = "failed", f"reference; history ({b.nights} nights)"
                if (pv.value is not None and case.result == "pass"
                        and v.verdict not in ("regression", "unconfirmed", "invalid")):
                    hist.good.append(pv.value)
                verdicts.append(v)
        out.append(verdicts)
    return out


def load_nights(db_file: str | os.PathLike[str]) -> list[Night]:
    """Every session stored in ReFrame's results database, oldest first.

    Reads the ``sessions`` table of ReFrame 4.x's SQLite storage (each row holds the session's
    JSON report), read-only; a missing database is no nights.
    """
    path = Path(db_file)
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
    try:
        rows = conn.execute("SELECT uuid, session_start_unix, json_blob FROM sessions "
                            "ORDER BY session_start_unix").fetchall()
    finally:
        conn.close()
    nights: list[Night] = []
    by_label: dict[str, Night] = {}
    for uuid, start, blob in rows:
        report = json.loads(blob)
        info = dict(report.get("session_info") or {})
        cases = cases_from_report(report)
        label = info.get(NIGHT_EXTRA)
        if info.get(ROLE_EXTRA) == "confirm" and label in by_label:
            by_label[label].confirm.extend(cases)
            continue
        night = Night(uuid, float(start or 0.0), info, cases)
        nights.append(night)
        if label:
            by_label[label] = night
    return nights
