"""The autotuner's parameters and the chain that searches them (Horovod's ``ParameterManager``).

A chain is a list of parameters, the fusion threshold and cycle time first (one *joint*
parameter, searched by test points then Bayesian optimisation), then yes/no choices
(hierarchical allreduce, hierarchical allgather). A score goes to the first parameter; when
that one has finished its search it starts over and the score goes on to the next, which moves
to its next value. So the whole joint search runs again under every combination of the
choices, as in Horovod.

Every parameter remembers the value it had when the best score reaching it so far was set
(Horovod's ``UpdateBestValue``: the joint parameter sees every score; a choice sees the best
score when a search under its current value ends). When the last parameter finishes, the best
values of all of them are the set that scored best.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from hvdcore.engine.bayes_opt import BayesianOptimizer

__all__ = ["Tunable", "Choice", "JointSearch", "tune_chain"]


class Tunable(ABC):
    """One parameter of the chain: the value in force, the best value, the best score."""

    def __init__(self, initial: Any) -> None:
        self.initial = initial
        self.value = initial
        self.best = initial
        self.best_score = 0.0
        self.tunable = True

    def fix(self, value: Any) -> None:
        """Hold ``value`` (set by the user, or nothing to choose): never tuned."""
        self.value = self.best = value
        self.tunable = False

    def tune(self, score: float) -> tuple[bool, float]:
        """Take ``score`` (measured with the current values); returns whether this parameter
        has finished its search (it then starts over at its first value) and the best score
        it has seen, for the next parameter of the chain."""
        if score > self.best_score:
            self.best_score, self.best = score, self.value
        best = self.best_score
        if not self.tunable:
            return True, best
        self._advance(score)
        if self._done():
            self.value = self.initial
            self._restart()
            return True, best
        return False, best

    @abstractmethod
    def _advance(self, score: float) -> None:
        """Move to the next value to try (``score`` was measured with the current one)."""

    @abstractmethod
    def _done(self) -> bool:
        """Whether every value this search tries has been scored."""

    @abstractmethod
    def _restart(self) -> None:
        """Forget the search (the next one starts from the first value)."""


class Choice(Tunable):
    """A parameter tried at each of ``values`` in turn (Horovod's categorical parameter)."""

    def __init__(self, values: Sequence[Any]) -> None:
        super().__init__(values[0])
        self.values = list(values)
        self._index = 0

    def _advance(self, score: float) -> None:
        self._index += 1
        if self._index < len(self.values):
            self.value = self.values[self._index]

    def _done(self) -> bool:
        return self._index >= len(self.values)

    def _restart(self) -> None:
        self._index = 0


class JointSearch(Tunable):
    """Points of a box: the ``test_points`` first, then where a Bayesian optimiser expects the
    most improvement; finished after ``max_samples + 1`` scores (Horovod's
    ``BAYES_OPT_MAX_SAMPLES``). Values are lists of floats, one per dimension of ``bounds``."""

    def __init__(self, bounds: list[tuple[float, float]], test_points: Sequence[list[float]],
                 max_samples: int, noise: float) -> None:
        super().__init__(list(test_points[0]))
        self.test_points = [list(p) for p in test_points]
        self.max_samples = max_samples
        self._bounds = bounds
        self._noise = noise
        self._runs = 0  # searches started: each gets its own seed, reproducibly
        self.iteration = 0
        self._bayes = BayesianOptimizer(bounds, noise, seed=0)

    def _advance(self, score: float) -> None:
        self._bayes.add(self.value, score)
        self.iteration += 1
        if self.iteration < len(self.test_points):
            self.value = list(self.test_points[self.iteration])
        else:
            self.value = self._bayes.propose()

    def _done(self) -> bool:
        return self.iteration > self.max_samples

    def _restart(self) -> None:
        self.iteration = 0
        self._runs += 1
        self._bayes = BayesianOptimizer(self._bounds, self._noise, seed=self._runs)


def tune_chain(chain: Sequence[Tunable], score: float) -> bool:
    """Give ``score`` to the chain (Horovod's ``Tune``); True when every parameter has
    finished (the best values are then the set to keep)."""
    best = score
    for param in chain:
        finished, best = param.tune(best)
        if not finished:
            return False
    return True
