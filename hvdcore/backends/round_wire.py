"""The response-cache round on the wire, described once for Python and C.

Every rank contributes one vector of little-endian unsigned 64-bit words to a round, reduced
with bitwise or (``MPI_BOR`` on ``MPI_UINT64_T``):

====================  =====================================================================
words                 what
====================  =====================================================================
0 .. H-1              the header: one word per row of :data:`FIELDS` (``lists``, ``flags``)
H .. H+W-1            *miss* bits: bit ``i`` set when the sender does not offer cache id i
H+W .. H+2W-1         *invalid* bits: bit ``i`` set when the sender's request no longer
                      matches cache id i
====================  =====================================================================

The words after the header are the round's *tail*. A steady call (one cached blocking
allreduce, round then data, :mod:`hvdcore.backends.mpi_steady`) writes the header the table's
``steady`` column gives, returns :data:`DONE`, :data:`NOT_READY` or ``(PENDING, token)``, and
lets the data call run only when :func:`data_may_run` (the table's ``may_run`` column, then
the tail) holds for the reduced round.

Everything about the header is made from :data:`FIELDS` (:func:`build`): the Python layout,
:class:`Header` (the header as a value), :func:`pack_steady` and :func:`data_may_run`
(generated source, compiled once), and the C header ``_round_wire.h`` with the same layout and
the same two functions (``round_pack_steady``, ``round_may_run``) for
``hvdcore/backends/_hotpath.c``. ``python -m hvdcore.backends.round_wire --write`` rewrites
``_round_wire.h``; ``tests/test_round_wire.py`` fails when the checked-in header is stale and
compiles it to check it against the Python field by field. The compiled module exports the
:data:`PROTOCOL` it was built with (it includes a checksum of the table), and
:mod:`hvdcore.backends.hotpath` refuses a build that speaks another.
"""

from __future__ import annotations

import struct
import sys
import zlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

__all__ = ["VERSION", "Field", "FIELDS", "STEADY_ARGS", "build", "Header", "HEADER",
           "HEADER_BYTES", "HEADER_WORDS", "WORD_BYTES", "FLAG_JOINING", "DONE", "NOT_READY",
           "PENDING", "PROTOCOL", "pack_steady", "data_may_run", "c_header", "HEADER_PATH"]

VERSION = 2
"""Bumped whenever the meaning of the round changes in a way the table and the constants
below do not show."""


class Field(NamedTuple):
    """One header word. ``steady``: what a steady call writes in it (``"0"`` or ``"lists"``,
    its first argument); ``may_run``: what the reduced round must hold in it for a steady
    call's data to run (``"== 0"``, ``"<= lists_done"``, ...: a comparison with ``0`` or with
    ``lists_done``, its second argument; ``""`` for no condition)."""

    name: str
    steady: str
    may_run: str
    doc: str


STEADY_ARGS = ("lists", "lists_done")
"""The integer arguments of every steady call, ``call(lists, lists_done, ...)``: the
coordinator lists rank 0 says go before this round, and the lists this rank executed."""

FIELDS: tuple[Field, ...] = (
    Field("lists", steady="lists", may_run="<= lists_done",
          doc="rank 0 writes how many coordinator response lists go before this round (the "
              "others write 0, so the or is rank 0's value)"),
    Field("flags", steady="0", may_run="== 0",
          doc="FLAG_JOINING when the sender called join()"),
)
"""The round's header, one row per word in order: the one place a header field is added."""

WORD_BYTES = 8
FLAG_JOINING = 1
"""A flag in the header: the sender called join(); every rank disables the cache."""

DONE = 0
"""A steady call made the round and the data call."""
NOT_READY = 1
"""A steady call's round completed but does not let the data run now (``recv`` holds it)."""
PENDING = 2
"""A steady call's round is still in flight (returned as ``(PENDING, token)``)."""

_OPS = ("==", "!=", "<=", ">=", "<", ">")
# names data_may_run's generated code uses beside the fields: no field may take them
_RESERVED = frozenset({"recv", "tail", "lists_done", "count", "index"})


