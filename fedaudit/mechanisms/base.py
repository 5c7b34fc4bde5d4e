"""The client-side mechanism interface every audit relies on.

A :class:`Mechanism` is a local randomizer ``M: R^d -> reports``. Reports are 2-D float64
arrays, one row per report, with a layout each mechanism documents in ``report_layout``.
The claimed guarantee is a typed value, ``Mechanism.guarantee``: :class:`~fedaudit.guarantees.PureLDP`
(ε) or :class:`~fedaudit.guarantees.ApproxLDP` (ε, δ) per report, ``None`` for no claim (a
non-private variant): for all inputs x, x' in the input domain and every event S,
``P[M(x) in S] <= exp(epsilon) P[M(x') in S] + delta``. ``epsilon`` and ``delta`` are read from it.
"""

from __future__ import annotations

import functools
import math
import warnings
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Guarantee, epsilon_delta
from fedaudit.validation import check_int, check_matrix, check_positive, check_vector
from fedaudit.rng import RngLike, as_generator

__all__ = ["Mechanism", "GridMechanism", "has_categorical_inputs", "rr_noise", "randomized_response_event", "no_event",
           "clip_l2",
           "signed_directions", "pow2_floor", "parallel_sign",
           "halfspace_pair_sup", "MAX_LEVELS", "check_levels"]

#: largest number of quantization levels a mechanism accepts: the level grid is one float64 array
#: of ``levels`` entries (2^24 → 128 MB, half the 256 MB live-memory budget of DESIGN.md), and
#: level indices travel as float64, exact far beyond this (2^53)
MAX_LEVELS = 2**24


def check_levels(levels: Any) -> int:
    """levels as an int in [2, MAX_LEVELS = 2^24] (the bound the level grid can allocate)."""
    return check_int("levels", levels, low=2, high=MAX_LEVELS, high_name="2^24")


def clip_l2(X: np.ndarray, clip: float) -> np.ndarray:
    """Row-wise projection onto the L2 ball of radius ``clip``: x * min(1, clip/||x||)."""
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    over = norms > clip
    return X * np.where(over, clip / np.where(over, norms, 1.0), 1.0)


def signed_directions(X: np.ndarray, clip: float) -> tuple[np.ndarray, np.ndarray]:
    """Unit directions u = x/‖x‖ (e_1 at x = 0) and P(+) = (1 + min(‖x‖, clip)/clip)/2 per row.

    Reporting ±clip·u with these probabilities is unbiased for the projection of x onto the
    clip ball (Duchi et al. 2018): the first step of Duchi's and PrivUnitG's randomizers.
    """
    norms = np.linalg.norm(X, axis=1)
    zero = norms == 0.0
    U = X / np.where(zero, 1.0, norms)[:, None]
    U[zero, 0] = 1.0
    norms = np.minimum(norms, clip)
    return U, np.minimum(0.5 * (1.0 + norms / clip), 1.0)


def parallel_sign(a: np.ndarray, b: np.ndarray) -> int:
    """+1 (−1) if the nonzero vector b is a positive (negative) multiple of the nonzero vector a
    *up to float64 rounding*, 0 if they are linearly independent beyond it.

    With â = a/‖a‖, b̂ = b/‖b‖ and θ the angle between a and ±b, the pair counts as parallel when
    the chord ‖â ∓ b̂‖ = 2 sin(θ/2) is at most τ = 8·d·u (u = 2^−53, the unit roundoff). The
    reason: the cells of :func:`halfspace_pair_sup` that only independent directions add are
    the wedges {z : sign⟨z, a⟩ ≠ ±sign⟨z, b⟩}, whose points satisfy |⟨z, â⟩| ≤ sin θ·‖z‖. A
    computed dot product ⟨z, a⟩ errs by up to γ_d·Σ|z_i a_i| ≤ γ_d·‖z‖·‖a‖ with γ_d = d·u/(1 − d·u)
    (Higham 2002, §3.1), so when sin θ ≲ γ_d the float sign tests that decide a report's law
    cannot tell the wedge from the shared hyperplane: no float sample reaches it as a cell of
    its own, and counting it would report a privacy loss no float report has. τ is a few times
    γ_d to cover the rounding of the normalisation. fl(c·a) for any float c, or a perturbed by a
    few ulps, is parallel to a; a relative perturbation of 1e-12 is not (for d < 500).
    """
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0
    ua, ub = a / na, b / nb
    tol = 8.0 * a.shape[0] * np.finfo(np.float64).eps / 2.0
    if float(np.linalg.norm(ua - ub)) <= tol:
        return 1
    if float(np.linalg.norm(ua + ub)) <= tol:
        return -1
    return 0


