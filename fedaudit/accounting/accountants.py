"""Accountants: one typed, open family over dp-accounting's ``DpEvent``.

**Currency.** What a run spends is a :class:`dp_accounting.dp_event.DpEvent` (dp-accounting's public
event algebra): a mechanism's report (:meth:`fedaudit.mechanisms.Mechanism.dp_event`), one DP-SGD
step or DP-FedAvg round (:func:`dpsgd_event`: the Poisson-subsampled Gaussian), a schedule whose σ or
q changes over time (:func:`schedule_event`), and their compositions (``ComposedDpEvent``,
``SelfComposedDpEvent``). What dp-accounting has no type for are fedaudit's own ``DpEvent``
subclasses: a shuffled round of ε0-LDP reports (:class:`~fedaudit.accounting.shuffling.ShuffledDpEvent`),
the privacy blanket of k-RR or Laplace reports (:class:`~fedaudit.accounting.blanket.BlanketDpEvent`),
an (ε, δ) claim (:class:`~fedaudit.accounting.events.EpsilonDeltaDpEvent`) and a PLD fedaudit builds
(:class:`~fedaudit.accounting.events.PldDpEvent`); :func:`~fedaudit.accounting.compose` and
:class:`~fedaudit.accounting.Ledger` turn each use into an event
(:func:`~fedaudit.accounting.events.event_of`) and ask an accountant of this registry.

**Accountant.** An :class:`Accountant` is dp-accounting's ``PrivacyAccountant`` interface:
``supports(event)``, ``compose(event, count)``, ``get_epsilon(δ)``, ``get_delta(ε)`` (optional:
``NotImplementedError`` where it has none), ``ledger`` and ``neighboring_relation``. Optional
attributes fedaudit reads: ``epsilon_bound`` (a :class:`~fedaudit.guarantees.Bound`, default UPPER)
and ``details()`` (the settings and by-products recorded with an answer). The registry
:data:`ACCOUNTANTS` (the same :class:`~fedaudit.registry.Registry` as every other family) maps a
name to a factory ``factory(neighboring_relation, **settings)``; the built-ins:

* ``"pld"`` — dp-accounting's privacy loss distributions (pessimistic discretisation
  ``discretization``, default 1e-4) through its public constructors and composition only: every
  event dp-accounting's ``PLDAccountant`` supports, with its numbers, and ``EpsilonDeltaDpEvent``
  and ``PldDpEvent`` (:class:`PldAccountant`);
* ``"rdp"`` — Opacus's Rényi-DP analysis (``opacus.accountants.analysis.rdp``, the orders of
  ``RDPAccountant.DEFAULT_ALPHAS``) of (Poisson-subsampled) Gaussian events, add/remove neighbours;
  δ(ε) by dp-accounting's RDP-to-DP conversion (``compute_delta``) of the same RDP curve;
* ``"prv"`` — Opacus's ``PRVAccountant`` fed through its public ``step()`` (the upper end of its ε
  error interval, ``eps_error``, default 0.01), (Poisson-subsampled) Gaussian events, ε(δ) only;
* ``"dpa-rdp"`` — dp-accounting's ``RdpAccountant`` (its own orders; both neighbouring relations,
  more event types than Opacus's);
* ``"shuffle"`` and ``"blanket"`` — the shuffle-model bounds of one
  :class:`~fedaudit.accounting.shuffling.ShuffledDpEvent` or
  :class:`~fedaudit.accounting.blanket.BlanketDpEvent` (Feldman–McMillan–Talwar; Balle–Bell–Gascón–Nissim).

Register your own with ``ACCOUNTANTS.register("mine", factory)``; it is then accepted everywhere an
accountant is named (:func:`account`, :func:`calibrate`, :func:`~fedaudit.accounting.epsilon_dpsgd`,
the ``dpsgd`` and ``dp-fedavg`` claims, ``fedaudit account``, the ``method`` of
:func:`~fedaudit.accounting.compose` and :class:`~fedaudit.accounting.Ledger`). A ``"package.module:attr"`` reference
works without registering.

**Neighbours.** :data:`NEIGHBOURING` maps fedaudit's words to dp-accounting's relations:
``"add-remove"`` (ADD_OR_REMOVE_ONE: DP-SGD examples, DP-FedAvg clients) and ``"replace-one"``
(REPLACE_ONE: local randomizers). Each accountant refuses an event it cannot account under the
relation asked for (dp-accounting's ``supports``), never guesses.

**Answers.** :func:`account` returns an :class:`Account`, the one result type of an accountant's
answer: ε at δ (or δ at ε), the accountant's name, its settings and ``epsilon_bound`` — what the ε
is (:class:`~fedaudit.guarantees.Bound`); every built-in accountant is an upper bound.

**Calibration.** :func:`calibrate` finds the parameter of an event factory (σ of DP-SGD, z of
DP-FedAvg, anything monotone) at which the accountant meets a target ε, with dp-accounting's
``mechanism_calibration.calibrate_dp_mechanism`` doing the search.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

from dp_accounting import dp_event
from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant, UnsupportedEventError

from fedaudit.accounting.blanket import BlanketAccountant
from fedaudit.accounting.events import EpsilonDeltaDpEvent, PldDpEvent
from fedaudit.accounting.pld import build_pld
from fedaudit.accounting.result import Account
from fedaudit.accounting.shuffling import ShuffleAccountant
from fedaudit.extras import require
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Bound
from fedaudit.registry import Registry
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real

__all__ = ["Account", "Accountant", "AccountantMemoryError", "ACCOUNTANTS", "NEIGHBOURING", "register_accountant", "make_accountant",
           "account", "calibrate", "dpsgd_event", "schedule_event", "accountants_for", "PldAccountant",
           "OpacusRdpAccountant", "OpacusPrvAccountant", "PLD_DISCRETIZATION", "PRV_EPS_ERROR"]

#: dp-accounting's PLD loss grid and Opacus's PRV ε error, the defaults of ``"pld"`` and ``"prv"``
PLD_DISCRETIZATION = 1e-4
PRV_EPS_ERROR = 0.01

#: fedaudit's neighbouring relations, as dp-accounting's
NEIGHBOURING: dict[str, NeighboringRelation] = {
    "add-remove": NeighboringRelation.ADD_OR_REMOVE_ONE,
    "replace-one": NeighboringRelation.REPLACE_ONE,
}


@runtime_checkable
class Accountant(Protocol):
    """What fedaudit asks of an accountant: dp-accounting's ``PrivacyAccountant`` interface (subclass
    :class:`dp_accounting.privacy_accountant.PrivacyAccountant` to get ``compose``, ``supports`` and
    ``ledger`` for free, and implement ``_maybe_compose`` and ``get_epsilon``)."""

    @property
    def neighboring_relation(self) -> NeighboringRelation: ...

    @property
    def ledger(self) -> dp_event.DpEvent: ...

    def supports(self, event: dp_event.DpEvent) -> bool: ...

    def compose(self, event: dp_event.DpEvent, count: int = 1) -> Any: ...

    def get_epsilon(self, target_delta: float) -> float: ...

    def get_delta(self, target_epsilon: float) -> float: ...


class AccountantMemoryError(FedAuditError):
    """An accountant ran out of memory (a PLD's loss grid grows like 1/(σ² · discretization)); a
    :class:`~fedaudit.errors.FedAuditError`, so one line and exit 2 on the CLI. Callers that know the
    parameters behind the event (:func:`~fedaudit.accounting.epsilon_dpsgd`) restate it in them."""


def _relation(neighbouring: Any) -> NeighboringRelation:
    if isinstance(neighbouring, NeighboringRelation):
        return neighbouring
    return NEIGHBOURING[check_choice("neighbouring", neighbouring, tuple(NEIGHBOURING))]


# -- the built-in accountants -------------------------------------------------------------------

#: the relations under which dp-accounting states its Laplace-type events (sensitivity of add/remove)
_ADDITIVE_RELATIONS = (NeighboringRelation.ADD_OR_REMOVE_ONE, NeighboringRelation.REPLACE_SPECIAL)


def _refused(event: dp_event.DpEvent, relation: NeighboringRelation, allowed: tuple[NeighboringRelation, ...],
             what: str) -> PrivacyAccountant.CompositionErrorDetails | None:
    """The refusal of ``event`` (a ``what``) under ``relation`` when dp-accounting states it only for ``allowed``."""
    if relation in allowed:
        return None
    return PrivacyAccountant.CompositionErrorDetails(
        event, f"neighboring_relation must be {' or '.join(r.name for r in allowed)} for {what}, got {relation.name}")


def _noise_part(event: dp_event.DpEvent, count: int, relation: NeighboringRelation) -> tuple:
    """What ``count`` uses of one of dp-accounting's noise events add to the ``"pld"`` accountant's
    PLD, as dp-accounting 0.6 states them: ``("pld", key, options, times)`` — the PLD
    :func:`~fedaudit.accounting.pld.build_pld` ``(key, discretization, **options)``, self-composed
    ``count`` times when ``times`` is ``"self"``, composed ``count`` times one by one when
    ``"each"``, built once at σ/√count when ``"sqrt"`` (``count`` Gaussians are one) — or
    ``("noop",)``, ``("non-private",)`` (a zero noise: nothing is hidden) or ``("error", details)``."""
    if isinstance(event, dp_event.RandomizedResponseDpEvent):
        refused = _refused(event, relation, (NeighboringRelation.REPLACE_ONE, NeighboringRelation.REPLACE_SPECIAL),
                           "RandomizedResponseDpEvent")
        if refused:
            return ("error", refused)
        if event.num_buckets == 1:  # one bucket: nothing to hide, whatever the noise
            return ("noop",)
        if event.noise_parameter == 0:
            return ("non-private",)
        # one by one: dp-accounting 0.6's own PLDAccountant composes this event once whatever its count
        return ("pld", ("rr", event.noise_parameter, event.num_buckets), {"neighboring_relation": relation}, "each")
    if isinstance(event, dp_event.GaussianDpEvent):
        if event.noise_multiplier == 0:
            return ("non-private",)
        return ("pld", ("gaussian", event.noise_multiplier), {"neighboring_relation": relation}, "sqrt")
    if isinstance(event, (dp_event.LaplaceDpEvent, dp_event.DiscreteLaplaceDpEvent)):
        refused = _refused(event, relation, _ADDITIVE_RELATIONS, type(event).__name__)
        if refused:
            return ("error", refused)
        if isinstance(event, dp_event.LaplaceDpEvent):
            noise, key = event.noise_multiplier, ("laplace", event.noise_multiplier)
        else:
            noise, key = event.noise_parameter, ("discrete-laplace", event.noise_parameter, event.sensitivity)
        return ("non-private",) if noise == 0 else ("pld", key, {}, "self")
    if isinstance(event, dp_event.MixtureOfGaussiansDpEvent):
        refused = _refused(event, relation, _ADDITIVE_RELATIONS, "MixtureOfGaussiansDpEvent")
        if refused:
            return ("error", refused)
        if len(event.sensitivities) == 1 and event.sensitivities[0] == 0.0:
            return ("noop",)
        if event.standard_deviation == 0:
            return ("non-private",)
        return ("pld", ("mixture-gaussian", event.standard_deviation, event.sensitivities, event.sampling_probs), {},
                "self")
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        inner = event.event
        if isinstance(inner, dp_event.LaplaceDpEvent):
            refused = _refused(event, relation, _ADDITIVE_RELATIONS, "PoissonSampledDpEvent of a LaplaceDpEvent")
            if refused:
                return ("error", refused)
            options: dict[str, Any] = {"sampling_prob": event.sampling_probability}
        elif isinstance(inner, dp_event.GaussianDpEvent):
            options = {"sampling_prob": event.sampling_probability, "neighboring_relation": relation}
        else:
            return ("error", PrivacyAccountant.CompositionErrorDetails(
                event, f"the subevent of a PoissonSampledDpEvent must be a GaussianDpEvent or a LaplaceDpEvent, "
                       f"got {inner}"))
        if event.sampling_probability == 0:
            return ("noop",)
        if inner.noise_multiplier == 0:
            return ("non-private",)
        kind = "laplace" if isinstance(inner, dp_event.LaplaceDpEvent) else "gaussian"
        return ("pld", (kind, inner.noise_multiplier), options, "self")
    if isinstance(event, dp_event.TruncatedSubsampledGaussianDpEvent):
        if event.sampling_probability == 0 or event.truncated_batch_size == 0 or event.dataset_size == 0:
            return ("noop",)
        if event.noise_multiplier == 0:
            return ("non-private",)
        return ("pld", ("truncated-subsampled-gaussian", event.dataset_size, event.sampling_probability,
                        event.truncated_batch_size, event.noise_multiplier), {"neighboring_relation": relation}, "self")
    return ("error", PrivacyAccountant.CompositionErrorDetails(event, "Unsupported event."))


class PldAccountant(PrivacyAccountant):
    """``"pld"``: privacy loss distributions through dp-accounting's public API only (numerical,
    tight; losses rounded up to multiples of ``discretization``, so an upper bound), recording its
    grid in :meth:`details`. It walks the event itself and builds every PLD with dp-accounting's
    public constructors (:func:`~fedaudit.accounting.pld.build_pld`), composing them with the
    PLDs' public ``compose``/``self_compose`` and answering by ``get_epsilon_for_delta`` /
    ``get_delta_for_epsilon``:

    * dp-accounting's own events (Gaussian, Laplace, discrete Laplace, mixture of Gaussians,
      Poisson-subsampled Gaussian and Laplace, truncated subsampled Gaussian, randomized response;
      :func:`_noise_part`) as dp-accounting 0.6's ``PLDAccountant`` accounts them, in the order
      they come, so its numbers are that accountant's, bit for bit;
    * fedaudit's :class:`~fedaudit.accounting.events.EpsilonDeltaDpEvent` (the dominating pair of an
      (ε, δ) claim, ``from_privacy_parameters``) and :class:`~fedaudit.accounting.events.PldDpEvent`
      (the PLD :func:`~fedaudit.accounting.pld.pld_of` builds), under either relation;
    * dp-accounting's ``RandomizedResponseDpEvent`` under replace-one counted ``count`` times, which
      dp-accounting 0.6's ``PLDAccountant`` does not (its randomized-response branch never
      self-composes: 10 reports of 5-RR at ε = 1 come out at ε ≈ 1.0 instead of 9.99 — an
      under-count); under REPLACE_SPECIAL its uses are composed one by one.

    Each event of the last two items has its PLD built once and self-composed ``count`` times (as
    dp-accounting does for its Laplace and subsampled-Gaussian events; error ≤ count ·
    discretization); equal events composed at different places are counted together, and the
    distinct ones are composed pairwise (each FFT joins two PLDs of similar support) when ε or δ is
    asked for, then with what dp-accounting's events composed. This is the path of
    :func:`~fedaudit.accounting.compose` (``method="pld"``), :class:`~fedaudit.accounting.Ledger`
    and the ``accounting`` claim kind."""

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
                 discretization: float = PLD_DISCRETIZATION):
        super().__init__(neighboring_relation)
        self.discretization = check_real("discretization", discretization, low=0.0, high=0.1, open_low=True)
        self._noise: Any = None  # the PLD of dp-accounting's events so far (None: none composed yet)
        self._parts: dict[tuple, int] = {}  # the extended events' PLD keys and counts, in order
        self._non_dp = False  # a zero-noise event (dp-accounting's NonPrivateDpEvent among them)
        self._reveals_input = False
        self._composed: Any = None

    def _key(self, event: dp_event.DpEvent) -> tuple | None:
        """The PLD key of an event whose uses this class gathers (``()``: the identity), None for
        dp-accounting's noise events (:func:`_noise_part`)."""
        if isinstance(event, EpsilonDeltaDpEvent):
            return () if event.epsilon == 0.0 and event.delta == 0.0 else ("privacy", event.epsilon, event.delta)
        if isinstance(event, PldDpEvent):
            return event.key
        if (isinstance(event, dp_event.RandomizedResponseDpEvent) and event.num_buckets > 1
                and event.noise_parameter > 0 and self.neighboring_relation is NeighboringRelation.REPLACE_ONE):
            return ("rr", event.noise_parameter, event.num_buckets)  # dp-accounting's factory at REPLACE_ONE
        return None

    def _maybe_compose(self, event, count, do_compose):
        """dp-accounting's ``PrivacyAccountant`` hook (its abstract method): check ``event`` and,
        with ``do_compose``, account ``count`` uses of it."""
        if isinstance(event, dp_event.NoOpDpEvent):
            return None
        if isinstance(event, dp_event.NonPrivateDpEvent):
            self._non_dp = self._non_dp or do_compose
            return None
        if isinstance(event, dp_event.SelfComposedDpEvent):
            return self._maybe_compose(event.event, event.count * count, do_compose)
        if isinstance(event, dp_event.ComposedDpEvent):
            for e in event.events:
                error = self._maybe_compose(e, count, do_compose)
                if error is not None:
                    return error
            return None
        key = self._key(event)
        if key is not None:
            if do_compose and count > 0 and key:
                self._composed = None
                if isinstance(event, PldDpEvent) and event.reveals_input:
                    self._reveals_input = True
                else:
                    self._parts[key] = self._parts.get(key, 0) + count
            return None
        part = _noise_part(event, count, self.neighboring_relation)
        if part[0] == "error":
            return part[1]
        if do_compose and count > 0:
            if part[0] == "non-private":
                self._non_dp = True
            elif part[0] == "pld":
                self._add_noise(*part[1:], count)
        return None

    def _add_noise(self, key: tuple, options: dict[str, Any], times: str, count: int) -> None:
        """Compose ``count`` uses of one of dp-accounting's events (:func:`_noise_part`) into the PLD
        of those composed so far, starting from the identity as dp-accounting's accountant does."""
        if times == "sqrt":
            key = (key[0], key[1] / math.sqrt(count))
        one = build_pld(key, self.discretization, **options)
        uses = one.self_compose(count) if times == "self" else one
        if self._noise is None:
            self._noise = build_pld(("identity",), self.discretization)
        for _ in range(count if times == "each" else 1):
            self._noise = self._noise.compose(uses)
        self._composed = None

    def _pld_now(self) -> Any:
        """The PLD of everything composed so far (the class docstring says in which order)."""
        if self._composed is None:
            parts = []
            for key, count in self._parts.items():
                one = build_pld(key, self.discretization)
                parts.append(one.self_compose(count) if count > 1 else one)
            while len(parts) > 1:  # pairwise, so that each FFT composes two PLDs of similar support
                parts = [a.compose(b) for a, b in zip(parts[::2], parts[1::2])] + parts[len(parts) - len(parts) % 2:]
            if self._noise is not None:
                parts = [self._noise.compose(parts[0])] if parts else [self._noise]
            self._composed = parts[0] if parts else None
        return self._composed

    def _non_private(self) -> bool:
        return self._reveals_input or self._non_dp

    def get_epsilon(self, target_delta: float) -> float:
        if self._non_private():
            return math.inf
        pld = self._pld_now()
        return 0.0 if pld is None else float(pld.get_epsilon_for_delta(target_delta))

    def get_delta(self, target_epsilon: float) -> float:
        if self._non_private():
            return 1.0
        pld = self._pld_now()
        return 0.0 if pld is None else float(pld.get_delta_for_epsilon(target_epsilon))

    def details(self) -> dict[str, Any]:
        return {"value_discretization_interval": self.discretization}


