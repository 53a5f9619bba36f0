"""The data-plane check (checks/hvdcore_planes.py) through ReFrame on the local config: five
collectives of torch tensors on the Gloo plane and the host plane against raw torch.distributed
and raw mpi4py, every size correct, the per-size table and plot in run_suite.sh's summary and
on the trend page (rendered by Chromium); and ``FAULTS_DATA_PATH=delay_us=200000,op=alltoall,
plane=device`` (200 ms of real sleep before every alltoall on the device plane, Gloo here)
failing ``device_alltoall_ratio`` and no other ratio, and ``device_alltoall_link_fraction``.

The link fraction's floor holds at any load: with a declared device link of 1 GB/s, the
slowed 4 MiB alltoall (2 ranks: busbw = 2 MiB / time) cannot exceed 2 MiB / 0.2 s = 0.0105 of
it, under the floor 0.02; clean 4 MiB Gloo collectives read 0.14-1.8 GB/s here at load 2-8
and down to 0.044 at load ~15 but 0.0176 at load 39 (2026-12-03): the test asserts the slowed
one's failure (a bound), not the clean ones' passing. The host plane declares no link: its absolute figures swing ~100x with load
(raw mpi4py's 4 MiB broadcast took 2 ms at load 2 and 130 ms at load 8, 2026-12-03)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from reframe_helpers import ROOT, reframe_env

pytestmark = [pytest.mark.reframe, pytest.mark.mpi, pytest.mark.torch, pytest.mark.slow,
              pytest.mark.quiet]

import planes_report  # noqa: E402

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
FAULT = "delay_us=200000,op=alltoall,plane=device"
#: The device plane declares a 1 GB/s link; the link fractions' floor.
LINK = ["-S", "device_link_GBps=1", "-S", "min_link_fraction=0.02"]


def run_suite(out: Path, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "checks" / "run_suite.sh"), str(out), "-n",
                           "HvdcoreDataPlanesCheck", *LINK],
                          env=reframe_env({"VENV": sys.prefix, **extra_env}),
                          capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def degraded(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("planes") / "suite"
    res = run_suite(out, {"FAULTS_DATA_PATH": FAULT})
    data = json.loads((out / "report.json").read_text())
    case = next(tc for run in data["runs"] for tc in run["testcases"])
    return {"out": out, "res": res, "case": case}


def test_one_degraded_collective_fails_its_ratio_and_nothing_else(degraded: dict) -> None:
    res, case = degraded["res"], degraded["case"]
    text = res.stdout + res.stderr
    assert res.returncode == 1, text[-4000:]
    assert case["fail_phase"] == "performance", case["fail_reason"]
    # the ratios: only the slowed one (the clean link fractions are absolute figures: at load
    # 39 a clean Gloo reducescatter read 0.0176 GB/s, under the floor, 2026-12-03)
    broken = set(re.findall(r"(\w+_ratio)=", case["fail_reason"]))
    assert broken == {"device_alltoall_ratio"}, case["fail_reason"]
    perf = {k.split(":")[-1]: v for k, v in case["perfvalues"].items()}
    assert perf["device_alltoall_ratio"][0] < 0.4  # (the floor, min_ratio)


def test_a_slowed_collective_breaks_its_link_fraction(degraded: dict) -> None:
    """busbw / the declared link rate, per plane and collective; the slowed one under the
    floor (a bound, not a timing: see the module doc), the fraction of hvdcore's busbw."""
    case = degraded["case"]
    perf = {k.split(":")[-1]: v for k, v in case["perfvalues"].items()}
    assert set(perf) == {f"{p}_{op}_{v}" for p in ("device", "host") for op in OPS
                         for v in ("ratio", "busbw")} | {f"device_{op}_link_fraction"
                                                        for op in OPS}  # no host link declared
    for op in OPS:
        assert perf[f"device_{op}_link_fraction"][0] == pytest.approx(
            perf[f"device_{op}_busbw"][0], rel=1e-5)  # a link of 1 GB/s
        assert perf[f"device_{op}_link_fraction"][2] == pytest.approx(-0.98)  # floor 0.02
    assert perf["device_alltoall_link_fraction"][0] < 0.0106
    assert "device_alltoall_link_fraction=" in case["fail_reason"], case["fail_reason"]
    rows = next(iter(planes_report.load_rows(degraded["out"] / "report.json").values()))
    top = next(r for r in rows if r["plane"] == "device" and r["op"] == "alltoall"
               and r["bytes"] == 4 << 20)
    assert perf["device_alltoall_busbw"][0] == pytest.approx(top["busbw"])  # hvdcore's