def halfspace_pair_sup(mix0, breaks0, mix1, breaks1, relation: int) -> float:
    """ess sup over reports of |m0(⟨u, v0⟩) − m1(⟨u, v1⟩)| for piecewise-constant log factors.

    ``m_i`` (vectorised callables) are constant on the open intervals between the breakpoints
    ``breaks_i``; their values on the breakpoints themselves are ignored (a null set). The map
    u ↦ (a0, a1) = (⟨u, v0⟩, ⟨u, v1⟩) sends the report domain onto all of R² when v0, v1 are
    linearly independent (``relation = 0``; the part of u orthogonal to span(v0, v1) is free) and
    onto the line a1 = c·a0 when v1 = c·v0 up to a positive factor (``relation = c = ±1``, which
    covers d = 1). Every open cell of that image is non-null, so the sup is the max over one
    representative point per cell: exact, no optimisation. The caller checks the report domain
    meets every cell (all of R^d; or a sphere with breakpoints {0}).
    """
    def reps(t):
        t = np.unique(np.asarray(t, dtype=np.float64))
        return np.concatenate([[t[0] - 1.0], 0.5 * (t[:-1] + t[1:]), [t[-1] + 1.0]])

    if relation == 0:
        diff = np.asarray(mix0(reps(breaks0)))[:, None] - np.asarray(mix1(reps(breaks1)))[None, :]
    else:
        a0 = reps(np.concatenate([np.asarray(breaks0, float), relation * np.asarray(breaks1, float)]))
        diff = np.asarray(mix0(a0)) - np.asarray(mix1(relation * a0))
    return float(np.max(np.abs(diff)))


def pow2_floor(x: float) -> float:
    """Largest power of two <= x (x > 0): grid steps whose multiples are exact in float64."""
    return math.ldexp(1.0, math.frexp(x)[1] - 1)


def _checked_pair_hook(hook: Any) -> Any:
    """``epsilon_for_pair`` around a mechanism's own ``hook(self, x0, x1)``: x0 and x1 checked as
    finite float64 vectors of length ``dim``, the result a ``float`` or None."""

    @functools.wraps(hook)
    def epsilon_for_pair(self: "Mechanism", x0: Any, x1: Any) -> float | None:
        out = hook(self, check_vector("x0", x0, dim=self.dim), check_vector("x1", x1, dim=self.dim))
        return None if out is None else float(out)

    epsilon_for_pair.__pair_hook__ = hook
    return epsilon_for_pair


def has_categorical_inputs(target: Any) -> bool:
    """True when ``target`` (a mechanism, or any sampler an audit takes) declares categorical
    one-hot inputs through :attr:`Mechanism.categorical_inputs`; False when it does not say."""
    return bool(getattr(target, "categorical_inputs", False))


def rr_noise(k: int, epsilon: float) -> float:
    """The noise probability ``k/(e^ε + k − 1)`` of ε-randomized response over ``k`` outputs (with it
    the output is uniform over all k, else the input), computed in logs; a FedAuditError when it
    underflows to 0 (ε too large for the float64 pair)."""
    noise = k * math.exp(-float(np.logaddexp(epsilon, math.log(k - 1))))
    if not 0.0 < noise < 1.0:
        raise FedAuditError(f"epsilon={epsilon!r} is too large for a randomized-response PLD over {k} "
                            f"buckets: the noise probability k/(e^epsilon + k - 1) underflows to 0")
    return noise


def no_event(mech: Any, what: str) -> str:
    """The one-line message of a mechanism without a dp-accounting event for ``what``."""
    return (f"{type(mech).__name__} has no dp-accounting event for {what}: account it with "
            f"fedaudit.accounting.pld_of(mech) or the event fedaudit.accounting.PldDpEvent(mech) (the 'pld' "
            f"accountant; compose(..., method='pld')), or through its guarantee, "
            f"fedaudit.accounting.EpsilonDeltaDpEvent(epsilon, delta)")


