"""What one client spends over a schedule of rounds: participation, shuffling and composition.

Each round in which the client takes part it sends one report of a mechanism (its typed
guarantee, :attr:`~fedaudit.mechanisms.Mechanism.guarantee`). :func:`account_schedule` composes
``count`` such rounds by ``method`` (:func:`fedaudit.accounting.compose`: basic, optimal advanced
of Kairouz–Oh–Viswanath, or exact PLD composition by the ``"pld"`` accountant of the mechanism's
event, :func:`fedaudit.accounting.events.event_of`, whose PLD is the mechanism's own,
:func:`fedaudit.accounting.pld.pld_of`; any other accountant registered in
:data:`~fedaudit.accounting.ACCOUNTANTS` is given the same events under replace-one neighbours,
:func:`schedule_accountant_refusal` saying beforehand whether it can account them). This is the
library behind the ``accounting`` claim kind.

* Participation (:func:`participations`). With probability q of taking part in a round, under
  local DP the server sees who reports, so subsampling does **not** amplify privacy.
  ``"every-round"`` charges all rounds (the worst case); ``"tail"`` uses that the participation
  pattern S is independent of the data: conditioned on S the view is the |S|-fold composition, so
  with K = |S| ~ Bin(rounds, q) and k the smallest integer with ``P[K > k] ≤ δ/2`` the run is
  (ε_k, δ_k + P[K > k])-DP, where (ε_k, δ_k) composes k reports at δ_k = δ − P[K > k].
* Shuffling (``shuffle_n = n``): each round's reports go through a shuffler in batches of at least
  n. A round is then (ε_s, δ_s)-DP by :func:`fedaudit.accounting.shuffle_epsilon` (Feldman,
  McMillan, Talwar 2021; any pure ε0-LDP mechanism) or, with ``shuffle_method = "blanket"`` for
  k-ary randomized response (:func:`blanket_covers`), by the privacy blanket
  (:func:`fedaudit.accounting.blanket_epsilon`; Balle, Bell, Gascón, Nissim 2019). Here δ_s = δ'/k
  for basic and s·δ'/k for advanced and PLD, which keep the rest as slack (the share s of
  :data:`SHUFFLE_SHARES` with the smallest ε is kept), δ' being the δ left for the k composed
  rounds. Where shuffling certifies no amplification, the round is charged its ε0 (with no δ).
* The curve ε(1…rounds) (:func:`schedule_curve`): the same schedule cut after r rounds, its points
  as engine chunks (:func:`fedaudit.accounting.curves.run_curve`), PLD points at the coarser
  :data:`~fedaudit.accounting.curves.CURVE_DISCRETIZATION` (still an upper bound).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Callable, Mapping

from fedaudit.accounting.curves import CURVE_DISCRETIZATION, run_curve
from fedaudit.errors import FedAuditError

__all__ = ["participations", "account_schedule", "schedule_curve", "schedule_accountant_refusal", "blanket_covers",
           "PLD_DISCRETIZATION", "PLD_MAX_LOSS", "SHUFFLE_SHARES"]

#: the discretisation of a schedule's PLD composition (dp-accounting's default)
PLD_DISCRETIZATION = 1e-4
#: largest total privacy loss (reports × per-report ε) composed by PLD: the composed distribution's
#: support grows with it (1000 reports of ε = 1 at 1e-4 hold ~480 MB); beyond it use 'advanced',
#: exact for equal per-report guarantees
PLD_MAX_LOSS = 250.0
#: shares of the rounds' δ given to the shuffled rounds themselves under advanced and PLD (the rest is
#: the composition's slack); the smallest composed ε over them is kept
SHUFFLE_SHARES = (0.1, 0.25, 0.5, 0.75, 0.9)


def participations(rounds: int, sampling: float, participation: str, delta: float) -> tuple[int, float]:
    """(k, tail): the number of reports accounted and the δ spent on ``P[K > k]``.

    ``every-round``: ``(rounds, 0)``. ``tail``: the smallest k with ``P[Bin(rounds, q) > k] ≤ δ/2``
    and that probability (module docstring)."""
    if participation == "every-round" or sampling >= 1.0:
        return rounds, 0.0
    from scipy.stats import binom

    k = max(0, int(binom.isf(delta / 2, rounds, sampling)) - 1)
    while k < rounds and binom.sf(k, rounds, sampling) > delta / 2:  # isf is a float search: step to the exact k
        k += 1
    return k, float(binom.sf(k, rounds, sampling)) if k < rounds else 0.0


def blanket_covers(mech: Any) -> bool:
    """True when the privacy-blanket bound of a shuffled round applies to ``mech``: it is proven
    here for k-ary randomized response only (:func:`fedaudit.accounting.blanket_epsilon`), so a
    mechanism of one's own, categorical or not, is not covered."""
    from fedaudit.mechanisms.randomized_response import RandomizedResponse

    return isinstance(mech, RandomizedResponse)