def _check(fields: tuple[Field, ...]) -> None:
    seen: set[str] = set()
    for f in fields:
        if not f.name.isidentifier() or f.name in _RESERVED or f.name in seen \
                or f.name.startswith("_"):
            raise ValueError(f"round field {f.name!r}: not a new identifier of its own")
        seen.add(f.name)
        if f.steady not in ("0", STEADY_ARGS[0]):
            raise ValueError(f"round field {f.name!r}: steady={f.steady!r} is neither 0 nor "
                             f"the steady call's {STEADY_ARGS[0]!r}")
        if f.may_run:
            op, _, rhs = f.may_run.partition(" ")
            if op not in _OPS or rhs not in ("0", STEADY_ARGS[1]):
                raise ValueError(f"round field {f.name!r}: may_run={f.may_run!r} is not "
                                 f"'<op> 0' or '<op> {STEADY_ARGS[1]}' (ops {_OPS})")


def _python_source(fields: tuple[Field, ...]) -> str:
    names = ", ".join(f.name for f in fields)
    steady = ", ".join(f.steady for f in fields)
    rule = " and ".join([f"{f.name} {f.may_run}" for f in fields if f.may_run]
                        + ["recv.endswith(tail)"])
    return (
        f"def pack_steady(send, tail, lists):\n"
        f"    _pack_into(send, 0, {steady})\n"
        f"    if not send.endswith(tail):\n"
        f"        send[{WORD_BYTES * len(fields)}:] = tail\n"
        f"\n"
        f"def data_may_run(recv, tail, lists_done):\n"
        f"    {names}, = _unpack_from(recv, 0)\n"
        f"    return {rule}\n")


def _c_functions(fields: tuple[Field, ...]) -> list[str]:
    word = {f.name: f"ROUND_{f.name.upper()}_WORD" for f in fields}
    rule = [f"h[{word[f.name]}] {f.may_run.partition(' ')[0]} "
            f"(uint64_t){f.may_run.partition(' ')[2]}" for f in fields if f.may_run]
    rule.append("memcmp(recv + ROUND_HEADER_BYTES, tail, tail_len) == 0")
    return [
        "/* A steady call's header (round_wire.pack_steady): the table's steady column. */",
        "static inline void round_pack_steady(unsigned char *send, uint64_t lists)",
        "{",
        "    uint64_t h[ROUND_HEADER_WORDS];",
        "    (void)lists;",
        *(f"    h[{word[f.name]}] = (uint64_t){f.steady};" for f in fields),
        "    memcpy(send, h, sizeof h); /* native order: little-endian, checked above */",
        "}",
        "",
        "/* Whether a reduced round lets a steady call's data run (round_wire.data_may_run): the",
        " * table's may_run column, then every rank sent this rank's tail. */",
        "static inline int round_may_run(const unsigned char *recv, const unsigned char *tail,",
        "                                size_t tail_len, uint64_t lists_done)",
        "{",
        "    uint64_t h[ROUND_HEADER_WORDS];",
        "    (void)lists_done;",
        "    memcpy(h, recv, sizeof h);",
        "    return " + "\n        && ".join(rule) + ";",
        "}",
    ]