def _pld(neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
         discretization: float = PLD_DISCRETIZATION) -> PrivacyAccountant:
    """dp-accounting's privacy-loss-distribution accountant (numerical, tight; losses rounded up to
    multiples of ``discretization``, so an upper bound)."""
    return PldAccountant(neighboring_relation, discretization=discretization)


def _gaussian_segments(event: dp_event.DpEvent, count: int) -> list[tuple[float, float, int]] | None:
    """``[(σ, q, steps)]`` of an event made of (Poisson-subsampled) Gaussian steps, or None."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return []
    if isinstance(event, dp_event.GaussianDpEvent):
        return [(event.noise_multiplier, 1.0, count)]
    if isinstance(event, dp_event.PoissonSampledDpEvent) and isinstance(event.event, dp_event.GaussianDpEvent):
        return [(event.event.noise_multiplier, event.sampling_probability, count)]
    if isinstance(event, dp_event.SelfComposedDpEvent):
        return _gaussian_segments(event.event, event.count * count)
    if isinstance(event, dp_event.ComposedDpEvent):
        out: list[tuple[float, float, int]] = []
        for e in event.events:
            part = _gaussian_segments(e, count)
            if part is None:
                return None
            out.extend(part)
        return out
    return None


class _OpacusGaussian(PrivacyAccountant):
    """Shared part of the Opacus accountants: they account (Poisson-subsampled) Gaussian steps under
    add/remove neighbours, kept as ``(σ, q, steps)`` segments in order."""

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE):
        super().__init__(neighboring_relation)
        self.segments: list[tuple[float, float, int]] = []

    def _maybe_compose(self, event, count, do_compose):
        if self.neighboring_relation is not NeighboringRelation.ADD_OR_REMOVE_ONE:
            return PrivacyAccountant.CompositionErrorDetails(
                event, f"Opacus accounts add/remove neighbours only, not {self.neighboring_relation.name}")
        segments = _gaussian_segments(event, count)
        if segments is None:
            return PrivacyAccountant.CompositionErrorDetails(
                event, "Opacus accounts Gaussian and Poisson-subsampled Gaussian events only")
        if do_compose:
            self.segments.extend(s for s in segments if s[2] > 0)
        return None


class OpacusRdpAccountant(_OpacusGaussian):
    """``"rdp"``: Opacus's Rényi-DP analysis of the sampled Gaussian (Mironov et al. 2019) summed
    over the segments and converted to (ε, δ) at the best of ``orders`` (default Opacus's
    ``RDPAccountant.DEFAULT_ALPHAS``); an upper bound."""

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
                 orders: Sequence[float] | None = None):
        super().__init__(neighboring_relation)
        self._given_orders = None if orders is None else list(orders)
        self.best_order: float | None = None

    @property
    def orders(self) -> list[float]:
        """The Rényi orders: ``orders`` as given, or Opacus's ``RDPAccountant.DEFAULT_ALPHAS`` (looked
        up when first needed, so the accountant is listed, and named in errors, without Opacus)."""
        if self._given_orders is None:
            self._given_orders = list(require("opacus.accountants", "the rdp accountant (Opacus)").RDPAccountant.DEFAULT_ALPHAS)
        return self._given_orders

    def _rdp_curve(self):
        analysis = require("opacus.accountants.analysis.rdp", "the rdp accountant (Opacus)")

        return sum(analysis.compute_rdp(q=q, noise_multiplier=s, steps=n, orders=self.orders)
                   for s, q, n in self.segments)

    def get_epsilon(self, target_delta: float) -> float:
        if not self.segments:
            return 0.0
        analysis = require("opacus.accountants.analysis.rdp", "the rdp accountant (Opacus)")

        eps, order = analysis.get_privacy_spent(orders=self.orders, rdp=self._rdp_curve(), delta=target_delta)
        self.best_order = float(order)
        return float(eps)

    def get_delta(self, target_epsilon: float) -> float:
        if not self.segments:
            return 0.0
        from dp_accounting.rdp.rdp_privacy_accountant import compute_delta

        delta, order = compute_delta(self.orders, list(self._rdp_curve()), target_epsilon)
        self.best_order = float(order)
        return float(delta)

    def details(self) -> dict[str, Any]:
        return {} if self.best_order is None else {"best_order": self.best_order}


class OpacusPrvAccountant(_OpacusGaussian):
    """``"prv"``: Opacus's privacy-random-variable accountant (Gopi, Lee, Wutschitz 2021), fed step by
    step through its public ``step()``; returns the upper end of its ε error interval (``eps_error``).
    Opacus offers no δ(ε) for it."""

    def __init__(self, neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
                 eps_error: float = PRV_EPS_ERROR):
        super().__init__(neighboring_relation)
        self.eps_error = check_real("eps_error", eps_error, low=0.0, high=1.0, open_low=True)

    def get_epsilon(self, target_delta: float) -> float:
        if not self.segments:
            return 0.0
        PRVAccountant = require("opacus.accountants", "the prv accountant (Opacus)").PRVAccountant

        prv = PRVAccountant()
        for sigma, q, n in self.segments:
            for _ in range(n):  # Opacus merges equal consecutive steps into one (σ, q, n) entry
                prv.step(noise_multiplier=sigma, sample_rate=q)
        return float(prv.get_epsilon(target_delta, eps_error=self.eps_error))

    def details(self) -> dict[str, Any]:
        return {"eps_error": self.eps_error}


def _dpa_rdp(neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
             orders: Sequence[float] | None = None) -> PrivacyAccountant:
    """dp-accounting's Rényi-DP accountant (its default orders unless ``orders``); both neighbouring
    relations and more event types than Opacus's RDP; an upper bound."""
    from dp_accounting.rdp import RdpAccountant

    return RdpAccountant(orders=None if orders is None else list(orders), neighboring_relation=neighboring_relation)


