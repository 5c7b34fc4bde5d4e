"""Privacy loss distributions (PLDs) of fedaudit's mechanisms, through dp-accounting's factories.

:func:`pld_of` returns a dp-accounting ``PrivacyLossDistribution`` whose hockey-stick curve
``δ(ε) = sup_S P(S) − e^ε Q(S)`` bounds the worst-case pair of output laws (P, Q) = (M(x), M(x'))
of one report. Composing k of them (``PrivacyLossDistribution.compose``) gives the exact δ(ε) of
the k-fold composition up to the discretisation of the loss (values rounded *up* to multiples of
``discretization``: a pessimistic estimate, error ≤ k · discretization in ε).

**Neighbouring relation.** LDP is replace-one: the neighbouring "datasets" are any two inputs x, x'
of the randomizer (:mod:`fedaudit.guarantees`). A PLD for a per-report guarantee must therefore
cover the worst pair *and both directions*, δ(ε) = max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P)). Every factory
used here holds both directions (dp-accounting's ``pmf_remove`` / ``pmf_add``); the additive-noise
factories take the *diameter* of the input domain as the sensitivity (the largest distance between
any two inputs, not an add/remove change) and are symmetric under x ↔ x' by reflection of the
noise, so at sampling probability 1 their add/remove PLD is the replace-one PLD; randomized
response uses dp-accounting's ``REPLACE_ONE`` relation; a :class:`PmfPair` (p, q) enters as its
*symmetric dominating pair* (:func:`dominating_pair`).

**Composition needs symmetric PLDs.** dp-accounting composes the "remove" PLD of one use with the
"remove" PLD of the next and "add" with "add", then takes the larger ε. For an asymmetric pair
that covers the sequences P‖Q, P‖Q, … and Q‖P, Q‖P, … only, but the k uses of a replace-one
ledger can meet the pair in *mixed* directions (the client's input in round 2 may be the other
one of the two), and the mixed products can be worse: for k uses the worst case is over all 2^k
direction sequences (and over adaptive choices of them). Every PLD built here is therefore
symmetric — the noise factories and randomized response by construction (their pair equals its
reverse up to relabelling the outputs), a :class:`PmfPair` through :func:`dominating_pair`, whose
trade-off curve is the largest symmetric one below both directions', so its k-fold composition
bounds every mixed (and adaptively chosen) sequence of directions (Dong, Roth, Su 2022, the
composition theorem of f-DP).

What each object maps to (worst pair; *exact* means attained by some pair of inputs):

* :class:`~fedaudit.guarantees.PureLDP` ε / :class:`~fedaudit.guarantees.ApproxLDP` (ε, δ) —
  ``from_privacy_parameters``: the randomized-response pair that dominates every (ε, δ)-DP
  mechanism (Kairouz, Oh, Viswanath 2015), so it is valid for any mechanism with that claim.
* :class:`~fedaudit.mechanisms.RandomizedResponse` (k, ε) — ``from_randomized_response`` with
  noise p = k/(e^ε + k − 1) over k buckets; exact (any two distinct categories). Tighter than the
  pure-ε PLD for k > 2 (the outputs other than x, x' carry no loss), equal for k = 2.
* :class:`~fedaudit.mechanisms.VQSGD` (d, ε) — ``from_randomized_response`` over its 2d vertices:
  its report is 2d-ary RR applied to a random vertex V ~ w_x, and the hockey-stick divergence is
  jointly convex, so D(K w_x ‖ K w_x') ≤ max_{v ≠ v'} D(K e_v ‖ K e_v'); an upper bound, exact at d = 1.
* :class:`~fedaudit.mechanisms.Duchi` (d, ε) — ``from_two_probability_mass_functions`` on the two
  hemisphere masses (π, 1 − π) vs (1 − π, π), π = e^ε/(e^ε + 1): the report's density is constant
  on each half-sphere, and antipodal unit inputs attain it; exact.
* :class:`~fedaudit.mechanisms.Laplace` (lattice Laplace with scale t grid units) — for dim = 1,
  ``from_discrete_laplace_mechanism`` with parameter 1/t at the largest attainable shift
  S = k(clip) − k(−clip) = 2·rint(clip/grid): exact (x = ±clip). For dim > 1 the worst pair of the
  product of d lattice Laplaces over the L2 ball is not a one-coordinate shift that we can certify,
  so the pure-ε PLD of its claim is used (valid, not tight).
* :class:`~fedaudit.mechanisms.Gaussian` (lattice Gaussian σ_grid) — for dim = 1,
  ``from_discrete_gaussian_mechanism`` at shift S = 2·rint(clip/grid): the PLD of the noise the
  mechanism actually adds, exact. For dim > 1, ``from_gaussian_mechanism`` with σ = s1 =
  √(σ²_grid − 4) at the L2 sensitivity bound ``sensitivity_grid``: the mechanism's privacy proof
  (:class:`~fedaudit.mechanisms.Gaussian`) is a post-processing of N(k, s1² I) up to a likelihood
  factor C = ((1 + η)/(1 − η))^d with η ≈ 1e-34, below float64 resolution of ε and δ; a continuous
  Gaussian's PLD is one-dimensional along k − k' (rotation invariance).
* Typed specifications for noise with free parameters: :class:`LaplacePLD` (``from_laplace_mechanism``),
  :class:`GaussianPLD` (``from_gaussian_mechanism``), :class:`DiscreteLaplacePLD`
  (``from_discrete_laplace_mechanism``), :class:`DiscreteGaussianPLD`
  (``from_discrete_gaussian_mechanism``) and :class:`PmfPair` (any finite worst-case pair,
  ``from_two_probability_mass_functions``).

Anything else raises a :class:`~fedaudit.errors.FedAuditError` naming the type and what is supported.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.guarantees import ApproxLDP, PureLDP
from fedaudit.json import jsonable
from fedaudit.mechanisms import Duchi, Gaussian, Laplace, Mechanism, RandomizedResponse, VQSGD
from fedaudit.mechanisms.base import rr_noise
from fedaudit.validation import check_int, check_positive, check_vector

__all__ = ["pld_of", "pld_key", "build_pld", "guarantee_of", "dominating_pair", "NoiseSpec", "LaplacePLD",
           "GaussianPLD", "DiscreteLaplacePLD", "DiscreteGaussianPLD", "PmfPair", "PLD_SUPPORTED"]

#: what :func:`pld_of` accepts, as listed in its error message
PLD_SUPPORTED = ("PureLDP", "ApproxLDP", "RandomizedResponse", "VQSGD (with epsilon)", "Duchi", "Laplace",
                 "Gaussian", "LaplacePLD", "GaussianPLD", "DiscreteLaplacePLD", "DiscreteGaussianPLD", "PmfPair")


@dataclass(frozen=True)
class NoiseSpec:
    """Base of the typed noise specifications: a value describing one report's worst-case pair
    (like :class:`~fedaudit.guarantees.Guarantee`); ``kind`` names the type in JSON."""

    kind: ClassVar[str] = "noise"

    @property
    def guarantee(self) -> PureLDP | None:
        """The pure-ε claim the noise implies (None when it implies none)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"type": self.kind, **asdict(self)})

    def dp_event(self) -> Any:
        """One use as a dp-accounting ``DpEvent`` where dp-accounting has one for this noise (stated
        for **add/remove** neighbours at ``sensitivity``; the noise is symmetric, so with the
        diameter of the inputs as sensitivity that is the replace-one guarantee); a one-line
        FedAuditError naming the alternatives where it has none."""
        raise FedAuditError(f"{type(self).__name__} has no dp-accounting event: account it with "
                            f"fedaudit.accounting.pld_of(spec) or the event fedaudit.accounting.PldDpEvent(spec) "
                            f"(the 'pld' accountant; compose(..., method='pld'))")