def build(fields: tuple[Field, ...]) -> SimpleNamespace:
    """Everything the round's header table gives: ``HEADER`` (the struct), ``HEADER_WORDS``,
    ``HEADER_BYTES``, ``Header`` (a named tuple with ``pack_into(buf)`` and
    ``unpack_from(buf)``), ``pack_steady``, ``data_may_run``, ``PROTOCOL``, ``c_header()``
    and the generated ``python_source``. The module's names are ``build(FIELDS)``'s."""
    _check(fields)
    header = struct.Struct("<" + "Q" * len(fields))
    names = [f.name for f in fields]

    def pack_into(self: Any, buf: Any) -> None:
        """Write this header at the start of ``buf``."""
        header.pack_into(buf, 0, *self)

    def unpack_from(cls: Any, buf: Any) -> Any:
        """The header at the start of ``buf``."""
        return tuple.__new__(cls, header.unpack_from(buf, 0))

    cls = NamedTuple("Header", [(n, int) for n in names])  # type: ignore[misc]
    cls.__new__.__defaults__ = (0,) * len(names)
    cls.__doc__ = "The round's header as a value: " + "; ".join(
        f"``{f.name}``: {f.doc}" for f in fields) + "."
    cls.pack_into = pack_into  # type: ignore[attr-defined]
    cls.unpack_from = classmethod(unpack_from)  # type: ignore[attr-defined]

    source = _python_source(fields)
    scope: dict[str, Any] = {"_pack_into": header.pack_into,
                             "_unpack_from": header.unpack_from}
    exec(compile(source, f"<round_wire: {len(fields)} fields>", "exec"), scope)
    table = repr([tuple(f[:3]) for f in fields]).encode()
    constants: tuple[tuple[str, int], ...] = (
        ("ROUND_WIRE_VERSION", VERSION), ("ROUND_HEADER_BYTES", header.size),
        ("ROUND_WORD_BYTES", WORD_BYTES), ("ROUND_FLAG_JOINING", FLAG_JOINING),
        ("STEADY_DONE", DONE), ("STEADY_NOT_READY", NOT_READY), ("STEADY_PENDING", PENDING),
        ("ROUND_FIELDS_CRC", zlib.crc32(table) & 0x7FFFFFFF))
    words = [f"#define ROUND_{f.name.upper()}_WORD {i}" for i, f in enumerate(fields)]

    def c_header() -> str:
        """The text of ``_round_wire.h``: the table as C macros and functions."""
        return "\n".join([
            "/* The response-cache round's wire format for hvdcore/backends/_hotpath.c.",
            " * Generated from hvdcore/backends/round_wire.py (python -m "
            "hvdcore.backends.round_wire",
            " * --write): do not edit; change its FIELDS table and regenerate. */",
            "#ifndef HVDCORE_ROUND_WIRE_H",
            "#define HVDCORE_ROUND_WIRE_H",
            "",
            "#include <stddef.h>",
            "#include <stdint.h>",
            "#include <string.h>",
            "",
            "#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__",
            "#error \"the round's words are little-endian: this byte order needs conversions\"",
            "#endif",
            "",
            f"#define ROUND_HEADER_WORDS {len(fields)}",
            *words,
            *(f"#define {name} {value}" for name, value in constants),
            "",
            "/* the module's PROTOCOL tuple: Py_BuildValue(ROUND_WIRE_PROTOCOL_FORMAT,",
            " * ROUND_WIRE_PROTOCOL_VALUES) gives round_wire.PROTOCOL */",
            f"#define ROUND_WIRE_PROTOCOL_FORMAT \"({'i' * len(constants)})\"",
            "#define ROUND_WIRE_PROTOCOL_VALUES " + ", ".join(n for n, _ in constants),
            "",
            *_c_functions(fields),
            "",
            "#endif",
        ]) + "\n"

    return SimpleNamespace(
        HEADER=header, HEADER_WORDS=len(fields), HEADER_BYTES=header.size, Header=cls,
        pack_steady=scope["pack_steady"], data_may_run=scope["data_may_run"],
        PROTOCOL=tuple(value for _, value in constants), c_header=c_header,
        python_source=source)


_WIRE = build(FIELDS)

HEADER: struct.Struct = _WIRE.HEADER
"""The header words, in :data:`FIELDS`' order."""
HEADER_WORDS: int = _WIRE.HEADER_WORDS
HEADER_BYTES: int = _WIRE.HEADER_BYTES
Header: Any = _WIRE.Header
"""The header as a value (a named tuple of :data:`FIELDS`, each 0 unless given)."""
pack_steady: Callable[[bytearray, bytes, int], None] = _WIRE.pack_steady
"""``pack_steady(send, tail, lists)``: a steady call's header (the table's ``steady``
column) and ``tail`` into ``send``."""
data_may_run: Callable[[Any, bytes | bytearray, int], bool] = _WIRE.data_may_run
"""``data_may_run(recv, tail, lists_done)``: whether a reduced round ``recv`` lets a steady
call's data run: every header field holds its ``may_run`` condition (no flag set, at most
``lists_done`` coordinator lists before it: this rank executed them all), and every rank sent
this rank's ``tail`` (the same ids offered, none invalid)."""
c_header: Callable[[], str] = _WIRE.c_header

PROTOCOL: tuple[int, ...] = _WIRE.PROTOCOL
"""What a build of the compiled module must report as its ``PROTOCOL`` to be used."""

HEADER_PATH = Path(__file__).with_name("_round_wire.h")
"""The generated C header, checked in beside ``_hotpath.c``."""


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
