"""The optimiser's budget: :class:`SearchBudget`, the limits on exhaustive subset scoring and the
cost classes (:func:`cheap_rule`, :func:`effective_budget`; see the package docstring)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_real

__all__ = [
    "SearchBudget", "effective_budget", "cheap_rule", "UNBOUNDED", "EXHAUSTIVE_LIMIT", "WORKING_LIMIT",
    "CHEAP_EVALS", "CHEAP_RESTARTS",
]


#: ν at or above this is reported as unbounded (the rule has no finite κ)
UNBOUNDED = 1e8
#: largest C(n, f) for which the max over S is exhaustive
EXHAUSTIVE_LIMIT = 20_000


@dataclass(frozen=True)
class SearchBudget:
    """Budget of the optimiser stage.

    ``evals``: objective evaluations in total (each = one call of the rule + the exact max over S);
    0 disables the stage. ``restarts``: local runs per subspace family from distinct starts
    (phase 1), and 2·restarts runs of iterated local search (phase 2); see
    :func:`optimise_configuration` for the split of ``evals`` between phases. ``dims``: subspace dimensions k
    searched. ``embedded``: also search a random max(dims)-frame of ℝ^d with the rule evaluated
    in ℝ^d (only when d > max(dims)). ``time_s``: optional wall-clock limit (results then depend
    on machine speed). ``scale_cheap``: multiply evals and restarts for rules in the cheap cost
    class (module docstring, :func:`effective_budget`).
    """

    evals: int = 3000
    restarts: int = 4
    dims: tuple[int, ...] = (1, 2)
    embedded: bool = True
    time_s: float | None = None
    scale_cheap: bool = True

    def __post_init__(self):
        check_int("search budget evals", self.evals, low=0, high=10_000_000)
        check_int("search budget restarts", self.restarts, low=1, high=10_000)
        dims = tuple(self.dims)
        if not dims:
            raise FedAuditError("search budget dims must list at least one subspace dimension in [1, 16]")
        for k in dims:
            check_int("search budget dims", k, low=1, high=16)
        object.__setattr__(self, "dims", tuple(int(k) for k in dims))
        if self.time_s is not None:
            check_real("search budget time_s", self.time_s, low=0.0, open_low=True)

    @classmethod
    def coerce(cls, value: "SearchBudget | dict | int | None") -> "SearchBudget":
        """None → defaults; an int → that many evaluations; a dict → keyword arguments."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - {"evals", "restarts", "dims", "embedded", "time_s", "scale_cheap"})
            if unknown:
                raise FedAuditError(f"unknown search budget key(s) {', '.join(unknown)}; "
                                    "allowed: evals, restarts, dims, embedded, time_s, scale_cheap")
            return cls(**value)
        if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            return cls(evals=int(value))
        raise FedAuditError(f"search must be a SearchBudget, a dict, an int (evaluations) or None, got {value!r}")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "dims": list(self.dims)}


#: multipliers of evals and restarts for the cheap cost class (module docstring)
CHEAP_EVALS = 3
CHEAP_RESTARTS = 2.5


def cheap_rule(agg: Any, n: int, f: int) -> bool:
    """True iff ``agg`` (a rule or a registry spec) is in the cheap cost class at (n, f): n ≤ 16,
    C(n, f) ≤ WORKING_LIMIT and every stage closed-form, i.e. its class declares
    ``closed_form = True`` (:attr:`fedaudit.defenses.base.Aggregator.closed_form`, read by
    :func:`~fedaudit.defenses.base.declares`; a spec's stages are looked up in the registries, an
    invalid spec is not cheap). Decided from the classes and (n, f) only (deterministic); a
    subclass of a closed-form rule is not assumed cheap unless it sets the attribute itself."""
    from fedaudit.defenses.base import Composed, declares
    from fedaudit.defenses.registry import spec_stages

    def closed_form(rule: Any) -> bool:
        if isinstance(rule, str):  # a registry spec such as "nnm+cwtm"
            try:
                return all(declares(registry.factory(name), "closed_form") for name, registry in spec_stages(rule))
            except FedAuditError:
                return False
        if isinstance(rule, Composed):
            return all(closed_form(s) for s in rule.stages)
        return declares(rule, "closed_form")

    return n <= 16 and math.comb(n, f) <= WORKING_LIMIT and closed_form(agg)


def effective_budget(budget: SearchBudget, agg: Any, n: int, f: int) -> SearchBudget:
    """The budget actually spent on ``agg`` at (n, f): ``budget`` itself, or for a cheap rule
    (:func:`cheap_rule`, when ``budget.scale_cheap``) CHEAP_EVALS× its evals and
    ⌈CHEAP_RESTARTS × restarts⌉ restarts."""
    if not budget.scale_cheap or budget.evals == 0 or not cheap_rule(agg, n, f):
        return budget
    return SearchBudget(evals=min(budget.evals * CHEAP_EVALS, 10_000_000),
                        restarts=min(math.ceil(budget.restarts * CHEAP_RESTARTS), 10_000), dims=budget.dims,
                        embedded=budget.embedded, time_s=budget.time_s, scale_cheap=False)


#: above this many subsets the optimiser's inner loop scores a working set of subsets
WORKING_LIMIT = 2_000
