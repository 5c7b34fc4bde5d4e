"""Aggregators and pre-aggregators by name, and spec parsing.

:data:`AGGREGATORS` and :data:`PREAGGREGATORS` are :class:`fedaudit.registry.Registry` objects
(lowercase name → class or factory). Users add their own with :func:`register_aggregator` /
:func:`register_preaggregator`, or name them as ``"package.module:attr"`` in a spec.

A spec is one aggregator, optionally preceded by pre-aggregators joined by '+': ``"cwtm"``,
``"nnm+cwtm"``, ``"bucketing+nnm+gm"``, ``"nnm+mypkg.rules:MyRule"``. :func:`make_aggregator`
gives every stage the same f and routes each keyword to the stages whose factory takes it
(``s`` to bucketing, ``c`` to clipping, ``m`` to multikrum, ``tau``/``iters``/
``center`` to cc, ``tol``/``max_iter``/``nu`` to gm, ``max_subsets`` to mda).
"""

from __future__ import annotations

from typing import Any, Callable

from fedaudit.defenses.aggregators import (
    CWMed,
    CWTM,
    MDA,
    Bulyan,
    CenteredClipping,
    GeometricMedian,
    Krum,
    Meamed,
    Mean,
    MultiKrum,
)
from fedaudit.defenses.base import Aggregator, PreAggregator, compose
from fedaudit.defenses.preaggregators import ARC, NNM, Bucketing, Clipping
from fedaudit.errors import FedAuditError
from fedaudit.registry import Registry, did_you_mean
from fedaudit.validation import check_int

__all__ = [
    "AGGREGATORS",
    "PREAGGREGATORS",
    "register_aggregator",
    "register_preaggregator",
    "make_aggregator",
    "spec_stages",
]

#: Aggregators (n, d) → (d,) by name; every factory is called as ``factory(f=f, **keywords)``.
AGGREGATORS: Registry[Aggregator] = Registry("aggregator", skip=("f",))
#: Pre-aggregators (n, d) → (n', d) by name, called like the aggregators.
PREAGGREGATORS: Registry[PreAggregator] = Registry("pre-aggregator", skip=("f",))

for _name, _cls in (("mean", Mean), ("cwtm", CWTM), ("cwmed", CWMed), ("gm", GeometricMedian), ("krum", Krum),
                    ("multikrum", MultiKrum), ("mda", MDA), ("cc", CenteredClipping), ("meamed", Meamed),
                    ("bulyan", Bulyan)):
    AGGREGATORS.register(_name, _cls)
for _name, _cls in (("nnm", NNM), ("bucketing", Bucketing), ("arc", ARC), ("clipping", Clipping)):
    PREAGGREGATORS.register(_name, _cls)
del _name, _cls


def register_aggregator(name: str, factory: Callable[..., Aggregator] | None = None, *,
                        summary: str | None = None, replace: bool = False) -> Any:
    """Register an aggregator class or factory (called as ``factory(f=f, **keywords)``, returning
    a :class:`~fedaudit.defenses.base.Aggregator`) under ``name``; a decorator without ``factory``."""
    return AGGREGATORS.register(name, factory, summary=summary, replace=replace)


def register_preaggregator(name: str, factory: Callable[..., PreAggregator] | None = None, *,
                           summary: str | None = None, replace: bool = False) -> Any:
    """Register a pre-aggregator class or factory (returning a
    :class:`~fedaudit.defenses.base.PreAggregator`) under ``name``; a decorator without ``factory``."""
    return PREAGGREGATORS.register(name, factory, summary=summary, replace=replace)


def spec_stages(spec: str) -> list[tuple[str, Registry]]:
    """The stages of a spec as ``(name, registry)`` pairs, validated: every name is registered
    (or a ``module:attr`` reference), the last is an aggregator and the others pre-aggregators.

    A ``module:attr`` stage is looked up in the registry of its position (the object it names
    is checked when the stage is built)."""
    if not isinstance(spec, str) or not spec.strip():
        raise FedAuditError(f"aggregator spec must be a non-empty string such as 'nnm+cwtm', got {spec!r}")
    names = [part.strip() if ":" in part else part.strip().lower() for part in spec.split("+")]
    valid = (f"aggregators: {', '.join(AGGREGATORS.names())}; "
             f"pre-aggregators: {', '.join(PREAGGREGATORS.names())} (or 'package.module:attr')")
    for name in names:
        if ":" not in name and name not in AGGREGATORS and name not in PREAGGREGATORS:
            hint = did_you_mean(name, AGGREGATORS.names() + PREAGGREGATORS.names()) if name else ""
            raise FedAuditError(f"unknown aggregator {name!r} in spec {spec!r}{hint}; valid names are {valid}")
    *pre, last = names
    if ":" not in last and last not in AGGREGATORS:
        raise FedAuditError(f"spec {spec!r} must end with an aggregator ({', '.join(AGGREGATORS.names())}), "
                            f"got {last!r}")
    misplaced = [p for p in pre if ":" not in p and p not in PREAGGREGATORS]
    if misplaced:
        raise FedAuditError(f"in spec {spec!r} only the last name may be an aggregator; "
                            f"{', '.join(misplaced)} must be pre-aggregators ({', '.join(PREAGGREGATORS.names())})")
    return [(p, PREAGGREGATORS) for p in pre] + [(last, AGGREGATORS)]


def _build(name: str, registry: Registry, f: int, kw: dict[str, Any]) -> Any:
    accepted = registry.accepted(name)
    mine = dict(kw) if accepted is None else {k: v for k, v in kw.items() if k in accepted}
    missing = [k for k in registry.required(name) if k not in mine]
    if missing:
        raise FedAuditError(f"{name} needs the keyword(s) {', '.join(missing)} "
                            f"(e.g. make_aggregator('{name}+cwtm', f, {missing[0]}=...))")
    rule = registry.call(name, (), {"f": f, **mine},
                         receives="f and the keywords of make_aggregator(spec, f, **keywords) its signature names")
    want = Aggregator if registry is AGGREGATORS else PreAggregator
    if not isinstance(rule, want):
        raise FedAuditError(f"{registry.kind} {name!r} must build a fedaudit.defenses.{want.__name__}, "
                            f"got {type(rule).__name__}")
    return rule


def make_aggregator(spec: str, f: int, **kw: Any) -> Aggregator:
    """Build an aggregator from a spec such as ``"cwtm"``, ``"nnm+cwtm"`` or ``"nnm+pkg.mod:Rule"``.

    Pre-aggregators come first, joined by '+', and the last stage must be an aggregator; names
    are case-insensitive and a stage may be a ``"package.module:attr"`` reference. Every stage is
    built as ``factory(f=f, **its keywords)``; each keyword goes to every stage that accepts it
    and a keyword no stage accepts is an error. Returns the aggregator itself for a single
    stage, else ``compose(*stages)``.
    """
    stages = spec_stages(spec)
    f = check_int("f", f, low=0)
    accepted = [registry.accepted(name) for name, registry in stages]
    if all(a is not None for a in accepted):
        unknown = sorted(set(kw) - {k for a in accepted for k in a})
        if unknown:
            raise FedAuditError(f"keyword(s) {', '.join(unknown)} are not parameters of any stage of {spec!r}")
    built = [_build(name, registry, f, kw) for name, registry in stages]
    return built[0] if len(built) == 1 else compose(*built)