def _rdp(neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
         orders: Sequence[float] | None = None) -> PrivacyAccountant:
    """Opacus's Rényi-DP analysis of (Poisson-subsampled) Gaussian events (its default orders); an
    upper bound, looser than PLD."""
    return OpacusRdpAccountant(neighboring_relation, orders=orders)


def _prv(neighboring_relation: NeighboringRelation = NeighboringRelation.ADD_OR_REMOVE_ONE, *,
         eps_error: float = PRV_EPS_ERROR) -> PrivacyAccountant:
    """Opacus's privacy-random-variable accountant of (Poisson-subsampled) Gaussian events; the upper
    end of its ε error interval."""
    return OpacusPrvAccountant(neighboring_relation, eps_error=eps_error)


def _shuffle(neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE, *,
             method: str = "numerical") -> PrivacyAccountant:
    """Shuffle-model amplification of one ShuffledDpEvent: n ε0-LDP reports shuffled (Feldman,
    McMillan, Talwar 2021; closed form or numerical bound)."""
    return ShuffleAccountant(neighboring_relation, method=method)


def _blanket(neighboring_relation: NeighboringRelation = NeighboringRelation.REPLACE_ONE, *,
             bound: str = "hoeffding") -> PrivacyAccountant:
    """The privacy blanket of one BlanketDpEvent: n shuffled k-RR or Laplace reports (Balle, Bell,
    Gascón, Nissim 2019; Hoeffding or Bennett tail)."""
    return BlanketAccountant(neighboring_relation, bound=bound)


