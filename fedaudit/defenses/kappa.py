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

Provenance: these formulas are taken from the project's research notes, which recorded them
from the paper's table without being able to re-read the full text; they could not be
re-verified against the paper in this environment either (``verified=False`` below). They are
therefore treated as hypotheses: the empirical auditor flags ``violation`` whenever a measured
ν̂ exceeds one, which would mean an error in the rule or in the bound.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int

__all__ = ["KappaBound", "kappa_lower_bound", "kappa_upper_bound", "BOUNDED_RULES"]

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
        from fedaudit.json import jsonable  # strict JSON: inf is "inf", nan is "nan"

        return jsonable(asdict(self))


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


def _base(rule: str, n: int, f: int) -> tuple[float, str] | None:
    r = f / (n - 2 * f)
    if rule == "cwtm":
        return 6 * r * (1 + r), "(6f/(n−2f))·(1 + f/(n−2f))"
    if rule == "krum":
        if n <= 2 * f + 2:
            return None
        return 6 * (1 + r), "6·(1 + f/(n−2f))"
    if rule in ("gm", "cwmed"):
        return 4 * (1 + r) ** 2, "4·(1 + f/(n−2f))²"
    if rule == "mean":
        return (0.0 if f == 0 else math.inf), "0 if f = 0, unbounded otherwise"
    return None


BOUNDED_RULES = ("mean", "cwtm", "krum", "gm", "cwmed", "nnm+cwtm", "nnm+krum", "nnm+gm", "nnm+cwmed")


def kappa_upper_bound(rule: str, n: int, f: int) -> KappaBound | None:
    """The published κ for ``rule`` ("cwtm", "krum", "gm", "cwmed", "mean", or "nnm+<one of
    those>") at (n, f); ``None`` when no bound is published for it."""
    n, f = _check(n, f)
    key = str(rule).lower().replace(" ", "")
    note = _PROVENANCE
    if key.startswith("nnm+"):
        inner = _base(key[4:], n, f)
        if inner is None or "+" in key[4:]:
            return None
        kappa = (8 * f / (n - f)) * (inner[0] + 1)
        formula = f"(8f/(n−f))·(κ_{key[4:]} + 1), κ_{key[4:]} = {inner[1]}"
    else:
        base = _base(key, n, f)
        if base is None:
            return None
        kappa, formula = base
    if key == "mean":
        note = "the mean is not (f, κ)-robust for any finite κ when f > 0"
    return KappaBound(rule=key, n=n, f=f, kappa=float(kappa), formula=formula, reference=_REF,
                      verified=False, note=note)
