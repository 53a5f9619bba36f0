#!/usr/bin/env bash
# Run the ReFrame suite and publish its summary: what README's first command and a nightly job run.
#
#   checks/run_suite.sh [OUTDIR] [extra reframe options...]
#
# Defaults: the embedded local config (CONFIG=checks/config/local.py), results in
# ./reframe-results (stage, output, perflogs, report.json, summary.md, scaling.png, planes.png).
# Uses $VENV/bin/reframe (VENV defaults to .venv, then the reframe on PATH).
# Exit status (checks/tools/verdict.py): 0 every case passed; 1 a case failed or a check file
# could not be loaded (ReFrame's "skipping test file" warning); 3 no case failed
# but a measurement was invalid (an invalid measurement is reported as INVALID, never as a
# failure, as checks/nightly.sh does); 2 ReFrame did not run (no report).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${1:-reframe-results}
shift || true
config=${CONFIG:-checks/config/local.py}
venv=${VENV:-.venv}
if [ -x "$venv/bin/reframe" ]; then
    reframe="$venv/bin/reframe"
    python="$venv/bin/python"
else
    reframe=$(command -v reframe) || { echo "run_suite.sh: reframe not found (pip install -e .[reframe])" >&2; exit 2; }
    # the interpreter next to ReFrame (pip's bin has python3, not always python), else PATH's
    python=$(dirname "$(readlink -f "$reframe")")/python3
    [ -x "$python" ] || python=python3
fi
# A ReFrame older than the suite needs is refused here, naming both versions (exit 2).
"$python" checks/tools/reframe_version.py "$reframe" || exit 2
mkdir -p "$out"
start=$(date +%s)
"$reframe" -C "$config" -c checks/ -r --prefix "$out" --report-file "$out/report.json" "$@" 2>&1 |
    tee "$out/reframe.out"
rc=${PIPESTATUS[0]}
echo "run_suite.sh: reframe finished with status $rc in $(( $(date +%s) - start ))s"
if [ -f "$out/report.json" ]; then
    "$python" checks/tools/report.py --report "$out/report.json" -o "$out/summary.md" \
        --plot "$out/scaling.png" --planes-plot "$out/planes.png" && echo "run_suite.sh: summary in $out/summary.md"
fi
"$python" checks/tools/verdict.py --report "$out/report.json" --reframe-status "$rc"
status=$?
# A check file ReFrame could not load (an import error, an API its release lacks) is skipped
# with a warning: its checks did not run, so the run is a failure, not a passing subset.
if grep -q 'WARNING: skipping test file' "$out/reframe.out"; then
    sed -n 's/^.*WARNING: \(skipping test file[^\x1b]*\).*/run_suite.sh: FAILED to load a check file, its checks did not run: \1/p' \
        "$out/reframe.out"
    [ "$status" = 2 ] || status=1
fi
exit "$status"
