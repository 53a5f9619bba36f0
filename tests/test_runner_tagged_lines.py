"""LineJoiner: Open MPI's per-write ``--tag-output`` stream (and Hydra's ``-l``) back into whole
tagged lines."""

from __future__ import annotations

import random

import pytest

from hvdcore.runner.tagged_lines import HYDRA, LineJoiner, TagFormat

# Recorded on the test VM (Open MPI 4.1.4): PYTHONUNBUFFERED=1 mpirun --tag-output -np 2, each
# rank printing print('loss', r, 0.5); write('part'), flush, write(f'ial {r}\n');
# print('step', 1, 'of', 2). Rank 1's print()s reached mpirun one write at a time.
RECORDED = (b"[1,1]<stdout>:loss[1,1]<stdout>: [1,1]<stdout>:1[1,1]<stdout>: [1,1]<stdout>:0.5"
            b"[1,1]<stdout>:\n[1,1]<stdout>:part[1,1]<stdout>:ial 1\n[1,1]<stdout>:step"
            b"[1,1]<stdout>: [1,1]<stdout>:1[1,1]<stdout>: [1,1]<stdout>:of[1,1]<stdout>: "
            b"[1,1]<stdout>:2[1,1]<stdout>:\n[1,0]<stdout>:loss [1,0]<stdout>:0 0.5\n"
            b"[1,0]<stdout>:partial 0\n[1,0]<stdout>:step 1 of 2\n")
WHOLE = [f"[1,{r}]<stdout>:{text}" for r in (1, 0)
         for text in (f"loss {r} 0.5", f"partial {r}", "step 1 of 2")]


# Recorded on the test VM (MPICH 5.0.2's Hydra, the PyPI wheel): the same program under
# PYTHONUNBUFFERED=1 mpirun -l -np 2 (PMI_RANK for r). Rank 1's print()s arrived a write at a time.
HYDRA_RECORDED = (b"[1] loss[1]  [1] 1[1]  [1] 0.5[1] \n[1] part[1] ial 1\n[1] step[1]  [1] 1"
                  b"[1]  [1] of[1]  [1] 2[1] \n[0] loss[0]  0 0.5\n[0] partial 0\n"
                  b"[0] step 1 of 2\n")
HYDRA_WHOLE = [f"[{r}] {text}" for r in (1, 0)
               for text in (f"loss {r} 0.5", f"partial {r}", "step 1 of 2")]


def joined(stream: bytes, cuts: list[int], tags: TagFormat | None = None) -> bytes:
    """``stream`` fed in pieces ending at ``cuts``, then flushed."""
    joiner = LineJoiner() if tags is None else LineJoiner(tags)
    out, start = bytearray(), 0
    for end in [*cuts, len(stream)]:
        out += joiner.feed(stream[start:end])
        start = end
    return bytes(out + joiner.flush())


@pytest.mark.parametrize("seed", range(5))
def test_recorded_stream_gives_whole_lines_however_it_is_read(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(RECORDED)), 40))
    assert joined(RECORDED, cuts).decode().splitlines() == WHOLE
    every_byte = list(range(1, len(RECORDED)))
    assert joined(RECORDED, every_byte).decode().splitlines() == WHOLE


@pytest.mark.parametrize("seed", range(5))
def test_recorded_hydra_stream_gives_whole_lines_however_it_is_read(seed: int) -> None:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(HYDRA_RECORDED)), 40))
    assert joined(HYDRA_RECORDED, cuts, HYDRA).decode().splitlines() == HYDRA_WHOLE
    every_byte = list(range(1, len(HYDRA_RECORDED)))
    assert joined(HYDRA_RECORDED, every_byte, HYDRA).decode().splitlines() == HYDRA_WHOLE


def test_hydra_brackets_that_are_no_tag_stay_text() -> None:
    joiner = LineJoiner(HYDRA)
    assert joiner.feed(b"[0] x = [") == b""
    assert joiner.feed(b"1]\n[0] a[2]=3\n[1") == b"[0] x = [1]\n[0] a[2]=3\n"
    assert joiner.feed(b"2] y\n") == b"[12] y\n"
    assert joiner.feed(b"[0] z[") == b""
    assert joiner.flush() == b"[0] z["


def test_interleaved_partial_lines_of_two_ranks_are_kept_apart() -> None:
    stream = (b"[1,0]<stdout>:part[1,1]<stderr>:warn[1,0]<stdout>:ial\n"
              b"[1,1]<stderr>:ing\n")
    assert joined(stream, []) == b"[1,0]<stdout>:partial\n[1,1]<stderr>:warning\n"


def test_mpiruns_own_text_after_a_newline_stays_untagged() -> None:
    stream = (b"[1,0]<stdout>:a[1,0]<stdout>:\n-----\nmpirun noticed that process rank 1 "
              b"exited\n[1,1]<stdout>:b\n")
    assert joined(stream, [20, 30]) == (b"[1,0]<stdout>:a\n-----\nmpirun noticed that process "
                                        b"rank 1 exited\n[1,1]<stdout>:b\n")


def test_a_pause_lets_an_unfinished_line_out_tagged() -> None:
    joiner = LineJoiner()
    assert joiner.feed(b"[1,0]<stdout>:epoch 1 ...") == b""
    assert joiner.flush() == b"[1,0]<stdout>:epoch 1 ..."
    assert joiner.flush() == b""
    assert joiner.feed(b"[1,0]<stdout>: done\n") == b"[1,0]<stdout>: done\n"


def test_a_read_that_ends_inside_a_tag_or_on_a_bracket() -> None:
    joiner = LineJoiner()
    assert joiner.feed(b"[1,0]<stdout>:x = [") == b""
    assert joiner.feed(b"1, 2]\n[1,0]<std") == b"[1,0]<stdout>:x = [1, 2]\n"
    assert joiner.feed(b"out>:y\n") == b"[1,0]<stdout>:y\n"
    assert joiner.feed(b"[1,0]<stdout>:z = [") == b""
    assert joiner.flush() == b"[1,0]<stdout>:z = ["  # the pause: the bracket was text


def test_progress_bar_redraws_stay_one_line_each() -> None:
    stream = b"[1,0]<stderr>:\r 10%[1,0]<stderr>:\r 20%[1,0]<stderr>:\r100%\n"
    assert joined(stream, []) == (b"[1,0]<stderr>: 10%\r[1,0]<stderr>: 20%\r"
                                  b"[1,0]<stderr>:100%\n")
