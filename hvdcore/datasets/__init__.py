"""Offline datasets for the examples, benchmarks and checks (nothing is downloaded at run time).

Example::

    >>> from hvdcore.datasets import mnist
    >>> x_train, y_train, x_test, y_test = mnist.load()   # doctest: +SKIP
"""

from __future__ import annotations

from hvdcore.datasets import mnist
from hvdcore.datasets.mnist import MnistDataError

__all__ = ["mnist", "MnistDataError"]