def test_every_size_correct_and_tabled(degraded: dict) -> None:
    rows = planes_report.load_rows(degraded["out"] / "report.json")
    (only,) = rows.values()
    assert len(only) == 2 * 5 * 11  # 2 planes x 5 collectives x 8 B, 32 B, ... 2 MiB, 4 MiB
    assert all(r["wrong"] == 0 for r in only)
    assert {r["raw"] for r in only if r["plane"] == "host"} == {"mpi4py"}
    assert "torch.distributed" in {r["raw"] for r in only if r["plane"] == "device"}
    summary = (degraded["out"] / "summary.md").read_text()
    assert "### device plane (2 ranks" in summary and "### host plane (2 ranks" in summary
    assert "| **ratio at 4 MiB** |" in summary
    png = degraded["out"] / "planes.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_trend_page_section_renders_in_chromium(degraded: dict, tmp_path: Path) -> None:
    """The trend page's data-plane section (tables and inline SVG plots) as Chromium draws it:
    per plane a table of every size and a plot with 5 collectives x (hvdcore, raw)."""
    from chromium_pages import Browser, find_chromium

    exe = find_chromium()
    if exe is None:
        pytest.skip("Debian's chromium is not installed (ci/apt/reframe.txt installs it)")
    import history
    import trend

    rows = planes_report.load_rows(degraded["out"] / "report.json")
    page = tmp_path / "trend.html"
    tonight = history.Night("n1", 0.0, {history.NIGHT_EXTRA: "n1"}, [])
    page.write_text(trend.render_page([tonight], [[]], tmp_path, "", rows))
    with Browser(exe) as browser:
        browser.open(page.as_uri())
        got = browser.evaluate("""(() => ({
          tables: document.querySelectorAll('table.planes').length,
          rows: Array.from(document.querySelectorAll('table.planes'), t => t.rows.length),
          plots: Array.from(document.querySelectorAll('figure.planes-plot svg'),
                            s => [s.querySelectorAll('polyline.series').length,
                                  s.getBoundingClientRect().width]),
        }))()""")
        browser.screenshot(tmp_path / "planes.png")
    assert got["tables"] == 2 and got["rows"] == [1 + 11 + 1] * 2, got  # head, sizes, ratio
    assert got["plots"] == [[10, 640]] * 2, got
    assert (tmp_path / "planes.png").stat().st_size > 20_000


def test_faults_data_path_names_a_collective_and_a_plane() -> None:
    from hvdcore import errors
    from hvdcore.backends import degraded

    fault = degraded.parse("scale=2,op=reducescatter,plane=device")
    assert (fault.op, fault.plane) == ("reducescatter", "device")
    assert fault.slows("reduce_scatter") and not fault.slows("allreduce")
    assert degraded.parse("delay_us=1").slows("alltoallv")  # no op=: every collective
    for bad in ("op=allreduce2", "plane=gpu", "repeat=2,plane=device"):
        with pytest.raises(errors.ConfigError, match="FAULTS_DATA_PATH"):
            degraded.parse(bad)
    host = SimpleNamespace(name="mpi")  # (only its identity matters here)
    assert degraded.wrap_from_env(host, {"FAULTS_DATA_PATH": "delay_us=1,plane=device"}, 0) \
        is host
    assert degraded.wrap_from_env(host, {"FAULTS_DATA_PATH": "delay_us=1,plane=device"}, 0,
                                  "device") is not host
