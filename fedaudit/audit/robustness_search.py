"""Worst-case search for the robustness ratio: exact subset maximisation and a multistart optimiser.

The robustness ratio of an input configuration x = (x_1..x_n) ∈ ℝ^{n×d} under a rule F is

    ν(x) = max_{S ⊆ [n], |S| = n − f}  ‖F(x) − x̄_S‖² / ((1/|S|) Σ_{i∈S} ‖x_i − x̄_S‖²)

(Allouah et al., "Fixing by Mixing", AISTATS 2023, Def. 1: F is (f, κ)-robust iff ν(x) ≤ κ for
every x). Every evaluated x certifies κ ≥ ν(x), so maximising ν over x tightens the lower bound.

**Exact S.** For a fixed x, write m = n − f and let 1_S ∈ {0,1}^n be the indicator of S. With
the rows centred (c = mean of the rows, y_i = x_i − c, w = F(x) − c):

    x̄_S − c = Yᵀ1_S / m,   var_S = (1_Sᵀ diag(YYᵀ)) / m − ‖Yᵀ1_S‖² / m²,
    err_S   = ‖w‖² − 2 wᵀYᵀ1_S / m + ‖Yᵀ1_S‖² / m²,

so stacking the C(n, f) indicators as a matrix M (cached per (n, f)) gives every subset's ratio
with matrix products. The implementation (:func:`subset_ratios`) uses the equivalent
difference forms var_S = 1_Sᵀ D 1_S / (2m²), D_ij = ‖x_i − x_j‖², and err_S = ‖Σ_{i∈S}(x_i − F(x))‖²/m²,
which keep full relative precision when a tight S lies far from the other rows. The
max over S is then exact (exhaustive) whenever C(n, f) ≤ ``exhaustive_limit``; past it the
evaluator falls back to the swap local search of :func:`robustness_ratio`
(a lower bound on the max, hence still a valid certificate). Inside the optimiser's loop, when
C(n, f) > 2000 each candidate is scored on a working set of subsets (the top 256 of a full
evaluation at the start and end of every local run, :class:`_Scorer`): again a lower bound, and
the value finally reported is a full evaluation.

**Search.** ν is maximised over the whole configuration (all n rows, honest and Byzantine alike:
S is chosen afterwards, exactly) by multistart Nelder–Mead (Nelder & Mead 1965; adaptive
coefficients of Gao & Han 2012 for more than 10 variables) followed by a Powell polish
(Powell 1964), both derivative-free (``scipy.optimize.minimize``). The variables are
Y ∈ ℝ^{n×k}, k ∈ ``dims`` (default 1 and 2), embedded in the audit's ℝ^d as X = Y Bᵀ with an
orthonormal k-frame B. Two families:

* *low-dimensional* — B = the first k standard basis vectors (zero padding). The rule is
  evaluated on Y itself (fast); the best point is then re-evaluated in ℝ^d and only that value
  is reported, so a rule that is not equivariant under zero padding cannot inflate ν̂. For
  coordinate-wise rules (CWTM, CWMed, Meamed) this family is exhaustive in d: for any S,
  Σ_j err_j(S) / Σ_j var_j(S) ≤ max_j err_j(S)/var_j(S), each term being a 1-D ratio;
* *embedded* — B a uniformly random orthonormal k-frame of ℝ^d, the rule evaluated on X ∈ ℝ^{n×d}
  directly (for rules that mix coordinates and are not rotation-equivariant, e.g. NNM∘CWTM).

Starts: the seed configurations handed in by the auditor (the lower-bound construction and the
best attacked inputs), projected on their top-k principal directions, then two-cluster honest
draws with f Byzantine rows at a common point, then Gaussian draws. The budget (total objective
evaluations, restarts, optional wall-clock limit) is split evenly over restarts, each local run's
share fixed in the plan before any run starts.

**Engine.** The local runs are independent given their starts, so they run as chunks of
:func:`fedaudit.engine.run_chunks` in stages, each depending on the one before: (1) phase F and
phase 0 (one chunk per family), (2) phase 1 (one chunk per local run), (3, 4, …) the rounds of
phase 2's iterated local search (``PHASE2_WIDTH`` local runs a round). Chunk i of a stage draws
from child i of a
``SeedSequence`` spawned for that stage (never from the worker or the completion order), returns
JSON data (ν, the configuration as nested lists of float64, which strict JSON round-trips
exactly, its label and the evaluations used), and the driver folds the results in plan order with
strict ``>``: the same seed gives bit-identical results on ``serial``, ``process`` with any
number of workers and ``ray``, from a fresh run or from checkpointed records. The one exception
is a wall-clock limit (``time_s``): chunks then stop at a deadline, and the result depends on
the machine's speed.

**Budget by cost class** (:func:`effective_budget`). ``evals`` and ``restarts`` are the budget of
an *expensive* evaluation; a rule in the cheap class — closed-form rules (mean, CWTM, CWMed,
Meamed, Krum, Multi-Krum, and compositions of these with NNM, bucketing, ARC or clipping) at
n ≤ 16 with C(n, f) ≤ 2000 (every S scored exactly, a few hundred microseconds per evaluation)
— gets ``CHEAP_EVALS``× the evaluations and ``CHEAP_RESTARTS``× the restarts. The class is
decided from the rule's type and (n, f) only, never from timing, so the run stays deterministic
under the seed. Why: on the held-out tightness benchmark (``benchmarks/robustness.py
tightness``) the shortfalls were selection rules (Krum at (11, 3), (12, 2)) and NNM∘CWTM, whose
worst cases sit on the boundary where the selected row flips — a discontinuous landscape where
extra *restarts* (independent local optima) help more than longer runs (Krum (11, 3): 4.64 with
9000 evaluations over 4 restarts, 5.11 over 10; the independent optimiser's 4.99); iterative
rules (GM, CC, MDA) already cost 1–40 s per audit at the base budget and keep it. Disable with
``scale_cheap=False``.

**Forced selection (Krum).** Extra restarts alone did not close the gap at Krum (12, 2) (1.78 with
20000 evaluations against the independent 1.905): Krum outputs one row, and its worst case puts
the selected row exactly where it is about to lose the selection to another, while ν itself is
blind to how close that is. Phase F therefore maximises a surrogate in which row 0 is made the
output, ν(X; z = x_0), penalised by how far row 0's Krum score is above the best other score,
from explicit constructions (the selected row, its f supporters next to it, the honest rest in
2–4 clusters; the groups' positions first, then row-wise); candidates are then scored with the
rule itself, so the surrogate never reaches the certificate. It costs evals/4 extra evaluations
per low-dimensional family and runs only for Krum with C(n, f) ≤ 2000 (Multi-Krum's average of
n − f rows already met the target). Its results seed the iterated local search of phase 2.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import itertools
import math
import os
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
from scipy.optimize import minimize

from fedaudit.arrays import is_torch, torch_to_numpy
from fedaudit.engine import run_chunks
from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.json import dumps, is_numbers, jsonable
from fedaudit.kernels import krum_scores
from fedaudit.validation import check_int, check_real

__all__ = ["SearchBudget", "SearchOutcome", "effective_budget", "cheap_rule", "subset_ratios", "exact_ratio",
           "robustness_ratio", "optimise_configuration", "optimiser_checkpoint", "optimiser_checkpoint_files", "tick", "call_rule",
           "UNBOUNDED", "EXHAUSTIVE_LIMIT", "PHASE2_WIDTH"]

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


_CHEAP_NAMES = frozenset({"mean", "cwtm", "cwmed", "meamed", "krum", "multikrum", "nnm", "bucketing", "arc", "clipping"})


def cheap_rule(agg: Any, n: int, f: int) -> bool:
    """True iff ``agg`` (a rule or a registry spec) is in the cheap cost class at (n, f):
    closed-form by type, n ≤ 16 and C(n, f) ≤ WORKING_LIMIT. Decided from the type and (n, f)
    only (deterministic); subclasses of the closed-form rules are not assumed cheap."""
    from fedaudit.defenses.aggregators import CWMed, CWTM, Krum, Meamed, Mean, MultiKrum
    from fedaudit.defenses.base import Composed
    from fedaudit.defenses.preaggregators import ARC, NNM, Bucketing, Clipping

    def closed_form(rule: Any) -> bool:
        if isinstance(rule, str):  # a registry spec such as "nnm+cwtm"
            return all(t.strip().lower() in _CHEAP_NAMES for t in rule.split("+"))
        if isinstance(rule, Composed):
            return all(closed_form(s) for s in rule.stages)
        return type(rule) in (Mean, CWTM, CWMed, Meamed, Krum, MultiKrum, NNM, Bucketing, ARC, Clipping)

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


# --------------------------------------------------------------------------- exact subset max
def _indicators(rows: np.ndarray, n: int, m: int) -> np.ndarray:
    """(C(len(rows), m), n) float 0/1 indicators of every m-subset of ``rows``."""
    combos = np.array(list(itertools.combinations(rows, m)), dtype=np.int64).reshape(-1, m)
    M = np.zeros((combos.shape[0], n))
    np.put_along_axis(M, combos, 1.0, axis=1)
    return M


@lru_cache(maxsize=8)
def _masks(n: int, f: int) -> np.ndarray:
    """(C(n, f), n) indicators of every S with |S| = n − f (read-only, cached)."""
    M = _indicators(np.arange(n), n, n - f)
    M.setflags(write=False)
    return M


def subset_ratios(M: np.ndarray, X: np.ndarray, z: np.ndarray, offset: float = 0.0) -> np.ndarray:
    """err_S / var_S for every indicator row of M (s, n), X (n, d) and z (d,) finite.

    Computed from differences only, so no cancellation between large centred terms:
    var_S = 1_Sᵀ D 1_S / (2m²) with D_ij = ‖x_i − x_j‖², and err_S = 1_Sᵀ E 1_S / m² with
    E_ij = ⟨x_i − z, x_j − z⟩ (its rounding error is relative to Σ_S ‖x_i − z‖² ≤ 2m(var_S + err_S),
    so the ratio keeps full relative precision even for a tight S far from the other rows).
    ``offset`` is added to every error (the squared distance of F(x) from the subspace when x
    and F(x) are given in the coordinates of an orthonormal frame). Inputs are halved and, if
    their differences would overflow or underflow a square, scaled by a power of two (ν is
    invariant under a common scaling). A zero-variance S with a positive error gives inf.
    """
    Xh, zh = 0.5 * X, 0.5 * z  # halves: differences of entries up to the float64 maximum stay finite
    # not kernels.pairwise_sqdist: the differences are rescaled by a power of two before they are
    # squared (so no square overflows or underflows), and R shares that scale; the kernel's
    # result is only comparison-exact in its own units (see its docstring), ν needs the values
    Dx = Xh[:, None, :] - Xh[None, :, :]
    R = Xh - zh
    scale = max(float(np.max(np.abs(Dx), initial=0.0)), float(np.max(np.abs(R), initial=0.0)))
    offset = 0.25 * offset
    if scale == 0.0:
        return np.full(M.shape[0], np.inf if offset > 0 else 0.0)
    if scale > 1e150 or scale < 1e-150:
        p2 = 2.0 ** -math.frexp(scale)[1]
        Dx, R, offset = Dx * p2, R * p2, offset * p2 * p2
    D = np.einsum("ijk,ijk->ij", Dx, Dx)
    E = R @ R.T
    m = float(M[0].sum()) if M.shape[0] else 1.0
    var = np.einsum("sn,sn->s", M @ D, M) / (2.0 * m * m)
    err = np.maximum(np.einsum("sn,sn->s", M @ E, M) / (m * m), 0.0) + offset
    big = max(float(D.max()), float(np.diag(E).max()), offset, 1e-300)
    ok = var > 1e-24 * big
    return np.where(ok, err / np.where(ok, var, 1.0), np.where(err > 1e-18 * big, np.inf, 0.0))


def exact_ratio(X: np.ndarray, z: np.ndarray, f: int, allowed: np.ndarray | None = None
                ) -> tuple[float, np.ndarray] | None:
    """(ν, S) by exhaustive enumeration of S ⊆ allowed rows, or None if C(|allowed|, f′) > limit.

    Rows whose deviation from the coordinate-wise median exceeds 10^100 times the median
    deviation (e.g. 1e308 next to O(1) rows) would lose every other row's precision in one
    frame, so subsets avoiding them are scored in the frame of the remaining rows and subsets
    touching them in the global frame; the max of both is exact.
    """
    n = X.shape[0]
    m = n - f
    allowed = np.isfinite(X).all(axis=1) if allowed is None else allowed
    k = int(allowed.sum())
    if k < m or math.comb(k, m) > EXHAUSTIVE_LIMIT:
        return None
    M = _masks(n, f) if k == n else _indicators(np.flatnonzero(allowed), n, m)
    Xa = X if k == n else np.where(allowed[:, None], X, 0.0)
    r = subset_ratios(M, Xa, z)
    if float(np.max(np.abs(Xa))) <= 1e100:
        i = int(np.argmax(r))
        return float(r[i]), np.flatnonzero(M[i])
    med = np.median(Xa[allowed], axis=0)
    dev = np.max(np.abs(0.5 * Xa - 0.5 * med), axis=1)
    ref = float(np.median(dev[allowed]))
    huge = allowed & (dev > 1e100 * max(ref, 1e-300))
    if huge.any() and k - int(huge.sum()) >= m:
        normal = ~(M[:, huge] > 0).any(axis=1)
        keep = allowed & ~huge
        r_norm = subset_ratios(M[normal], np.where(keep[:, None], Xa, 0.0), z)
        r = np.where(normal, -np.inf, r)
        r[normal] = r_norm
    i = int(np.argmax(r))
    return float(r[i]), np.flatnonzero(M[i])


# --------------------------------------------------------------------------- calling a rule
_ACCEPTS_RNG: dict[type, bool] = {}


def call_rule(agg: Callable, X: np.ndarray, rule_seed: int) -> np.ndarray:
    """F(X) as a float64 vector; rules whose ``__call__`` takes ``rng`` get a fresh generator
    seeded with ``rule_seed`` (common random numbers: the objective is deterministic)."""
    key = type(agg)
    if key not in _ACCEPTS_RNG:
        try:
            params = inspect.signature(agg).parameters
            _ACCEPTS_RNG[key] = "rng" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())
        except (TypeError, ValueError):
            _ACCEPTS_RNG[key] = False
    with np.errstate(all="ignore"):
        if _ACCEPTS_RNG[key]:
            out = agg(X, rng=np.random.default_rng(rule_seed))
        else:
            out = agg(X)
    if is_torch(out):
        out = torch_to_numpy(out, "aggregator output")[0]
    return np.asarray(out, dtype=np.float64).reshape(-1)


# --------------------------------------------------------------------------- the optimiser
@dataclass(frozen=True)
class SearchOutcome:
    """Best configuration found by the optimiser stage, certified in the audit's ℝ^d: ν, the
    inputs X and subset S attaining it, where it was found (subspace, k, start), the work done
    (evaluations, local runs, runtime), why the search stopped and the best ν per subspace."""

    nu: float = -1.0
    X: np.ndarray | None = None
    S: np.ndarray | None = None
    subspace: str = ""
    k: int = 0
    start: str = ""
    evals: int = 0
    restarts_run: int = 0
    runtime_s: float = 0.0
    stopped: str = "budget"
    per_subspace: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Every field as strict JSON (fedaudit.json; X and S as nested lists); a ν at the
        :data:`UNBOUNDED` sentinel is reported as ``"inf"``."""
        per = {k: (math.inf if isinstance(v, (int, float)) and v >= UNBOUNDED else v)
               for k, v in self.per_subspace.items()}
        return jsonable({**asdict(self), "per_subspace": per})


