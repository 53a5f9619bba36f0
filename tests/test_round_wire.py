"""The cache round's one description (hvdcore/backends/round_wire.py) and the compiled module
that follows it through the generated header: the checked-in header is the generator's output,
the built module speaks the same protocol, and a build that speaks another is refused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib.machinery import ExtensionFileLoader
from importlib.util import find_spec, module_from_spec, spec_from_loader
from pathlib import Path

import pytest
from conftest import ROOT

from hvdcore.backends import base, hotpath, mpi_steady, round_wire
from hvdcore.backends.round_wire import Header
from hvdcore.engine import cache
from hvdcore.engine.cache import RoundVector

BACKENDS = ROOT / "hvdcore" / "backends"


def test_the_checked_in_header_is_the_generators_output() -> None:
    """A change to round_wire.py without ``python -m hvdcore.backends.round_wire --write``
    fails here (and the C module would be built with the old constants)."""
    proc = subprocess.run([sys.executable, "-m", "hvdcore.backends.round_wire", "--header"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == round_wire.c_header()
    assert (BACKENDS / "_round_wire.h").read_text() == proc.stdout, \
        "hvdcore/backends/_round_wire.h is stale: python -m hvdcore.backends.round_wire --write"
    source = (BACKENDS / "_hotpath.c").read_text()
    assert '#include "_round_wire.h"' in source
    assert "ROUND_WIRE_PROTOCOL_VALUES" in source


def test_the_built_module_speaks_the_same_protocol() -> None:
    if find_spec("hvdcore.backends._hotpath") is None:
        pytest.skip("the compiled hot path is not built in this install")
    from hvdcore.backends import _hotpath

    assert _hotpath.PROTOCOL == round_wire.PROTOCOL, (
        f"{_hotpath.__file__} was built from another _round_wire.h: reinstall hvdcore")


def test_every_reader_takes_the_constants_from_the_one_description() -> None:
    assert (base.STEADY_DONE, base.STEADY_NOT_READY, base.STEADY_PENDING) == (
        round_wire.DONE, round_wire.NOT_READY, round_wire.PENDING)
    assert (mpi_steady.DONE, mpi_steady.NOT_READY, mpi_steady.PENDING) == (
        round_wire.DONE, round_wire.NOT_READY, round_wire.PENDING)
    assert cache.FLAG_JOINING is round_wire.FLAG_JOINING
    assert len({round_wire.DONE, round_wire.NOT_READY, round_wire.PENDING}) == 3
    rv = RoundVector(130)
    assert rv.nbytes == round_wire.HEADER_BYTES + 2 * 3 * round_wire.WORD_BYTES


def test_data_may_run_on_rounds_the_engine_packs() -> None:
    """The rule on RoundVector's own packing: every rank offered the same ids, no flag, no
    coordinator list this rank has not executed."""
    rv = RoundVector(128)
    tail = rv.tail([5])
    reduced = rv.buffer()
    rv.pack(reduced, Header(lists=2), [5], [])
    assert reduced.endswith(tail)
    assert round_wire.data_may_run(reduced, tail, lists_done=2)
    assert round_wire.data_may_run(reduced, tail, lists_done=3)
    assert not round_wire.data_may_run(reduced, tail, lists_done=1)  # a list not run yet
    rv.pack(reduced, Header(flags=round_wire.FLAG_JOINING), [5], [])
    assert not round_wire.data_may_run(reduced, tail, lists_done=0)  # a rank joined
    rv.pack(reduced, Header(), [], [])  # a peer did not offer id 5: its miss bit stays set
    assert not round_wire.data_may_run(reduced, tail, lists_done=0)
    rv.pack(reduced, Header(), [5], [9])  # a peer invalidated id 9
    assert not round_wire.data_may_run(reduced, tail, lists_done=0)
    assert rv.unpack(reduced, [5])[0] == Header()
    send = rv.buffer()
    round_wire.pack_steady(send, tail, 7)
    assert rv.unpack(send, [5]) == (Header(lists=7), [5], [])  # a steady call's header


# The C side of a table, compiled: each input line is ``lists lists_done recv_hex tail_hex``;
# it prints what round_pack_steady writes (header and tail, hex) and round_may_run's answer.
_HARNESS = r"""
#include <stdio.h>
#include "_round_wire.h"
static int unhex(const char *s, unsigned char *out) {
    int n = 0; unsigned v;
    while (sscanf(s + 2 * n, "%2x", &v) == 1) out[n++] = (unsigned char)v;
    return n;
}
int main(void) {
    unsigned long long lists, done; char rh[2048], th[2048];
    unsigned char recv[1024], tail[1024], send[1024];
    while (scanf("%llu %llu %2047s %2047s", &lists, &done, rh, th) == 4) {
        int nr = unhex(rh, recv), nt = unhex(th, tail);
        if (nr != ROUND_HEADER_BYTES + nt) return 2;
        memset(send, 0xAB, sizeof send);
        round_pack_steady(send, lists);
        memcpy(send + ROUND_HEADER_BYTES, tail, (size_t)nt);
        for (int i = 0; i < nr; i++) printf("%02x", send[i]);
        printf(" %d\n", round_may_run(recv, tail, (size_t)nt, done));
    }
    return 0;
}
"""


def _cases(wire: object) -> list[tuple[int, int, bytes, bytes]]:
    """Reduced rounds that set each header field, alone and together, to values on both sides
    of every bound, with the tail matching this rank's or not."""
    nwords = wire.HEADER_WORDS  # type: ignore[attr-defined]
    values = (0, 1, 2, 3, 1 << 63)
    tail = bytes(range(1, 17))
    other = bytes([1] * 16)
    cases = []
    for field in range(nwords):
        for v in values:
            for rest in (0, 1):
                words = [rest] * nwords
                words[field] = v
                head = b"".join(w.to_bytes(8, "little") for w in words)
                for lists_done in (0, 2, 3):
                    for sent in (tail, other):
                        cases.append((v, lists_done, head + tail, sent))
    return cases


