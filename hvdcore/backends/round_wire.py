"""The response-cache round on the wire, described once for Python and C.

Every rank contributes one vector of little-endian unsigned 64-bit words to a round, reduced
with bitwise or (``MPI_BOR`` on ``MPI_UINT64_T``):

====================  =====================================================================
words                 what
====================  =====================================================================
0                     ``lists``: rank 0 writes how many coordinator response lists go
                      before this round (the others write 0, so the or is rank 0's value)
1                     ``flags``: :data:`FLAG_JOINING` when the sender called join()
2 .. 2+W-1            *miss* bits: bit ``i`` set when the sender does not offer cache id i
2+W .. 2+2W-1         *invalid* bits: bit ``i`` set when the sender's request no longer
                      matches cache id i
====================  =====================================================================

The words after the header are the round's *tail*. A steady call (one cached blocking
allreduce, round then data, :mod:`hvdcore.backends.mpi_steady`) returns :data:`DONE`,
:data:`NOT_READY` or ``(PENDING, token)``, and lets the data call run only when
:func:`data_may_run` holds for the reduced round.

Readers: :class:`~hvdcore.engine.cache.RoundVector` (the engine's packing and unpacking),
:class:`~hvdcore.backends.mpi_steady.PythonSteady`, and the compiled module
``hvdcore/backends/_hotpath.c`` through the header this module generates
(``python -m hvdcore.backends.round_wire --write`` rewrites ``_round_wire.h``;
``tests/test_round_wire.py`` fails when the checked-in header is stale). The compiled module
exports the :data:`PROTOCOL` it was built with, and :mod:`hvdcore.backends.hotpath` refuses
a build that speaks another.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

__all__ = ["VERSION", "HEADER", "HEADER_BYTES", "HEADER_WORDS", "WORD_BYTES", "FLAG_JOINING",
           "DONE", "NOT_READY", "PENDING", "PROTOCOL", "data_may_run", "c_header",
           "HEADER_PATH"]

VERSION = 1
"""Bumped whenever the meaning of the round changes in a way the constants below do not show
(e.g. :func:`data_may_run`'s rule)."""

HEADER = struct.Struct("<QQ")
"""The header words ``[lists, flags]``."""
WORD_BYTES = 8
HEADER_WORDS = 2
HEADER_BYTES = HEADER.size

FLAG_JOINING = 1
"""A flag in the header: the sender called join(); every rank disables the cache."""

DONE = 0
"""A steady call made the round and the data call."""
NOT_READY = 1
"""A steady call's round completed but does not let the data run now (``recv`` holds it)."""
PENDING = 2
"""A steady call's round is still in flight (returned as ``(PENDING, token)``)."""

# (C name, value) of everything a build is compiled with, in PROTOCOL's order
_C_CONSTANTS: tuple[tuple[str, int], ...] = (
    ("ROUND_WIRE_VERSION", VERSION), ("ROUND_HEADER_BYTES", HEADER_BYTES),
    ("ROUND_WORD_BYTES", WORD_BYTES), ("ROUND_FLAG_JOINING", FLAG_JOINING),
    ("STEADY_DONE", DONE), ("STEADY_NOT_READY", NOT_READY), ("STEADY_PENDING", PENDING))

PROTOCOL: tuple[int, ...] = tuple(value for _, value in _C_CONSTANTS)
"""What a build of the compiled module must report as its ``PROTOCOL`` to be used."""

HEADER_PATH = Path(__file__).with_name("_round_wire.h")
"""The generated C header, checked in beside ``_hotpath.c``."""


def data_may_run(recv: bytes | bytearray, tail: bytes, lists_done: int) -> bool:
    """Whether a reduced round ``recv`` lets a steady call's data run: no flag set, at most
    ``lists_done`` coordinator lists before it (this rank executed them all), and every rank
    sent this rank's ``tail`` (the same ids offered, none invalid)."""
    lists, flags = HEADER.unpack_from(recv, 0)
    return not flags and lists <= lists_done and recv.endswith(tail)


def c_header() -> str:
    """The text of ``_round_wire.h``: the constants above as C macros."""
    lines = [
        "/* The response-cache round's wire format for hvdcore/backends/_hotpath.c.",
        " * Generated from hvdcore/backends/round_wire.py (python -m hvdcore.backends.round_wire",
        " * --write): do not edit; change round_wire.py and regenerate. */",
        "#ifndef HVDCORE_ROUND_WIRE_H",
        "#define HVDCORE_ROUND_WIRE_H",
        "",
        "#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__",
        "#error \"the round's words are little-endian: this byte order needs conversions\"",
        "#endif",
        "",
        f"#define ROUND_HEADER_WORDS {HEADER_WORDS}",
        "#define ROUND_LISTS_WORD 0",
        "#define ROUND_FLAGS_WORD 1",
        *(f"#define {name} {value}" for name, value in _C_CONSTANTS),
        "",
        "/* the module's PROTOCOL tuple: Py_BuildValue(ROUND_WIRE_PROTOCOL_FORMAT,",
        " * ROUND_WIRE_PROTOCOL_VALUES) gives round_wire.PROTOCOL */",
        f"#define ROUND_WIRE_PROTOCOL_FORMAT \"({'i' * len(_C_CONSTANTS)})\"",
        "#define ROUND_WIRE_PROTOCOL_VALUES " + ", ".join(name for name, _ in _C_CONSTANTS),
        "",
        "#endif",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``--header``: print the C header; ``--write``: rewrite the checked-in one."""
    import argparse  # (not on the import path of every engine)

    parser = argparse.ArgumentParser(prog="python -m hvdcore.backends.round_wire",
                                     description="The cache round's C header.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--header", action="store_true", help="print it")
    group.add_argument("--write", action="store_true", help=f"write {HEADER_PATH.name}")
    args = parser.parse_args(argv)
    if args.write:
        HEADER_PATH.write_text(c_header())
        print(f"wrote {HEADER_PATH}")
    else:
        sys.stdout.write(c_header())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