def _round_guarantee(mech: Any, shuffle_n: int | None, shuffle_method: str, delta_round: float) -> tuple[Any, dict]:
    """The guarantee of one round for the client, and what the evidence says of it."""
    from fedaudit.guarantees import ApproxLDP, PureLDP

    g = mech.guarantee
    if shuffle_n is None:
        return g, {"shuffled": False}
    k = getattr(mech, "k", None) if shuffle_method == "blanket" else None
    bound, why = _shuffled(shuffle_n, g.epsilon, delta_round, shuffle_method, k)
    info = {"shuffled": True, "shuffle": bound.to_dict()}
    if not bound.amplified:
        info["note"] = why
        return PureLDP(g.epsilon), info
    return ApproxLDP(bound.epsilon, delta_round), info


@functools.lru_cache(maxsize=1024)
def _shuffled(n: int, eps0: float, delta: float, method: str, k: int | None) -> tuple[Any, str]:
    """The shuffled round's bound and its warning text (the evidence states it instead):
    :func:`~fedaudit.accounting.shuffle_epsilon` (any ε0-LDP randomizer) or, for ``blanket``,
    :func:`~fedaudit.accounting.blanket_epsilon` of k-ary randomized response."""
    from fedaudit.accounting import blanket_epsilon, shuffle_epsilon

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bound = (blanket_epsilon(n, "krr", eps0, delta, k=k) if method == "blanket"
                 else shuffle_epsilon(n, eps0, delta, method=method))
    return bound, "; ".join(str(w.message) for w in caught) or "no amplification certified"


def account_schedule(mech: Any, *, count: int, method: str, delta: float, shuffle_n: int | None = None,
                     shuffle_method: str = "numerical", discretization: float = PLD_DISCRETIZATION,
                     shares: tuple[float, ...] = SHUFFLE_SHARES) -> tuple[float, float, Any, dict]:
    """(ε, δ, round guarantee, round info) of ``count`` rounds composed by ``method`` at total ``delta``
    (the δ left after the participation tail). ``count = 0`` costs nothing.

    Shuffled rounds are (ε_s, s·δ/count)-DP; basic takes s = 1 (its δ is Σδ_l), advanced and PLD
    the share s in ``shares`` giving the smallest ε (each is a valid bound, chosen without looking
    at any data); ``info["delta_share"]`` records it."""
    from fedaudit.accounting import compose
    from fedaudit.accounting.composition import CLOSED_FORMS
    from fedaudit.guarantees import epsilon_delta

    shares = (1.0,) if method == "basic" or shuffle_n is None else shares
    best: tuple[float, float, Any, dict] | None = None
    for share in shares:
        g, info = _round_guarantee(mech, shuffle_n, shuffle_method, share * delta / max(count, 1))
        if shuffle_n is not None:
            info["delta_share"] = share
        if count == 0:
            return 0.0, 0.0, g, info
        if method == "pld" and count * epsilon_delta(g)[0] > PLD_MAX_LOSS:
            raise FedAuditError(f"PLD composition of {count} reports of ε = {epsilon_delta(g)[0]:.4g} exceeds a total "
                                f"loss of {PLD_MAX_LOSS:g} (memory); use method = 'advanced' (exact for equal "
                                f"per-report guarantees) or fewer rounds")
        if method == "basic":
            comp = compose([g] * count, "basic", 0.0)  # reports (Σε, Σδ); over budget when Σδ > δ
            ok = comp.delta <= delta * (1 + 1e-9)
            found = (comp.epsilon, comp.delta, g, info) if ok else (math.inf, delta, g, info)
        elif method not in CLOSED_FORMS and shuffle_n is None:
            found = (_mechanism_epsilon(mech, count, delta, method, discretization, info), delta, g, info)
        else:
            comp = compose([g] * count, method, delta, discretization=discretization)
            found = (comp.epsilon, comp.delta, g, info)
        if best is None or found[0] < best[0]:
            best = found
    return best


