"""Stable lowercase names for aggregators and pre-aggregators, and spec parsing.

A spec is one aggregator name, optionally preceded by pre-aggregator names joined by '+':
``"cwtm"``, ``"nnm+cwtm"``, ``"bucketing+nnm+gm"``. :func:`make_aggregator` gives every stage
the same f and routes each keyword to the stages whose constructor takes it (``s`` and
``seed`` to bucketing, ``c`` to clipping, ``m`` to multikrum, ``tau``/``iters``/``center`` to
cc, ``tol``/``max_iter``/``nu`` to gm, ``max_subsets`` to mda).
"""

from __future__ import annotations

import inspect
from typing import Any

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
from fedaudit.defenses.base import Aggregator, compose
from fedaudit.defenses.preaggregators import ARC, NNM, Bucketing, Clipping
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int

__all__ = ["AGGREGATOR_NAMES", "PREAGGREGATOR_NAMES", "make_aggregator"]

_AGGREGATORS: dict[str, type] = {
    "mean": Mean,
    "cwtm": CWTM,
    "cwmed": CWMed,
    "gm": GeometricMedian,
    "krum": Krum,
    "multikrum": MultiKrum,
    "mda": MDA,
    "cc": CenteredClipping,
    "meamed": Meamed,
    "bulyan": Bulyan,
}
_PREAGGREGATORS: dict[str, type] = {
    "nnm": NNM,
    "bucketing": Bucketing,
    "arc": ARC,
    "clipping": Clipping,
}

AGGREGATOR_NAMES: tuple[str, ...] = tuple(_AGGREGATORS)
PREAGGREGATOR_NAMES: tuple[str, ...] = tuple(_PREAGGREGATORS)


def _keywords(cls: type) -> dict[str, inspect.Parameter]:
    params = inspect.signature(cls.__init__).parameters
    return {k: p for k, p in params.items() if k not in ("self", "f")}


def _build(name: str, cls: type, f: int, kw: dict[str, Any]) -> Any:
    accepted = _keywords(cls)
    mine = {k: v for k, v in kw.items() if k in accepted}
    missing = [k for k, p in accepted.items() if p.default is inspect.Parameter.empty and k not in mine]
    if missing:
        raise FedAuditError(f"{name} needs the keyword(s) {', '.join(missing)} "
                            f"(e.g. make_aggregator('{name}+cwtm', f, {missing[0]}=...))")
    return cls(f=f, **mine)


def make_aggregator(spec: str, f: int, **kw: Any) -> Aggregator:
    """Build an aggregator from a spec such as ``"cwtm"`` or ``"nnm+cwtm"``.

    Pre-aggregators come first, joined by '+', and the last name must be an aggregator; names
    are case-insensitive. Every stage is built with the same ``f``; each keyword goes to every
    stage that accepts it and a keyword no stage accepts is an error. Returns the aggregator
    itself for a single name, else ``compose(*stages)``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise FedAuditError(f"aggregator spec must be a non-empty string such as 'nnm+cwtm', got {spec!r}")
    f = check_int("f", f, low=0)
    names = [part.strip().lower() for part in spec.split("+")]
    valid = f"aggregators: {', '.join(AGGREGATOR_NAMES)}; pre-aggregators: {', '.join(PREAGGREGATOR_NAMES)}"
    for name in names:
        if name not in _AGGREGATORS and name not in _PREAGGREGATORS:
            raise FedAuditError(f"unknown aggregator {name!r} in spec {spec!r}; valid names are {valid}")
    *pre, last = names
    if last not in _AGGREGATORS:
        raise FedAuditError(f"spec {spec!r} must end with an aggregator ({', '.join(AGGREGATOR_NAMES)}), "
                            f"got {last!r}")
    misplaced = [p for p in pre if p not in _PREAGGREGATORS]
    if misplaced:
        raise FedAuditError(f"in spec {spec!r} only the last name may be an aggregator; "
                            f"{', '.join(misplaced)} must be pre-aggregators ({', '.join(PREAGGREGATOR_NAMES)})")
    used = {k for name in names for k in _keywords({**_AGGREGATORS, **_PREAGGREGATORS}[name])}
    unknown = sorted(set(kw) - used)
    if unknown:
        raise FedAuditError(f"keyword(s) {', '.join(unknown)} are not parameters of any stage of {spec!r}")
    stages = [_build(p, _PREAGGREGATORS[p], f, kw) for p in pre] + [_build(last, _AGGREGATORS[last], f, kw)]
    return stages[0] if len(stages) == 1 else compose(*stages)
