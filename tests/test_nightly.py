"""The nightly entry point (checks/nightly.sh): nights kept, verdicts against the site's own
history from ReFrame's results storage, JUnit, and the trend page rendered in Chromium.

The multi-night test runs the real suite's collectives check through the real entry point four
times into one results directory, on each ReFrame of the matrix: the newest (the project's venv)
and EESSI 2025.06's 4.7.4 (``reframe_helpers.REFRAME_MATRIX``: a fresh venv whose ReFrame is
4.7.4 and whose other packages are the project venv's, ``reframe_matrix_venv``). Nights 1-3 build
the history; night 4 runs with a real degradation (``FAULTS_DATA_PATH=delay_us=60``: 60 us of
real sleep before every data collective, which slows the 1-element allreduce ~2-3x and leaves
the 8 MiB one within 2 %) and is judged by them. That a regressed night stays out of the history
of the nights after it is ``history.judge_nights``' rule, tested on its own below.

History judges the in-job ratios only (``--judge '*_ratio'``): on this 2-core VM the absolute
figures of a clean run swing 2-3x from one run to the next (busbw 0.71-1.95 GB/s, latency
20-42 us in five consecutive runs, 2026-12-01), while the ratios to raw mpi4py measured in the
same job stay within ~15 % (busbw) and ~±25 % (latency: 2.6-4.0 in consecutive clean runs), so
the band's minimum half-width is 40 % here (``--min-band 0.4``); the degradation takes
latency_ratio to 15-30x. That holds on a quiet machine (``quiet``: scripts/test.sh runs this
alone): under a load of 10-17 from other jobs on the 2 cores, raw latency rose to 350-800 us and
the 60 us delay no longer showed (a degraded night measured 1.9x, a confirmation 2.7x;
2026-12-03).
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import history
import pytest
from reframe_helpers import CHECKS, REFRAME_MATRIX, reframe_env, reframe_matrix_venv
from report import Case, PerfVar

NIGHTLY = CHECKS / "nightly.sh"
SHORT = ["-n", "HvdcoreCollectivesCheck", "-S", "sizes=1,1000", "-S", "reps=10",
         "-S", "latency_reps=300"]
DEGRADED = {"FAULTS_DATA_PATH": "delay_us=60"}
#: The collectives check's own ratio bounds lifted for local:default (a recorded references file
#: through CHECKS_REFERENCES_DIR: the ratios are reported, never judged by ReFrame), so that
#: history alone judges: the check's ceiling on latency_ratio (9.6) failed clean nights of this
#: test at a load of 10-23 on the 2-core VM (10.1, 10.3, 13.6, 21.5; 2026-12-03), which is not
#: what it is about. The degraded night fails by history's verdict alone.
UNBOUNDED_RATIOS = {"default": {"HvdcoreCollectivesCheck": {
    "busbw_ratio": [0.9, None, None, "x"], "latency_ratio": [5.5, None, None, "x"]}}}
NIGHTS = 4
DEGRADED_NIGHTS = {4}
#: The ReFrame releases the nights run on: the project venv's (the newest), then the matrix's.
NEWEST = "newest"


def _case(value: float, var: str = "busbw_ratio", result: str = "pass",
          reason: str = "") -> Case:
    return Case("HvdcoreCollectivesCheck %hvdcore_module=env", "local", "default", "venv",
                result, fail_reason=reason, perfvars=[PerfVar(var, value, "x")])


def _nights(values: list[float], var: str = "busbw_ratio") -> list[history.Night]:
    return [history.Night(str(i), float(i), {history.NIGHT_EXTRA: f"n{i}"}, [_case(v, var)])
            for i, v in enumerate(values)]


def test_band_is_median_and_robust_spread_with_a_minimum_width() -> None:
    b = history.band([1.0, 1.0, 1.0, 1.0], sigmas=4, min_band=0.2)
    assert (b.centre, b.low, b.high) == (1.0, 0.8, 1.2)  # no spread: the minimum width
    b = history.band([10.0, 12.0, 8.0, 10.0, 30.0], sigmas=4, min_band=0.01)
    assert b.centre == 10.0 and b.spread == pytest.approx(1.4826 * 2.0)  # the 30 is ignored
    assert b.high == pytest.approx(10.0 + 4 * 1.4826 * 2.0)


def test_band_of_non_negative_figures_stays_above_zero() -> None:
    """A noisy bandwidth history (this VM: 0.1-2.9 GB/s) gets a band from 0, never below."""
    b = history.band([1.2, 0.1, 2.9, 1.1], sigmas=4, min_band=0.2)
    assert b.low == 0.0 and b.high > 2.9
    b = history.band([-1.0, 1.0, 0.5], sigmas=4, min_band=0.2)  # signed figures keep theirs
    assert b.low < 0


def test_direction_of_a_regression_follows_the_variable() -> None:
    b = history.band([1.0] * 5, min_band=0.2)
    assert history.classify(0.7, b, lower_is_better=False) == "regression"
    assert history.classify(0.7, b, lower_is_better=True) == "improvement"
    assert history.classify(1.1, b, lower_is_better=False) == "pass"


def test_history_judges_after_min_nights_and_a_regression_never_joins_it() -> None:
    verdicts = history.judge_nights(_nights([1.0, 1.02, 0.98, 1.0, 0.5, 0.5, 1.01]),
                                    min_nights=3)
    got = [v[0].verdict for v in verdicts]
    assert got == ["no history"] * 3 + ["pass", "regression", "regression", "pass"]
    assert verdicts[6][0].band is not None and verdicts[6][0].band.nights == 4
    assert verdicts[4][0].change == pytest.approx(-0.5)


def test_unconfirmed_regression_is_not_a_failure() -> None:
    nights = _nights([1.0, 1.0, 1.0, 0.5])
    nights[-1].confirm = [_case(0.99)]
    last = history.judge_nights(nights)[-1][0]
    assert last.verdict == "unconfirmed" and last.confirm_value == 0.99
    nights[-1].confirm = [_case(0.6)]
    assert history.judge_nights(nights)[-1][0].verdict == "regression"


def test_efficiency_is_information_and_invalid_is_not_judged() -> None:
    eff = history.judge_nights(_nights([90.0, 91.0, 89.0, 40.0], "efficiency"))
    assert {v[0].verdict for v in eff} == {"information"}
    nights = _nights([1.0, 1.0, 1.0])
    nights.append(history.Night("x", 9.0, {}, [_case(0.2, result="fail",
                                                     reason="invalid measurement: ...")]))
    assert history.judge_nights(nights)[-1][0].verdict == "invalid"


def test_variables_outside_judge_are_information() -> None:
    v = history.judge_nights(_nights([1.0, 1.0, 1.0, 0.1], "busbw"), judge=["*_ratio"])[-1][0]
    assert v.verdict == "information" and "--judge" in v.rule


def test_a_check_file_reframe_could_not_load_is_reported(tmp_path: Path, capsys) -> None:
    """ReFrame's warning for a check file it skipped (as 4.7.4 printed it for a file whose
    import failed) is collected and logged; the other lines are logged as before."""
    import nightly

    warning = ("WARNING: skipping test file '/x/checks/hvdcore_mnist.py': module not found "
               "error: hvdcore_mnist.py:61: No module named 'nope'")
    lines = ["[ReFrame Setup]", warning, "[       OK ] (1/1) HvdcoreCollectivesCheck @local",
             "P: busbw_ratio: 1.01 x (r:0.9, l:-0.35, u:None)"]
    skipped: list[str] = []
    rc = nightly.run_reframe(["printf", "%s\\n", *lines], {"PATH": "/usr/bin:/bin"}, tmp_path,
                             tmp_path / "out", skipped)
    assert rc == 0 and skipped == [warning.removeprefix("WARNING: ")]
    assert "PASS  (1/1) HvdcoreCollectivesCheck @local  busbw_ratio=1.01 x" in capsys.readouterr().out


_RUNS: dict[str, dict] = {}


def _run_nights(reframe: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Four real nights into one results directory on ReFrame ``reframe``; night 4 degraded."""
    if reframe in _RUNS:
        return _RUNS[reframe]
    base = tmp_path_factory.mktemp(f"nightly-{reframe}")
    venv = {} if reframe == NEWEST else {"VENV": str(reframe_matrix_venv(reframe, base / "venv"))}
    results = base / "results"
    refs = base / "references"
    refs.mkdir()
    (refs / "local.json").write_text(json.dumps(UNBOUNDED_RATIOS))
    venv["CHECKS_REFERENCES_DIR"] = str(refs)
    runs = []
    for n in range(1, NIGHTS + 1):
        env = reframe_env({**venv, **(DEGRADED if n in DEGRADED_NIGHTS else {})})
        res = subprocess.run([str(NIGHTLY), "--results", str(results), "--judge", "*_ratio",
                              "--min-band", "0.4", "--", *SHORT], env=env, capture_output=True, text=True,
                             timeout=600, check=False)
        runs.append(res)
    _RUNS[reframe] = {"results": results, "runs": runs, "reframe": reframe}
    return _RUNS[reframe]