def _mechanism_epsilon(mech: Any, count: int, delta: float, method: str, discretization: float, info: dict) -> float:
    """ε at ``delta`` of ``count`` reports of the mechanism's event
    (:func:`fedaudit.accounting.events.event_of`: its own worst pair where fedaudit knows it,
    tighter than the dominating pair of its (ε, δ) claim) by the accountant ``method`` under
    replace-one neighbours, or of its guarantee's event for a mechanism (or an accountant) without
    one; ``info["pld"]`` (``info["event"]`` for an accountant other than pld) says which."""
    from dp_accounting import dp_event

    from fedaudit.accounting.accountants import ACCOUNTANTS, AccountantMemoryError, account
    from fedaudit.accounting.events import event_of

    settings = {"discretization": discretization} if ACCOUNTANTS.canonical(method) == "pld" else {}
    said = "pld" if ACCOUNTANTS.canonical(method) == "pld" else "event"

    def spent(one: Any) -> float:
        event = dp_event.SelfComposedDpEvent(one, count) if count > 1 else one
        return account(event, delta=delta, accountant=method, neighbouring="replace-one", **settings).epsilon

    try:  # a mechanism of one's own may declare an event the accountant refuses: use its claim then
        eps = spent(event_of(mech))
        info[said] = "the mechanism's own privacy loss distribution (worst pair)" if said == "pld" else \
            "the mechanism's own event"
    except AccountantMemoryError:
        raise
    except FedAuditError:
        eps = spent(event_of(mech.guarantee))
        info[said] = "the dominating pair of the mechanism's (ε, δ) claim" if said == "pld" else \
            "the event of the mechanism's (ε, δ) claim"
    return eps


def schedule_accountant_refusal(mech: Any, method: str, *, shuffled: bool) -> str | None:
    """Why ``method`` cannot account a schedule of ``mech``'s reports (None when it can): a
    closed form (basic, advanced) composes any guarantee; an accountant of
    :data:`~fedaudit.accounting.ACCOUNTANTS` must support, under replace-one neighbours, the
    mechanism's event or its guarantee's event (:func:`_mechanism_epsilon`) or, for shuffled
    rounds, the event of a round's (ε, δ) guarantee. The plan check of the ``accounting`` kind
    asks this before anything runs."""
    from fedaudit.accounting.accountants import accountants_for, make_accountant
    from fedaudit.accounting.composition import CLOSED_FORMS
    from fedaudit.accounting.events import event_of

    if method in CLOSED_FORMS:
        return None
    try:
        acc = make_accountant(method, "replace-one")
    except FedAuditError as err:
        return str(err)
    events = [event_of(mech.guarantee)]
    if not shuffled:
        try:
            events.insert(0, event_of(mech))
        except FedAuditError:  # no event of its own: its (ε, δ) guarantee's event alone
            pass
    if any(acc.supports(e) for e in events):
        return None
    able = dict.fromkeys([*CLOSED_FORMS, *(n for e in events for n in accountants_for(e, "replace-one"))])
    what = "a shuffled round's (ε, δ) guarantee" if shuffled else "the mechanism's reports"
    return (f"{method!r} does not account {what} under replace-one neighbours (events "
            f"{', '.join(type(e).__name__ for e in events)}); those that do: {', '.join(able)}")


def schedule_curve(mech: Any, jobs: list[list[tuple[int, float, str, tuple[float, ...]]]],
                   progress: Callable[[int], None], engine: Mapping[str, Any], *, shuffle_n: int | None = None,
                   shuffle_method: str = "numerical") -> list[list[float]]:
    """For each point of a curve, the ε of each of its ``(count, δ, method, shares)`` jobs
    (:func:`account_schedule` at :data:`~fedaudit.accounting.curves.CURVE_DISCRETIZATION`), the
    points as engine chunks (:func:`~fedaudit.accounting.curves.run_curve` with ``engine``:
    backend, workers, address); ``progress(1)`` per point. Every point is computed on its own, so
    the values are the same on every backend and worker count."""
    common = dict(shuffle_n=shuffle_n, shuffle_method=shuffle_method)
    return run_curve(_schedule_chunk, (mech, common), jobs, progress, engine)


def _schedule_chunk(task: tuple[tuple[Any, dict], list[list[tuple]]]) -> list[list[float]]:
    """An engine chunk of :func:`schedule_curve`: for each of its points, the ε of every
    ``(count, δ, method, shares)`` job at :data:`CURVE_DISCRETIZATION` (:func:`account_schedule`)."""
    (mech, common), points = task
    return [[account_schedule(mech, count=c, method=m, delta=d, discretization=CURVE_DISCRETIZATION, shares=s,
                              **common)[0] for c, d, m, s in jobs] for jobs in points]
