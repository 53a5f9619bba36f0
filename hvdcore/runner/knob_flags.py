"""``hvdcorerun`` flags generated from :data:`hvdcore.config.KNOBS` and the env they export.

Every knob with a ``cli_flag`` becomes a flag. A bool knob's flag takes no value: ``--no-X`` where
the knob is called ``X`` sets it to false (``--no-abort-on-exception``), any other flag sets it to
true (``--no-stall-check`` sets ``STALL_CHECK_DISABLE``) and has Horovod's opposite, which sets it
to false (``--no-hierarchical-allreduce``, ``--stall-check``). ``--fusion-threshold-mb`` takes
mebibytes (float) while the knob is bytes. Values are checked with the knob's own ``Knob.convert``
so a bad value fails in the launcher with the same message ``init()`` would give.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from hvdcore.config import KNOBS, Knob, load
from hvdcore.errors import ConfigError

__all__ = ["add_knob_flags", "knob_exports", "validate_environment"]

MIB = 1024 * 1024


def _dest(k: Knob) -> str:
    return "knob_" + k.name.lower()


def _is_bool(k: Knob) -> bool:
    return k.kind == "bool"


def _negates(k: Knob) -> bool:
    """``--no-<knob name>`` means false; any other bool flag means true."""
    assert k.cli_flag is not None
    return k.cli_flag == "--no-" + k.name.lower().replace("_", "-")


def _opposite(flag: str) -> str:
    """Horovod's name for the flag that undoes ``flag``: ``--no-stall-check`` is undone by
    ``--stall-check``, ``--hierarchical-allreduce`` by ``--no-hierarchical-allreduce``."""
    return "--" + flag[5:] if flag.startswith("--no-") else "--no-" + flag[2:]


def add_knob_flags(parser: argparse.ArgumentParser) -> None:
    """Add one flag per knob that declares ``cli_flag`` (in a "tuning knobs" group)."""
    group = parser.add_argument_group(
        "tuning knobs (each exported to every rank as HVDCORE_<NAME>; see the table below)")
    for k in KNOBS:
        if not k.cli_flag:
            continue
        help_text = f"{k.help} Sets {k.env}."
        if _is_bool(k):
            help_text = f"{k.help} Sets {k.env}={'0' if _negates(k) else '1'}."
            pair = group.add_mutually_exclusive_group()
            pair.add_argument(k.cli_flag, dest=_dest(k), action="store_true", default=None,
                              help=help_text)
            if not _negates(k):
                pair.add_argument(_opposite(k.cli_flag), dest=_dest(k), action="store_false",
                                  default=None, help=f"Sets {k.env}=0.")
            continue
        metavar = "MB" if k.cli_flag.endswith("-mb") else k.kind.split()[0].upper()
        if k.choices:
            metavar = "{" + ",".join(k.choices) + "}"
        if k.cli_flag.endswith("-mb"):
            help_text += " Given in MiB (may be fractional); the variable holds bytes."
        group.add_argument(k.cli_flag, dest=_dest(k), metavar=metavar, default=None,
                           help=help_text)


def _mib_to_bytes(flag: str, raw: str) -> str:
    try:
        mib = float(raw)
    except ValueError:
        raise ConfigError(f"{flag} {raw!r} is not a number of MiB (e.g. 64 or 0.5)") from None
    if not mib >= 0:
        raise ConfigError(f"{flag} {raw!r} must be >= 0 (0 disables fusion)")
    return str(int(round(mib * MIB)))


def knob_exports(args: argparse.Namespace) -> dict[str, str]:
    """``{HVDCORE_<NAME>: value}`` for every knob flag given, validated; ConfigError if bad."""
    out: dict[str, str] = {}
    for k in KNOBS:
        if not k.cli_flag:
            continue
        value = getattr(args, _dest(k), None)
        if value is None:
            continue
        if _is_bool(k):
            raw = "0" if _negates(k) or value is False else "1"
        elif k.cli_flag.endswith("-mb"):
            raw = _mib_to_bytes(k.cli_flag, value)
        else:
            raw = str(value)
        k.convert(raw, k.cli_flag)  # raises ConfigError naming the flag and accepted values
        out[k.env] = raw.strip().lower() if k.choices else raw
    return out


def validate_environment(environ: Mapping[str, str], exports: Mapping[str, str]) -> None:
    """Check the launcher's ``HVDCORE_*``/``HOROVOD_*`` variables as every rank will see them
    (flags win), so a typo fails here, once, instead of on every rank. Raises ConfigError."""
    load({**environ, **exports})