@dataclass(frozen=True)
class LaplacePLD(NoiseSpec):
    """Continuous Laplace noise of ``scale`` b added to a query of L1 diameter ``sensitivity`` Δ:
    privacy loss in [−Δ/b, Δ/b], so ``guarantee`` is PureLDP(Δ/b) (Dwork et al. 2006)."""

    kind: ClassVar[str] = "laplace"
    scale: float
    sensitivity: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    @property
    def guarantee(self) -> PureLDP:
        return PureLDP(self.sensitivity / self.scale)

    def dp_event(self) -> Any:
        """``LaplaceDpEvent(scale/sensitivity)`` (add/remove; :meth:`NoiseSpec.dp_event`)."""
        from dp_accounting import dp_event

        return dp_event.LaplaceDpEvent(noise_multiplier=self.scale / self.sensitivity)


@dataclass(frozen=True)
class GaussianPLD(NoiseSpec):
    """Continuous Gaussian noise N(0, ``sigma``²) added to a query of L2 diameter ``sensitivity``:
    the PLD of N(0, 1) vs N(Δ/σ, 1); no pure guarantee (``guarantee`` is None)."""

    kind: ClassVar[str] = "gaussian"
    sigma: float
    sensitivity: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", check_positive("sensitivity", self.sensitivity))

    def dp_event(self) -> Any:
        """``GaussianDpEvent(sigma/sensitivity)`` (add/remove; :meth:`NoiseSpec.dp_event`)."""
        from dp_accounting import dp_event

        return dp_event.GaussianDpEvent(noise_multiplier=self.sigma / self.sensitivity)


