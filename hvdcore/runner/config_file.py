"""``hvdcorerun --config-file FILE``: horovodrun's YAML file of settings.

The file has horovodrun's sections and keys, e.g.::

    controller: gloo
    params: {fusion_threshold_mb: 32, cycle_time_ms: 10, cache_capacity: 2048,
             hierarchical_allreduce: true, hierarchical_allgather: false}
    timeline: {filename: timeline.json, mark_cycles: true}
    stall_check: {enabled: true, warning_time_seconds: 120, shutdown_time_seconds: 240}
    library_options: {gloo_timeout_seconds: 60, mpi_threads_disable: false,
                      num_nccl_streams: 1, thread_affinity: 0}
    logging: {level: INFO, with_timestamp: false}
    autotune: {enabled: false}

Each key fills the flag of the same meaning unless that flag is on the command line, wherever
it stands there (horovodrun's rule in practice, whatever its help says about order); values are
then checked as the flag's. Keys horovodrun does not know are ignored as it ignores them, with
a note on stderr so a misspelt one does not pass unseen.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from hvdcore.errors import ConfigError

__all__ = ["apply_config_file", "KEYS"]


def _text(value: Any) -> str:
    return str(value)


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value > 0
    low = str(value).strip().lower()
    if low in ("true", "yes", "on", "1"):
        return True
    if low in ("false", "no", "off", "0"):
        return False
    raise ValueError(f"{value!r} is not true or false")


def _not_flag(value: Any) -> bool:
    return not _flag(value)


def _same(value: Any) -> Any:
    return value


# section -> key -> (argparse dest, conversion); the knob flags hold strings, switches bools
KEYS: dict[str, dict[str, tuple[str, Callable[[Any], Any]]]] = {
    "params": {
        "fusion_threshold_mb": ("knob_fusion_threshold", _text),
        "cycle_time_ms": ("knob_cycle_time", _text),
        "cache_capacity": ("knob_cache_capacity", _text),
        "hierarchical_allreduce": ("knob_hierarchical_allreduce", _flag),
        "hierarchical_allgather": ("knob_hierarchical_allgather", _flag),
    },
    "autotune": {
        "enabled": ("knob_autotune", _flag),
        "log_file": ("knob_autotune_log", _text),
        "warmup_samples": ("knob_autotune_warmup_samples", _text),
        "steps_per_sample": ("knob_autotune_steps_per_sample", _text),
        "bayes_opt_max_samples": ("knob_autotune_bayes_opt_max_samples", _text),
        "gaussian_process_noise": ("knob_autotune_gaussian_process_noise", _text),
    },
    "timeline": {
        "filename": ("knob_timeline", _text),
        "mark_cycles": ("knob_timeline_mark_cycles", _flag),
    },
    "stall_check": {
        "enabled": ("knob_stall_check_disable", _not_flag),
        "warning_time_seconds": ("knob_stall_check_time_seconds", _text),
        "shutdown_time_seconds": ("knob_stall_shutdown_time_seconds", _text),
    },
    "library_options": {
        "mpi_threads_disable": ("mpi_threads_disable", _flag),
        "num_nccl_streams": ("num_nccl_streams", _same),
        "thread_affinity": ("thread_affinity", _same),
        "ccl_bgt_affinity": ("thread_affinity", _same),  # the key's name before 0.21
        "gloo_timeout_seconds": ("knob_rendezvous_timeout", _text),
    },
    "logging": {
        "level": ("knob_log_level", _text),
        "with_timestamp": ("log_with_timestamp", _flag),
        "hide_timestamp": ("log_with_timestamp", _not_flag),  # the older key
    },
}


def _load(path: str) -> Mapping[str, Any]:
    try:
        import yaml
    except ImportError:
        raise ConfigError("--config-file needs PyYAML: pip install PyYAML") from None
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ConfigError(f"--config-file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config-file {path}: not YAML: {' '.join(str(exc).split())}"
                          ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config-file {path}: expected sections (a mapping) at the top, "
                          f"found {type(data).__name__}")
    return data


def _controller(args: argparse.Namespace, path: str, value: Any) -> None:
    if args.gloo or args.mpi or getattr(args, "jsrun", False):
        return
    choice = str(value).strip().lower()
    if choice not in ("gloo", "mpi"):
        raise ConfigError(f"--config-file {path}: controller {value!r}: expected gloo or mpi")
    setattr(args, choice, True)


def apply_config_file(args: argparse.Namespace, path: str) -> list[str]:
    """Fill ``args`` from the file at ``path`` where the command line left a setting unset;
    the notes to print (keys ignored). ConfigError for an unreadable file or a bad value."""
    notes: list[str] = []
    for section, body in _load(path).items():
        if section == "controller":
            if body is not None:
                _controller(args, path, body)
            continue
        keys = KEYS.get(str(section))
        if keys is None:
            notes.append(f"hvdcorerun: note: --config-file {path}: section {section!r} "
                         "ignored (not one of horovodrun's)")
            continue
        if body is None:
            continue
        if not isinstance(body, dict):
            raise ConfigError(f"--config-file {path}: {section}: expected keys and values, "
                              f"found {body!r}")
        for key, value in body.items():
            if key not in keys:
                notes.append(f"hvdcorerun: note: --config-file {path}: {section}.{key} "
                             "ignored (not one of horovodrun's keys)")
                continue
            dest, convert = keys[key]
            if value is None or getattr(args, dest, None) is not None:
                continue
            try:
                setattr(args, dest, convert(value))
            except ValueError as exc:
                raise ConfigError(f"--config-file {path}: {section}.{key}: {exc}") from None
    return notes
