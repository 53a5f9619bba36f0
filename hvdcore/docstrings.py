"""Google-style ``Args:``, ``Returns:`` and ``Raises:`` sections for the public API, written once.

The core's collectives and the bindings' share their parameters (``name``, ``op``,
``process_set``, ...). Each public function keeps its own summary and example; :func:`documented`
adds the sections, describing every parameter from :data:`PARAMS` (or the function's own
wording), so that ``help()`` and the API reference (``sphinx.ext.napoleon``) say the same thing
everywhere. A parameter with no description is an error at import time: the sections cannot
drift from the signatures.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: What each collective's input is, by kind.
TENSOR = {
    "allreduce": "The tensor to reduce: the same shape and dtype on every rank of the set.",
    "allgather": "This rank's part: the same dtype and trailing dimensions on every rank; the "
                 "first dimension may differ.",
    "broadcast": "On the root, the tensor to send; on the other ranks, a tensor of the same "
                 "shape and dtype (overwritten by the in-place forms).",
    "alltoall": "The tensor whose first-dimension slices go to the ranks of the set, in rank "
                "order.",
    "reducescatter": "The tensor to reduce (the same shape and dtype on every rank); each rank "
                     "gets its block of the result along the first dimension.",
}

#: Every other parameter of the public collectives, as the API reference describes it.
PARAMS = {
    "average": "Horovod's older spelling of ``op``: True is Average, False is Sum. Give ``op`` "
               "instead; giving both is an error.",
    "name": "The operation's name, the same on every rank. None: an automatic name from the "
            "order of the calls (ranks must then make them in the same order), never kept in "
            "the response cache.",
    "op": "The reduction: ``Average`` (the default), ``Sum``, ``Adasum``, ``Min``, ``Max`` "
          "or ``Product``. An average of integers truncates toward zero. ``Adasum`` (float "
          "host tensors, the global set, 1, 2, 4, ... ranks, as Horovod's) combines the "
          "ranks' tensors pairwise: their sum when orthogonal, their average when parallel.",
    "prescale_factor": "Every rank's input is multiplied by it before the reduction.",
    "postscale_factor": "The result is multiplied by it after the reduction.",
    "process_set": "The ranks that take part (default: all, ``global_process_set``). Every "
                   "rank of the set must make the call; a rank outside it must not.",
    "out": "An array that receives the result: ``tensor`` itself (in place) or an array of "
           "its shape and dtype. None: a new array.",
    "root_rank": "The global rank (a member of the process set) whose tensor every rank "
                 "receives.",
    "splits": "How many first-dimension slices go to each rank of the set, in rank order "
              "(they sum to the first dimension). None: equal parts.",
    "handle": "A handle returned by an ``*_async`` call.",
    "obj": "Any picklable object.",
    "compression": "How the tensor travels: ``Compression.none`` (the default) or "
                   "``Compression.fp16`` (floating-point tensors sent as float16, the result "
                   "cast back).",
    "gradient": "Keyword only. ``\"horovod\"`` (the default): Horovod 0.28.1's gradient of "
                "this collective. ``\"exact\"``: the exact derivative of the sum of every "
                "rank's loss.",
    "comm": "None (``MPI_COMM_WORLD``), a list of world ranks, or an mpi4py communicator: the "
            "processes that form the job.",
    "process_sets": "ProcessSet objects to register now, the same list on every rank.",
    "file_path": "Where the timeline goes: a file (rank 0 writes it), or an existing directory "
                 "or a path ending in '/' (every rank writes ``timeline-rank<N>.json`` there).",
    "mark_cycles": "Also mark every engine cycle that sent work.",
}

#: What any collective may raise, on every rank of the set.
COLLECTIVE_RAISES = (
    ("NotInitializedError", "``init()`` has not been called."),
    ("ValueError", "an argument is invalid on some rank (an ``ArgumentError``): every rank "
                   "raises it, naming that rank and the reason."),
    ("TypeError", "an argument has a type the call cannot take on some rank (an "
                  "``UnsupportedError``), raised likewise on every rank."),
    ("MismatchError", "the ranks' calls disagree (shape, dtype, op, root): raised on every "
                      "rank, naming both sides."),
)

#: What ``synchronize`` raises: the operation's own error, on every rank it failed on.
SYNC_RAISES = (
    ("HvdcoreError", "the operation failed (``MismatchError``, ``StallError``, "
                     "``RankFailedError``, ...): the same error as its blocking form raises."),
    ("TypeError", "``handle`` is not a handle (an ``UnsupportedError``)."),
)

#: What registering or removing a process set raises.
PROCESS_SET_RAISES = (
    ("NotInitializedError", "``init()`` has not been called."),
    ("ValueError", "the ranks are empty, out of range or repeated, the set is already "
                   "registered, or the ranks disagree (an ``ArgumentError``, on every rank)."),
)

#: What starting a timeline raises.
INIT_RAISES = (("NotInitializedError", "``init()`` has not been called."),)

#: What ``init()`` raises.
INIT_ERRORS = (
    ("ConfigError", "an ``HVDCORE_*`` (or ``HOROVOD_*``) variable is unknown or malformed."),
    ("CapabilityError", "MPI was initialized below ``MPI_THREAD_SERIALIZED``."),
)


def _block(title: str, items: list[tuple[str, str]]) -> list[str]:
    return [f"{title}:", *(f"    {name}: {text}" for name, text in items)] if items else []


def documented(kind: str | None = None, returns: str | None = None,
               raises: tuple[tuple[str, str], ...] = COLLECTIVE_RAISES,
               **own: str) -> Callable[[F], F]:
    """Decorator: add ``Args:`` (every parameter: ``own`` wording first, then the input of
    ``kind`` for ``tensor``/``tensors``, then :data:`PARAMS`), ``Returns:`` and ``Raises:``
    to the function's docstring, before its example. Returns the function itself."""

    def add(fn: F) -> F:
        args = []
        for pname in inspect.signature(fn).parameters:
            text = own.get(pname)
            if text is None and pname in ("tensor", "tensors") and kind is not None:
                text = TENSOR[kind]
                if pname == "tensors":
                    text = "The tensors, in the same order on every rank; for each: " + \
                           text[0].lower() + text[1:]
            text = text or PARAMS.get(pname)
            if text is None:
                raise TypeError(f"{fn.__qualname__}: no description of parameter {pname!r}")
            args.append((pname, text))
        lines = inspect.cleandoc(fn.__doc__ or "").splitlines()
        cut = next((i for i, line in enumerate(lines)
                    if line.startswith(">>>") or line.rstrip() == "Example::"), len(lines))
        head, tail = lines[:cut], lines[cut:]
        while head and not head[-1].strip():
            head.pop()
        sections = _block("Args", args)
        if returns:
            sections += ["", "Returns:", f"    {returns}"]
        if raises:
            sections += [""] + _block("Raises", list(raises))
        fn.__doc__ = "\n".join([*head, "", *sections, *([""] + tail if tail else [])])
        return fn

    return add