@dataclass(frozen=True)
class DiscreteLaplacePLD(NoiseSpec):
    """Discrete Laplace noise ``P[Z = z] ∝ exp(−|z|/scale)`` on the integers, added to an integer
    query of L1 diameter ``sensitivity``: PureLDP(sensitivity/scale) (Ghosh, Roughgarden,
    Sundararajan 2009)."""

    kind: ClassVar[str] = "discrete-laplace"
    scale: float
    sensitivity: int = 1

    def __post_init__(self):
        object.__setattr__(self, "scale", check_positive("scale", self.scale))
        object.__setattr__(self, "sensitivity", check_int("sensitivity", self.sensitivity, low=1))

    @property
    def guarantee(self) -> PureLDP:
        return PureLDP(self.sensitivity / self.scale)

    def dp_event(self) -> Any:
        """``DiscreteLaplaceDpEvent(1/scale, sensitivity)`` (add/remove; :meth:`NoiseSpec.dp_event`)."""
        from dp_accounting import dp_event

        return dp_event.DiscreteLaplaceDpEvent(noise_parameter=1.0 / self.scale, sensitivity=self.sensitivity)


@dataclass(frozen=True)
class DiscreteGaussianPLD(NoiseSpec):
    """Discrete Gaussian noise ``P[Z = z] ∝ exp(−z²/(2 sigma²))`` on the integers, added to an
    integer query of diameter ``sensitivity`` (Canonne, Kamath, Steinke 2020); no pure guarantee."""

    kind: ClassVar[str] = "discrete-gaussian"
    sigma: float
    sensitivity: int = 1

    def __post_init__(self):
        object.__setattr__(self, "sigma", check_positive("sigma", self.sigma))
        object.__setattr__(self, "sensitivity", check_int("sensitivity", self.sensitivity, low=1))



@dataclass(frozen=True)
class PmfPair(NoiseSpec):
    """A worst-case pair of output pmfs (p, q) over the same finite outputs; both directions
    P‖Q and Q‖P are accounted, in any mix over repeated uses (its PLD is that of
    :func:`dominating_pair`). ``guarantee`` is PureLDP(max |log p/q|) when p and q have the same
    support and differ, None otherwise (an output only one input can produce has infinite loss)."""

    kind: ClassVar[str] = "pmf-pair"
    p: tuple[float, ...]
    q: tuple[float, ...]

    def __post_init__(self):
        p, q = (check_vector(name, v, finite=True) for name, v in (("p", self.p), ("q", self.q)))
        if p.shape != q.shape or p.size < 2:
            raise FedAuditError(f"p and q must be pmfs over the same finite outputs (at least 2), got "
                                f"lengths {p.size} and {q.size}")
        for name, v in (("p", p), ("q", q)):
            if (v < 0).any() or abs(float(v.sum()) - 1.0) > 1e-9:
                raise FedAuditError(f"{name} must be a pmf: entries >= 0 summing to 1 (within 1e-9), "
                                    f"got sum {float(v.sum())!r} and min {float(v.min())!r}")
        object.__setattr__(self, "p", tuple(float(x) for x in p))
        object.__setattr__(self, "q", tuple(float(x) for x in q))

    @property
    def guarantee(self) -> PureLDP | None:
        p, q = np.asarray(self.p), np.asarray(self.q)
        if ((p > 0) != (q > 0)).any():
            return None
        both = p > 0
        eps = float(np.max(np.abs(np.log(p[both]) - np.log(q[both]))))
        return PureLDP(eps) if eps > 0 else None





def _unsupported(obj: Any) -> FedAuditError:
    return FedAuditError(f"no privacy loss distribution for {type(obj).__name__}: supported are "
                         f"{', '.join(PLD_SUPPORTED)} (for another mechanism, pass its .guarantee for the "
                         f"generic (epsilon, delta) bound)")