def _project(X: np.ndarray, k: int) -> np.ndarray:
    """Coordinates of X's rows on their top-k principal directions (n, k), unit RMS spread."""
    Y = X - X.mean(axis=0)
    if not np.isfinite(Y).all():
        Y = np.where(np.isfinite(Y), Y, 0.0)
    try:
        U, s, _ = np.linalg.svd(Y, full_matrices=False)
    except np.linalg.LinAlgError:
        return np.zeros((X.shape[0], k))
    P = np.zeros((X.shape[0], k))
    r = min(k, U.shape[1])
    P[:, :r] = U[:, :r] * s[:r]
    rms = float(np.sqrt(np.mean(P ** 2)))
    return P / rms if rms > 0 else P


def _starts(n: int, f: int, k: int, seeds: Sequence[tuple[str, np.ndarray]], count: int,
            rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    out = [(f"projected {label}", _project(X, k)) for label, X in seeds][: max(count - 1, 1)]
    m = n - f
    i = 0
    while len(out) < count:
        if i % 2 == 0:  # two honest clusters, f Byzantine rows at one point beyond them
            a = int(rng.integers(1, m)) if m > 1 else 1
            Y = 0.1 * rng.normal(size=(n, k))
            Y[a:m, 0] += 1.0
            Y[m:] += rng.normal(size=k) * 2.0
            out.append(("two clusters + f at a point", Y))
        else:
            out.append(("gaussian", rng.normal(size=(n, k))))
        i += 1
    return out[:count]


# ------------------------------------------------------------------------- ratio over S
def robustness_ratio(X: np.ndarray, z: np.ndarray, f: int, *, honest: np.ndarray | None = None
                     ) -> tuple[float, np.ndarray, str]:
    """max over S (|S| = n − f, finite rows only) of ‖z − x̄_S‖² / var_S; returns (ν, S, method).

    Exhaustive (:func:`exact_ratio`, vectorised over the subset
    indicators) when C(#finite rows, n − f) ≤ 2·10^4, else a swap local search (a lower bound).
    """
    X = np.asarray(X, dtype=np.float64)
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    n = X.shape[0]
    m = n - f
    allowed = np.isfinite(X).all(axis=1)
    if allowed.sum() < m:
        raise FedAuditError(f"fewer than n − f = {m} finite inputs: the ratio is undefined")
    if not np.isfinite(z).all():
        return math.inf, np.flatnonzero(allowed)[:m], "non-finite output"
    exact = exact_ratio(X, z, f, allowed)
    if exact is not None:
        return exact[0], exact[1], "exhaustive"
    return _greedy(np.where(allowed[:, None], X, 0.0), z, n, m, allowed, honest)


def _greedy(X, z, n, m, allowed, honest) -> tuple[float, np.ndarray, str]:
    """Swap local search over S from the honest set and the m rows closest to/farthest from z."""
    dist = np.where(allowed, np.sum((0.5 * X - 0.5 * z) ** 2, axis=1), np.inf)
    starts = [np.argsort(dist)[:m], np.argsort(-np.where(allowed, dist, -np.inf))[:m]]
    if honest is not None and len(honest) == m:
        starts.append(np.asarray(honest))
    best = (-1.0, None)
    for start in starts:
        mask = np.zeros(n)
        mask[start] = 1.0
        current = float(subset_ratios(mask[None, :], X, z)[0])
        for _ in range(200):
            inside, outside = np.flatnonzero(mask > 0), np.flatnonzero((mask == 0) & allowed)
            if len(outside) == 0:
                break
            cand = np.repeat(mask[None, :], len(inside) * len(outside), axis=0)
            ii = np.repeat(inside, len(outside))
            oo = np.tile(outside, len(inside))
            cand[np.arange(len(cand)), ii] = 0.0
            cand[np.arange(len(cand)), oo] = 1.0
            r = subset_ratios(cand, X, z)
            j = int(np.argmax(r))
            if r[j] <= current * (1 + 1e-12):
                break
            current, mask = float(r[j]), cand[j]
        if current > best[0]:
            best = (current, np.flatnonzero(mask))
    return best[0], best[1], "greedy swap search"



def _ratio(X: np.ndarray, z: np.ndarray, f: int) -> tuple[float, np.ndarray]:
    if np.isfinite(z).all():
        exact = exact_ratio(X, z, f)
        if exact is not None:
            return exact
    nu, S, _ = robustness_ratio(X, z, f)
    return nu, S


class _Stop(Exception):
    pass


#: above this many subsets the optimiser's inner loop scores a working set of subsets
WORKING_LIMIT = 2_000
_WORKING_SIZE = 256


class _Scorer:
    """ν for the optimiser's inner loop.

    Exact (every S) when C(n, f) ≤ WORKING_LIMIT. Otherwise the max over a working set W of
    subsets — a lower bound on ν, so still a valid certificate — refreshed by :meth:`refresh`
    with the top subsets of a full evaluation (exhaustive or swap search) at the start and end of
    every local run; the reported value is always a full evaluation (``certify``).
    """

    def __init__(self, n: int, f: int):
        self.n, self.f = n, f
        total = math.comb(n, f)
        self.small, self.full = total <= WORKING_LIMIT, total <= EXHAUSTIVE_LIMIT
        self.W: np.ndarray | None = None

    def __call__(self, Y: np.ndarray, z: np.ndarray, offset: float) -> float:
        if self.small:
            return float(np.max(subset_ratios(_masks(self.n, self.f), Y, z, offset)))
        if self.W is None:
            self.refresh(Y, z, offset)
        return float(np.max(subset_ratios(self.W, Y, z, offset)))

    def refresh(self, Y: np.ndarray, z: np.ndarray, offset: float) -> None:
        if self.small:
            return
        if self.full:
            M = _masks(self.n, self.f)
            r = subset_ratios(M, Y, z, offset)
            top = M[np.argpartition(-r, _WORKING_SIZE)[:_WORKING_SIZE]]
        else:
            X = np.hstack([Y, np.full((self.n, 1), 0.0)])
            zz = np.append(z, math.sqrt(offset))
            _, S, _ = robustness_ratio(X, zz, self.f)
            top = np.zeros((1, self.n))
            top[0, S] = 1.0
        W = top if self.W is None else np.vstack([top, self.W])
        self.W = np.unique(W, axis=0)[: 4 * _WORKING_SIZE]


#: local runs per round of phase 2 (a fixed plan, never the worker count: see optimise_configuration)
PHASE2_WIDTH = 4


def optimiser_checkpoint(checkpoint: str | os.PathLike, stage: int) -> Path:
    """The optimiser's checkpoint file of engine stage ``stage`` next to the audit's ``checkpoint``
    FILE: ``FILE.opt1`` (phase F and phase 0), ``FILE.opt2`` (phase 1), ``FILE.opt3``, … (the
    rounds of phase 2)."""
    path = Path(checkpoint)
    return path.with_name(f"{path.name}.opt{stage}")


def optimiser_checkpoint_files(checkpoint: str | os.PathLike) -> list[Path]:
    """The existing ``FILE.opt<j>`` files of the audit's ``checkpoint`` FILE, by stage."""
    path = Path(checkpoint)
    prefix = f"{path.name}.opt"
    parent = path.parent if str(path.parent) else Path(".")
    found = [p for p in parent.iterdir() if p.name.startswith(prefix) and p.name[len(prefix):].isdigit()] \
        if parent.is_dir() else []
    return sorted(found, key=lambda p: int(p.name[len(prefix):]))


def tick(progress: Callable[[int], None], units: int) -> None:
    """``progress(1)`` once per unit of a finished engine chunk (as a serial loop reports them)."""
    for _ in range(units):
        progress(1)


def optimise_configuration(agg: Callable, n: int, f: int, d: int, *, seeds: Sequence[tuple[str, np.ndarray]],
                           budget: SearchBudget, seq: np.random.SeedSequence, rule_seed: int,
                           progress: Callable[[int], None] | None = None, backend: str | None = None,
                           workers: int | None = None, address: str | None = None, checkpoint: Any = None,
                           resume: bool = False, key: Any = None) -> SearchOutcome:
    """Maximise ν over configurations X = Y Bᵀ (module docstring); the returned ν is certified
    by re-evaluating the rule on the best X ∈ ℝ^{n×d}.

    Families: ``d=k`` for k in ``dims`` and, if ``embedded`` and d > max(dims), one random
    max(dims)-frame of ℝ^d. Phase 0 (20% of the evaluations): per family, configurations of
    coincident clusters (a, m − a honest rows; the f Byzantine rows together, or one row and the
    other f − 1) with their positions optimised, for up to six splits a. Phase 1 (30%): ``restarts``
    local runs per family from the best cluster configurations (half of them, jittered), the
    seeds, then random starts. Phase 2 (50%): 2·``restarts`` runs of iterated local search in
    rounds of ``PHASE2_WIDTH``, run c of a round starting from the (c mod 2)-th best family
    incumbent after the rounds before, with a random half of its rows moved by 0.3× their RMS
    spread. A local run is Nelder–Mead (70% of its evaluations) then Powell from NM's best point.
    For Krum, phase F
    (module docstring, ``budget.evals // 4`` extra evaluations per low-dimensional family) runs
    next to phase 0 and its certified best becomes that family's first incumbent.

    Engine: one :func:`fedaudit.engine.run_chunks` call per stage (phase F + 0, phase 1, each
    round of phase 2), one chunk per family (F, 0) or per local run (1, 2); each chunk draws from
    its own child of a ``SeedSequence`` spawned from ``seq`` for that stage, indexed by its place
    in the plan, and has its evaluation budget fixed in the plan, so the results — folded in plan
    order with strict ``>`` — are bit-identical on every backend and worker count. ``checkpoint``
    (a path) records stage j in :func:`optimiser_checkpoint` ``(checkpoint, j)``, keyed by ``key``
    (JSON data: the caller's description of the run) and a digest of the stage's plan. With
    ``budget.time_s`` a chunk stops at a wall-clock deadline (``time.time()``, shared by the
    workers of one machine), so the result then depends on speed.
    """
    t0 = time.perf_counter()
    out: dict[str, Any] = {"per_subspace": {}, "evals": 0, "restarts_run": 0, "stopped": "budget", "nu": -1.0}
    frame_seq, forced_seq, cluster_seq, start_seq, run_seq, round_seq = seq.spawn(6)
    families: list[tuple[str, int, np.ndarray | None]] = [(f"d={k}", k, None) for k in budget.dims if k <= d]
    if budget.embedded and d > max(budget.dims):
        k = max(budget.dims)
        Q, _ = np.linalg.qr(np.random.default_rng(frame_seq).normal(size=(d, k)))
        families.append((f"{k}-dim random subspace of d={d}", k, Q[:, :k]))
    if not families or budget.evals == 0:
        return SearchOutcome(stopped="disabled", runtime_s=time.perf_counter() - t0)
    runs = budget.restarts
    per_run0 = max(int(0.2 * budget.evals) // len(families), 2)
    per_run1 = max(int(0.3 * budget.evals) // (len(families) * runs), 2)
    per_run2 = max((budget.evals - (per_run0 + per_run1 * runs) * len(families)) // (2 * runs), 2)
    ctx = (agg, n, f, d, rule_seed, None if budget.time_s is None else time.time() + budget.time_s)

    def stage(j: int, plan: list[tuple[str, dict[str, Any]]], parent: Sequence[np.random.SeedSequence],
              units: list[int]) -> list[dict[str, Any]]:
        """Run one stage's plan as engine chunks; chunk i draws from ``parent[i]``."""
        stage_key = None
        if checkpoint is not None:
            digest = hashlib.sha256(dumps(jsonable(plan), sort_keys=True).encode("utf-8")).hexdigest()
            stage_key = {"run": f"fedaudit.audit.robustness_search:optimiser stage {j}", "caller": key,
                         "budget": budget.to_dict(), "plan": digest}
        file = None if checkpoint is None else optimiser_checkpoint(checkpoint, j)
        results = run_chunks(_optimiser_chunk, [(ctx, kind, item, s) for (kind, item), s in zip(plan, parent)],
                             backend=backend, workers=workers, address=address, checkpoint=file, resume=resume,
                             key=stage_key, units=units, validate=_check_optimiser_result,
                             progress=None if progress is None else functools.partial(tick, progress))
        for res in results:
            out["evals"] += int(res["evals"])
            if res["stopped"] != "budget" and out["stopped"] == "budget":
                out["stopped"] = res["stopped"]
        return results

    incumbents: dict[str, list] = {}  # family label -> [ν, Y, start label, k, B]
    families_by_label = {label: (k, B) for label, k, B in families}

    def fold(label: str, nu: float, Y: np.ndarray, start_label: str | None) -> None:
        """A run's best into its family's incumbent by strict ``>`` (start label kept when None)."""
        inc = incumbents.setdefault(label, [-1.0, None, start_label, *families_by_label[label]])
        if nu > inc[0]:
            inc[0], inc[1] = nu, Y
            if start_label is not None:
                inc[2] = start_label

    # stage 1: phase F (Krum) and phase 0, independent of each other
    forced = [i for i, (_, _, B) in enumerate(families) if B is None] if _forced_selection_applies(agg, n, f) else []
    plan1 = [("forced", {"k": families[i][1], "evals": budget.evals // 4}) for i in forced]
    plan1 += [("clusters", {"k": k, "B": B, "evals": per_run0}) for _, k, B in families]
    res1 = stage(1, plan1, forced_seq.spawn(len(forced)) + cluster_seq.spawn(len(families)),
                 [1] * len(forced) + [0] * len(families))
    for i, res in zip(forced, res1):
        if res["Y"] is not None:
            fold(families[i][0], float(res["nu"]), _rows(res["Y"]), res["label"])
    start_rng = np.random.default_rng(start_seq)
    plan2, owners = [], []
    for (label, k, B), res in zip(families, res1[len(forced):]):
        clusters = [(float(c["nu"]), c["label"], _rows(c["Y"])) for c in res["found"]]
        starts = []
        for nu_c, c_label, Y_c in clusters[: max(runs // 2, 1)]:
            jitter = 1e-3 * float(np.sqrt(np.mean(Y_c ** 2)) or 1.0) * start_rng.normal(size=Y_c.shape)
            starts.append((c_label, Y_c + jitter))
            fold(label, nu_c, Y_c, c_label)
        starts += _starts(n, f, k, seeds, runs - len(starts), start_rng) if runs > len(starts) else []
        plan2 += [("run", {"k": k, "B": B, "Y0": Y0, "evals": per_run1}) for _, Y0 in starts]
        owners += [(label, start_label) for start_label, _ in starts]
    # stage 2: phase 1, every family's local runs from its starts
    if out["stopped"] == "budget":
        for (label, start_label), res in zip(owners, stage(2, plan2, run_seq.spawn(len(plan2)), [1] * len(plan2))):
            if res["Y"] is not None:
                out["restarts_run"] += 1
                fold(label, float(res["nu"]), _rows(res["Y"]), start_label)
    # stages 3, 4, …: phase 2, rounds of PHASE2_WIDTH perturbed runs from the two best incumbents
    widths = [min(PHASE2_WIDTH, 2 * runs - start) for start in range(0, 2 * runs, PHASE2_WIDTH)]
    for r, (width, parent) in enumerate(zip(widths, round_seq.spawn(len(widths)))):
        ranked = sorted(((lbl, v) for lbl, v in incumbents.items() if v[1] is not None),
                        key=lambda kv: -kv[1][0])[:2]
        if out["stopped"] != "budget" or not ranked:
            break
        picks = [ranked[c % len(ranked)] for c in range(width)]
        plan = [("perturbed", {"k": k, "B": B, "Y": Y_i, "evals": per_run2}) for _, (_, Y_i, _, k, B) in picks]
        for (label, _), res in zip(picks, stage(3 + r, plan, parent.spawn(width), [1] * width)):
            if res["Y"] is not None:
                out["restarts_run"] += 1
                fold(label, float(res["nu"]), _rows(res["Y"]), None)
    for label, (_, Y_inc, start_label, k, B) in incumbents.items():
        if Y_inc is None:
            continue
        nu, X, S = _certify(agg, n, f, d, rule_seed, Y_inc, B)
        out["per_subspace"][label] = nu
        if nu > out["nu"]:
            out.update(nu=nu, X=X, S=S, subspace=label, k=k, start=start_label)
    return SearchOutcome(**out, runtime_s=time.perf_counter() - t0)


def _rows(value: Any) -> np.ndarray:
    """A chunk's configuration (nested lists; non-finite entries as "inf"/"-inf"/"nan" after a
    checkpoint) as float64 rows."""
    return np.asarray(value, dtype=object).astype(np.float64)


def _embed(Y: np.ndarray, B: np.ndarray | None, n: int, d: int) -> np.ndarray:
    """X = Y Bᵀ, or Y zero-padded to d columns when B is None."""
    if B is None:
        X = np.zeros((n, d))
        X[:, : Y.shape[1]] = Y
        return X
    return Y @ B.T


def _certify(agg: Callable, n: int, f: int, d: int, rule_seed: int, Y: np.ndarray, B: np.ndarray | None
             ) -> tuple[float, np.ndarray, np.ndarray]:
    """(ν, X, S) of X = Y Bᵀ ∈ ℝ^{n×d} with the rule re-run there (ν = −1 on a breakdown)."""
    X = _embed(Y, B, n, d)
    try:
        z = call_rule(agg, X, rule_seed)
    except AggregatorBreakdown:
        return -1.0, X, np.arange(n - f)
    nu, S = _ratio(X, z, f)
    return nu, X, S


def _check_optimiser_result(result: Any, task) -> None:
    """An optimiser chunk's result as a checkpoint stores it (:func:`fedaudit.engine.iter_chunks`'s
    ``validate``): the fields :func:`_optimiser_chunk` returns for the chunk's kind, ``evals`` an
    integer ≥ 0, each ``nu`` a number, each ``Y`` None or rows of numbers."""
    kind = task[1]

    def found(item: Any) -> bool:
        return (isinstance(item, dict) and is_numbers(item.get("nu")) and isinstance(item.get("label"), str)
                and (item.get("Y") is None or is_numbers(item.get("Y"), (None, None))))

    ok = (isinstance(result, dict) and type(result.get("evals")) is int and result["evals"] >= 0
          and result.get("stopped") in ("budget", "time limit", "unbounded"))
    if ok and "found" in result:
        ok = isinstance(result["found"], list) and all(found(item) for item in result["found"])
    if ok and (kind != "clusters" or result.get("stopped") == "time limit"):
        ok = found({"label": "", **result})
    if not ok:
        raise ValueError(f"not the result of an optimiser chunk of kind {kind!r}")


def _optimiser_chunk(task) -> dict[str, Any]:
    """One engine chunk of :func:`optimise_configuration`: ``(ctx, kind, item, seq)`` with
    ``ctx = (agg, n, f, d, rule_seed, deadline)``, ``kind`` one of ``"forced"`` (phase F of one
    family), ``"clusters"`` (phase 0 of one family), ``"run"`` (one local run of phase 1) or
    ``"perturbed"`` (one run of phase 2 from ``item["Y"]`` with a random half of its rows moved
    by 0.3× their RMS spread), all randomness from
    ``seq``. Returns JSON data: ``evals``, ``stopped`` ("budget", "time limit" or "unbounded")
    and the best configuration found (``nu``, ``Y`` as nested lists; ``found`` per cluster layout)."""
    ctx, kind, item, seq = task
    local = _Local(*ctx)
    rng = np.random.default_rng(seq)
    B = None if item.get("B") is None else np.asarray(item["B"], dtype=np.float64)
    if local.expired():
        return {"evals": 0, "stopped": "time limit", "nu": -1.0, "Y": None, "found": [], "label": ""}
    result: dict[str, Any] = {"stopped": "budget"}
    if kind == "forced":
        nu, Y, label = local.forced(item["k"], item["evals"], rng)
        result.update(nu=nu, Y=None if Y is None else Y.tolist(), label=label)
    elif kind == "clusters":
        result["found"] = [{"nu": nu, "label": label, "Y": Y.tolist()}
                           for nu, label, Y in local.clusters(item["k"], B, item["evals"], rng)]
    elif kind == "run":
        nu, Y = local.local_run(np.array(item["Y0"], dtype=np.float64), item["k"], B, item["evals"], rng)
        result.update(nu=nu, Y=Y.tolist(), stopped="unbounded" if nu >= UNBOUNDED else "budget")
    else:
        Y0 = np.array(item["Y"], dtype=np.float64)  # a copy: in this process item["Y"] is the incumbent
        rows = rng.random(Y0.shape[0]) < 0.5
        Y0[rows] += 0.3 * float(np.sqrt(np.mean(Y0 ** 2)) or 1.0) * rng.normal(size=(int(rows.sum()), item["k"]))
        nu, Y = local.local_run(Y0, item["k"], B, item["evals"], rng)
        result.update(nu=nu, Y=Y.tolist(), stopped="unbounded" if nu >= UNBOUNDED else "budget")
    result["evals"] = local.evals
    return result


class _Local:
    """The optimiser's work inside one engine chunk: the rule at (n, f, d) with its seed, the
    optional wall-clock deadline (``time.time()``), this chunk's subset scorer
    (:class:`_Scorer`) and its count of objective evaluations."""

    def __init__(self, agg: Callable, n: int, f: int, d: int, rule_seed: int, deadline: float | None):
        self.agg, self.n, self.f, self.d, self.rule_seed, self.deadline = agg, n, f, d, rule_seed, deadline
        self.scorer = _Scorer(n, f)
        self.evals = 0

    def expired(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def score(self, Y: np.ndarray, B: np.ndarray | None, refresh: bool = False) -> float:
        """ν of X = Y Bᵀ in frame coordinates: ‖F − x̄_S‖² = ‖BᵀF − ȳ_S‖² + ‖(I − BBᵀ)F‖²."""
        if B is None:
            Yz, offset = call_rule(self.agg, Y, self.rule_seed), 0.0
        else:
            z = call_rule(self.agg, Y @ B.T, self.rule_seed)
            Yz = z @ B
            offset = max(float(z @ z - Yz @ Yz), 0.0)
        if not np.isfinite(Yz).all():
            return math.inf
        if refresh:
            self.scorer.refresh(Y, Yz, offset)
        return self.scorer(Y, Yz, offset)

    def local_run(self, Y0: np.ndarray, k: int, B: np.ndarray | None, per_run: int, rng: np.random.Generator,
                  decode: Callable[[np.ndarray], np.ndarray] | None = None, v0: np.ndarray | None = None
                  ) -> tuple[float, np.ndarray]:
        """Nelder–Mead then Powell on v (Y = decode(v), default the rows themselves), at most
        ``per_run`` evaluations; (best ν, its Y), ν capped at :data:`UNBOUNDED`."""
        n = self.n
        decode = decode or (lambda v: v.reshape(n, k))
        state = {"nu": -1.0, "Y": Y0.copy(), "count": 0, "v": None}

        def objective(v: np.ndarray) -> float:
            if state["count"] >= per_run or self.expired():
                raise _Stop
            state["count"] += 1
            Y = decode(v)
            try:
                nu = self.score(Y, B, refresh=state["count"] == 1)
            except AggregatorBreakdown:
                return 0.0
            if not math.isfinite(nu) or nu >= UNBOUNDED:
                state.update(nu=UNBOUNDED, Y=Y.copy())
                raise _Stop
            if nu > state["nu"]:
                state.update(nu=nu, Y=Y.copy(), v=v.copy())
            return -nu

        v0 = Y0.reshape(-1) if v0 is None else v0
        state["v"] = v0.copy()
        try:
            minimize(objective, v0, method="Nelder-Mead",
                     options={"maxfev": int(per_run * 0.7), "xatol": 1e-10, "fatol": 1e-12,
                              "adaptive": v0.size > 10, "initial_simplex": _simplex(v0, rng)})
            minimize(objective, state["v"], method="Powell",
                     options={"maxfev": per_run, "xtol": 1e-8, "ftol": 1e-12})
        except _Stop:
            pass
        if not self.scorer.small:
            try:
                self.score(state["Y"], B, refresh=True)
            except AggregatorBreakdown:
                pass
        self.evals += state["count"]
        return state["nu"], state["Y"]

    def clusters(self, k: int, B: np.ndarray | None, evals: int, rng: np.random.Generator
                 ) -> list[tuple[float, str, np.ndarray]]:
        """Phase 0: coincident clusters — a and m − a honest rows, and the f Byzantine rows
        together or as one row plus f − 1 — with their positions optimised, for several
        splits a; exact ties let a rule's output sit on a data point (GM's vertex optimality,
        medians, Krum picking one Byzantine row backed by the others), which row-wise starts
        rarely reach. Sorted by decreasing ν."""
        n, f = self.n, self.f
        m = n - f
        if m < 2:
            return []
        splits = sorted(set(int(a) for a in np.linspace(1, m - 1, min(m - 1, 6)).round()))
        byz_layouts = ["together", "1 + rest"] if f >= 2 else ["together"]
        layouts = [(a, lay) for a in splits for lay in byz_layouts]
        found = []
        for a, lay in layouts:
            byz = np.full(f, 2, int) if lay == "together" else np.r_[2, np.full(f - 1, 3, int)]
            assign = np.r_[np.zeros(a, int), np.ones(m - a, int), byz]
            c = int(assign.max()) + 1
            P0 = rng.normal(size=(c, k))
            nu, Y = self.local_run(P0[assign], k, B, max(evals // len(layouts), 2), rng,
                                   decode=lambda v, assign=assign, c=c: v.reshape(c, k)[assign], v0=P0.reshape(-1))
            byz_label = f"{f} Byzantine together" if lay == "together" else f"Byzantine 1 + {f - 1}"
            found.append((nu, f"honest clusters {a} + {m - a}, {byz_label}", Y))
        found.sort(key=lambda t: -t[0])
        return found

    def forced(self, k: int, evals: int, rng: np.random.Generator) -> tuple[float, np.ndarray | None, str]:
        """Phase F (Krum only): the worst case of a selection rule sits where the selected row
        is about to lose the selection, a boundary that row-wise search on ν keeps crossing.
        So maximise the surrogate ν(X; z = x_0) − 30·max(0, (score_0 − min_{i≠0} score_i)/D̄ + 10⁻³)
        (Krum's score, D̄ the mean squared distance): row 0 is *made* the selected row, its f
        supporters sit near it, and the honest rest forms c ∈ {2, 3, 4} clusters — first with
        the groups' positions as variables, then row-wise from the two best. Candidates are
        ranked by the true ν (the rule re-run on them), never by the surrogate."""
        n, f = self.n, self.f
        m, q_f = n - f, int(getattr(self.agg, "f", f))
        masks = _masks(n, f)

        def surrogate(Y: np.ndarray) -> float:
            # direct differences, not kernels.pairwise_sqdist: the Gram-matrix kernel rounds
            # differently, and the surrogate steers the search, so its bits fix the search path
            diff = Y[:, None, :] - Y[None, :, :]
            D = np.einsum("ijk,ijk->ij", diff, diff)
            scale = float(D.sum()) / (n * (n - 1)) or 1.0
            sc = krum_scores(D, q_f)
            with np.errstate(all="ignore"):
                r = float(np.max(subset_ratios(masks, Y, Y[0])))
            if not math.isfinite(r):
                return -UNBOUNDED
            return r - 30.0 * max(0.0, (float(sc[0]) - float(np.min(sc[1:]))) / scale + 1e-3)

        def polish(decode: Callable[[np.ndarray], np.ndarray], v0: np.ndarray, evals_run: int
                   ) -> tuple[float, np.ndarray]:
            best = [-math.inf, decode(v0)]
            count = [0]

            def objective(v: np.ndarray) -> float:
                if count[0] >= evals_run:
                    raise _Stop
                count[0] += 1
                Y = decode(v)
                val = surrogate(Y)
                if val > best[0]:
                    best[0], best[1] = val, Y.copy()
                return -val

            try:
                res = minimize(objective, v0, method="Nelder-Mead",
                               options={"maxfev": int(0.7 * evals_run), "xatol": 1e-10, "fatol": 1e-12,
                                        "adaptive": v0.size > 10})
                minimize(objective, res.x, method="Powell", options={"maxfev": evals_run, "xtol": 1e-8, "ftol": 1e-12})
            except _Stop:
                pass
            self.evals += count[0]
            return best[0], best[1]

        group_runs = [(c, rep) for c in (2, 3, 4) if c <= m - 1 for rep in range(2)]
        per_group = max(evals // (2 * max(len(group_runs), 1)), 2)
        cands = []
        for c, _ in group_runs:  # groups: 0 = the selected row, 1..c honest clusters, c+1 supporters
            assign = np.r_[0, 1 + np.arange(m - 1) % c, np.full(f, c + 1)]
            P0 = rng.normal(size=(c + 2, k))
            P0[c + 1] = P0[0] + 0.5 * rng.normal(size=k)
            val, Y = polish(lambda v, a=assign, c=c: v.reshape(c + 2, k)[a], P0.reshape(-1), per_group)
            cands.append((val, c, Y))
        cands.sort(key=lambda t: -t[0])
        best = (-1.0, None, "")
        for val, c, Y in cands[:2]:
            Yj = Y + 1e-2 * float(np.sqrt(np.mean((Y - Y.mean(axis=0)) ** 2)) or 1.0) * rng.normal(size=Y.shape)
            _, Yp = polish(lambda v: v.reshape(n, k), Yj.reshape(-1), max(evals // 4, 2))
            for Yc in (Y, Yp):
                try:
                    nu = self.score(Yc, None)
                except AggregatorBreakdown:
                    continue
                self.evals += 1
                if math.isfinite(nu) and nu > best[0]:
                    best = (nu, Yc, f"forced selection of a row with {f} supporters, {c} honest clusters")
        return best


def _forced_selection_applies(agg: Any, n: int, f: int) -> bool:
    """Phase F runs for Krum itself (exact type or registry name) when every S is scored exactly."""
    from fedaudit.defenses.aggregators import Krum

    named = isinstance(agg, str) and agg.strip().lower() == "krum"
    return (named or type(agg) is Krum) and math.comb(n, f) <= WORKING_LIMIT and n - f >= 3


def forced_selection_runs(agg: Any, n: int, f: int, budget: SearchBudget, d: int) -> int:
    """progress(1) calls of phase F: one per low-dimensional family when it applies."""
    if budget.evals == 0 or not _forced_selection_applies(agg, n, f):
        return 0
    return sum(k <= d for k in budget.dims)


def _simplex(v0: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Initial simplex around v0 with edges a third of the configuration's spread (random axes)."""
    spread = float(np.std(v0)) or 1.0
    nvar = v0.size
    Q, _ = np.linalg.qr(rng.normal(size=(nvar, nvar)))
    return np.vstack([v0, v0 + (spread / 3.0) * Q.T])
