"""Claim kind ``accounting``: what one client spends over a schedule of rounds, against a budget.

Each round in which the client takes part it sends one report of the plan's mechanism (its
typed guarantee, :attr:`~fedaudit.mechanisms.Mechanism.guarantee`). The composed ε at
``target_delta`` is computed by ``method`` (:func:`fedaudit.accounting.compose`: basic, optimal
advanced of Kairouz–Oh–Viswanath, or exact PLD composition through dp-accounting, from the
mechanism's own privacy loss distribution, :func:`fedaudit.accounting.pld.pld_of`). The claim
holds when it is at most ``max_epsilon``; otherwise the budget is violated (the computation is
deterministic, so the verdict is never inconclusive).

Schedule.

* ``sampling = q`` is the probability that the client takes part in a round. Under local DP the
  server sees who reports, so subsampling does **not** amplify privacy: each report is a full
  ε-LDP release. ``participation = "every-round"`` (the default) accounts the worst case, a client
  that takes part in all ``rounds``. ``participation = "tail"`` uses that the participation
  pattern S is independent of the data: conditioned on S the view is the |S|-fold composition,
  so with K = |S| ~ Bin(rounds, q) and k the smallest integer with ``P[K > k] ≤ δ/2`` the run is
  (ε_k, δ_k + P[K > k])-DP, where (ε_k, δ_k) composes k reports at δ_k = δ − P[K > k].
* ``shuffle_n = n``: each round's reports go through a shuffler in batches of at least n
  (with sampling, give the smallest batch a round may have). A round is then (ε_s, δ_s)-DP by
  :func:`fedaudit.accounting.shuffle_epsilon` (Feldman, McMillan, Talwar 2021; any pure ε0-LDP
  mechanism) or, with ``shuffle_method = "blanket"`` for k-ary randomized response, by the privacy
  blanket (:func:`fedaudit.accounting.blanket_epsilon`; Balle, Bell, Gascón, Nissim 2019). Here
  δ_s = δ'/k for basic and s·δ'/k for advanced and PLD, which keep the rest as slack (the share s
  of :data:`SHUFFLE_SHARES` with the smallest ε is kept), δ' being the δ left for the k composed
  rounds. Where shuffling certifies no amplification, the round is charged its ε0 (with no δ).

Evidence: the per-report and per-round guarantees, the composed (ε, δ) by ``method``, the same
schedule composed by the other two methods (``references``), and ε after 1…rounds rounds
(the ``epsilon_vs_steps`` figure with the budget as a line; PLD points before the last are
computed at a 10× coarser discretisation, still an upper bound). The curve's points are independent:
they run as engine chunks (:func:`run_curve`; plan keys ``backend`` and ``workers``), each point
computed on its own, so the evidence is bit-identical on every backend and worker count.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any, Mapping

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, fmt_number, number
from fedaudit.experiments.keys import Key, engine_keys, key_error

__all__ = ["Accounting", "participations", "curve_points", "curve_groups", "run_curve", "account_schedule",
           "CURVE_CHUNKS", "CURVE_MIN_POINTS"]

METHOD_NAMES = {"basic": "basic composition", "advanced": "advanced (KOV)", "pld": "PLD"}
#: the discretisation of PLD composition (dp-accounting's default) and of the curve's other points
PLD_DISCRETIZATION = 1e-4
CURVE_DISCRETIZATION = 1e-3
#: largest total privacy loss (reports × per-report ε) composed by PLD: the composed distribution's
#: support grows with it (1000 reports of ε = 1 at 1e-4 hold ~480 MB); beyond it use 'advanced',
#: exact for equal per-report guarantees
PLD_MAX_LOSS = 250.0


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


def curve_points(rounds: int, points: int) -> list[int]:
    """Up to ``points`` distinct round counts from 1 to ``rounds``, evenly spaced, ``rounds`` last."""
    return [int(v) for v in np.unique(np.round(np.linspace(1, rounds, min(points, rounds))).astype(int))]


#: most engine chunks an ε curve is split into
CURVE_CHUNKS = 8
#: fewest points in a chunk: a point takes 10–70 ms of CPU (a DP-SGD PLD self-composition ~12 ms,
#: PRV ~70 ms, a mechanism's PLD ~0.2 s), so 8 keep Ray's ~5 ms per task near or under 5 % of the work
CURVE_MIN_POINTS = 8


def curve_groups(n: int) -> list[list[int]]:
    """The point indices 0..n−1 of an ε curve in c = min(max(⌊n / :data:`CURVE_MIN_POINTS`⌋, 1),
    :data:`CURVE_CHUNKS`) engine chunks (none for n = 0), strided (chunk j holds j, j + c, j + 2c, …)
    so that each mixes cheap early points with costly late ones. Each point is computed on its own,
    so the grouping never changes a value."""
    c = min(max(n // CURVE_MIN_POINTS, min(n, 1)), CURVE_CHUNKS)
    return [list(range(j, n, c)) for j in range(c)]


def run_curve(fn: Any, shared: Any, jobs: list[Any], progress: Progress, engine: Mapping[str, Any]) -> list[Any]:
    """``[fn((shared, [job]))[0] for job in jobs]`` with the jobs in :func:`curve_groups` chunks on
    the engine (:func:`fedaudit.engine.run_chunks` with ``engine``: backend, workers, address);
    ``progress(1)`` per job. ``fn`` maps ``(shared, jobs)`` to one value per job."""
    from fedaudit.engine import run_chunks

    groups = curve_groups(len(jobs))
    results = run_chunks(fn, [(shared, [jobs[i] for i in g]) for g in groups], progress=progress,
                         units=[len(g) for g in groups], **engine)
    out: list[Any] = [None] * len(jobs)
    for g, values in zip(groups, results):  # chunk order, then each chunk's points in order
        for i, v in zip(g, values):
            out[i] = v
    return out


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
    """The shuffled round's bound and its warning text (the kind states it in the evidence instead):
    :func:`~fedaudit.accounting.shuffle_epsilon` (any ε0-LDP randomizer) or, for ``blanket``,
    :func:`~fedaudit.accounting.blanket_epsilon` of k-ary randomized response."""
    from fedaudit.accounting import blanket_epsilon, shuffle_epsilon

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bound = (blanket_epsilon(n, "krr", eps0, delta, k=k) if method == "blanket"
                 else shuffle_epsilon(n, eps0, delta, method=method))
    return bound, "; ".join(str(w.message) for w in caught) or "no amplification certified"


#: shares of the rounds' δ given to the shuffled rounds themselves under advanced and PLD (the rest is
#: the composition's slack); the smallest composed ε over them is kept
SHUFFLE_SHARES = (0.1, 0.25, 0.5, 0.75, 0.9)


def account_schedule(mech: Any, *, count: int, method: str, delta: float, shuffle_n: int | None = None,
                     shuffle_method: str = "numerical", discretization: float = PLD_DISCRETIZATION,
                     shares: tuple[float, ...] = SHUFFLE_SHARES) -> tuple[float, float, Any, dict]:
    """(ε, δ, round guarantee, round info) of ``count`` rounds composed by ``method`` at total ``delta``
    (the δ left after the participation tail). ``count = 0`` costs nothing.

    Shuffled rounds are (ε_s, s·δ/count)-DP; basic takes s = 1 (its δ is Σδ_l), advanced and PLD
    the share s in ``shares`` giving the smallest ε (each is a valid bound, chosen without looking
    at any data); ``info["delta_share"]`` records it."""
    from fedaudit.accounting import compose
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
        elif method == "pld" and shuffle_n is None:
            found = (_mechanism_pld_epsilon(mech, count, delta, discretization, info), delta, g, info)
        else:
            comp = compose([g] * count, method, delta, discretization=discretization)
            found = (comp.epsilon, comp.delta, g, info)
        if best is None or found[0] < best[0]:
            best = found
    return best


def _mechanism_pld_epsilon(mech: Any, count: int, delta: float, discretization: float, info: dict) -> float:
    """ε at ``delta`` of ``count`` reports composed from the mechanism's own PLD
    (:func:`fedaudit.accounting.pld.pld_of`: its worst pair where fedaudit knows it, tighter than
    the dominating pair of its (ε, δ) claim), or from its guarantee's PLD for a mechanism
    ``pld_of`` does not cover; ``info["pld"]`` says which."""
    from fedaudit.accounting.pld import pld_of

    try:
        one = pld_of(mech, discretization=discretization)
        info["pld"] = "the mechanism's own privacy loss distribution (worst pair)"
    except FedAuditError:
        one = pld_of(mech.guarantee, discretization=discretization)
        info["pld"] = "the dominating pair of the mechanism's (ε, δ) claim"
    composed = one.self_compose(count) if count > 1 else one
    return float(composed.get_epsilon_for_delta(delta))


def _curve_chunk(task: tuple[tuple[Any, dict], list[list[tuple]]]) -> list[list[float]]:
    """An engine chunk of the accounting curve: for each of its points, the ε of every
    ``(count, δ, method, shares)`` job at :data:`CURVE_DISCRETIZATION` (:func:`account_schedule`)."""
    (mech, common), points = task
    return [[account_schedule(mech, count=c, method=m, delta=d, discretization=CURVE_DISCRETIZATION, shares=s,
                              **common)[0] for c, d, m, s in jobs] for jobs in points]


class Accounting(ClaimKind):
    """Compose one client's reports of a mechanism over a schedule (rounds, client sampling, shuffling) by basic, advanced or PLD composition; the claim holds when the composed ε at target_delta is at most max_epsilon."""

    name = "accounting"
    guarantee = "privacy"
    unit = "compositions"
    figures = ("epsilon_vs_steps",)

    def keys(self) -> dict[str, Key]:
        from fedaudit.accounting import METHODS, SHUFFLE_METHODS
        from fedaudit.mechanisms.base import MAX_LEVELS
        from fedaudit.mechanisms.registry import MECHANISMS

        return {
            "mechanism": Key("str", help=f"registry name of the randomizer ({', '.join(MECHANISMS.names())}) "
                                         f"or 'package.module:attr'; its guarantee (for pld: its own privacy loss "
                                         f"distribution) is what each report costs"),
            "dim": Key("int", 64, low=1, high=1_000_000, help="input dimension (categories for rr)"),
            "epsilon": Key("float", 1.0, low=0, open_low=True, help="the mechanism's ε parameter (per report)"),
            "delta": Key("float", 1e-5, low=0, high=1, open_high=True,
                         help="the mechanism's δ parameter (gaussian; per report)"),
            "k": Key("int", None, low=1, help="SSTQ coordinates per report (default dim // 16)"),
            "levels": Key("int", 4, low=2, high=MAX_LEVELS, help="quantization levels"),
            "clip": Key("float", 1.0, low=0, open_low=True, help="L2 clip radius of the inputs"),
            "rotate": Key("bool", True, help="SSTQ random rotation"),
            "rounds": Key("int", low=1, high=1_000_000, help="rounds of the schedule"),
            "sampling": Key("float", 1.0, low=0, high=1, open_low=True,
                            help="probability that the client takes part in a round (does not amplify LDP: "
                                 "see 'participation')"),
            "participation": Key("str", "every-round", choices=("every-round", "tail"),
                                 help="every-round: charge all rounds (worst case); tail: charge the k rounds "
                                      "with P[Bin(rounds, sampling) > k] <= target_delta/2, that probability "
                                      "added to δ"),
            "shuffle_n": Key("int", None, low=1, help="reports per shuffled batch (shuffle model; pure-LDP "
                                                      "mechanisms only); unset: no shuffler"),
            "shuffle_method": Key("str", "numerical", choices=(*SHUFFLE_METHODS, "blanket"),
                                  help="Feldman–McMillan–Talwar closed form or numerical bound (any ε0-LDP "
                                       "randomizer), or the privacy blanket of Balle et al. (mechanism 'rr' only)"),
            "method": Key("str", "pld", choices=METHODS, help="composition: basic, advanced (Kairouz–Oh–Viswanath) "
                                                              "or pld (exact numerical, dp-accounting)"),
            "max_epsilon": Key("float", low=0, open_low=True, help="the budget: largest ε allowed at target_delta"),
            "target_delta": Key("float", 1e-6, low=0, high=1, open_high=True,
                                help="the budget's δ (0: basic composition of pure-LDP reports only)"),
            "curve_points": Key("int", 30, low=2, high=200, help="points of the ε(rounds) figure"),
            **engine_keys("the ε(rounds) curve"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        from fedaudit.guarantees import PureLDP

        from fedaudit.experiments.kinds.ldp import build_mechanism, categorical, check_mechanism_key

        check_mechanism_key(where, p)
        if p["k"] is not None and p["k"] > p["dim"]:
            raise key_error(where, "k", f"must be an integer in [1, dim={p['dim']}], got {p['k']}")
        try:
            mech = build_mechanism(p)
        except FedAuditError as exc:
            raise FedAuditError(f"{where}: mechanism {p['mechanism']!r} rejects its parameters: {exc}") from None
        pure = isinstance(mech.guarantee, PureLDP)
        if mech.guarantee is None:
            raise key_error(where, "mechanism", f"{p['mechanism']!r} states no privacy guarantee to account")
        if p["shuffle_n"] is not None and not pure:
            raise key_error(where, "shuffle_n", f"needs a pure ε-LDP mechanism (the shuffling bounds are for "
                                                f"ε0-LDP reports); {p['mechanism']!r} is {mech.guarantee.to_dict()}")
        if p["shuffle_method"] == "blanket" and p["shuffle_n"] is not None and not categorical(mech):
            raise key_error(where, "shuffle_method", f"'blanket' is the privacy blanket of k-ary randomized response "
                                                     f"(mechanism 'rr'), got mechanism {p['mechanism']!r}")
        if p["participation"] == "tail" and p["sampling"] >= 1.0:
            raise key_error(where, "participation", "'tail' needs sampling < 1 (with sampling = 1 every round is "
                                                    "charged anyway)")
        if p["method"] == "pld" and p["shuffle_n"] is None and p["rounds"] * mech.guarantee.epsilon > PLD_MAX_LOSS:
            raise key_error(where, "method", f"'pld' composes at most a total loss rounds × ε = {PLD_MAX_LOSS:g} "
                                             f"(memory), got {p['rounds']} × {mech.guarantee.epsilon:g}; use 'advanced' "
                                             f"(exact for equal per-report guarantees)")
        if p["target_delta"] == 0.0:
            why = ("method must be 'basic'" if p["method"] != "basic" else
                   "no shuffling (shuffle_n unset)" if p["shuffle_n"] is not None else
                   "participation 'every-round'" if p["participation"] == "tail" else
                   "a pure-LDP mechanism" if not pure else None)
            if why:
                raise key_error(where, "target_delta", f"= 0 needs {why}; give a δ in (0, 1)")

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        sched = f"{p['rounds']} rounds"
        if p["sampling"] < 1:
            sched += f" at sampling {p['sampling']:g}"
        if p["shuffle_n"] is not None:
            sched += f", shuffled in batches of {p['shuffle_n']}"
        verb = "exceed" if expect == "violation" else "stay within"
        return (f"{p['mechanism']} (ε={p['epsilon']:g}) over {sched} must {verb} ε = {p['max_epsilon']:g} at "
                f"δ = {p['target_delta']:g} ({METHOD_NAMES[p['method']]})")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return len(curve_points(p["rounds"], p["curve_points"])) + 2

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.accounting import METHODS
        from fedaudit.experiments.kinds.ldp import build_mechanism

        p = spec.params
        mech = build_mechanism(p)
        delta, method = p["target_delta"], p["method"]
        count, tail = participations(p["rounds"], p["sampling"], p["participation"], delta)
        left = delta - tail
        common = dict(shuffle_n=p["shuffle_n"], shuffle_method=p["shuffle_method"])
        eps, used, g_round, round_info = account_schedule(mech, count=count, method=method, delta=left, **common)
        progress(1)
        references, ref_infos = {}, []
        for other in METHODS:
            if other == method:
                continue
            if left == 0.0 and other != "basic":
                references[other] = {"epsilon": None, "delta": 0.0, "note": "needs δ > 0"}
                continue
            try:
                e, d, _, info = account_schedule(mech, count=count, method=other, delta=left, **common)
            except FedAuditError as exc:  # PLD beyond PLD_MAX_LOSS: state why there is no reference
                references[other] = {"epsilon": None, "delta": left + tail, "note": str(exc)}
                continue
            references[other] = {"epsilon": e, "delta": d + tail}
            ref_infos.append((other, info))
        progress(1)
        # ε(r) for r = 1…rounds: the same schedule cut after r rounds (the tail recomputed for r),
        # the points as engine chunks (curve_groups); the shuffled rounds' δ share found for the
        # whole schedule, per method, is kept for the curve
        xs = curve_points(p["rounds"], p["curve_points"])
        names = [m for m in references if references[m]["epsilon"] is not None]
        share = {m: (r.get("delta_share", 0.5),) for m, r in [(method, round_info)] + ref_infos}
        jobs = []
        for r in xs:
            c, t = participations(r, p["sampling"], p["participation"], delta)
            jobs.append([(c, delta - t, m, share[m]) for m in ([] if r == p["rounds"] else [method]) + names])
        values = run_curve(_curve_chunk, (mech, common), jobs, progress,
                           {"backend": p["backend"], "workers": p["workers"]})
        ys = [eps if r == p["rounds"] else v[0] for r, v in zip(xs, values)]
        refs_curve = {m: [v[j - len(names)] for v in values] for j, m in enumerate(names)}

        decision = self.decide({"epsilon": eps, "max_epsilon": p["max_epsilon"]}, spec.expect)
        holds = decision.holds
        total_delta = used + tail
        g = mech.guarantee
        notes = []
        if p["sampling"] < 1 and p["participation"] == "every-round":
            notes.append(f"sampling {p['sampling']:g} does not amplify local DP (the server sees who reports): "
                         f"every one of the {p['rounds']} rounds is charged")
        if p["participation"] == "tail":
            notes.append(f"{count} of {p['rounds']} rounds charged: P[Bin({p['rounds']}, {p['sampling']:g}) > {count}]"
                         f" = {tail:.3g} is added to δ")
        caveats = []
        if getattr(mech, "as_published", False):
            caveats.append(f"{p['mechanism']!r} is kept as published and is NOT LDP (see the ldp kind): this accounts "
                           f"its stated claim, which an audit refutes")
            notes.append(caveats[-1])
        if "note" in round_info:
            notes.append(f"shuffling certifies no amplification: {round_info['note']}")
        ref_text = ", ".join(f"{m} {fmt_number(r['epsilon'], '.4g')}" for m, r in references.items())
        state = "within" if holds else "EXCEEDS"
        summary = (f"composed ε = {fmt_number(eps, '.4g')} at δ = {total_delta:.3g} after {count} report(s) "
                   f"({METHOD_NAMES[method]}; {ref_text}) {state} the budget ε = {p['max_epsilon']:g}")
        if notes:
            summary += ". " + "; ".join(notes)
        own = mech.params() if callable(getattr(mech, "params", None)) else {}
        mechanism = {"name": p["mechanism"], **{k: v for k, v in own.items() if k not in ("epsilon", "delta")}}
        evidence: dict[str, Any] = {
            "epsilon": eps, "delta": total_delta, "method": method, "max_epsilon": p["max_epsilon"],
            "target_delta": delta, "within_budget": holds,
            "margin": p["max_epsilon"] - eps if math.isfinite(eps) else -math.inf,
            "mechanism": mechanism, "per_report": g.to_dict(),
            "per_round": {**g_round.to_dict(), **round_info},
            "schedule": {"rounds": p["rounds"], "sampling": p["sampling"], "participation": p["participation"],
                         "reports_charged": count, "expected_reports": p["rounds"] * p["sampling"],
                         "tail_delta": tail},
            "references": references,
            "curve": {"rounds": xs, "epsilon": ys},
            **({"notes": notes} if notes else {}),
        }
        plot = {"type": "epsilon_vs_steps", "title": f"ε after r rounds ({METHOD_NAMES[method]}) against the budget",
                "steps": xs, "epsilon": ys, "epsilon_claimed": p["max_epsilon"], "delta": delta,
                "x_label": "rounds", "accountant": METHOD_NAMES[method],
                "references": {METHOD_NAMES[m]: v for m, v in refs_curve.items()}}
        return Evidence(holds=holds, violated=decision.violated, evidence=evidence, summary=summary, plots=(plot,),
                        caveats=tuple(caveats))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The budget holds when the composed ε is within it, ``epsilon <= max_epsilon`` (an ε of
        ``"inf"``, a composition over its δ, exceeds every budget); otherwise it is violated. The
        composition is deterministic, so the decision is never inconclusive."""
        holds = bool(number(evidence, "epsilon") <= number(evidence, "max_epsilon"))
        return Decision(holds=holds, violated=not holds)