def pld_key(obj: Any) -> tuple:
    """A hashable description ``(factory, *arguments)`` of the PLD of ``obj`` (module docstring);
    equal keys give equal PLDs, so a composition builds each distinct PLD once."""
    if isinstance(obj, PureLDP):
        return ("privacy", obj.epsilon, 0.0)
    if isinstance(obj, ApproxLDP):
        return ("privacy", obj.epsilon, obj.delta)
    if isinstance(obj, RandomizedResponse):
        return _rr_key(obj.k, obj.epsilon)
    if isinstance(obj, VQSGD):
        if obj.epsilon is None:
            raise FedAuditError("VQSGD(epsilon=None) is not private: it has no privacy loss distribution")
        return _rr_key(obj.n_vertices, obj.epsilon)
    if isinstance(obj, Duchi):
        pi = 1.0 / (1.0 + math.exp(-obj.epsilon))
        return ("pmf", (pi, 1.0 - pi), (1.0 - pi, pi))
    if isinstance(obj, Laplace):
        if obj.dim == 1:
            return ("discrete-laplace", 1.0 / obj.scale_grid, obj.lattice_shift)
        return ("privacy", obj.epsilon, 0.0)
    if isinstance(obj, Gaussian):
        if obj.dim == 1:
            return ("discrete-gaussian", obj.sigma_grid, obj.lattice_shift)
        return ("gaussian", obj.proof_sigma_grid, obj.sensitivity_grid)
    if isinstance(obj, LaplacePLD):
        return ("laplace", obj.scale, obj.sensitivity)
    if isinstance(obj, GaussianPLD):
        return ("gaussian", obj.sigma, obj.sensitivity)
    if isinstance(obj, DiscreteLaplacePLD):
        return ("discrete-laplace", 1.0 / obj.scale, obj.sensitivity)
    if isinstance(obj, DiscreteGaussianPLD):
        return ("discrete-gaussian", obj.sigma, obj.sensitivity)
    if isinstance(obj, PmfPair):
        return ("pmf", obj.p, obj.q)
    raise _unsupported(obj)


def _rr_key(k: int, epsilon: float) -> tuple:
    return ("rr", rr_noise(k, epsilon), k)  # k/(e^ε + k − 1)


def build_pld(key: tuple, discretization: float, **options: Any) -> Any:
    """The dp-accounting PLD of a :func:`pld_key` at loss discretisation ``discretization``, through
    dp-accounting's public constructors only (``privacy_loss_distribution.from_*``); the one place
    fedaudit builds a PLD. ``options`` go to the constructor as keywords (``sampling_prob``,
    ``neighboring_relation``: what the ``"pld"`` accountant passes for dp-accounting's events).

    Besides the kinds :func:`pld_key` returns, the ``"pld"`` accountant uses ``("identity",)``,
    ``("mixture-gaussian", σ, sensitivities, sampling_probs)`` and
    ``("truncated-subsampled-gaussian", dataset_size, q, batch_size, noise_multiplier)``."""
    from dp_accounting.pld import privacy_loss_distribution as pld
    from dp_accounting.pld.common import DifferentialPrivacyParameters

    kind, *args = key
    if kind == "identity":
        return pld.identity(value_discretization_interval=discretization)
    if kind == "mixture-gaussian":
        std, sensitivities, probs = args
        return pld.from_mixture_gaussian_mechanism(std, sensitivities, probs,
                                                   value_discretization_interval=discretization, **options)
    if kind == "truncated-subsampled-gaussian":
        return pld.from_truncated_subsampled_gaussian_mechanism(*args, value_discretization_interval=discretization,
                                                                **options)
    if kind == "privacy":
        return pld.from_privacy_parameters(DifferentialPrivacyParameters(*args),
                                           value_discretization_interval=discretization)
    if kind == "rr":
        return pld.from_randomized_response(*args, value_discretization_interval=discretization, **options)
    if kind == "laplace":
        return pld.from_laplace_mechanism(*args, value_discretization_interval=discretization, **options)
    if kind == "gaussian":
        return pld.from_gaussian_mechanism(*args, value_discretization_interval=discretization, **options)
    if kind == "discrete-laplace":
        return pld.from_discrete_laplace_mechanism(*args, value_discretization_interval=discretization, **options)
    if kind == "discrete-gaussian":
        return pld.from_discrete_gaussian_mechanism(*args, value_discretization_interval=discretization, **options)
    p, q = dominating_pair(*args)  # "pmf": symmetric, so one direction ("remove" = P̂‖Q̂) is both
    with np.errstate(divide="ignore"):
        log_p = dict(enumerate(np.log(p).tolist()))
        log_q = dict(enumerate(np.log(q).tolist()))
    return pld.from_two_probability_mass_functions(log_q, log_p, value_discretization_interval=discretization,
                                                   symmetric=True)