@pytest.mark.parametrize("extra", [(), (round_wire.Field("epoch", "0", "== 0", "a test"),
                                        round_wire.Field("seen", "lists", "<= lists_done", "t"),
                                        round_wire.Field("free", "lists", "", "no rule"))],
                         ids=["the table", "three more rows"])
def test_the_c_header_and_the_python_agree_field_by_field(extra: tuple, tmp_path: Path) -> None:
    """Compile the generated header and compare its round_pack_steady and round_may_run with
    the generated Python, on every header field; with rows added to the table too (a header
    field is one row: nothing else changes by hand)."""
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        pytest.skip("no C compiler")
    wire = round_wire.build(round_wire.FIELDS + extra)
    assert wire.HEADER_BYTES == 8 * (len(round_wire.FIELDS) + len(extra))
    (tmp_path / "_round_wire.h").write_text(wire.c_header())
    (tmp_path / "harness.c").write_text(_HARNESS)
    proc = subprocess.run([cc, "-O1", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "h"),
                           str(tmp_path / "harness.c")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cases = _cases(wire)
    text = "".join(f"{lists} {done} {recv.hex()} {tail.hex()}\n"
                   for lists, done, recv, tail in cases)
    out = subprocess.run([str(tmp_path / "h")], input=text, capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    assert len(out) == len(cases)
    answers = set()
    for (lists, done, recv, tail), line in zip(cases, out, strict=True):
        send = bytearray(len(recv))
        wire.pack_steady(send, tail, lists)
        may = wire.data_may_run(recv, tail, done)
        answers.add(may)
        assert line == f"{send.hex()} {int(may)}", (lists, done, recv.hex(), tail.hex())
        header = wire.Header.unpack_from(send)
        assert header == wire.Header(**{f.name: lists if f.steady == "lists" else 0
                                        for f in round_wire.FIELDS + extra})
    assert answers == {True, False}


def test_a_table_outside_the_vocabulary_is_refused() -> None:
    bad = [round_wire.Field("lists_done", "0", "", "a name the rule uses"),
           round_wire.Field("x", "lists_done", "", "not a steady value"),
           round_wire.Field("x", "0", "<= lists", "not a bound"),
           round_wire.Field("x", "0", "=~ 0", "not an operator")]
    for row in bad:
        with pytest.raises(ValueError, match="round field"):
            round_wire.build(round_wire.FIELDS + (row,))
    with pytest.raises(ValueError, match="round field"):
        round_wire.build(round_wire.FIELDS + (round_wire.FIELDS[0],))


def test_a_build_for_another_protocol_is_refused(tmp_path: Path) -> None:
    """Build _hotpath.c with a header of another protocol version (the same compiler wrapper
    setup.py uses) and ask the runtime's decision about it."""
    mpicc = shutil.which(os.environ.get("MPICC", "mpicc"))
    if mpicc is None:
        pytest.skip("no MPI compiler wrapper (mpicc) to build the module with")
    shutil.copy(BACKENDS / "_hotpath.c", tmp_path / "_hotpath.c")
    version = f"#define ROUND_WIRE_VERSION {round_wire.VERSION}\n"
    header = round_wire.c_header()
    assert version in header
    (tmp_path / "_round_wire.h").write_text(
        header.replace(version, f"#define ROUND_WIRE_VERSION {round_wire.VERSION + 1}\n"))
    out = tmp_path / f"_hotpath{sysconfig.get_config_var('EXT_SUFFIX')}"
    proc = subprocess.run([mpicc, "-shared", "-fPIC", "-O0", f"-I{sysconfig.get_paths()['include']}",
                           str(tmp_path / "_hotpath.c"), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loader = ExtensionFileLoader("_hotpath", str(out))
    stale = module_from_spec(spec_from_loader("_hotpath", loader))
    loader.exec_module(stale)
    assert stale.PROTOCOL[0] == round_wire.VERSION + 1
    assert stale.PROTOCOL[1:] == round_wire.PROTOCOL[1:]
    module, why = hotpath.decide("", need_initialized=False, module=stale)
    assert module is None and "another round protocol" in why, why
    assert repr(round_wire.PROTOCOL) in why, why


def test_an_install_where_mpicc_is_has_the_compiled_module() -> None:
    """setup.py builds it where an MPI compiler wrapper is (scripts/setup.sh installs one): the
    install must not lose it silently, or benchmarks/allreduce.py's figures would be the
    slower path's. Installs without a wrapper, or built with HVDCORE_BUILD_HOTPATH=0, run the
    mpi4py path (tests/test_fallback_install.py)."""
    if shutil.which(os.environ.get("MPICC", "mpicc")) is None:
        pytest.skip("no mpicc here: this install runs the mpi4py path")
    if os.environ.get("HVDCORE_BUILD_HOTPATH") == "0":
        pytest.skip("HVDCORE_BUILD_HOTPATH=0: built without the compiled module on purpose")
    assert find_spec("hvdcore.backends._hotpath") is not None, (
        "mpicc is on PATH but hvdcore.backends._hotpath is not built: reinstall "
        "(scripts/setup.sh, or pip install -e .) and read the build log")
