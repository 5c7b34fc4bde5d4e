"""The claim kinds: one module per kind, all in the open :data:`CLAIM_KINDS` registry.

Built in: :mod:`~fedaudit.experiments.kinds.convergence`, :mod:`~fedaudit.experiments.kinds.ldp`,
:mod:`~fedaudit.experiments.kinds.robustness`, :mod:`~fedaudit.experiments.kinds.stress` and
:mod:`~fedaudit.experiments.kinds.variance`. Every :class:`~fedaudit.experiments.kind.ClaimKind`
subclass defined in a module of this package is registered when the package is imported (in
module-name order), so a new built-in kind is one new module. A kind of your own is a
:class:`~fedaudit.experiments.kind.ClaimKind` subclass registered with
:func:`register_claim_kind` (or named ``kind = "package.module:Class"`` in a plan); plans
validate its keys, the runner runs it and the report renders its evidence like a built-in's.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind
from fedaudit.registry import Registry

__all__ = ["CLAIM_KINDS", "register_claim_kind", "claim_kind", "check_kind"]

#: claim kind name -> its :class:`ClaimKind` subclass
CLAIM_KINDS: Registry[ClaimKind] = Registry("claim kind")


def register_claim_kind(cls: type[ClaimKind] | None = None, *, replace: bool = False) -> Any:
    """Register a :class:`ClaimKind` subclass under its ``name`` (a decorator, or call it with the
    class). Its plot types must be ones the reports draw
    (:data:`fedaudit.reports.model.PLOT_TYPES`)."""
    if cls is None:
        return lambda c: register_claim_kind(c, replace=replace)
    check_kind(cls)
    return CLAIM_KINDS.register(cls.name, cls, replace=replace, aliases=tuple(cls.former_names))


def check_kind(cls: Any) -> None:
    """Refuse a class the registry cannot hold: not a ClaimKind subclass, no ``name``, or plot
    types the reports cannot draw (one FedAuditError naming it)."""
    from fedaudit.reports.model import PLOT_TYPES

    if not (isinstance(cls, type) and issubclass(cls, ClaimKind)):
        raise FedAuditError(f"a claim kind must be a ClaimKind subclass, got {cls!r}")
    if not isinstance(cls.name, str) or not cls.name.strip():
        raise FedAuditError(f"claim kind {cls.__name__} needs a non-empty class attribute 'name'")
    unknown = [t for t in cls.figures if t not in PLOT_TYPES]
    if unknown:
        raise FedAuditError(f"claim kind {cls.name!r} draws plot type {unknown[0]!r}, which the reports cannot "
                            f"render; use one of {', '.join(PLOT_TYPES)}")


def claim_kind(name: str) -> ClaimKind:
    """The claim kind registered as ``name`` (or a ``"package.module:Class"`` reference), built."""
    cls = CLAIM_KINDS.factory(name)
    check_kind(cls)
    return cls()


def _register_builtins() -> None:
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, ClaimKind) and obj.__module__ == module.__name__:
                register_claim_kind(obj)


_register_builtins()
