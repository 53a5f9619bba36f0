"""The control channel: announcements go to the coordinator, ordered response lists come back.

Every rank announces the requests it cannot run from the response cache; world rank 0 hosts
the :class:`~hvdcore.engine.coordinator.Coordinator` and answers with lists of responses that
every rank runs in the same order. A list carries a *fence* (see
:mod:`hvdcore.engine.cache`); stall warnings and aborts travel beside the list and run at once.
Messages are pickled tuples over the :class:`~hvdcore.backends.base.ControlPlane`.
"""

from __future__ import annotations

import pickle
from typing import Any

from hvdcore.engine.coordinator import Coordinator
from hvdcore.engine.messages import Meta, Response

TAG_ANNOUNCE = 11
TAG_RESPONSE = 12

#: One received list: (fence, ordered responses, out-of-band responses).
Delivery = tuple[int, list[Response], list[Response]]


class ControlChannel:
    """This rank's end of the control channel (rank 0's end also feeds the coordinator)."""

    def __init__(self, plane: Any, coordinator: Coordinator | None) -> None:
        self.plane = plane
        self.coordinator = coordinator
        self.rank: int = plane.rank
        self.size: int = plane.size

    def announce(self, metas: list[Meta]) -> None:
        """Tell the coordinator about requests this rank submitted."""
        if self.coordinator is not None:
            self.coordinator.add(0, metas)
        else:
            self.plane.send(pickle.dumps([m.wire() for m in metas], 5), 0, TAG_ANNOUNCE)

    def report_waiting(self, waiting: list[tuple[str, float]]) -> None:
        """Tell the coordinator which cached allreduces this rank has long waited for."""
        if self.coordinator is not None:
            for name, age in waiting:
                self.coordinator.note_waiting(0, name, age)
        else:
            self.plane.send(pickle.dumps({"waiting": waiting}, 5), 0, TAG_ANNOUNCE)

    def collect(self) -> bool:
        """Rank 0: feed every waiting announcement to the coordinator; True if any came."""
        coord = self.coordinator
        assert coord is not None
        receive = self.plane.receive
        got = False
        while True:
            msg = receive(None, TAG_ANNOUNCE)
            if msg is None:
                return got
            source, payload = msg
            body = pickle.loads(payload)
            if isinstance(body, dict):  # cached allreduces a rank has long waited for
                for name, age in body["waiting"]:
                    coord.note_waiting(source, name, age)
            else:
                coord.add(source, [Meta(*t) for t in body])
            got = True

    def publish(self, fence: int, ordered: list[Response], oob: list[Response]) -> None:
        """Rank 0: send a response list (and its out-of-band responses) to every other rank."""
        if self.size > 1:
            payload = pickle.dumps(
                (fence, [r.wire() for r in ordered], [r.wire() for r in oob]), 5)
            for dest in range(1, self.size):
                self.plane.send(payload, dest, TAG_RESPONSE)

    def receive(self) -> Delivery | None:
        """Ranks other than 0: the next response list from rank 0, or None if none waits."""
        msg = self.plane.receive(0, TAG_RESPONSE)
        if msg is None:
            return None
        fence, ordered, oob = pickle.loads(msg[1])
        return fence, [Response(*t) for t in ordered], [Response(*t) for t in oob]

    def flush(self) -> bool:
        """Complete finished sends; True while some are in flight."""
        return self.plane.flush()
