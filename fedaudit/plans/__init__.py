"""Example plans shipped with fedaudit as package data.

``demo.toml`` is the plan ``fedaudit demo`` runs. Load the text with :func:`plan_text` or get a
real file path with :func:`plan_path` (a context manager, valid also from a zipped install).
"""
from __future__ import annotations

import contextlib
import importlib.resources as _resources
from collections.abc import Iterator
from pathlib import Path

__all__ = ["available", "plan_text", "plan_path"]


def available() -> list[str]:
    """Names (without ``.toml``) of the plans shipped in this package, sorted."""
    return sorted(p.name[:-5] for p in _resources.files(__name__).iterdir()
                  if p.name.endswith(".toml"))


def _resource(name: str):
    if name not in available():
        from fedaudit.errors import FedAuditError
        raise FedAuditError(f"no shipped plan named {name!r}; available: {', '.join(available())}")
    return _resources.files(__name__) / f"{name}.toml"


def plan_text(name: str = "demo") -> str:
    """The UTF-8 text of the shipped plan ``name``."""
    return _resource(name).read_text(encoding="utf-8")


@contextlib.contextmanager
def plan_path(name: str = "demo") -> Iterator[Path]:
    """A filesystem path to the shipped plan ``name`` for the duration of the ``with`` block."""
    with _resources.as_file(_resource(name)) as p:
        yield Path(p)
