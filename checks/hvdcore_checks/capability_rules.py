"""Which capabilities a partition must have, and how ``hvdcorerun --check-build --json`` is judged.

Partition features map to report items (``hvdcore.capabilities`` names):

=================  ======================================================
``mpi``            ``mpi``
``nvgpu``          ``cuda``, ``nccl``
``amdgpu``         ``rocm``, ``nccl`` (RCCL reports as NCCL)
``gpu``            ``nccl`` and one of ``cuda``/``rocm`` (vendor not named)
``cuda-aware-mpi`` ``cuda-aware-mpi``
=================  ======================================================

plus the framework under test (``torch``, ``tensorflow``) and any names in the partition's
``extras['hvdcore_require']``. Each required item must be built *and* available.

    >>> required_capabilities(["cpu", "mpi"], {}, "torch")
    ['torch', 'mpi']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["FEATURE_ITEMS", "GPU_FEATURES", "required_capabilities", "evaluate_report"]

FEATURE_ITEMS: dict[str, tuple[str, ...]] = {
    "mpi": ("mpi",),
    "nvgpu": ("cuda", "nccl"),
    "amdgpu": ("rocm", "nccl"),
    "cuda-aware-mpi": ("cuda-aware-mpi",),
}
GPU_FEATURES = ("gpu", "nvgpu", "amdgpu")
ANY_GPU = "cuda|rocm"


def required_capabilities(
    features: Iterable[str], extras: Mapping[str, Any], framework: str
) -> list[str]:
    """Report item names the partition must have (``cuda|rocm`` means either one)."""
    feats = list(features)
    names = [framework]
    for feat in feats:
        names.extend(FEATURE_ITEMS.get(feat, ()))
    if "gpu" in feats and not {"nvgpu", "amdgpu"} & set(feats):
        names.extend([ANY_GPU, "nccl"])
    names.extend(extras.get("hvdcore_require", []))
    return list(dict.fromkeys(names))


def _items(report: Mapping[str, Any]) -> dict[str, list[Mapping[str, Any]]]:
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for item in report.get("items", []):
        by_name.setdefault(item["name"], []).append(item)
    return by_name


def evaluate_report(
    report: Mapping[str, Any],
    required: Iterable[str],
    features: Iterable[str] = (),
    gpus_per_node: int = 0,
) -> list[str]:
    """Problems found, one line each (``name: not built: reason``); empty when all is well.

    Also flags a partition that claims GPUs in ``features`` but configures none, and one that
    configures GPUs without claiming them: a partition without GPUs must not claim them.
    """
    feats = set(features)
    problems: list[str] = []
    claims_gpu = bool(feats & set(GPU_FEATURES))
    if claims_gpu and gpus_per_node < 1:
        problems.append("config: the partition claims GPUs (features "
                        f"{sorted(feats & set(GPU_FEATURES))}) but extras.gpus_per_node is 0")
    if gpus_per_node > 0 and not claims_gpu:
        problems.append(f"config: extras.gpus_per_node={gpus_per_node} but no gpu feature")
    items = _items(report)
    for name in required:
        failures: list[str] = []
        for alt in name.split("|"):
            entries = items.get(alt)
            if not entries:
                failures.append(f"{alt}: not in the report (hvdcore does not know it)")
                continue
            bad = [e for e in entries if not (e.get("built") and e.get("available"))]
            if not bad:
                failures = []
                break
            e = bad[0]
            state = "not built" if not e.get("built") else "built but not available"
            failures.append(f"{alt}: {state}: {e.get('reason') or 'no reason given'}")
        if failures:
            problems.append(" / ".join(failures))
    return problems
