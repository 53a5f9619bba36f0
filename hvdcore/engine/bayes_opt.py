"""Bayesian optimisation of a noisy score over a box: the autotuner's search.

A Gaussian process (squared-exponential kernel on coordinates scaled to [0, 1], scores
standardised, ``noise`` added to the kernel's diagonal) models the score seen so far; the next
point is the one of a set of candidates with the largest expected improvement over the best
predicted score of the points tried. The candidates are random points of the box and points
near the best one tried, drawn from a generator seeded once, so that a run is reproducible.
NumPy only: a handful of points in one or two dimensions needs no optimiser library.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BayesianOptimizer"]

_LENGTHS = (0.05, 0.1, 0.2, 0.35, 0.6, 1.0)  # kernel length scales tried (scaled units)
_CANDIDATES = 2048
_XI = 0.01  # how much improvement is worth exploring for, in standardised score units


class BayesianOptimizer:
    """Propose where to measure next, from the (point, score) pairs given so far.

    ``bounds``: one ``(low, high)`` per dimension; ``noise``: the variance added to the
    kernel's diagonal (how little one score is trusted: Horovod's Gaussian-process noise);
    ``seed``: the candidates' generator.
    """

    def __init__(self, bounds: list[tuple[float, float]], noise: float, seed: int = 0) -> None:
        if not bounds:
            raise ValueError("BayesianOptimizer needs at least one dimension")
        self.low = np.array([b[0] for b in bounds], dtype=np.float64)
        self.high = np.array([b[1] for b in bounds], dtype=np.float64)
        if np.any(self.high <= self.low):
            raise ValueError(f"each bound must be (low, high) with low < high, got {bounds}")
        self.noise = max(float(noise), 1e-6)
        self._rng = np.random.default_rng(seed)
        self.xs: list[np.ndarray] = []
        self.ys: list[float] = []

    def add(self, x: list[float] | np.ndarray, y: float) -> None:
        """Record that point ``x`` scored ``y`` (higher is better)."""
        self.xs.append(np.asarray(x, dtype=np.float64))
        self.ys.append(float(y))

    def _scaled(self, x: np.ndarray) -> np.ndarray:
        return (x - self.low) / (self.high - self.low)

    def propose(self) -> list[float]:
        """The next point to try: inside the bounds, the largest expected improvement."""
        d = len(self.low)
        cand = self._rng.random((_CANDIDATES, d))
        if not self.xs:
            return list(self.low + cand[0] * (self.high - self.low))
        x = self._scaled(np.stack(self.xs))
        y = np.asarray(self.ys)
        std = y.std()
        y = (y - y.mean()) / (std if std > 0 else 1.0)
        best = x[int(np.argmax(y))]
        near = np.clip(best + self._rng.normal(0.0, 0.05, (_CANDIDATES // 4, d)), 0.0, 1.0)
        cand = np.concatenate([cand, near])
        length = max(_LENGTHS, key=lambda ell: self._evidence(x, y, ell))
        mu, sigma, mu_seen = self._posterior(x, y, length, cand)
        ei = _expected_improvement(mu, sigma, float(mu_seen.max()))
        pick = cand[int(np.argmax(ei))] if ei.max() > 0 else cand[int(np.argmax(sigma))]
        return list(self.low + pick * (self.high - self.low))

    def _kernel(self, a: np.ndarray, b: np.ndarray, length: float) -> np.ndarray:
        sq = ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
        return np.exp(-0.5 * sq / (length * length))

    def _evidence(self, x: np.ndarray, y: np.ndarray, length: float) -> float:
        """Log marginal likelihood of the scores under length scale ``length``."""
        k = self._kernel(x, x, length) + self.noise * np.eye(len(x))
        chol = np.linalg.cholesky(k)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        return float(-0.5 * y @ alpha - np.log(np.diag(chol)).sum())

    def _posterior(self, x: np.ndarray, y: np.ndarray, length: float, at: np.ndarray
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = self._kernel(x, x, length) + self.noise * np.eye(len(x))
        chol = np.linalg.cholesky(k)
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, y))
        k_at = self._kernel(at, x, length)
        mu = k_at @ alpha
        v = np.linalg.solve(chol, k_at.T)
        var = np.clip(1.0 - (v * v).sum(axis=0), 0.0, None)
        mu_seen = self._kernel(x, x, length) @ alpha
        return mu, np.sqrt(var), mu_seen


def _expected_improvement(mu: np.ndarray, sigma: np.ndarray, incumbent: float) -> np.ndarray:
    imp = mu - incumbent - _XI
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(sigma > 0, imp / sigma, 0.0)
    cdf = 0.5 * np.vectorize(math.erfc)(-z / math.sqrt(2.0))
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
    return np.where(sigma > 0, imp * cdf + sigma * pdf, 0.0)
