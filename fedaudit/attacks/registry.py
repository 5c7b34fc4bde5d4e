"""Byzantine attacks by name: :data:`ATTACKS` (a :class:`fedaudit.registry.Registry`),
:func:`register_attack` for users' own attacks and :func:`make_attack`.

A factory is called with the attack's constructor keywords and returns a callable
``attack(honest, f, rng) -> (f, d)`` (normally a :class:`~fedaudit.attacks.byzantine.Attack`).
``"package.module:attr"`` is accepted wherever a name is. :class:`~fedaudit.attacks.byzantine.Optimal`
wraps an attack and an aggregator, so it is not registered.
"""

from __future__ import annotations

from typing import Any, Callable

from fedaudit.attacks.byzantine import ALIE, IPM, Attack, Fang, GaussianNoise, MinMax, MinSum, Mimic, NonFinite, SignFlip
from fedaudit.attacks.sparse import ArbitraryPackets, SparseALIE, SparseIPM
from fedaudit.errors import FedAuditError
from fedaudit.registry import Registry, did_you_mean

__all__ = ["ATTACKS", "register_attack", "make_attack", "SPARSE_ATTACKS", "register_sparse_attack",
           "make_sparse_attack"]

#: Byzantine attacks by name.
ATTACKS: Registry[Attack] = Registry("attack")
for _cls in (ALIE, IPM, SignFlip, GaussianNoise, Mimic, MinMax, MinSum, Fang, NonFinite):
    ATTACKS.register(_cls.name, _cls)
del _cls

#: Byzantine attacks on the gated sparse upload by name (call convention of :mod:`fedaudit.attacks.sparse`:
#: ``attack(honest_packets, f, rng, *, upload, previous)``); separate from :data:`ATTACKS`, whose
#: members take dense (n − f, d) matrices.
SPARSE_ATTACKS: Registry[Any] = Registry("sparse attack")
for _cls in (SparseALIE, SparseIPM, ArbitraryPackets):
    SPARSE_ATTACKS.register(_cls.name, _cls)
del _cls


def register_attack(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                    replace: bool = False) -> Any:
    """Register an attack class or factory under ``name`` (a decorator without ``factory``)."""
    return ATTACKS.register(name, factory, summary=summary, replace=replace)


def make_attack(name: str, **kw: Any) -> Attack:
    """Build an attack by name (or ``"package.module:attr"``) with constructor keywords, e.g.
    ``make_attack("ipm", tau=2)``."""
    return _make(ATTACKS, name, kw)


def _make(registry: Registry, name: Any, kw: dict[str, Any]) -> Any:
    """``registry.build(name, **kw)`` with one FedAuditError for an unknown name (the valid names
    and the nearest one) or for constructor keywords the factory rejects."""
    what = registry.kind
    if not isinstance(name, str) or name not in registry:
        hint = did_you_mean(name, registry.names()) if isinstance(name, str) else ""
        raise FedAuditError(f"unknown {what} {name!r}; valid names: {', '.join(registry.names())} "
                            f"(or 'package.module:attr'){hint}")
    try:
        return registry.build(name, **kw)
    except TypeError as err:
        raise FedAuditError(f"bad parameters for {what} {name!r}: {err}") from None


def register_sparse_attack(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                           replace: bool = False) -> Any:
    """Register a sparse-upload attack class or factory under ``name`` (a decorator without ``factory``)."""
    return SPARSE_ATTACKS.register(name, factory, summary=summary, replace=replace)


def make_sparse_attack(name: str, **kw: Any) -> Any:
    """Build a sparse-upload attack by name (or ``"package.module:attr"``), e.g.
    ``make_sparse_attack("sparse-alie", support="popular")``."""
    return _make(SPARSE_ATTACKS, name, kw)