#: the accountant family: a name to ``factory(neighboring_relation, **settings)``
ACCOUNTANTS: Registry[Accountant] = Registry("accountant", skip=("neighboring_relation",))
ACCOUNTANTS.register("pld", _pld)
ACCOUNTANTS.register("rdp", _rdp)
ACCOUNTANTS.register("prv", _prv)
ACCOUNTANTS.register("dpa-rdp", _dpa_rdp)
ACCOUNTANTS.register("shuffle", _shuffle)
ACCOUNTANTS.register("blanket", _blanket)


def register_accountant(name: str, factory: Callable[..., Accountant] | None = None, **kwargs: Any) -> Any:
    """Register a user's accountant factory ``factory(neighboring_relation, **settings)`` under
    ``name`` (a decorator without ``factory``); :meth:`Registry.register`'s keywords apply."""
    return ACCOUNTANTS.register(name, factory, **kwargs)


def make_accountant(name: str = "pld", neighbouring: Any = "add-remove", **settings: Any) -> Accountant:
    """A fresh accountant ``name`` (registered or ``"package.module:attr"``) for ``neighbouring``
    (``"add-remove"``, ``"replace-one"`` or a dp-accounting ``NeighboringRelation``), built with
    ``settings`` (checked against the factory's keywords)."""
    relation = _relation(neighbouring)
    ACCOUNTANTS.check_keywords(name, settings)
    acc = ACCOUNTANTS.call(name, (relation,), settings, receives="the neighbouring relation and its settings")
    if not isinstance(acc, Accountant):
        raise FedAuditError(f"accountant {name!r} built a {type(acc).__name__}, not an accountant (it needs "
                            f"supports, compose, get_epsilon, get_delta, ledger and neighboring_relation: "
                            f"subclass dp_accounting.privacy_accountant.PrivacyAccountant)")
    return acc


