"""``hvdcorerun --check-build``: the capability report in Horovod's layout, JSON, and --require.

The text layout follows ``horovodrun --check-build`` (Available Frameworks / Controllers /
Tensor Operations with ``[X]``/``[ ]``), adds device rows and the GPU tensor path, and prints
the reason under every ``[ ]``. ``[X]`` means built *and* usable on this node now; an item that
is built but not usable here (e.g. NCCL on a node without a GPU) shows ``[ ]`` and says so.

``--require a,b`` exits 1 unless every named item is *built* (what an easyconfig sanity check on
a build host without GPUs needs); ``--require-available a,b`` also needs it usable now (what a
check on a compute node needs). With either, only the named items are probed, so
``--require mpi,torch`` does not import TensorFlow.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from hvdcore.capabilities import ITEM_NAMES, Capability, CapabilityReport, capabilities

__all__ = ["format_report", "parse_names", "run_check_build"]

_SECTIONS = (
    ("framework", "Available Frameworks"),
    ("controller", "Available Controllers"),
    ("tensor_operation", "Available Tensor Operations"),
    ("device", "Available Devices"),
)


class UnknownNameError(ValueError):
    """A --require name that is not a capability."""


def parse_names(text: str, flag: str) -> list[str]:
    """Split ``a,b`` into names; UnknownNameError listing the accepted names."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    aliases = {"pytorch": "torch", "tf": "tensorflow"}
    names = [aliases.get(n, n) for n in names]
    unknown = [n for n in names if n not in ITEM_NAMES]
    if unknown or not names:
        raise UnknownNameError(
            f"{flag}: unknown capability {', '.join(unknown) or '(empty)'}; accepted names: "
            f"{', '.join(ITEM_NAMES)}")
    return list(dict.fromkeys(names))


def _version_text(it: Capability) -> str:
    if not it.version:
        return ""
    if it.category != "framework":
        return f" ({it.version})"
    extra = []
    if it.name == "keras":
        if it.details.get("backend"):
            extra.append(f"backend {it.details['backend']}")
        if it.details.get("tf_keras_version"):
            extra.append(f"tf-keras {it.details['tf_keras_version']}")
    return f" {it.version}" + (f" ({'; '.join(extra)})" if extra else "")


def format_report(report: CapabilityReport) -> str:
    """Horovod-style text of ``report`` (reasons indented under each ``[ ]``)."""
    ctx = report.context
    lines = [f"hvdcore {ctx.get('hvdcore')}, Python {ctx.get('python')}, host {ctx.get('host')}:"]
    for category, title in _SECTIONS:
        items = [it for it in report.items if it.category == category]
        if not items:
            continue
        lines += ["", f"{title}:"]
        for it in items:
            mark = "X" if it.built and it.available else " "
            lines.append(f"    [{mark}] {it.label}{_version_text(it)}")
            if mark == " ":
                reason = it.reason or "no reason recorded"
                if not reason.startswith(("not built", "built")):
                    reason = ("built, not usable here: " if it.built else "not built: ") + reason
                lines.append(f"        {reason}")
    ctl = report.tensor_paths.get("controller")
    if ctl is not None:
        lines += ["", f"Controller of a job started here: {ctl.get('path')} ({ctl.get('reason')})"]
    gpu = report.gpu_tensors
    if gpu.get("path") != "not probed":
        lines += ["", f"GPU tensors: {gpu.get('path')} ({gpu.get('reason')})"]
    paths = report.tensor_paths
    if "torch_cpu" in paths:
        cpu = paths["torch_cpu"]
        lines.append(f"CPU tensors (torch): {cpu.get('path')} ({cpu.get('reason')})")
    if "tensorflow" in paths:
        lines.append(f"TensorFlow tensors: {paths['tensorflow'].get('path')}")
    if "host_hot_path" in paths:
        hot = paths["host_hot_path"]
        lines.append(f"Repeated host allreduces: {hot.get('path')} ({hot.get('reason')})")
    return "\n".join(lines)


def run_check_build(
    as_json: bool,
    require: Sequence[str] = (),
    require_available: Sequence[str] = (),
) -> int:
    """Print the report (text or JSON); 1 if a required item is missing, else 0."""
    wanted = list(dict.fromkeys([*require, *require_available]))
    report = capabilities(wanted or None)
    missing = report.missing(require) + report.missing(require_available, need_available=True)
    if as_json:
        data = report.to_dict()
        if wanted:
            data["required"] = {"built": list(require), "available": list(require_available),
                                "missing": missing}
        print(json.dumps(data, indent=2, sort_keys=False))
    else:
        print(format_report(report))
    if missing:
        print("hvdcorerun: missing required capabilities:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        return 1
    if wanted and not as_json:
        print(f"\nAll required capabilities present: {', '.join(wanted)}")
    return 0
