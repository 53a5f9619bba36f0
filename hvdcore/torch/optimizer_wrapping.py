"""What the torch binding's optimizers (``DistributedOptimizer`` and the Adasum one) share as
wrappers of the user's optimizer: its ``state_dict`` and the number of backward passes a step.

:class:`WrapsOptimizer` is a mixin placed before ``torch.optim.Optimizer`` in their bases; it
reads the attributes their ``__init__`` sets (annotated below).
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["WrapsOptimizer"]


class WrapsOptimizer:
    """``state_dict``/``load_state_dict`` of the wrapped optimizer, and
    ``set_backward_passes_per_step``."""

    wrapped_optimizer: torch.optim.Optimizer
    param_groups: list[dict[str, Any]]
    state: Any
    backward_passes_per_step: int
    _delay: dict[int, int]

    def state_dict(self) -> dict[str, Any]:
        """The wrapped optimizer's state dict."""
        return self.wrapped_optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load into the wrapped optimizer."""
        self.wrapped_optimizer.load_state_dict(state_dict)
        self.state = self.wrapped_optimizer.state
        self.param_groups = self.wrapped_optimizer.param_groups

    def set_backward_passes_per_step(self, passes: int) -> None:
        """Change ``backward_passes_per_step`` (between steps)."""
        self.backward_passes_per_step = passes
        for k in self._delay:
            self._delay[k] = passes