def accountants_for(event: dp_event.DpEvent, neighbouring: Any = "add-remove") -> tuple[str, ...]:
    """The registered accountants (default settings) that support ``event`` under ``neighbouring``."""
    out = []
    for name in ACCOUNTANTS.names():
        try:
            if make_accountant(name, neighbouring).supports(event):
                out.append(name)
        except FedAuditError:
            continue
    return tuple(out)


def _has_additive_noise(event: dp_event.DpEvent) -> bool:
    """True when ``event`` holds a Laplace, discrete-Laplace or Gaussian event (dp-accounting's
    add/remove-sensitivity events)."""
    if isinstance(event, (dp_event.LaplaceDpEvent, dp_event.DiscreteLaplaceDpEvent, dp_event.GaussianDpEvent)):
        return True
    if isinstance(event, (dp_event.SelfComposedDpEvent, dp_event.PoissonSampledDpEvent)):
        return _has_additive_noise(event.event)
    if isinstance(event, dp_event.ComposedDpEvent):
        return any(_has_additive_noise(e) for e in event.events)
    return False


def _compose(acc: Accountant, event: dp_event.DpEvent, name: str) -> None:
    if not isinstance(event, dp_event.DpEvent):
        raise FedAuditError(f"an event must be a dp_accounting DpEvent, got {type(event).__name__}")
    if not acc.supports(event):
        hint = ""
        if acc.neighboring_relation is not NeighboringRelation.ADD_OR_REMOVE_ONE and _has_additive_noise(event):
            hint = ("; dp-accounting states Laplace and Gaussian events for an add/remove sensitivity (its PLD "
                    "refuses Laplace events under replace-one): a fedaudit mechanism's event carries the diameter "
                    "of its inputs as that sensitivity, so neighbouring='add-remove' gives its replace-one guarantee")
        raise FedAuditError(f"accountant {name!r} does not support {event} under "
                            f"{acc.neighboring_relation.name}; accountants that do: "
                            f"{', '.join(accountants_for(event, acc.neighboring_relation)) or 'none'}{hint}")
    try:
        acc.compose(event)
    except UnsupportedEventError as err:
        raise FedAuditError(f"accountant {name!r}: {err}") from None