@pytest.fixture(scope="module", params=[NEWEST, *REFRAME_MATRIX])
def nights_run(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The nights on each ReFrame of the matrix."""
    return _run_nights(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def newest_nights(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The nights on the newest ReFrame (the trend page does not depend on the release)."""
    return _run_nights(NEWEST, tmp_path_factory)


def _night_dirs(results: Path) -> list[Path]:
    return sorted((results / "nights").iterdir())


def _history_failures(junit: Path) -> set[str]:
    root = ET.parse(junit).getroot()
    suite = next(s for s in root.iter("testsuite") if s.get("name") == "hvdcore-history")
    return {tc.get("name", "").rsplit(" ", 1)[-1] for tc in suite.iter("testcase")
            if tc.find("failure") is not None}


@pytest.mark.reframe
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.quiet
def test_history_flags_exactly_the_degraded_nights_and_variables(nights_run: dict) -> None:
    results, runs = nights_run["results"], nights_run["runs"]
    for n, res in enumerate(runs, 1):
        out = res.stdout + res.stderr
        want = 1 if n in DEGRADED_NIGHTS else 0
        assert res.returncode == want, f"night {n}:\n{out[-3000:]}"
        assert "PASS  (1/1) HvdcoreCollectivesCheck" in out or n in DEGRADED_NIGHTS, out
    dirs = _night_dirs(results)
    assert len(dirs) == NIGHTS, dirs  # every night kept
    for n, night in enumerate(dirs, 1):
        for name in ("report.json", "reframe-junit.xml", "junit.xml", "summary.md",
                     "reframe.out"):
            assert (night / name).is_file(), f"night {n}: {name} missing"
        rfm_out = (night / "reframe.out").read_text()
        if nights_run["reframe"] != NEWEST:  # the release asked for ran the night
            assert re.search(rf"^  version: +{re.escape(nights_run['reframe'])}$", rfm_out,
                             re.M), rfm_out[:2000]
        # every check file loaded (a file ReFrame cannot load is skipped with this warning,
        # and the night would run a subset of the suite)
        assert "skipping test" not in rfm_out, rfm_out[:3000]
        flagged = _history_failures(night / "junit.xml")
        assert flagged == ({"latency_ratio"} if n in DEGRADED_NIGHTS else set()), \
            f"night {n}: {flagged}\n{(night / 'summary.md').read_text()}"
        summary = (night / "summary.md").read_text()
        assert "## Against history" in summary and "Judged by" in summary
        if n in DEGRADED_NIGHTS:
            assert (night / "confirm" / "report.json").is_file()  # the regression ran again
            assert "**regression**" in summary and "confirmed by a second run" in summary
            assert "REGRESSION HvdcoreCollectivesCheck" in runs[n - 1].stdout
    # night 4 is judged by nights 1-3
    assert re.search(r"latency_ratio .*\*\*regression\*\* \| history \(3 nights\)",
                     (dirs[3] / "summary.md").read_text()), (dirs[3] / "summary.md").read_text()
    conn = sqlite3.connect(results / "results.db")
    infos = [json.loads(b)["session_info"]
             for (b,) in conn.execute("SELECT json_blob FROM sessions")]
    conn.close()
    main = [i for i in infos if i.get(history.ROLE_EXTRA) != "confirm"]
    assert len(main) == NIGHTS and len(infos) == NIGHTS + len(DEGRADED_NIGHTS)
    assert all(i.get("hvdcore_version") and i.get("hvdcore_commit") and i.get("hvdcore_module")
               for i in infos)
    page = (results / "trend.html").read_text()
    for night in dirs:
        assert f"<td>{night.name}</td>" in page and f"nights/{night.name}/summary.md" in page
    assert (results / "latest").resolve() == dirs[-1].resolve()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


@pytest.mark.reframe
@pytest.mark.mpi
@pytest.mark.slow
@pytest.mark.quiet
def test_trend_page_renders_in_chromium(newest_nights: dict, tmp_path: Path) -> None:
    """The page as a person sees it: Chromium's rendered DOM has a plot per variable with its
    points and bands, tonight's table, and a screenshot is drawn."""
    chromium = _chromium()
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (ci/apt/reframe.txt installs it)")
    page = newest_nights["results"] / "trend.html"
    flags = [*CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert dom.count("<figure") == 4, dom[:2000]  # busbw, latency and their two ratios
    assert dom.count('class="band"') >= 4 * (NIGHTS - 3)
    assert dom.count('class="pt-regression"') == len(DEGRADED_NIGHTS)
    assert "<h2>Tonight: " in dom and "<th>Judged by</th>" in dom
    shot = tmp_path / "trend.png"
    subprocess.run([chromium, *flags, f"--screenshot={shot}", "--window-size=1280,2400",
                    page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000
