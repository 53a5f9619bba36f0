"""Does the nightly job cry wolf, and does it catch a real slowdown? Nights under a competing load.

Runs ``checks/nightly.sh`` (by default the full nightly set of the local suite: capabilities,
collectives, data planes, torch and Keras MNIST scaling) for ``--nights`` consecutive nights into
one fresh results directory, with bursty load beside it: ``stress-ng --cpu 1`` (``--stress-load``
percent of one core) switched on and off every ``--burst-s`` seconds (SIGSTOP / SIGCONT of its
process group; 0: on the whole time), then ``--degraded`` more nights under the same load with
the data path made really slower (``FAULTS_DATA_PATH``, default ``scale=1.5``: every host-plane
data collective takes 1.5x as long). A clean night that fails is a false alarm; a degraded night
that passes is a miss.

    python benchmarks/nightly_false_alarms.py --results /tmp/nightly-bench        # ~1 h on 2 cores
    python benchmarks/nightly_false_alarms.py --nights 4 --degraded 1 -- -n Collectives
    python benchmarks/nightly_false_alarms.py --nightly-args "--judge *_ratio" -- \
        -n 'HvdcoreCollectivesCheck|HvdcoreDataPlanesCheck'

The table says, per night: its kind, the exit status, the load average when it started, the
failed cases (with the variables ReFrame's bounds broke) and the variables history flagged as
regressions (confirmed by a second run). The last lines: false alarms among the clean nights,
degraded nights caught, and which variables carried each verdict. ``--json FILE`` writes all of
it. Arguments after ``--`` go to the nightly entry point's ReFrame.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NIGHTLY = ROOT / "checks" / "nightly.sh"


def _failures(junit: Path) -> tuple[list[str], list[str]]:
    """(failed ReFrame cases with the variables named, history regressions) of one night."""
    if not junit.exists():
        return ["no junit.xml"], []
    cases, regressions = [], []
    for suite in ET.parse(junit).getroot().iter("testsuite"):
        for tc in suite.iter("testcase"):
            fail = tc.find("failure")
            if fail is None:
                continue
            name = tc.get("name", "")
            if suite.get("name") == "hvdcore-history":
                regressions.append(name.rsplit(" ", 1)[-1])
            else:
                text = fail.text or ""
                broken = sorted(set(re.findall(r"\b(\w+)=[-\d.e+]+ \S*, expected", text)))
                cases.append(f"{name.split()[0]}[{','.join(broken) or fail.get('message', '')}]")
    return cases, sorted(regressions)


class Bursts:
    """Switches a process group on and off every ``period`` seconds (SIGCONT / SIGSTOP) in a
    thread, so that the load comes and goes during a night; :meth:`stop` leaves it running."""

    def __init__(self, pgid: int, period: float) -> None:
        self.pgid, self.period = pgid, period
        self.switches = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        on = True
        while not self._done.wait(self.period):
            on = not on
            try:
                os.killpg(self.pgid, signal.SIGCONT if on else signal.SIGSTOP)
            except ProcessLookupError:
                return
            self.switches += 1

    def stop(self) -> None:
        """Stop switching and leave the group running (so that it can be terminated)."""
        self._done.set()
        self._thread.join()
        try:
            os.killpg(self.pgid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def main(argv: list[str] | None = None) -> int:
    """Command line entry (see the module doc)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--results", type=Path, default=Path("nightly-false-alarms"),
                        help="results directory (made fresh: an existing one is refused)")
    parser.add_argument("--nights", type=int, default=10, help="clean nights (default 10)")
    parser.add_argument("--degraded", type=int, default=3,
                        help="degraded nights after them (default 3)")
    parser.add_argument("--fault", default="scale=1.5",
                        help="FAULTS_DATA_PATH of the degraded nights (default scale=1.5)")
    parser.add_argument("--stress-load", type=int, default=100,
                        help="percent of one core stress-ng keeps busy while on (0: no "
                             "stress-ng)")
    parser.add_argument("--burst-s", type=float, default=30.0,
                        help="stress-ng on for this many seconds, then off as long, and so on "
                             "(default 30; 0: on the whole time)")
    parser.add_argument("--nightly-args", default="",
                        help="options of the nightly entry point (before its '--'), e.g. "
                             "\"--judge *_ratio --min-band 0.4\"")
    parser.add_argument("--json", type=Path, help="write the nights and totals here")
    args, rest = parser.parse_known_args(argv)
    rest = rest[1:] if rest[:1] == ["--"] else rest
    if args.results.exists():
        parser.error(f"--results {args.results} exists: give a fresh directory")
    # a killed benchmark still stops its stress-ng (the finally below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stress = None
    if args.stress_load:
        exe = shutil.which("stress-ng")
        if exe is None:
            parser.error("stress-ng not found (apt-get install stress-ng), or --stress-load 0")
        stress = subprocess.Popen([exe, "--cpu", "1", "--cpu-load", str(args.stress_load),
                                   "--quiet"], start_new_session=True)
        print(f"stress-ng pid {stress.pid}: {args.stress_load} % of one core, "
              + (f"on/off every {args.burst_s:g} s" if args.burst_s else "on the whole time"),
              flush=True)
    bursts = Bursts(stress.pid, args.burst_s) if stress is not None and args.burst_s else None
    nightly_args = shlex.split(args.nightly_args)
    nights = []
    try:
        for i in range(args.nights + args.degraded):
            degraded = i >= args.nights
            env = dict(os.environ)
            env.pop("FAULTS_DATA_PATH", None)
            if degraded:
                env["FAULTS_DATA_PATH"] = args.fault
            load = os.getloadavg()[0]
            t0 = time.monotonic()
            res = subprocess.run([str(NIGHTLY), "--results", str(args.results), *nightly_args,
                                  "--", *rest],
                                 env=env, capture_output=True, text=True, check=False)
            night = sorted((args.results / "nights").iterdir())[-1]
            cases, regressions = _failures(night / "junit.xml")
            row = {"night": night.name, "kind": "degraded" if degraded else "clean",
                   "exit": res.returncode, "load": round(load, 2),
                   "seconds": round(time.monotonic() - t0), "failed": cases,
                   "regressions": regressions}
            nights.append(row)
            print(f"{i + 1:>2} {row['kind']:<8} exit {row['exit']} load {load:4.2f} "
                  f"{row['seconds']:>4}s failed: {', '.join(cases) or '-'}; history: "
                  f"{', '.join(regressions) or '-'}", flush=True)
    finally:
        if bursts is not None:
            bursts.stop()
        if stress is not None:
            os.killpg(stress.pid, signal.SIGTERM)
            stress.wait(timeout=30)
    clean = [n for n in nights if n["kind"] == "clean"]
    bad = [n for n in nights if n["kind"] == "degraded"]
    totals = {
        "false_alarms": sum(n["exit"] != 0 for n in clean), "clean_nights": len(clean),
        "caught": sum(n["exit"] == 1 for n in bad), "degraded_nights": len(bad),
        "fault": args.fault, "stress_load_percent": args.stress_load,
        "burst_s": args.burst_s, "nightly_args": args.nightly_args, "reframe_args": rest,
    }
    print(f"false alarms: {totals['false_alarms']} of {len(clean)} clean nights; caught: "
          f"{totals['caught']} of {len(bad)} nights with FAULTS_DATA_PATH={args.fault}")
    for n in bad:
        print(f"  {n['night']}: ReFrame bounds {n['failed'] or '-'}; history "
              f"{n['regressions'] or '-'}")
    if args.json:
        args.json.write_text(json.dumps({"nights": nights, "totals": totals}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