def account(event: dp_event.DpEvent, *, delta: float | None = None, epsilon: float | None = None,
            accountant: str = "pld", neighbouring: Any = "add-remove",
            parameters: Mapping[str, Any] | None = None, **settings: Any) -> Account:
    """ε at ``delta`` (or, with ``epsilon``, δ at ε) of ``event`` by ``accountant`` under
    ``neighbouring`` (module docstring); ``settings`` go to the accountant's factory (``discretization``
    for pld, ``eps_error`` for prv, ``orders`` for the RDPs, ...). ``parameters`` are recorded in the
    answer ahead of the accountant's own details. Give exactly one of ``delta`` and ``epsilon``."""
    if (delta is None) == (epsilon is None):
        raise FedAuditError("give exactly one of delta (to get ε) or epsilon (to get δ)")
    acc = make_accountant(accountant, neighbouring, **settings)
    try:
        _compose(acc, event, accountant)
        if delta is not None:
            delta = check_probability("delta", delta)
            eps = float(acc.get_epsilon(delta))
        else:
            eps = check_real("epsilon", epsilon, low=0.0)
            try:
                delta = float(acc.get_delta(eps))
            except NotImplementedError:
                raise FedAuditError(f"accountant {accountant!r} answers ε(δ) only, not δ(ε); use "
                                    f"{', '.join(n for n in ('pld', 'rdp', 'dpa-rdp') if n != accountant)}") from None
    except MemoryError:  # a PLD grid spans ~1/σ² in steps of the discretisation (σ = 1e-3, 1e-4: 38 GiB)
        raise AccountantMemoryError(f"the {accountant} accountant ran out of memory on {event} (a privacy-loss grid grows "
                            f"like 1/(σ² · discretization)): raise discretization or use accountant='rdp' or "
                            f"'prv'") from None
    if math.isnan(eps) or math.isnan(delta):
        raise FedAuditError(f"the {accountant} accountant returned NaN for {event} at delta={delta!r}")
    details = acc.details() if callable(getattr(acc, "details", None)) else {}
    bound = Bound(getattr(acc, "epsilon_bound", Bound.UPPER))
    return Account(eps, delta, method=accountant, parameters={**dict(parameters or {}), **details},
                   epsilon_bound=bound)


