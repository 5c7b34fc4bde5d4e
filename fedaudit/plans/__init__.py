"""Example plans shipped with fedaudit as package data.

``demo.toml`` is the plan ``fedaudit demo`` runs. Load the text with :func:`plan_text` or get a
real file path with :func:`plan_path` (a context manager, valid also from a zipped install).
:func:`describe` gives a plan's one-line title (``fedaudit plans`` lists them) and :func:`resolve`
turns what a user typed after ``fedaudit run`` (a plan file or a shipped plan's name) into a path,
so the documented ``fedaudit run accounting --out DIR`` works after ``pip install`` from any folder.
"""
from __future__ import annotations

import contextlib
import importlib.resources as _resources
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

__all__ = ["available", "plan_text", "plan_path", "describe", "resolve"]


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


def describe(name: str) -> str:
    """The one-line description of the shipped plan ``name``: its ``[plan] title``."""
    title = tomllib.loads(plan_text(name)).get("plan", {}).get("title", "")
    return " ".join(str(title).split())


@contextlib.contextmanager
def resolve(plan: str | os.PathLike) -> Iterator[Path]:
    """The path of the plan ``fedaudit run PLAN`` means, for the duration of the ``with`` block.

    An existing file wins (a path keeps working exactly as before, even when its name is also a
    shipped plan's); otherwise a shipped plan's name (``accounting``, with or without ``.toml``)
    gives its packaged file. Anything else is one :class:`~fedaudit.errors.FedAuditError` listing
    the shipped names, so a typo is answered with the choices rather than a bare "not found".
    """
    path = Path(plan)
    if path.exists():
        yield path
        return
    name = path.name.removesuffix(".toml") if str(path) == path.name else str(plan)
    if name not in available():
        from fedaudit.errors import FedAuditError
        raise FedAuditError(f"plan {str(plan)!r} is neither a file nor a shipped plan; shipped plans: "
                            f"{', '.join(available())} (fedaudit plans describes them)")
    with plan_path(name) as p:
        yield p
