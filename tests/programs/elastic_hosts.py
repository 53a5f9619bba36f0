"""A host discovery script whose hosts change with the training's progress (tests/test_elastic_*).

ELASTIC_SCHEDULE (JSON): [[from_epoch, ["host:slots", ...]], ...]; the epoch is read from the
file ELASTIC_PROGRESS (written by the job's rank 0; 0 before it exists). ELASTIC_DISCOVERY_FAIL:
a file whose existence makes this script fail (exit 5).
"""

import json
import os
import sys

if os.path.exists(os.environ.get("ELASTIC_DISCOVERY_FAIL", "/nonexistent")):
    print("discovery backend unreachable", file=sys.stderr)
    sys.exit(5)
try:
    with open(os.environ["ELASTIC_PROGRESS"]) as f:
        epoch = int(f.read().strip() or 0)
except (OSError, ValueError):
    epoch = 0
hosts: list[str] = []
for start, listed in json.loads(os.environ["ELASTIC_SCHEDULE"]):
    if epoch >= start:
        hosts = listed
print("\n".join(hosts))