# -- events -------------------------------------------------------------------------------------

def dpsgd_event(noise_multiplier: float, sample_rate: float, steps: int) -> dp_event.DpEvent:
    """``steps`` Poisson-subsampled Gaussian steps: one DP-SGD step (examples sampled with probability
    q, gradients clipped to C, N(0, (σC)²) added) or one DP-FedAvg round (clients for examples)."""
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(sample_rate, dp_event.GaussianDpEvent(noise_multiplier)), steps)


def schedule_event(segments: Sequence[tuple[float, float, int]]) -> dp_event.DpEvent:
    """A schedule whose σ or q changes over time: ``[(noise_multiplier, sample_rate, steps), ...]`` run
    in order, as the composition of their :func:`dpsgd_event`."""
    if isinstance(segments, (str, bytes)) or not isinstance(segments, Sequence) or not segments:
        raise FedAuditError("segments must be a non-empty sequence of (noise_multiplier, sample_rate, steps)")
    events = []
    for i, seg in enumerate(segments):
        if not isinstance(seg, Sequence) or len(seg) != 3:
            raise FedAuditError(f"segments[{i}] must be (noise_multiplier, sample_rate, steps), got {seg!r}")
        sigma = check_positive(f"segments[{i}] noise_multiplier", seg[0])
        q = check_probability(f"segments[{i}] sample_rate", seg[1], open_high=False)
        events.append(dpsgd_event(sigma, q, check_int(f"segments[{i}] steps", seg[2], low=1)))
    return events[0] if len(events) == 1 else dp_event.ComposedDpEvent(events)


