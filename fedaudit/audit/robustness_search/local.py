"""The local optimiser inside one engine chunk: calling the rule under common random numbers,
start configurations, Nelder–Mead then Powell local runs, the cluster layouts of phase 0 and the
forced-selection surrogate of phase F (for rules that select the row of smallest Krum score)."""

from __future__ import annotations

import inspect
import math
import time
from typing import Any, Callable, Sequence

import numpy as np
from scipy.optimize import minimize

from fedaudit.arrays import is_torch, torch_to_numpy
from fedaudit.audit.robustness_search.budget import UNBOUNDED, WORKING_LIMIT, SearchBudget
from fedaudit.audit.robustness_search.subsets import SubsetScorer, subset_masks, subset_ratios
from fedaudit.defenses.base import declares
from fedaudit.defenses.registry import spec_stages
from fedaudit.errors import AggregatorBreakdown, FedAuditError
from fedaudit.kernels import krum_scores

__all__ = [
    "call_rule", "start_configurations", "LocalSearch", "forced_selection_applies", "forced_selection_runs",
]


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


def start_configurations(n: int, f: int, k: int, seeds: Sequence[tuple[str, np.ndarray]], count: int,
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


class _Stop(Exception):
    pass


class LocalSearch:
    """The optimiser's work inside one engine chunk: the rule at (n, f, d) with its seed, the
    optional wall-clock deadline (``time.time()``), this chunk's subset scorer
    (:class:`SubsetScorer`) and its count of objective evaluations."""

    def __init__(self, agg: Callable, n: int, f: int, d: int, rule_seed: int, deadline: float | None):
        self.agg, self.n, self.f, self.d, self.rule_seed, self.deadline = agg, n, f, d, rule_seed, deadline
        self.scorer = SubsetScorer(n, f)
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
        masks = subset_masks(n, f)

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


def forced_selection_applies(agg: Any, n: int, f: int) -> bool:
    """Phase F runs for a rule that outputs the row of smallest Krum score — its class declares
    ``selects_min_krum_score = True`` (:attr:`fedaudit.defenses.base.Aggregator.selects_min_krum_score`,
    read by :func:`~fedaudit.defenses.base.declares`), as :class:`~fedaudit.defenses.aggregators.Krum`
    does; a spec must be that one rule, with no pre-aggregator — when every S is scored exactly."""
    if isinstance(agg, str):
        try:
            stages = spec_stages(agg)
            selects = len(stages) == 1 and declares(stages[0][1].factory(stages[0][0]), "selects_min_krum_score")
        except FedAuditError:
            selects = False
    else:
        selects = declares(agg, "selects_min_krum_score")
    return selects and math.comb(n, f) <= WORKING_LIMIT and n - f >= 3


def forced_selection_runs(agg: Any, n: int, f: int, budget: SearchBudget, d: int) -> int:
    """progress(1) calls of phase F: one per low-dimensional family when it applies."""
    if budget.evals == 0 or not forced_selection_applies(agg, n, f):
        return 0
    return sum(k <= d for k in budget.dims)


def _simplex(v0: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Initial simplex around v0 with edges a third of the configuration's spread (random axes)."""
    spread = float(np.std(v0)) or 1.0
    nvar = v0.size
    Q, _ = np.linalg.qr(rng.normal(size=(nvar, nvar)))
    return np.vstack([v0, v0 + (spread / 3.0) * Q.T])