def randomized_response_event(k: int, epsilon: float) -> Any:
    """dp-accounting's ``RandomizedResponseDpEvent`` of ε-randomized response over ``k`` outputs
    (replace-one neighbours): the event of one report of :class:`RandomizedResponse`-like mechanisms."""
    from dp_accounting import dp_event

    return dp_event.RandomizedResponseDpEvent(noise_parameter=rr_noise(k, epsilon), num_buckets=k)


class Mechanism(ABC):
    """Abstract local randomizer.

    Subclasses implement ``_encode`` (validated float64 (n, dim) input), ``decode`` and,
    where the output law is tractable, ``_log_prob``; they set ``dim``, ``guarantee`` (the
    claimed :class:`~fedaudit.guarantees.PureLDP` / :class:`~fedaudit.guarantees.ApproxLDP`,
    or None), ``bits_per_report``, ``report_width`` and ``report_layout``.

    A mechanism whose pair loss is tractable implements the public hook
    :meth:`epsilon_for_pair` ``(x0, x1) -> float | None`` itself: the audits call it for the
    exact ε of the audited pair (the pair power, the tightness and the pair search's ties). The
    override receives validated float64 vectors of length ``dim`` and may return any real or
    None; a subclass's definition is wrapped when the class is created, so callers always get
    the inputs checked and a ``float`` (or None) back, and ``super().epsilon_for_pair(x0, x1)``
    works. ``_epsilon_for_pair``, the hook's former private name, still works as a deprecated
    alias: a subclass that defines it (and not ``epsilon_for_pair``) gets it as its hook, with a
    ``DeprecationWarning`` when the class is defined outside fedaudit.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("epsilon_for_pair")
        legacy = cls.__dict__.get("_epsilon_for_pair")
        if own is None and legacy is not None:
            if not cls.__module__.startswith("fedaudit."):
                warnings.warn(f"{cls.__module__}.{cls.__qualname__} defines _epsilon_for_pair, the former name of "
                              f"the hook: define epsilon_for_pair(self, x0, x1) instead", DeprecationWarning,
                              stacklevel=2)
            own = legacy
        if own is not None and not hasattr(own, "__pair_hook__"):
            cls.epsilon_for_pair = _checked_pair_hook(own)
            if legacy is None:
                cls._epsilon_for_pair = own  # the deprecated alias: super()._epsilon_for_pair still reaches it

    #: registry / CLI name
    name: str = "mechanism"
    #: True for an algorithm kept as published (:mod:`fedaudit.mechanisms.published`) whose
    #: claimed guarantee is known not to hold; listings mark it "NOT LDP (as published)".
    as_published: bool = False
    #: True for a mechanism whose inputs are categories given as one-hot vectors e_c (k-ary
    #: randomized response): an LDP audit then tests the one-hot pair e0 vs e1 instead of a
    #: vector pair, and the pair search tries one-hot candidates only. A mechanism of your own
    #: over categories sets it too (:func:`has_categorical_inputs` reads it).
    categorical_inputs: bool = False
    dim: int
    #: the claimed guarantee per report (None: no claim)
    guarantee: Guarantee | None
    report_width: int
    report_layout: str = ""

    @property
    def epsilon(self) -> float | None:
        """The claimed ε (None when the mechanism claims nothing)."""
        return epsilon_delta(self.guarantee)[0]

    @property
    def delta(self) -> float:
        """The claimed δ (0 for a pure-LDP claim or no claim)."""
        return epsilon_delta(self.guarantee)[1]

    def dp_event(self) -> Any:
        """One report as a dp-accounting ``DpEvent`` — the currency of
        :data:`fedaudit.accounting.ACCOUNTANTS` — where dp-accounting has an event whose pair is the
        mechanism's worst pair: randomized response over k outputs for **replace-one** neighbours
        (:func:`randomized_response_event`; also VQSGD and Duchi), the lattice Laplace of one
        dimension (``DiscreteLaplaceDpEvent``) and the Gaussian of several (``GaussianDpEvent``),
        whose events are stated for **add/remove** neighbours at the diameter of the inputs (module
        :mod:`fedaudit.accounting.pld`: for symmetric noise that is the replace-one guarantee).

        The base raises a one-line :class:`~fedaudit.errors.FedAuditError` naming the alternatives: a
        mechanism dp-accounting has no event for (a pmf pair, a discrete Gaussian, a product of
        lattice noises) is accounted by its own privacy loss distribution
        (:func:`fedaudit.accounting.pld_of`, or the event :class:`fedaudit.accounting.PldDpEvent` of
        the ``"pld"`` accountant) or through its guarantee
        (:class:`fedaudit.accounting.EpsilonDeltaDpEvent`)."""
        raise FedAuditError(no_event(self, "its worst pair"))

    # ------------------------------------------------------------------ API
    @property
    @abstractmethod
    def bits_per_report(self) -> int:
        """Bits one report costs on the wire (values plus public randomness that must be sent)."""

    def encode(self, X: Any, rng: RngLike = None) -> np.ndarray:
        """One report per row of ``X`` (n, dim)."""
        X = check_matrix("X", X, cols=self.dim)
        return self._encode(X, as_generator(rng))

    def sample(self, x: Any, size: int, rng: RngLike = None) -> np.ndarray:
        """``size`` independent reports of the same input ``x`` (the audit's hot path)."""
        x = check_vector("x", x, dim=self.dim)
        size = check_int("size", size, low=1)
        return self._sample(x, size, as_generator(rng))

    @abstractmethod
    def decode(self, reports: Any) -> np.ndarray:
        """Unbiased estimates (n, dim): E[decode(M(x))] = x for x in the input domain."""

    def decode_bias(self) -> float | None:
        """The largest ``|E[decode(M(x))]_i − x_i|`` per coordinate that the mechanism promises for
        x in its input domain: 0.0 (the default) for an unbiased ``decode``, a bound for a
        mechanism unbiased up to rounding, None for one whose ``decode`` claims no unbiasedness
        (e.g. a selection that depends on x). :func:`fedaudit.testing.check_mechanism` tests it."""
        return 0.0

    def estimate_mean(self, reports: Any) -> np.ndarray:
        """The server's estimate of the mean input: the average of the decoded reports."""
        return self.decode(reports).mean(axis=0)

    def log_prob(self, reports: Any, x: Any) -> np.ndarray:
        """Exact log-likelihood log p(report | x) for each row (n,), w.r.t. a base measure
        that does not depend on x (counting measure for discrete reports)."""
        reports = self._check_reports(reports)
        x = check_vector("x", x, dim=self.dim)
        return self._log_prob(reports, x)

    def epsilon_for_pair(self, x0: Any, x1: Any) -> float | None:  # wrapped below: inputs checked, float out
        """The exact worst-case privacy loss of the pair (x0, x1) (white box), or None.

        Pure DP (``delta == 0``): ``ε(x0, x1) = ess sup_r |log p(r|x0) − log p(r|x1)|`` over every
        report r, public randomness included — the smallest ε such that M(x0) and M(x1) are
        ε-indistinguishable in both directions (sup over events of log P[M(x0)∈S]/P[M(x1)∈S]).
        ``inf`` when some report has positive probability under one input and zero under the
        other. Approximate DP (``delta > 0``): the mechanism's pair ε(δ) at its own δ, i.e. the
        smallest ε with ``δ_pair(ε) = sup_S P[M(x0)∈S] − e^ε P[M(x1)∈S] ≤ delta`` (both
        directions); see the subclass. Public randomness is modelled as ideal (every subset /
        sign pattern has positive probability; a 52-bit seed reaches at most 2^52). Computed analytically or by
        exhaustive enumeration, never by sampling; ``None`` when the mechanism has no tractable
        exact value for this pair (the subclass documents when). ``ε(x0, x1) ≤ epsilon`` is the
        claimed guarantee restricted to one pair.
        """
        return None  # no tractable exact value: the subclass overrides this hook

    def privacy_loss(self, reports: Any, x0: Any, x1: Any) -> np.ndarray:
        """Privacy loss ``log p(r|x0) − log p(r|x1)`` of each report (n,) — the statistic of the
        likelihood-ratio (Neyman–Pearson) test. ``±inf`` where exactly one input can produce r;
        NaN where neither can. ``|privacy_loss| ≤ epsilon_for_pair(x0, x1)`` for pure-DP mechanisms.
        """
        reports = self._check_reports(reports)
        x0 = check_vector("x0", x0, dim=self.dim)
        x1 = check_vector("x1", x1, dim=self.dim)
        return self._privacy_loss(reports, x0, x1)

    # ------------------------------------------------------------ hooks
    def _epsilon_for_pair(self, x0: np.ndarray, x1: np.ndarray) -> float | None:
        """Deprecated alias of :meth:`epsilon_for_pair` (the hook's former private name)."""
        return None

    def _privacy_loss(self, reports: np.ndarray, x0: np.ndarray, x1: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return self._log_prob(reports, x0) - self._log_prob(reports, x1)

    @abstractmethod
    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray: ...

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        return self._encode(np.broadcast_to(x, (size, self.dim)), rng)

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no tractable log_prob")

    # ----------------------------------------------------------- helpers
    def _check_reports(self, reports: Any) -> np.ndarray:
        return check_matrix("reports", reports, cols=self.report_width, finite=True)

    def params(self) -> dict[str, Any]:
        """Constructor parameters (JSON-friendly)."""
        return {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "mechanism": self.name,
            "params": self.params(),
            "dim": self.dim,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "guarantee": None if self.guarantee is None else self.guarantee.to_dict(),
            "bits_per_report": self.bits_per_report,
            "report_layout": self.report_layout,
        }

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


def check_epsilon(epsilon: Any, *, allow_none: bool = False) -> float | None:
    """epsilon > 0 (finite); ``None`` allowed for non-private variants."""
    if epsilon is None:
        if allow_none:
            return None
        raise FedAuditError("epsilon must be a finite real number > 0, got epsilon=None")
    return check_positive("epsilon", epsilon)


Mechanism.epsilon_for_pair = _checked_pair_hook(Mechanism.__dict__["epsilon_for_pair"])


class GridMechanism(Mechanism):
    """Additive integer noise on a power-of-two grid: r = grid·(rint(clip_l2(x)/grid) + Z).

    Subclasses set ``grid``, ``clip`` and implement ``_noise(shape, rng)`` (exact integer
    samples) and ``_noise_logpmf(z)``. Reports are (n, dim) values on the grid; decode is the
    identity, unbiased up to the rounding bias |E[r] − clip(x)| ≤ grid/2 per coordinate;
    ``log_prob`` is exact w.r.t. counting measure on the grid (−inf off the grid).
    """

    grid: float
    clip: float

    @property
    def bits_per_report(self) -> int:
        return 64 * self.dim

    @property
    def lattice_shift(self) -> int:
        """The largest attainable |k0 − k1| of one coordinate, k(clip) − k(−clip) = 2·rint(clip/grid):
        the diameter of the inputs on the lattice, and the exact worst shift when ``dim`` is 1."""
        return 2 * int(np.rint(self.clip / self.grid))

    @abstractmethod
    def _noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray: ...

    @abstractmethod
    def _noise_logpmf(self, z: np.ndarray) -> np.ndarray: ...

    def _grid_point(self, X: np.ndarray) -> np.ndarray:
        """k = rint(clip_l2(X)/grid) as int64 (exact: grid is a power of two)."""
        return np.rint(clip_l2(X, self.clip) / self.grid).astype(np.int64)

    def _encode(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        k = self._grid_point(X)
        return (k + self._noise(k.shape, rng)).astype(np.float64) * self.grid

    def _sample(self, x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        k = self._grid_point(x[None, :])
        return (k + self._noise((size, self.dim), rng)).astype(np.float64) * self.grid

    def decode_bias(self) -> float:
        """The rounding bias bound: ``|E[r] − clip(x)| ≤ grid/2`` per coordinate."""
        return self.grid / 2

    def decode(self, reports: Any) -> np.ndarray:
        """Identity: unbiased up to the rounding bias ``|E[r] - clip(x)| <= grid/2`` per coordinate."""
        return self._check_reports(reports).copy()

    def _log_prob(self, reports: np.ndarray, x: np.ndarray) -> np.ndarray:
        k = self._grid_point(x[None, :])[0]
        return self._noise_logpmf(reports / self.grid - k).sum(axis=1)
