"""ε lower bounds from one training run: m canaries, each included independently with probability ½.

The game (Steinke, Nasr, Jagielski, NeurIPS 2023, "Privacy auditing with one (1) training run"):
each of m canaries is put into the training set by a fair coin S_i ∈ {in, out}; after one run the
auditor guesses the coins of r canaries (abstaining on m − r) and v guesses are right. If the
training algorithm is (ε, δ)-DP with respect to each canary, then (their Thm. 3, in the form of
the p-value function of their Appendix D) for q = e^ε/(1 + e^ε) and B ~ Binom(r, q)

    β = P[B ≥ v],   α = max_{i=1..v} P[v − i ≤ B < v] / i,   P[V ≥ v] ≤ p(ε, δ) = min(1, β + 2·m·δ·α).

:func:`one_run_epsilon` reports ε_lb = inf{ε ≥ 0 : p(ε, δ) > 1 − confidence}: every ε below it is
rejected at level 1 − confidence, and P[ε_lb > ε_true] ≤ P[p(ε_true, δ) ≤ 1 − confidence] ≤
1 − confidence. p is nondecreasing in ε when 2mδ ≤ 1: with S_i = P[v − i ≤ B < v],
d/dq (β + 2mδ·S_i/i) = r·(pmf′(v−1)·(1 − 2mδ/i) + (2mδ/i)·pmf′(v−i−1)) ≥ 0 (pmf′ of
Binom(r − 1, q)), and a maximum of nondecreasing functions is nondecreasing; there the root is
the answer, elsewhere the search also checks a grid under the root. The α-sum is truncated where
the binomial mass falls below 1e-30 and that mass is added back to α, so p stays an upper bound.

:func:`one_run_epsilon_fdp` analyses the same game under an f-DP hypothesis (Mahloujifar, Melis,
Chaudhuri 2024, arXiv 2410.22235, "Auditing f-differential privacy in one run"), with the
Gaussian trade-off f = G_μ (Dong, Roth, Su 2022) whose (ε, δ) curve passes through the claimed
point: μ(ε, δ) = 1/σ(ε, δ), σ the analytic Gaussian-mechanism noise (Balle & Wang 2018; the
search runs over μ and converts the result once with :func:`fedaudit.audit.gdp.gdp_epsilon`).
It rejects μ-GDP, so its ε is a lower bound on the ε(δ) of a mechanism whose trade-off curve is
Gaussian (the Gaussian mechanism; DP-SGD and DP-FedAvg to the extent that their curves are); for
other curves it is no certificate: randomized response at ε = 1 is (1, δ)-DP but not μ(1, δ)-GDP,
and with all of 1000 such canaries guessed (73% right) the Gaussian analysis reports ε ≈ 1.64.
``curve="dp"`` runs the same analysis with the (ε, δ)-DP curve f_{ε,δ} itself, valid for every
(ε, δ)-DP mechanism (close to Steinke's bound, tighter where the 2mδ term bites).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Callable, ClassVar, Sequence

import numpy as np
from scipy import optimize, special, stats

from fedaudit.audit.gdp import gdp_epsilon
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Bound
from fedaudit.json import jsonable
from fedaudit.validation import check_choice, check_int, check_probability, check_real

__all__ = ["one_run_p_value", "one_run_epsilon", "one_run_epsilon_fdp", "OneRunAudit", "one_run_audit",
           "ONE_RUN_METHODS", "FDP_CURVES", "GUESS_FRACTIONS", "MIN_CANARIES"]

#: "steinke": Steinke–Nasr–Jagielski 2023, valid for every (ε, δ)-DP mechanism; "fdp":
#: Mahloujifar–Melis–Chaudhuri 2024 under a Gaussian trade-off curve
ONE_RUN_METHODS = ("steinke", "fdp")
#: the default grid of guess counts, as fractions of the canaries: r = round(m·2^-k), k = 0..7
GUESS_FRACTIONS = tuple(2.0 ** -k for k in range(8))
#: fewest canaries an audit of scores accepts
MIN_CANARIES = 10
#: binomial mass below which the α-sum is truncated (added back to α in full: p stays an upper bound)
_TAIL = 1e-30
#: largest ε the root search brackets (m ≤ 10^12 canaries cannot certify more than ~28)
_EPS_CAP = 100.0
#: largest μ the Gaussian f-DP search brackets (ε(μ = 40, δ = 1e-5) ≈ 970)
_MU_CAP = 40.0


def _check_counts(correct: Any, guesses: Any, canaries: Any) -> tuple[int, int, int]:
    m = check_int("canaries", canaries, low=1)
    r = check_int("guesses", guesses, low=1, high=m, high_name="canaries")
    v = check_int("correct", correct, low=0, high=r, high_name="guesses")
    return v, r, m


def _check_confidence(confidence: Any) -> float:
    return check_probability("confidence", confidence)


def _p_value(v: int, r: int, m: int, eps: float, delta: float) -> float:
    if v == 0:
        return 1.0
    q = float(special.expit(eps))
    beta = float(stats.binom.sf(v - 1, r, q))
    if delta == 0.0:
        return beta
    # S_i = P[v − i ≤ B ≤ v − 1] = Σ_{j=v−i}^{v−1} pmf(j): cumulative sums from j = v − 1 down
    lo = max(0, int(stats.binom.ppf(_TAIL, r, q)))
    lo = min(lo, v - 1)
    j = np.arange(v - 1, lo - 1, -1)
    s = np.cumsum(stats.binom.pmf(j, r, q))
    alpha = float(np.max(s / np.arange(1, s.size + 1)))
    if lo > 0:  # every i past the truncation has S_i/i ≤ alpha + P[B < lo]
        alpha += float(stats.binom.cdf(lo - 1, r, q))
    return min(1.0, beta + 2.0 * m * delta * alpha)


def one_run_p_value(correct: int, guesses: int, canaries: int, *, epsilon: float, delta: float) -> float:
    """p(ε, δ) = min(1, β + 2mδα) of Steinke–Nasr–Jagielski 2023 (module docstring): an upper
    bound on the probability that an (ε, δ)-DP run lets ``guesses`` guesses on ``canaries``
    canaries get ``correct`` or more right."""
    v, r, m = _check_counts(correct, guesses, canaries)
    eps = check_real("epsilon", epsilon, low=0.0)
    delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    return _p_value(v, r, m, eps, delta)


def _first_crossing(margin: Callable[[float], float], cap: float, *, check: bool = True) -> float:
    """inf{x ≥ 0 : margin(x) ≤ 0} (at most ``cap``) for a margin that is positive where the claim x
    is rejected: bracket by doubling, Brent's method, then (``check``, for margins not known to be
    monotone) a 16-point grid under the root: a smaller point that is not rejected moves the
    search into that bracket."""
    if margin(0.0) <= 0:
        return 0.0
    lo, hi = 0.0, 1.0
    while margin(hi) > 0:
        if hi >= cap:
            return cap
        lo, hi = hi, min(2.0 * hi, cap)
    while True:
        root = float(optimize.brentq(margin, lo, hi, xtol=1e-9, rtol=1e-12))
        if not check:
            return root
        grid = np.linspace(0.0, root, 17)[1:-1]
        bad = [e for e in grid if margin(float(e)) <= 0]
        if not bad:
            return root
        hi = float(bad[0])
        lo = float(grid[grid < hi][-1]) if (grid < hi).any() else 0.0


def one_run_epsilon(correct: int, guesses: int, canaries: int, *, delta: float, confidence: float = 0.95) -> float:
    """Certified ε lower bound of a one-run audit (Steinke, Nasr, Jagielski 2023, Thm. 3):
    ε_lb = inf{ε ≥ 0 : p(ε, δ) > 1 − confidence} for ``correct`` right out of ``guesses`` guesses
    on ``canaries`` canaries, each included with probability ½ (module docstring). Valid for any
    (ε, δ)-DP mechanism, at ``confidence``, when the guesses are fixed in advance (a number of
    guesses chosen on the same scores needs a union bound: :func:`one_run_audit`). δ = 0 audits
    pure DP."""
    v, r, m = _check_counts(correct, guesses, canaries)
    delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    sig = 1.0 - _check_confidence(confidence)
    if _p_value(v, r, m, 0.0, 0.0) > sig:  # β ≤ p: cannot reject even ε = 0 (and δ = 0)
        return 0.0
    # p is nondecreasing in ε when 2mδ ≤ 1 (module docstring): no grid check needed there
    return _first_crossing(lambda e: sig - _p_value(v, r, m, e, delta), _EPS_CAP, check=2 * m * delta > 1)


#: trade-off curves the f-DP analysis can hypothesise
FDP_CURVES = ("gaussian", "dp")


def _blow_down(curve: str, param: float, delta: float) -> Callable[[float], float]:
    """g = B⁻¹ for the blow-up B(x) = 1 − f(x) of the hypothesised trade-off curve f: an event of
    probability y under one neighbour has probability ≥ g(y) under the other.
    "gaussian" (``param`` = μ): f = G_μ, g(y) = Φ(Φ⁻¹(y) − μ) (Dong, Roth, Su 2022);
    "dp" (``param`` = ε): f = f_{ε,δ}(x) = max(0, 1 − δ − e^ε x, e^−ε (1 − δ − x)) (Kairouz, Oh,
    Viswanath 2015), g(y) = max(0, e^−ε (y − δ), 1 − δ − e^ε (1 − y))."""
    if curve == "dp":
        e = float(np.exp(param))
        return lambda y: max(0.0, (y - delta) / e, 1.0 - delta - e * (1.0 - y))
    return lambda y: float(special.ndtr(special.ndtri(y) - param))


def _fdp_margin(v: int, r: int, m: int, g: Callable[[float], float], sig: float) -> float:
    """Positive when the counts reject the hypothesised trade-off curve at level ``sig``
    (Mahloujifar–Melis–Chaudhuri 2024, the recursion of their capped audit): start from the
    masses c = sig·v/m of correct and h = sig·(r − v)/m of wrong guesses; for i = v − 1, …, 0 the
    wrong mass must be at least the blow-down of the correct mass, h' = max(h, g(c)), and the
    correct mass grows by i/(r − i)·(h' − h), capped at 1 so that it stays a probability (the cap
    binds only well past the root). Under the hypothesis c + h ≤ r/m; the margin is c + h − r/m."""
    c = sig * v / m
    h = sig * (r - v) / m
    for i in range(v - 1, -1, -1):
        h_new = max(h, g(c))
        if h_new == h:  # a fixed point: neither h nor c changes again
            break
        c = min(c + i / (r - i) * (h_new - h), 1.0)
        h = h_new
    return c + h - r / m


def one_run_epsilon_fdp(correct: int, guesses: int, canaries: int, *, delta: float,
                        confidence: float = 0.95, curve: str = "dp") -> float:
    """ε lower bound of a one-run audit by the f-DP analysis of Mahloujifar, Melis, Chaudhuri
    (2024): the smallest ε whose trade-off curve at (ε, δ) the counts no longer reject at level
    1 − confidence (:func:`_fdp_margin`). ``curve="dp"`` (the default) hypothesises f_{ε,δ} itself
    and is valid for every (ε, δ)-DP mechanism. ``curve="gaussian"`` (μ(ε, δ)-GDP) is
    certified only for mechanisms whose trade-off curve is Gaussian (the Gaussian mechanism; the
    Poisson-subsampled Gaussian of DP-SGD and DP-FedAvg only approximately); it rejects μ-GDP,
    which an (ε, δ)-DP mechanism of another shape (e.g. randomized response) need not satisfy, and
    the subsampled Gaussian's tail is heavier than G_μ's (its δ(ε′) exceeds μ-GDP's at some ε′):
    an estimate there, not a certificate. δ must be in (0, 1)."""
    v, r, m = _check_counts(correct, guesses, canaries)
    delta = check_probability("delta", delta)
    sig = 1.0 - _check_confidence(confidence)
    curve = check_choice("curve", curve, FDP_CURVES)
    if curve == "dp":
        return _first_crossing(lambda e: _fdp_margin(v, r, m, _blow_down("dp", e, delta), sig), _EPS_CAP)
    # search μ directly (ε ↦ μ(ε, δ) is increasing; μ below μ(0, δ) converts to ε = 0), convert once
    mu = _first_crossing(lambda mu: _fdp_margin(v, r, m, _blow_down("gaussian", mu, delta), sig), _MU_CAP)
    return gdp_epsilon(mu, delta)


@dataclass(frozen=True)
class OneRunAudit:
    """Result of a one-run audit of canary scores (:func:`one_run_audit`,
    ``ScoreAuditor.one_run``). ``epsilon`` is the lower bound at ``confidence`` for ``delta``
    (``method`` "steinke", or "fdp" with ``curve`` "dp": certified for every (ε, δ)-DP mechanism;
    "fdp" with ``curve`` "gaussian": certified only under a Gaussian trade-off curve). It comes
    from the guess count ``guesses`` = ``guesses_in`` (highest scores, guessed included) +
    ``guesses_out`` (lowest, guessed excluded), of which ``correct`` were right, chosen from
    ``grid`` with each bound at ``alpha_per_test`` = (1 − confidence)/len(grid).
    ``threshold_in``/``threshold_out`` are the scores of the last canary guessed in/out (None when
    that side has no guess); ``grid_epsilons`` the bound of every grid entry."""

    epsilon: float
    delta: float
    confidence: float
    method: str
    curve: str | None
    canaries: int
    canaries_in: int
    guesses: int
    guesses_in: int
    guesses_out: int
    correct: int
    threshold_in: float | None
    threshold_out: float | None
    orientation: str
    grid: tuple[int, ...]
    grid_epsilons: tuple[float, ...]
    alpha_per_test: float
    ties: str
    #: what ``epsilon`` is: a certified lower bound (at ``confidence``)
    epsilon_bound: ClassVar[Bound] = Bound.LOWER

    @property
    def precision(self) -> float:
        """correct / guesses."""
        return self.correct / self.guesses

    def to_dict(self) -> dict[str, Any]:
        return jsonable({**asdict(self), "precision": self.precision, "epsilon_bound": self.epsilon_bound.value})

    def summary(self) -> str:
        """One line: the bound, its method and the counts behind it."""
        kind = ("certified only under a Gaussian trade-off curve (μ-GDP)" if self.curve == "gaussian"
                else "certified for every (ε, δ)-DP mechanism")
        name = self.method if self.curve is None else f"{self.method}/{self.curve}"
        sel = (f"r chosen from {len(self.grid)} grid values (Bonferroni)" if len(self.grid) > 1
               else "r fixed in advance")
        return (f"one-run ε ≥ {self.epsilon:.4f} at {self.confidence:.0%} confidence (δ = {self.delta:g}; "
                f"{name}, {kind}); {self.correct:,}/{self.guesses:,} guesses right "
                f"({self.guesses_in:,} in, {self.guesses_out:,} out) on {self.canaries:,} canaries; {sel}")


def _guess_grid(guesses: Any, m: int) -> tuple[int, ...]:
    if guesses is None:
        return tuple(sorted({max(1, int(round(m * f))) for f in GUESS_FRACTIONS}, reverse=True))
    if isinstance(guesses, (str, bytes)) or not np.iterable(guesses):
        return (check_int("guesses", guesses, low=1, high=m, high_name="canaries"),)
    items = [check_int("guesses", g, low=1, high=m, high_name="canaries") for g in guesses]
    if not items:
        raise FedAuditError(f"guesses must be None, an integer in [1, canaries={m}] or a non-empty sequence of them")
    return tuple(sorted(set(items), reverse=True))


def one_run_audit(scores_in: np.ndarray, scores_out: np.ndarray, *, delta: float, confidence: float = 0.95,
                  guesses: int | Sequence[int] | None = None, method: str = "steinke", curve: str = "dp",
                  orientation: str = "in-high", seed: int = 0) -> OneRunAudit:
    """One-run ε lower bound from the scores of canaries that were included (``scores_in``) and
    excluded (``scores_out``) by independent fair coins.

    For a total guess count r the auditor guesses "in" on the r₊ = ⌈r/2⌉ highest scores and "out"
    on the r₋ = ⌊r/2⌋ lowest (``orientation="in-low"``: the other way round), a rule that reads the
    scores only, never the coins. ``guesses``: an int fixes r (no correction); a sequence or None
    (the grid r = round(m·2^-k), k = 0..7) tries each r at level (1 − confidence)/#grid and keeps the
    largest bound (union bound over the grid). ``method``: "steinke" (:func:`one_run_epsilon`) or
    "fdp" (:func:`one_run_epsilon_fdp` with ``curve``). Scores tied across a guess boundary are ordered by
    a seeded random permutation (``seed``), so tie-breaking never depends on membership.
    """
    a = np.asarray(scores_in, dtype=np.float64).reshape(-1)
    b = np.asarray(scores_out, dtype=np.float64).reshape(-1)
    m = a.size + b.size
    if m < MIN_CANARIES:
        raise FedAuditError(f"a one-run audit needs at least {MIN_CANARIES} canaries (scores_in + scores_out), got {m}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise FedAuditError("scores_in and scores_out must be finite")
    delta = check_real("delta", delta, low=0.0, high=1.0, open_high=True)
    confidence = _check_confidence(confidence)
    method = check_choice("method", method, ONE_RUN_METHODS)
    if method == "fdp":
        curve = check_choice("curve", curve, FDP_CURVES)
        delta = check_probability("delta", delta)
        bound = partial(one_run_epsilon_fdp, curve=curve)
    else:
        curve, bound = None, one_run_epsilon
    orientation = check_choice("orientation", orientation, ("in-high", "in-low"))
    seed = check_int("seed", seed, low=0)
    grid = _guess_grid(guesses, m)
    alpha = (1.0 - confidence) / len(grid)
    scores = np.concatenate([a, b]) if orientation == "in-high" else -np.concatenate([a, b])
    member = np.concatenate([np.ones(a.size, bool), np.zeros(b.size, bool)])
    # ascending by score, ties in a seeded random order independent of membership
    tie = np.random.default_rng(seed).permutation(m)
    order = np.lexsort((tie, scores))
    member_sorted = member[order]
    # correct "in" guesses among the k highest, correct "out" guesses among the k lowest
    in_top = np.concatenate([[0], np.cumsum(member_sorted[::-1])])
    out_bottom = np.concatenate([[0], np.cumsum(~member_sorted)])
    best = None
    eps_all = []
    for r in grid:
        r_in, r_out = (r + 1) // 2, r // 2
        v = int(in_top[r_in] + out_bottom[r_out])
        eps = bound(v, r, m, delta=delta, confidence=1.0 - alpha)
        eps_all.append(float(eps))
        if best is None or eps > best[0]:
            best = (float(eps), r, r_in, r_out, v)
    eps, r, r_in, r_out, v = best
    sorted_scores = scores[order] if orientation == "in-high" else -scores[order]
    return OneRunAudit(
        epsilon=eps, delta=delta, confidence=confidence, method=method, curve=curve, canaries=m,
        canaries_in=int(a.size),
        guesses=r, guesses_in=r_in, guesses_out=r_out, correct=v,
        threshold_in=float(sorted_scores[m - r_in]) if r_in else None,
        threshold_out=float(sorted_scores[r_out - 1]) if r_out else None,
        orientation=orientation, grid=grid, grid_epsilons=tuple(eps_all), alpha_per_test=alpha,
        ties=f"random order (seed {seed})")
