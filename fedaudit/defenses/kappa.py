"""Published (f, κ)-robustness constants and the universal lower bound.

Definition (Allouah, Farhadkhani, Guerraoui, Gupta, Pinot, Stephan, "Fixing by Mixing: A
Recipe for Optimal Byzantine ML under Heterogeneity", AISTATS 2023, arXiv 2302.01772):
F is (f, κ)-robust if for all x_1..x_n and every S ⊆ [n] with |S| = n − f,

    ‖F(x_1..x_n) − x̄_S‖² ≤ (κ/|S|) Σ_{i∈S} ‖x_i − x̄_S‖².

Lower bound (same paper): any (f, κ)-robust F with f > 0 has κ ≥ f/(n − 2f). The
construction behind it — n − f equal inputs and f others — is one of the configurations the
auditor (:mod:`fedaudit.audit.robustness`) replays.

Upper bounds, valid for n > 2f (Table 1 of the paper; Krum needs n > 2f + 2):

=========  ==========================================
CWTM       (6f/(n−2f))·(1 + f/(n−2f))
Krum       6·(1 + f/(n−2f))
GM         4·(1 + f/(n−2f))²
CWMed      4·(1 + f/(n−2f))²
NNM ∘ F    (8f/(n−f))·(κ_F + 1)
=========  ==========================================

Dispatch. A bound is looked up by the rule's robustness class
(:class:`~fedaudit.defenses.base.RobustnessClass`: ``rule.robustness``), never by its name: a
user's rule named "cwtm" has no published bound unless its class says so. Add a bound for a new
class with ``kappa_formula.register(MyClass)``.

Provenance: these formulas are taken from the project's research notes, which recorded them
from the paper's table without being able to re-read the full text; they could not be
re-verified against the paper in this environment either (``verified=False`` below). They are
therefore treated as hypotheses: the empirical auditor flags ``violation`` whenever a measured
ν̂ exceeds one, which would mean an error in the rule or in the bound.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

from fedaudit.defenses.base import (
    Aggregator,
    Averaging,
    KrumSelection,
    MedianBased,
    NearestNeighbourMixing,
    RobustnessClass,
    TrimmedMean,
    composed_class,
)
from fedaudit.defenses.registry import spec_stages
from fedaudit.errors import FedAuditError
from fedaudit.json import jsonable
from fedaudit.validation import check_int

__all__ = ["KappaBound", "kappa_lower_bound", "kappa_upper_bound", "kappa_formula", "robustness_class"]

_REF = "Allouah et al., AISTATS 2023 (arXiv 2302.01772), Table 1"
_PROVENANCE = "formula from the project research notes; not re-verified against the paper text here"


@dataclass(frozen=True)
class KappaBound:
    """A published upper bound κ on the (f, κ)-robustness constant of a rule."""

    rule: str
    n: int
    f: int
    kappa: float
    formula: str
    reference: str
    verified: bool
    note: str

    def to_dict(self) -> dict[str, Any]:
        return jsonable(asdict(self))  # strict JSON: inf is "inf", nan is "nan"


def _check(n: int, f: int) -> tuple[int, int]:
    n = check_int("n", n, low=1)
    f = check_int("f", f, low=0)
    if n <= 2 * f:
        raise FedAuditError(f"(f, κ)-robustness needs n > 2f, got n={n}, f={f}")
    return n, f


def kappa_lower_bound(n: int, f: int) -> float:
    """Universal lower bound f/(n − 2f) on κ for any (f, κ)-robust rule."""
    n, f = _check(n, f)
    return f / (n - 2 * f)


@functools.singledispatch
def kappa_formula(cls: RobustnessClass, n: int, f: int, rule: str) -> tuple[float, str] | None:
    """(κ, formula) of the published bound for a rule of class ``cls`` named ``rule`` at (n, f),
    n > 2f; ``None`` when no bound is published (the base class)."""
    return None


@kappa_formula.register
def _(cls: Averaging, n: int, f: int, rule: str) -> tuple[float, str] | None:
    return (0.0 if f == 0 else math.inf), "0 if f = 0, unbounded otherwise"


@kappa_formula.register
def _(cls: TrimmedMean, n: int, f: int, rule: str) -> tuple[float, str] | None:
    r = f / (n - 2 * f)
    return 6 * r * (1 + r), "(6f/(n−2f))·(1 + f/(n−2f))"


@kappa_formula.register
def _(cls: KrumSelection, n: int, f: int, rule: str) -> tuple[float, str] | None:
    if n <= 2 * f + 2:
        return None
    return 6 * (1 + f / (n - 2 * f)), "6·(1 + f/(n−2f))"


@kappa_formula.register
def _(cls: MedianBased, n: int, f: int, rule: str) -> tuple[float, str] | None:
    return 4 * (1 + f / (n - 2 * f)) ** 2, "4·(1 + f/(n−2f))²"


@kappa_formula.register
def _(cls: NearestNeighbourMixing, n: int, f: int, rule: str) -> tuple[float, str] | None:
    if isinstance(cls.inner, NearestNeighbourMixing):  # published for NNM ∘ F with F a base rule only
        return None
    name = rule.split("+", 1)[1] if "+" in rule else "F"
    inner = kappa_formula(cls.inner, n, f, name)
    if inner is None:
        return None
    return (8 * f / (n - f)) * (inner[0] + 1), f"(8f/(n−f))·(κ_{name} + 1), κ_{name} = {inner[1]}"


def _class_of(factory: Any) -> RobustnessClass:
    tag = getattr(factory, "robustness", None)
    return tag if isinstance(tag, RobustnessClass) else RobustnessClass()


def robustness_class(rule: Any) -> tuple[RobustnessClass, str]:
    """(robustness class, rule name) of an aggregator, a :class:`RobustnessClass` or a registered
    spec string such as ``"nnm+cwtm"`` (resolved through :mod:`fedaudit.defenses.registry`
    from the registered classes, without building them)."""
    if isinstance(rule, RobustnessClass):
        return rule, type(rule).__name__
    if isinstance(rule, Aggregator):
        return rule.robustness, rule.name
    if isinstance(rule, str):
        stages = [(name, registry.factory(name)) for name, registry in spec_stages(rule)]
        pre = [f for _, f in stages[:-1]]
        if not all(isinstance(f, type) and hasattr(f, "robustness_after") for f in pre):
            return RobustnessClass(), "+".join(name for name, _ in stages)
        return composed_class(pre, _class_of(stages[-1][1])), "+".join(name for name, _ in stages)
    raise FedAuditError(f"rule must be an Aggregator, a RobustnessClass or a registered spec such as 'nnm+cwtm', "
                        f"got {type(rule).__name__}")


def kappa_upper_bound(rule: Any, n: int, f: int) -> KappaBound | None:
    """The published κ for ``rule`` at (n, f), looked up by its robustness class; ``None`` when
    no bound is published for it.

    ``rule`` is an :class:`~fedaudit.defenses.base.Aggregator` (e.g. ``CWTM(f)``,
    ``compose(NNM(f), Krum(f))``), a :class:`~fedaudit.defenses.base.RobustnessClass`, or a
    registered spec string (``"cwtm"``, ``"nnm+gm"``, …) resolved through the registry.
    Bounds are published for the mean, CWTM, Krum, GM, CWMed and NNM followed by one of those.
    """
    n, f = _check(n, f)
    cls, name = robustness_class(rule)
    found = kappa_formula(cls, n, f, name)
    if found is None:
        return None
    kappa, formula = found
    note = ("the mean is not (f, κ)-robust for any finite κ when f > 0" if type(cls) is Averaging
            else _PROVENANCE)
    return KappaBound(rule=name, n=n, f=f, kappa=float(kappa), formula=formula, reference=_REF,
                      verified=False, note=note)
