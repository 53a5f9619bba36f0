"""Per-system performance references, recorded from a known-good run (no ReFrame import).

Absolute performance variables (``busbw``, ``latency``, ``images_per_sec``,
``images_per_sec_per_rank``, ``efficiency``) depend on the machine, so their references live per
system and partition in ``checks/config/references/<system>.json``, written by
``checks/tools/record_references.py`` from a ReFrame JSON report::

    {"<partition>": {"<key>": {"<variable>": [reference, lower, upper, "unit"]}}}

``lower``/``upper`` are relative thresholds as ReFrame uses them (``-0.3`` = 30 % below the
reference; ``null`` = unbounded). A site config puts one partition's part into the partition's
``extras["references"]`` (``config/common.py``: ``recorded_references(system, partition)``) and
the checks look their entries up with :func:`lookup`. Machine-independent ratios (``*_ratio``)
have their references in the checks themselves.

Key format (:func:`reference_key`), one entry per check variant whose numbers differ::

    <CheckClassName>[@scale=<scale>][@framework=<framework>]

    HvdcoreCollectivesCheck
    HvdcoreMnistCheck@scale=1_node@framework=torch
    MnistBaseline@framework=tensorflow

``scale`` is the ``%scale=`` parameter, ``framework`` the ``%framework=`` or
``%baseline.framework=`` parameter of the test's display name (:func:`key_of_test`). The
environment and the hvdcore module are not part of the key: the references of a partition hold
for every environment on it (record from runs of all of them and the tool keeps the median and
widens the bounds to cover them).

    >>> reference_key("HvdcoreMnistCheck", "1_node", "torch")
    'HvdcoreMnistCheck@scale=1_node@framework=torch'
    >>> key_of_test("MnistBaseline %framework=torch %hvdcore_module=env ~local:default+venv")
    'MnistBaseline@framework=torch'
"""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "REFERENCES_DIR",
    "LOWER_IS_BETTER",
    "INFORMATION_ONLY",
    "reference_key",
    "key_of_test",
    "load_recorded",
    "lookup",
]

#: Where the recorded files live: ``checks/config/references/<system>.json``.
REFERENCES_DIR = Path(__file__).resolve().parent.parent / "config" / "references"

#: Performance variables where a smaller value is better (the others: higher is better).
LOWER_IS_BETTER = frozenset({"latency", "latency_ratio"})

#: Variables measured against an earlier job (the MNIST and synthetic checks' efficiency: the
#: 1-rank baseline is a separate job): their recorded references are shown, never bounds.
INFORMATION_ONLY = frozenset({"efficiency"})

_PARAM = re.compile(r"%([\w.]+)=(\S+)")


def reference_key(check_class: str, scale: str | None = None,
                  framework: str | None = None) -> str:
    """The key of a check variant's entry in ``extras["references"]`` (see the module doc)."""
    key = check_class
    if scale:
        key += f"@scale={scale}"
    if framework:
        key += f"@framework={framework}"
    return key


def key_of_test(display_name: str) -> str:
    """:func:`reference_key` of a test case from its ReFrame display name."""
    params = dict(_PARAM.findall(display_name))
    return reference_key(display_name.split()[0], params.get("scale"),
                         params.get("framework") or params.get("baseline.framework"))


def load_recorded(system: str, directory: str | os.PathLike[str] = REFERENCES_DIR
                  ) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """The recorded references of ``system``: ``{partition: {key: {var: [ref, lower, upper,
    unit]}}}``; ``{}`` when the system has no file."""
    path = Path(directory) / f"{system}.json"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected an object of partitions, got {type(data).__name__}")
    return data


def _candidates(key: str) -> list[str]:
    """``key`` and its more general forms, most general first (each subset of qualifiers)."""
    check, *quals = key.split("@")
    return ["@".join([check, *sub]) for n in range(len(quals) + 1)
            for sub in itertools.combinations(quals, n)]


def lookup(extras_refs: Mapping[str, Mapping[str, Any]] | None,
           key: str) -> dict[str, tuple[Any, ...]]:
    """The references of one check variant: ``{var: (ref, lower, upper, unit)}``.

    ``extras_refs`` is a partition's ``extras["references"]`` (``{}``/``None``: no references).
    An entry of a more general key also applies (``HvdcoreMnistCheck`` and
    ``HvdcoreMnistCheck@scale=1_node`` to ``HvdcoreMnistCheck@scale=1_node@framework=torch``);
    per variable, the most specific entry wins.
    """
    found: dict[str, tuple[Any, ...]] = {}
    for cand in _candidates(key):
        for var, ref in (extras_refs or {}).get(cand, {}).items():
            found[var] = tuple(ref)
    return found
