"""Issue 62: data planes are registered by name (hvdcore/backends/registry.py) and made only
through the registry; each declaration agrees with its class."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from hvdcore.backends import registry
from hvdcore.backends.base import Backend, PlaneCapabilities
from hvdcore.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
_PROTOCOL = [n for n, v in vars(Backend).items() if inspect.isfunction(v)]


@pytest.mark.parametrize("name", sorted(registry.REGISTRY))
def test_each_plane_class_implements_the_protocol_it_declares(name: str) -> None:
    if registry.info(name).target.startswith("hvdcore.torch"):
        pytest.importorskip("torch")
    cls = registry.plane_class(name)
    missing = [m for m in _PROTOCOL if not callable(getattr(cls, m, None))]
    assert not missing, f"{name} ({cls.__name__}) lacks {missing}"
    assert isinstance(cls.capabilities, PlaneCapabilities)
    declared = registry.info(name)
    assert declared.float16 == ("native" if cls.reduces_float16 else "in float32"), name
    assert set(declared.devices) <= {"host", "cpu", "cuda", "rocm"}
    assert set(declared.controllers) <= {"mpi", "gloo"}
    assert set(declared.dtypes) <= set(registry.CORE_DTYPES)


def test_an_unknown_plane_is_an_error_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"no data plane called 'ib'; known: gloo, "):
        registry.create("ib")


def test_no_plane_is_made_outside_the_registry() -> None:
    """No call of a plane class in hvdcore's code but through :func:`registry.create` (a
    subclass's ``super().__init__`` aside): a new plane is one registry entry."""
    classes = {t.target.partition(":")[2] for t in registry.REGISTRY.values()}
    calls = []
    for path in sorted((ROOT / "hvdcore").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else \
                    f.attr if isinstance(f, ast.Attribute) else None
                if called in classes:
                    calls.append(f"{path.relative_to(ROOT)}:{node.lineno} {called}(...)")
    assert not calls, calls
