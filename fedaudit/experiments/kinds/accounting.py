"""Claim kind ``accounting``: what one client spends over a schedule of rounds, against a budget.

Each round in which the client takes part it sends one report of the plan's mechanism (its
typed guarantee, :attr:`~fedaudit.mechanisms.Mechanism.guarantee`). The composed ε at
``target_delta`` is computed by ``accountant`` (:func:`fedaudit.accounting.compose`: basic, optimal
advanced of Kairouz–Oh–Viswanath, or exact PLD composition through dp-accounting, from the
mechanism's own privacy loss distribution, :func:`fedaudit.accounting.pld.pld_of`; or any
accountant registered in :data:`fedaudit.accounting.ACCOUNTANTS` that accounts the reports' events
under replace-one neighbours, which the plan check asks it first). The claim
holds when it is at most ``max_epsilon``; otherwise the budget is violated (the computation is
deterministic, so the verdict is never inconclusive).

The schedule — ``sampling`` and ``participation`` ("every-round" charges every round; "tail"
charges the k rounds with P[Bin(rounds, sampling) > k] ≤ δ/2 and adds that probability to δ),
``shuffle_n`` and ``shuffle_method`` (shuffle-model amplification, or the privacy blanket of k-ary
randomized response) — is accounted by :func:`fedaudit.accounting.schedule.account_schedule`;
its module docstring states the rules. Under local DP, sampling does **not** amplify privacy:
the server sees who reports. With sampling, give ``shuffle_n`` as the smallest batch a round may
have.

Evidence: the per-report and per-round guarantees, the composed (ε, δ) by ``accountant``, the same
schedule composed by the built-in methods other than it (basic, advanced, pld; ``references``), and ε after 1…rounds rounds
(the ``epsilon_vs_steps`` figure with the budget as a line; PLD points before the last are
computed at a 10× coarser discretisation, still an upper bound). The curve's points are independent:
they run as engine chunks (:func:`fedaudit.accounting.schedule.schedule_curve`; plan keys ``backend`` and ``workers``), each point
computed on its own, so the evidence is bit-identical on every backend and worker count.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.components import build_mechanism, check_common_keywords, check_mechanism_key
from fedaudit.guarantees import Bound
from fedaudit.reports.diff import Tracked
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, SelfTest, fmt_number, number
from fedaudit.experiments.keys import Key, engine_keys, key_error, mechanism_params_key
from fedaudit.reports.explain import Explanation, Field, display_number

__all__ = ["Accounting"]

METHOD_NAMES = {"basic": "basic composition", "advanced": "advanced (KOV)", "pld": "PLD"}


def _method_name(method: str) -> str:
    """How a report names a composition method: the built-ins' words, an accountant's own name."""
    return METHOD_NAMES.get(method, method)


class Accounting(ClaimKind):
    """Compose one client's reports of a mechanism over a schedule (rounds, client sampling, shuffling) by basic, advanced or PLD composition or a registered accountant; the claim holds when the composed ε at target_delta is at most max_epsilon."""

    name = "accounting"
    renamed_keys = {"method": "accountant"}
    guarantee = "privacy"
    unit = "compositions"
    figures = ("epsilon_vs_steps",)
    figure_names = {"epsilon_vs_steps": "ε against rounds"}
    tracked = (Tracked("epsilon", "accountant ε", bound=Bound.UPPER),)
    evidence_fields = {
        "epsilon": Field("composed ε after all rounds"),
        "max_epsilon": Field("budget ε"),
        "within_budget": Field("within the budget"),
        "margin": Field("margin (budget − composed ε)"),
        "delta": Field("total δ (sampling tail included)"),
        "references": Field("the same schedule by the other accountants"),
        "notes": Field("notes"),
        "method": Field("accountant", "", "configuration"),
        "target_delta": Field("budget δ", "", "configuration"),
        "mechanism": Field("mechanism", "", "configuration"),
        "per_report": Field("guarantee of one report (as the mechanism states it)", "", "configuration"),
        "per_round": Field("guarantee of one round", "", "configuration"),
        "schedule": Field("schedule", "", "configuration"),
        "curve": Field("ε after r rounds (figure)", "", "diagnostics"),
    }

    def keys(self) -> dict[str, Key]:
        from fedaudit.accounting import ACCOUNTANTS, SHUFFLE_METHODS
        from fedaudit.accounting.composition import CLOSED_FORMS
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
            "mechanism_params": mechanism_params_key(),
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
            "accountant": Key("str", "pld", choices=(*CLOSED_FORMS, *ACCOUNTANTS.names()),
                              help="composition: basic or advanced (Kairouz–Oh–Viswanath) of the reports' guarantees, "
                                   "or an accountant registered in fedaudit.accounting.ACCOUNTANTS of their events "
                                   "under replace-one neighbours (pld: exact numerical, dp-accounting; dpa-rdp; "
                                   "your own once registered)"),
            "max_epsilon": Key("float", low=0, open_low=True, help="the budget: largest ε allowed at target_delta"),
            "target_delta": Key("float", 1e-6, low=0, high=1, open_high=True,
                                help="the budget's δ (0: basic composition of pure-LDP reports only)"),
            "curve_points": Key("int", 30, low=2, high=200, help="points of the ε(rounds) figure"),
            **engine_keys("the ε(rounds) curve"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        from fedaudit.accounting.schedule import PLD_MAX_LOSS, blanket_covers, schedule_accountant_refusal
        from fedaudit.guarantees import PureLDP

        check_mechanism_key(where, p)
        check_common_keywords(where, p, self.keys())
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
        if p["shuffle_method"] == "blanket" and p["shuffle_n"] is not None and not blanket_covers(mech):
            raise key_error(where, "shuffle_method", f"'blanket' is the privacy blanket of k-ary randomized response "
                                                     f"(mechanism 'rr'), got mechanism {p['mechanism']!r}")
        if p["participation"] == "tail" and p["sampling"] >= 1.0:
            raise key_error(where, "participation", "'tail' needs sampling < 1 (with sampling = 1 every round is "
                                                    "charged anyway)")
        refusal = schedule_accountant_refusal(mech, p["accountant"], shuffled=p["shuffle_n"] is not None)
        if refusal:
            raise key_error(where, "accountant", refusal)
        if p["accountant"] == "pld" and p["shuffle_n"] is None and p["rounds"] * mech.guarantee.epsilon > PLD_MAX_LOSS:
            raise key_error(where, "accountant", f"'pld' composes at most a total loss rounds × ε = {PLD_MAX_LOSS:g} "
                                             f"(memory), got {p['rounds']} × {mech.guarantee.epsilon:g}; use 'advanced' "
                                             f"(exact for equal per-report guarantees)")
        if p["target_delta"] == 0.0:
            why = ("key 'accountant' = 'basic'" if p["accountant"] != "basic" else
                   "no shuffling (key 'shuffle_n' unset)" if p["shuffle_n"] is not None else
                   "key 'participation' = 'every-round'" if p["participation"] == "tail" else
                   "a pure-LDP mechanism" if not pure else None)
            if why:
                raise key_error(where, "target_delta", f"= 0 (pure ε) needs {why}; give a δ in (0, 1) otherwise")

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """One client's local reports composed over rounds; shuffled when ``shuffle_n`` is set (the
        ε then assumes a trusted shuffler). The claimed budget is ``max_epsilon`` at ``target_delta``:
        an (ε, δ) guarantee, pure only under basic composition."""
        return {"trust": "shuffled" if p["shuffle_n"] is not None else "local", "unit": "client",
                "epsilon": p["max_epsilon"], "delta": p["target_delta"], "accountant": p["accountant"],
                "flavours": None if p["accountant"] == "basic" else ("approximate", "renyi", "zcdp", "gdp")}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        sched = f"{p['rounds']} rounds"
        if p["sampling"] < 1:
            sched += f" at sampling {p['sampling']:g}"
        if p["shuffle_n"] is not None:
            sched += f", shuffled in batches of {p['shuffle_n']}"
        verb = "exceed" if expect == "violation" else "stay within"
        return (f"{p['mechanism']} (ε={p['epsilon']:g}) over {sched} must {verb} ε = {p['max_epsilon']:g} at "
                f"δ = {p['target_delta']:g} ({_method_name(p['accountant'])})")

    def work_units(self, p: Mapping[str, Any]) -> int:
        from fedaudit.accounting.curves import curve_points

        return len(curve_points(p["rounds"], p["curve_points"])) + 2

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.accounting import METHODS
        from fedaudit.accounting.curves import curve_points
        from fedaudit.accounting.schedule import account_schedule, participations, schedule_curve

        p = spec.params
        mech = build_mechanism(p)
        delta, method = p["target_delta"], p["accountant"]
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
        # the points as engine chunks (schedule_curve); the shuffled rounds' δ share found for the
        # whole schedule, per method, is kept for the curve
        xs = curve_points(p["rounds"], p["curve_points"])
        names = [m for m in references if references[m]["epsilon"] is not None]
        share = {m: (r.get("delta_share", 0.5),) for m, r in [(method, round_info)] + ref_infos}
        jobs = []
        for r in xs:
            c, t = participations(r, p["sampling"], p["participation"], delta)
            jobs.append([(c, delta - t, m, share[m]) for m in ([] if r == p["rounds"] else [method]) + names])
        values = schedule_curve(mech, jobs, progress, {"backend": p["backend"], "workers": p["workers"]}, **common)
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
                   f"({_method_name(method)}; {ref_text}) {state} the budget ε = {p['max_epsilon']:g}")
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
        plot = {"type": "epsilon_vs_steps", "title": f"ε after r rounds ({_method_name(method)}) against the budget",
                "steps": xs, "epsilon": ys, "epsilon_claimed": p["max_epsilon"], "delta": delta,
                "x_label": "rounds", "accountant": _method_name(method),
                "references": {_method_name(m): v for m, v in refs_curve.items()}}
        return Evidence(holds=holds, violated=decision.violated, evidence=evidence, summary=summary, plots=(plot,),
                        caveats=tuple(caveats))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The budget claim in words: what one client's reports over the schedule may spend, how
        the accountant composed the mechanism's *stated* per-report guarantee (taken as given: the
        ldp kind audits it), the composed ε against the budget and the other accountants, and
        what accounting never shows (the per-report claim itself, what else is released)."""
        num = display_number
        eps, budget = number(ev, "epsilon"), number(ev, "max_epsilon")
        delta, target = number(ev, "delta"), number(ev, "target_delta")
        method = _method_name(str(ev.get("method")))
        sched = ev.get("schedule") or {}
        rounds, sampling = sched.get("rounds"), sched.get("sampling", 1.0)
        charged = sched.get("reports_charged", rounds)
        per = ev.get("per_report") or {}
        per_text = (f"(ε = {num(per.get('epsilon'))}, δ = {num(per.get('delta'))})" if per.get("delta")
                    else f"ε = {num(per.get('epsilon'))}") + f" ({per.get('type', 'its stated guarantee')})"
        mech = (ev.get("mechanism") or {}).get("name", "the mechanism")
        shuffled = bool((ev.get("per_round") or {}).get("shuffled"))
        where = f"{num(rounds)} rounds" + (f" at participation probability {num(sampling)}" if sampling != 1 else "") \
            + (", reports shuffled" if shuffled else "")
        claimed = (f"Over {where}, one client's reports of {mech} spend at most ε = {budget:g} at δ = {num(target)} in "
                   f"total" + (" (the plan expects this budget to be exceeded)." if expect == "violation" else "."))
        tested = (f"Accounting, not sampling: each report's guarantee as {mech} states it, {per_text}, composed over "
                  f"the {num(charged)} report(s) charged by the {method} accountant (replace-one neighbours; an "
                  f"adversary who sees every report of the client). The computation is deterministic: no samples, "
                  f"no confidence level.")
        refs = {m: r for m, r in (ev.get("references") or {}).items() if isinstance(r, Mapping)}
        ref_text = ", ".join(f"{_method_name(m)} {num(r.get('epsilon'))}" for m, r in refs.items()
                             if r.get("epsilon") is not None)
        within = eps <= budget
        if within:
            means = (f"The composed ε = {num(eps)} at δ = {num(delta, 3)} is within the budget ε = {budget:g} "
                     f"(margin {num(budget - eps, 3)}).")
        else:
            means = (f"The composed ε = {num(eps)} at δ = {num(delta, 3)} EXCEEDS the budget ε = {budget:g}"
                     + (f" by {num(eps - budget, 3)}." if math.isfinite(eps) else " (no finite ε at this δ)."))
        if ref_text:
            over = [_method_name(m) for m, r in refs.items() if isinstance(r.get("epsilon"), (int, float))
                    and r["epsilon"] > budget]
            means += f" The other accountants give {ref_text}" + (
                f" — {', '.join(over)} would exceed the budget: the choice of accountant matters here." if over and within
                else ".")
        if expect == "violation":
            means += " The plan expected the budget to be exceeded: " + ("it is." if not within else "it is NOT.")
        not_shown = [f"that each report is really {per_text.split(' (')[0]}: the accountant takes {mech}'s stated "
                     f"guarantee as given (an ldp claim on the same mechanism audits it)",
                     "anything released besides these reports (model updates, counts, metrics): only the reports "
                     "are accounted",
                     f"the true ε of the schedule: {num(eps)} is the {method} accountant's upper bound, which may "
                     f"be loose"]
        if sampling != 1 and not shuffled:
            not_shown.append("amplification by sampling: under local DP the server sees who reports, so sampling "
                             "buys nothing here")
        steps = []
        if within:
            steps.append(f"audit the per-report claim with an ldp claim on {mech} (pair = \"search\")")
            if budget - eps < 0.1 * budget:
                steps.append(f"the margin is under 10% of the budget: a few more rounds would exceed it (the figure "
                             f"shows ε after r rounds)")
        elif expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case (it fails if the budget is ever met)")
        else:
            cheaper = [f"{_method_name(m)} gives {num(r['epsilon'])}" for m, r in refs.items()
                       if isinstance(r.get("epsilon"), (int, float)) and r["epsilon"] <= budget]
            steps.append("fewer rounds, a smaller per-report ε, or client sampling with a shuffler (shuffle_n)"
                         + (f"; a tighter accountant would do: {', '.join(cheaper)}" if cheaper else ""))
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """No auditor: the composed ε is a computation. Its cross-check against an independent
        accountant, when the rounds are pure ε-LDP (δ = 0 per round) and ``accountant`` is not
        basic composition: the composed ε must not exceed basic composition's of the same
        schedule (the sum of the rounds' ε, an upper bound for every composition theorem) — a
        check on the recorded numbers, re-derived by ``verify`` like every self-test."""
        per_round, basic = evidence.get("per_round") or {}, (evidence.get("references") or {}).get("basic") or {}
        if (evidence.get("method") == "basic" or basic.get("epsilon") is None
                or float(per_round.get("delta", 0.0) or 0.0) != 0.0):
            return []
        eps, bound = evidence["epsilon"], basic["epsilon"]
        return [SelfTest(f"cross-check: the {_method_name(evidence['method'])} ε within basic composition's (no "
                         f"auditor: a computation)", "cross-check",
                         lambda: {"statistic": "ε", "bound": "value", "value": eps, "rule": "at_most",
                                  "threshold": bound * (1 + 1e-9), "reference": "basic composition of the same rounds",
                                  "accountant": evidence["method"]})]

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The budget holds when the composed ε is within it, ``epsilon <= max_epsilon`` (an ε of
        ``"inf"``, a composition over its δ, exceeds every budget); otherwise it is violated. The
        composition is deterministic, so the decision is never inconclusive."""
        holds = bool(number(evidence, "epsilon") <= number(evidence, "max_epsilon"))
        return Decision(holds=holds, violated=not holds)