def _tradeoff_vertices(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vertices (α_j, β_j) of the trade-off curve T(P, Q)(α) = inf{1 − E_Q φ : E_P φ ≤ α}: the
    optimal tests reject the outputs in decreasing order of q/p (those with p = 0 first), so
    α_j = Σ_{i ≤ j} p_(i) and β_j = 1 − Σ_{i ≤ j} q_(i), from (0, 1) to (1, 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.inf)
    order = np.argsort(-ratio, kind="stable")
    alpha = np.concatenate([[0.0], np.cumsum(p[order])])
    beta = np.concatenate([[1.0], 1.0 - np.cumsum(q[order])])
    alpha[-1], beta[-1] = 1.0, 0.0  # the pmfs sum to 1 within 1e-9: end exactly at (1, 0)
    return np.clip(alpha, 0.0, 1.0), np.clip(beta, 0.0, 1.0)


def dominating_pair(p: Any, q: Any) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric pair (P̂, Q̂) that dominates both directions of the finite pair (P, Q).

    With f = T(P, Q) the trade-off curve of P vs Q (:func:`_tradeoff_vertices`) and f⁻¹ = T(Q, P)
    its reflection in the diagonal, g = conv(min(f, f⁻¹)) — the lower convex envelope of the
    vertices of both curves — is the largest symmetric trade-off curve below both. Its hockey-stick
    curve is the pointwise maximum of the two directions' (the convex conjugate of a convex
    envelope of a minimum is the maximum of the conjugates):
    ``δ_ĝ(ε) = max(D_{e^ε}(P‖Q), D_{e^ε}(Q‖P))`` for every ε, so one use is accounted exactly. A
    piecewise-linear g is the curve of a finite pair: the segment from (x_i, y_i) to
    (x_{i+1}, y_{i+1}) is one output with P̂ = x_{i+1} − x_i and Q̂ = y_i − y_{i+1}, and a drop
    1 − g(0) at α = 0 is an output with P̂ = 0. Since every use, in either direction, is g-DP,
    k uses in any (even adaptively chosen) mix of directions are g^{⊗k}-DP (Dong, Roth, Su 2022,
    "Gaussian differential privacy", the composition theorem of f-DP): the k-fold composition of
    (P̂, Q̂) is an upper bound on every mixed product. It is exact for pairs that are already symmetric (T(P, Q) = T(Q, P), e.g. q a permutation of p),
    and can exceed the worst mixed sequence otherwise (benchmarks/accountants.py --section
    mixed: up to ~7 % at k = 3 on random 2–4-output pairs).

    Returns the two pmfs as float arrays (outputs with P̂ = Q̂ = 0 dropped)."""
    p, q = np.asarray(p, dtype=np.float64), np.asarray(q, dtype=np.float64)
    alpha, beta = _tradeoff_vertices(p, q)
    points = sorted(set(zip(alpha.tolist(), beta.tolist())) | set(zip(beta.tolist(), alpha.tolist())))
    hull: list[tuple[float, float]] = []
    for x, y in points:  # lower hull, Andrew's monotone chain: drop vertices on or above a chord
        while len(hull) >= 2 and ((hull[-1][0] - hull[-2][0]) * (y - hull[-2][1])
                                  - (hull[-1][1] - hull[-2][1]) * (x - hull[-2][0])) <= 0.0:
            hull.pop()
        hull.append((x, y))
    xs, ys = np.array(hull).T
    p_hat = np.maximum(np.concatenate([[0.0], np.diff(xs)]), 0.0)
    q_hat = np.maximum(np.concatenate([[1.0 - ys[0]], -np.diff(ys)]), 0.0)
    keep = (p_hat > 0) | (q_hat > 0)
    return p_hat[keep], q_hat[keep]


def pld_of(obj: Any, *, discretization: float = 1e-4) -> Any:
    """The dp-accounting ``PrivacyLossDistribution`` of one report of ``obj`` (a mechanism, a
    typed noise specification or a guarantee; see the module docstring for each type, its worst
    pair and why it covers both directions of the replace-one relation). The loss is rounded up to
    multiples of ``discretization`` (> 0), so ε read from the PLD is an upper bound."""
    discretization = check_positive("discretization", discretization)
    return build_pld(pld_key(obj), discretization)


def guarantee_of(obj: Any) -> PureLDP | ApproxLDP | None:
    """The (ε, δ) claim of a guarantee, a mechanism or a noise specification (None: none, e.g. a
    :class:`GaussianPLD`); a FedAuditError for any other type."""
    if isinstance(obj, (PureLDP, ApproxLDP)):
        return obj
    if isinstance(obj, (Mechanism, NoiseSpec)):
        return obj.guarantee
    raise _unsupported(obj)