# -- calibration --------------------------------------------------------------------------------

def calibrate(event_factory: Callable[[float], dp_event.DpEvent], target_epsilon: float, delta: float, *,
              accountant: str = "pld", neighbouring: Any = "add-remove", tol: float = 1e-3,
              search_range: tuple[float, float] = (2.0 ** -6, 2.0 ** 12), decreasing: bool = True,
              discrete: bool = False, parameter: str = "noise_multiplier", **settings: Any) -> float:
    """The parameter x of ``event_factory(x)`` at which ``accountant`` just meets ``target_epsilon``
    at ``delta``: the smallest x with ε ≤ target when ε decreases in x (``decreasing``, e.g. a noise
    multiplier), the largest when it increases (a sampling rate, a number of steps with ``discrete``).

    A bracket is found by doubling / halving from x = 1 inside ``search_range``; then dp-accounting's
    ``mechanism_calibration.calibrate_dp_mechanism`` searches it (Brent's method, its result checked
    to meet the target) to an absolute tolerance ``tol·lo/2`` (lo the bracket's lower end), so the
    answer x* meets the target and, for decreasing ε, ``ε(x*·(1 − tol)) > target``."""
    from dp_accounting import mechanism_calibration as mc

    target = check_positive("target_epsilon", target_epsilon)
    delta = check_probability("delta", delta)
    tol = check_real("tol", tol, low=0.0, high=0.5, open_low=True)
    s_min, s_max = (check_positive("search_range[0]", search_range[0]),
                    check_positive("search_range[1]", search_range[1]))
    relation = _relation(neighbouring)
    make_accountant(accountant, relation, **settings)  # refuse a bad name or setting before searching

    def fresh() -> Accountant:
        return make_accountant(accountant, relation, **settings)

    def eps(x: float) -> float:
        x = round(x) if discrete else x
        acc = fresh()
        _compose(acc, event_factory(x), accountant)
        return float(acc.get_epsilon(delta))

    def ok(x: float) -> bool:
        return eps(x) <= target

    lo, hi = _bracket(ok if decreasing else (lambda x: not ok(x)), s_min, s_max, target, parameter, decreasing)
    try:
        return mc.calibrate_dp_mechanism(fresh, event_factory, target, delta,
                                         mc.ExplicitBracketInterval(lo, hi), discrete=discrete, tol=tol * lo / 2)
    except (ValueError, mc.NoBracketIntervalFoundError) as err:
        raise FedAuditError(f"calibrating {parameter} for target_epsilon={target:g} at delta={delta:g} by "
                            f"{accountant}: {err}") from None


def _bracket(above: Callable[[float], bool], s_min: float, s_max: float, target: float, parameter: str,
             decreasing: bool) -> tuple[float, float]:
    """``(lo, hi)`` in ``[s_min, s_max]`` with ``above(lo)`` False and ``above(hi)`` True, by doubling or
    halving from 1 (``above`` is monotone: False below the answer, True above it)."""
    lo = hi = min(max(1.0, s_min), s_max)
    met = "met" if decreasing else "not met"
    if above(hi):
        while above(lo):
            if lo <= s_min:
                raise FedAuditError(f"target_epsilon={target:g} is {met} even at {parameter}={lo:g}, the lower end "
                                    f"of search_range (sigma_range of the deprecated noise_multiplier_for); lower "
                                    f"it or change the target")
            hi, lo = lo, max(lo / 2, s_min)
    else:
        while not above(hi):
            if hi >= s_max:
                met = "not met" if decreasing else "met"
                raise FedAuditError(f"target_epsilon={target:g} is {met} even at {parameter}={hi:g}, the upper end "
                                    f"of search_range (sigma_range of the deprecated noise_multiplier_for); raise "
                                    f"it or change the target")
            lo, hi = hi, min(hi * 2, s_max)
    return lo, hi
