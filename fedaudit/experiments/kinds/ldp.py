"""Claim kind ``ldp``: certify a lower bound on a randomizer's ε and compare it with the claim.

The certified lower bound ε_lb (at ``confidence``) against the claimed ε: a violation is
ε_lb > ε_claimed (certified: P[false alarm] ≤ 1 − confidence); "holds" means no violation was
detected by this audit — an audit can only refute an LDP claim, never prove it. The *pair power*
ε_exact(pair)/ε_claimed bounds what the pair can show (:func:`fedaudit.audit.pairs.pair_power`); the *proven power*
max(ε_lb/ε_claimed, pair power) is what the audit showed the pair can test (the certified lower
bound counts: a certified ε ≥ 0.994 against a claim of 1 proves power 0.994 even when the pair's
exact ε is unknown). With ``min_pair_power`` set, a run that certified no violation with a lower
proven power is INCONCLUSIVE whatever ``expect`` says: the absence of a violation on such a pair is evidence
neither for nor against the claim. A certified violation is decisive at any power. The evidence
lists the mechanism's own parameters (``Mechanism.params()``) and states the claimed ε (and δ,
for approximate-DP mechanisms only) once.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.components import build_mechanism, check_common_keywords, check_mechanism_key, load_sampler
from fedaudit.guarantees import Bound
from fedaudit.reports.diff import Tracked
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, SelfTest, fmt_number, number
from fedaudit.experiments.keys import Key, engine_keys, key_error, mechanism_params_key, show
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["LDP", "proven_power", "ldp_caveats"]


def proven_power(epsilon_lower: float, claimed_epsilon: float, power: float | None) -> float:
    """What an audit proved of its pair, as a fraction of the claim: its certified
    ε_lb / ε_claimed at least, and the pair's exact ε / ε_claimed (``power``) when known."""
    certified = epsilon_lower / claimed_epsilon if claimed_epsilon and math.isfinite(epsilon_lower) else 0.0
    return max(certified, power or 0.0)


def _power_sentence(power: float | None, exact: float | None, eps: float) -> str:
    """The summary's sentence on pair power (its caveat, when it is weak, is :func:`ldp_caveats`)."""
    if power is None:
        return "the pair's exact ε is unknown, so how much of the claim it tests is unknown"
    return f"this pair's exact ε {fmt_number(exact, '.3g')} is {power:.2f} of the claimed {eps:g}"


def ldp_caveats(res: Any, power: float | None, eps: float, searched: bool) -> list[str]:
    """The caveats of an LDP audit that certified no violation (none for a certified violation,
    which is decisive): a pair that carries less than ``LOW_PAIR_POWER`` of the claim ("this
    pair carries 35% of the claim: a PASS here says little"), a pair whose exact ε is unknown,
    and the audit's other notes (a claim beyond what the samples can certify, an exact ε above
    the claim that the samples did not certify)."""
    from fedaudit.audit.ldp import LOW_PAIR_POWER

    if res.violation:
        return []
    out = []
    if power is None:
        out.append("the pair's exact ε is unknown, so how much of the claim this pair can test is unknown: "
                   "a PASS here may say little")
    elif power < LOW_PAIR_POWER:
        out.append(f"this pair carries {power:.0%} of the claim (its exact ε {fmt_number(res.epsilon_exact, '.3g')} "
                   f"of the claimed {eps:g}): a PASS here says little"
                   + ("; the search found no stronger pair" if searched else "; use pair = 'search'"))
    out += [str(n).rstrip(".") for n in (getattr(res, "notes", None) or []) if "says little" not in str(n)]
    return out


#: LDPAudit fields the ldp evidence already shows under its own names (left out of ``audit``)
_SHOWN = frozenset({"epsilon_lower", "epsilon_claimed", "delta_claimed", "violation", "epsilon_exact", "test",
                    "samples", "seed", "confidence", "max_certifiable", "mechanism", "pair_power", "notes", "proven_power"})


def _mechanism_params(mech: Any) -> dict[str, Any]:
    """The mechanism's own constructor parameters (``Mechanism.params()``) without ε and δ, which
    the evidence states once, as the claim (``epsilon_claimed``, ``delta_claimed``)."""
    params = mech.params() if callable(getattr(mech, "params", None)) else {}
    return {k: v for k, v in params.items() if k not in ("epsilon", "delta")}


#: numbers (report coordinates) an LDP audit draws and scores per core-second, measured on SSTQ
#: and Laplace at d = 64 and 1024 (3-4e6): the rate :meth:`LDP.estimate` assumes
DRAWS_PER_SECOND = 3e6


def _check_samples(where: str, p: dict[str, Any], delta: float) -> None:
    """Refuse ``samples`` too few for the audit to certify any ε > 0 at the claim's ``confidence``
    and δ (:func:`~fedaudit.audit.ldp.min_certifying_samples`): such a run could only report
    "certified ε ≥ 0" and PASS whatever the mechanism. The curve's points (samples/16 and
    samples/4, :func:`_curve_sizes`) must each be such an audit too; below 16 × that minimum the
    curve is left out, as it was below the audit's minimum of 100 draws."""
    from fedaudit.audit.ldp import min_certifying_samples

    try:
        least = min_certifying_samples(p["confidence"], delta)
    except FedAuditError as exc:
        raise key_error(where, "confidence", f"is too close to 1: {exc}") from None
    if p["samples"] < least:
        raise key_error(where, "samples", f"must be at least {least} at confidence {p['confidence']!r}"
                                          f"{f' and δ = {delta:g}' if delta else ''}, got {p['samples']}: with fewer "
                                          f"draws no audit can certify any ε > 0, so a PASS would say nothing")
    if p["curve"] and p["samples"] // 16 < least:
        p["curve"] = False  # samples/16 could certify nothing (or fall below the audit's minimum of 100)


def _curve_sizes(p: Mapping[str, Any]) -> list[int]:
    n = p["samples"]
    return [n // 16, n // 4] if p["curve"] else []


def _claimed(p: Mapping[str, Any], where: str) -> tuple[Any, float, float]:
    """The audited target (the mechanism, or the black-box sampler), its claimed ε and the δ its
    bound uses (:func:`~fedaudit.audit.ldp.claimed_guarantee`)."""
    from fedaudit.audit.ldp import claimed_guarantee
    from fedaudit.guarantees import epsilon_delta

    if p["sampler"] is not None:
        target = load_sampler(where, p["sampler"])
        claimed = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        claim, delta = claimed_guarantee(target, claimed, p["claimed_delta"])
    else:
        target = build_mechanism(p)
        claim, delta = claimed_guarantee(target, p["claimed_epsilon"], p["claimed_delta"])
    return target, epsilon_delta(claim)[0], delta


def _self_test_units(p: Mapping[str, Any]) -> int:
    """Reports the self-tests draw (both inputs, null and planted), for :meth:`LDP.estimate`;
    the claimed ε is taken as the plan states it, with δ = 0 (the most the planted test draws)."""
    from fedaudit.audit.self_tests import planted_samples, self_test_samples

    eps = p["claimed_epsilon"] if p["claimed_epsilon"] is not None else p["epsilon"]
    return 2 * (self_test_samples(p["samples"], p["confidence"])
                + planted_samples(p["samples"], eps, 0.0, p["confidence"]))


class LDP(ClaimKind):
    """Certify a lower bound on ε (pair given or searched); optionally at N/16 and N/4 as well."""

    name = "ldp"
    guarantee = "privacy"
    renamed_keys = {"test": "distinguisher"}
    unit = "samples"
    figures = ("epsilon_vs_samples", "privacy_region")
    tracked = (Tracked("epsilon_lower", "certified ε", bound=Bound.LOWER),)
    evidence_fields = {
        "epsilon_claimed": Field("claimed ε"),
        "epsilon_lower": Field("certified lower bound on ε"),
        "violation": Field("violation detected (lower bound > claim)"),
        "epsilon_exact": Field("exact ε of the audited pair"),
        "pair_power": Field("pair power (pair's exact ε ÷ claim)"),
        "proven_power": Field("proven power (what the audit showed the pair tests)"),
        "min_pair_power": Field("required proven power"),
        "max_certifiable": Field("largest ε these samples can certify"),
        "delta_claimed": Field("claimed δ"),
        "epsilon_mechanism": Field("ε the mechanism is calibrated for"),
        "notes": Field("audit notes"),
        "mechanism": Field("mechanism", "", "configuration"),
        "pair": Field("audited input pair", "", "configuration"),
        "distinguisher": Field("distinguishing test", "", "configuration"),
        "samples": Field("reports drawn per input", "", "configuration"),
        "search_samples": Field("reports per searched candidate", "", "configuration"),
        "confidence": Field("confidence of the certified bound", "", "configuration"),
        "curve": Field("certified bound at fewer samples (figure)", "", "diagnostics"),
        "audit": Field("raw audit record", "", "diagnostics"),
    }

    def keys(self) -> dict[str, Key]:
        from fedaudit.audit.bounds import MAX_SAMPLES
        from fedaudit.audit.pairs import LDP_PAIRS
        from fedaudit.mechanisms.base import MAX_LEVELS
        from fedaudit.mechanisms.registry import MECHANISMS

        return {
            "mechanism": Key("str", None, help=f"registry name of the randomizer ({', '.join(MECHANISMS.names())}) "
                                               f"or 'package.module:attr' (default sstq unless sampler is given)"),
            "sampler": Key("str", None,
                           help="'package.module:function', a black-box sampler(x, size, rng) audited instead of a "
                                "mechanism: its claim is claimed_epsilon (else epsilon) and claimed_delta (else 0); "
                                "dim is its input dimension"),
            "dim": Key("int", 64, low=1, high=1_000_000, help="input dimension (categories for rr)"),
            "epsilon": Key("float", 1.0, low=0, open_low=True, help="the mechanism's ε parameter"),
            "delta": Key("float", 1e-5, low=0, high=1, open_high=True, help="the mechanism's δ parameter (gaussian)"),
            "k": Key("int", None, low=1, help="SSTQ coordinates per report (default dim // 16)"),
            "levels": Key("int", 4, low=2, high=MAX_LEVELS, help="quantization levels"),
            "clip": Key("float", 1.0, low=0, open_low=True, help="L2 clip radius of the inputs"),
            "rotate": Key("bool", True, help="SSTQ random rotation"),
            "mechanism_params": mechanism_params_key(),
            "claimed_epsilon": Key("float", None, low=0, open_low=True,
                                   help="the ε claim under audit (default: the mechanism's ε)"),
            "claimed_delta": Key("float", None, low=0, high=1, open_high=True,
                                 help="the δ claim under audit (default: the mechanism's δ)"),
            "pair": Key("str", "antipodal", choices=(*LDP_PAIRS, "search"),
                        help="the audited input pair, or 'search' for the worst pair found"),
            "samples": Key("int", 200_000, low=100, high=MAX_SAMPLES, help="draws per input for the certified bound"),
            "search_samples": Key("int", 20_000, low=200, high=MAX_SAMPLES,
                                  help="draws per input per searched candidate"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
            "distinguisher": Key("str", "auto", help="the test that tells the two inputs' reports apart: auto, likelihood-ratio, black-box, column, ..."),
            "curve": Key("bool", True, help="also certify at samples/16 and samples/4 (epsilon_vs_samples plot)"),
            "min_pair_power": Key("float", None, low=0, high=1, open_low=True,
                                  help="least proven pair power — max(certified ε lower bound, the pair's exact ε) / "
                                       "the claimed ε — for a 'no violation' result to count; below it the verdict "
                                       "is INCONCLUSIVE"),
            **engine_keys("the audit's draws (and with pair = 'search' the candidate audits)"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        from fedaudit.audit.ldp import TESTS, claimed_guarantee
        from fedaudit.mechanisms.base import has_categorical_inputs

        if p["k"] is not None and p["k"] > p["dim"]:
            raise key_error(where, "k", f"must be an integer in [1, dim={p['dim']}], got {p['k']}")
        if p["sampler"] is not None:
            if p["mechanism"] is not None:
                raise key_error(where, "sampler", "audits a black-box sampler instead of a mechanism: give mechanism "
                                                  "or sampler, not both")
            if p["mechanism_params"]:
                raise key_error(where, "mechanism_params", "are a mechanism's keywords; a sampler takes none")
            load_sampler(where, p["sampler"])
        elif p["mechanism"] is None:
            p["mechanism"] = "sstq"
        names = [t.strip().lower() for t in p["distinguisher"].split(",") if t.strip()]
        if not names or any(t not in TESTS and t != "lr" for t in names):
            raise key_error(where, "distinguisher", f"must be one of {', '.join(repr(t) for t in TESTS)} "
                                                    f"(comma-separated allowed), got {show(p['distinguisher'])}")
        p["distinguisher"] = ",".join(names)
        if p["sampler"] is not None:
            _check_samples(where, p, 0.0 if p["claimed_delta"] is None else p["claimed_delta"])
            return
        check_mechanism_key(where, p)
        check_common_keywords(where, p, self.keys())
        if p["mechanism"] == "rr" and p["dim"] < 2:
            raise key_error(where, "dim", f"must be an integer >= 2 for mechanism 'rr' (categories), got {p['dim']}")
        try:
            mech = build_mechanism(p)
        except FedAuditError as exc:
            raise FedAuditError(f"{where}: mechanism {p['mechanism']!r} rejects its parameters: {exc}") from None
        if has_categorical_inputs(mech) and p["pair"] != "search":
            p["pair"] = "one-hot"  # e_0 vs e_1: e.g. rr takes categories, not vectors
        try:
            delta = claimed_guarantee(mech, p["claimed_epsilon"], p["claimed_delta"])[1]
        except FedAuditError:
            delta = 0.0  # a claim the mechanism refuses: the run says so, as it always did
        _check_samples(where, p, delta)

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """A local randomizer: each client randomizes its own report (the unit is the client's input)."""
        gaussian = p["mechanism"] == "gaussian"
        delta = p["claimed_delta"] if p["claimed_delta"] is not None else (p["delta"] if gaussian else None)
        return {"trust": "local", "unit": "client", "accountant": None,
                "epsilon": p["claimed_epsilon"] if p["claimed_epsilon"] is not None else p["epsilon"], "delta": delta,
                "flavours": ("approximate", "renyi", "zcdp", "gdp") if gaussian else None}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        eps = p["claimed_epsilon"] if p["claimed_epsilon"] is not None else p["epsilon"]
        if p["sampler"] is not None:
            return f"sampler {p['sampler']} (d={p['dim']}) {'is not' if expect == 'violation' else 'is'} {eps:g}-LDP"
        name = {"sstq": "SSTQ", "sstq-sketch": "SSTQ sketch (as published)", "vqsgd": "vqSGD",
                "privunitg": "PrivUnitG", "rr": "randomized response"}.get(p["mechanism"], p["mechanism"])
        k = f", k={p['k']}" if p["mechanism"].startswith("sstq") and p["k"] is not None else ""
        verb = "is not" if expect == "violation" else "is"
        return f"{name} (d={p['dim']}{k}) {verb} {eps:g}-LDP"

    def work_units(self, p: Mapping[str, Any]) -> int:
        from fedaudit.audit.pairs import SEARCH_CANDIDATES

        total = 2 * p["samples"] + 2 * sum(_curve_sizes(p))
        if p["pair"] == "search":
            candidates = 2 if p["mechanism"] == "rr" else SEARCH_CANDIDATES
            total += 2 * candidates * p["search_samples"]
        return total

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every report drawn (:meth:`work_units`) costs about ``dim`` numbers at
        :data:`DRAWS_PER_SECOND`; the audit keeps one seed per block of draws."""
        from fedaudit.experiments.kind import draw_cost

        parts = "2·samples" + (" + curve" if p["curve"] else "") + (" + searched pairs" if p["pair"] == "search" else "")
        return draw_cost(self.work_units(p) + _self_test_units(p), p["dim"], DRAWS_PER_SECOND,
                         f"{parts} at dim = {p['dim']} (auditor self-tests included)")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """The LDP auditor's self-tests, with the claim's claimed (ε, δ), confidence and
        distinguisher on its pair (the antipodal pair for a searched one), each on its own seed
        derived from the claim's: a null test — the mechanism (or sampler) on the same input twice,
        whose certified ε must be 0 — on :func:`~fedaudit.audit.self_tests.self_test_samples`
        draws per input (10% of ``samples``), and a planted violation — the mechanism with a
        deterministic fingerprint of its input appended, exact ε ∞, whose certified ε must exceed
        the claim — on :func:`~fedaudit.audit.self_tests.planted_samples` draws per input."""
        from fedaudit.audit.self_tests import ldp_self_test, planted_samples, self_test_samples
        from fedaudit.rng import derive_seed

        p = spec.params
        target, eps, delta = _claimed(p, spec.id)
        pair = "antipodal" if p["pair"] == "search" else p["pair"]
        common = dict(dim=p["dim"] if p["sampler"] else None, clip=p["clip"], epsilon=eps, delta=delta,
                      confidence=p["confidence"], distinguisher=p["distinguisher"],
                      engine={k: p[k] for k in ("backend", "workers") if p[k] is not None})
        what = "sampler" if p["sampler"] is not None else "mechanism"
        return [
            SelfTest(f"null: the {what} on the same input twice", "null",
                     lambda: ldp_self_test("null", target, pair,
                                           samples=self_test_samples(p["samples"], p["confidence"], delta),
                                           seed=derive_seed(spec.seed, "self-test=null"), **common)),
            SelfTest(f"planted: the {what} with its input leaked (exact ε ∞)", "planted",
                     lambda: ldp_self_test("planted", target, pair,
                                           samples=planted_samples(p["samples"], eps, delta, p["confidence"]),
                                           seed=derive_seed(spec.seed, "self-test=planted"), **common)),
        ]

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.ldp import audit_ldp
        from fedaudit.audit.pairs import audit_pair, pair_power
        from fedaudit.rng import derive_seed

        p = spec.params
        mech, eps, delta = _claimed(p, spec.id)
        common = dict(epsilon=eps, delta=delta, confidence=p["confidence"], distinguisher=p["distinguisher"],
                      progress=progress,
                      **{k: p[k] for k in ("backend", "workers") if p[k] is not None})
        res, x0, x1, pair_name = audit_pair(mech, p["pair"], dim=p["dim"] if p["sampler"] else None, clip=p["clip"],
                                            samples=p["samples"],
                                            search_samples=p["search_samples"], seed=spec.seed, **common)
        # the curve: the same pair certified on fewer, independent draws (seeds named by the size)
        curve = []
        for n in _curve_sizes(p):
            small = audit_ldp(mech, x0, x1, samples=n, seed=derive_seed(spec.seed, f"curve={n}"), **common)
            curve.append({"samples": n, "epsilon_lower": small.epsilon_lower, "seed": small.seed,
                          "violation": small.violation})
        curve.append({"samples": res.samples, "epsilon_lower": res.epsilon_lower, "seed": spec.seed,
                      "violation": res.violation})

        power = pair_power(res, eps)
        proven = proven_power(res.epsilon_lower, eps, power)
        decision = self.decide({"epsilon_claimed": eps, "epsilon_lower": res.epsilon_lower, "pair_power": power,
                                "min_pair_power": p["min_pair_power"]}, spec.expect)
        violated, weak = decision.violated, decision.inconclusive
        if violated != bool(res.violation):
            raise AssertionError(f"the LDP audit's violation flag {res.violation} disagrees with the kind's rule")
        notes = [str(n) for n in (getattr(res, "notes", None) or [])]
        conf = f"{res.confidence:.0%}"
        if violated:
            exact = "" if res.epsilon_exact is None else f"; exact ε of the pair {fmt_number(res.epsilon_exact, '.3g')}"
            summary = (f"VIOLATION: certified ε ≥ {res.epsilon_lower:.3f} at {conf} exceeds the claimed "
                       f"ε = {eps:g} ({pair_name}, {res.test}){exact}")
        else:
            summary = (f"no violation detected: certified ε ≥ {res.epsilon_lower:.3f} at {conf} is within the "
                       f"claimed ε = {eps:g} ({pair_name}, {res.test}, max certifiable {res.max_certifiable:.2f}); "
                       + _power_sentence(power, res.epsilon_exact, eps))
        if weak:
            need = p["min_pair_power"]
            summary += (f" — INCONCLUSIVE: min_pair_power {need:g} not met (proven power {proven:.2f} < {need:g}"
                        + ("; the pair's exact ε is unknown)" if power is None else ")"))
        if spec.expect == "violation":
            summary += " — expected a violation" + (", detected" if violated else ", NOT detected")
        caveats = ldp_caveats(res, power, eps, p["pair"] == "search")
        mechanism = ({"name": p["sampler"], "sampler": True, "dim": p["dim"]} if p["sampler"] is not None
                     else {"name": p["mechanism"], **_mechanism_params(mech)})
        evidence: dict[str, Any] = {"mechanism": mechanism, "epsilon_claimed": eps}
        if delta or p["claimed_delta"] is not None:  # δ only where the guarantee has one
            evidence["delta_claimed"] = delta
        if getattr(mech, "epsilon", None) is not None and not math.isclose(mech.epsilon, eps):
            evidence["epsilon_mechanism"] = mech.epsilon  # calibrated at one ε, audited against another
        evidence.update({
            "pair": pair_name, "distinguisher": res.test, "samples": res.samples, "confidence": res.confidence,
            **({"search_samples": p["search_samples"]} if p["pair"] == "search" else {}),
            "epsilon_lower": res.epsilon_lower, "epsilon_exact": res.epsilon_exact,
            "pair_power": power, "proven_power": proven,
            **({"min_pair_power": p["min_pair_power"]} if p["min_pair_power"] is not None else {}),
            "violation": violated, "max_certifiable": res.max_certifiable,
            **({"notes": notes} if notes else {}),
            "curve": curve,
            "audit": {k: v for k, v in res.to_dict().items() if k not in _SHOWN},
        })
        ev = res.event
        plots = (
            {"type": "epsilon_vs_samples", "title": "certified ε lower bound vs samples per input",
             "samples": [c["samples"] for c in curve], "epsilon_lower": [c["epsilon_lower"] for c in curve],
             "epsilon_claimed": eps, "epsilon_exact": res.epsilon_exact},
            {"type": "privacy_region", "title": f"certified event ({ev['event']}, positive {ev['positive_input']})",
             "tpr": res.tpr, "fpr": res.fpr, "epsilon": eps, "delta": delta,
             "tpr_lower": ev["tpr_lower"], "fpr_upper": ev["fpr_upper"], "epsilon_lower": res.epsilon_lower},
        )
        return Evidence(holds=decision.holds, violated=violated, evidence=evidence, summary=summary, plots=plots,
                        inconclusive=weak, states_parameters=True, caveats=tuple(caveats))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The LDP claim in words: the black-box threat model (one report, two known candidate
        inputs), what the certified lower bound shows against the claim, how much the pair could
        show (its power), what a lower bound never shows (that the mechanism is LDP) and the next
        step (a pair search, more samples, a calibration fix)."""
        from fedaudit.audit.ldp import LOW_PAIR_POWER

        num = display_number
        eps, lb = number(ev, "epsilon_claimed"), number(ev, "epsilon_lower")
        exact, power = number(ev, "epsilon_exact", optional=True), number(ev, "pair_power", optional=True)
        proven = number(ev, "proven_power", optional=True)
        maxc, n, conf = number(ev, "max_certifiable"), int(number(ev, "samples")), number(ev, "confidence")
        delta = number(ev, "delta_claimed", optional=True)
        mech = ev.get("mechanism") or {}
        name, sampler = str(mech.get("name", "?")), bool(mech.get("sampler"))
        searched = "search_samples" in ev
        violated = lb > eps
        guarantee = f"(ε = {eps:g}, δ = {num(delta)})-LDP" if delta else f"ε = {eps:g}-LDP"
        claimed = (f"The {'black-box sampler' if sampler else 'randomizer'} {name} is {guarantee}: whatever two inputs "
                   f"a client holds, each report is at most e^{eps:g} ≈ {math.exp(eps):.3g} times likelier under one "
                   f"than under the other" + (f", except with probability δ = {num(delta)}" if delta else "") + ".")
        if expect == "violation":
            claimed += " The plan expects this claim to be false (a known-bad mechanism kept as a regression case)."
        tested = (f"Black-box threat model: an adversary sees one report and knows it came from one of two inputs "
                  f"({ev.get('pair')}" + (", the strongest pair a search found" if searched else "") + "). "
                  f"The audit drew {num(n)} reports per input, told them apart with the {ev.get('distinguisher')} "
                  f"test and certified a lower bound on ε at {percent(conf)} confidence (a false alarm has "
                  f"probability at most {percent(1 - conf)}).")
        if violated:
            means = (f"The reports leak more than claimed: with {percent(conf)} confidence the true ε is at least "
                     f"{lb:.3g}, above the claimed {eps:g}. One pair that leaks more than the claim refutes it.")
            if expect == "violation":
                means += " This is the violation the plan expected."
        else:
            means = f"No leak beyond the claim was found: the certified lower bound {lb:.3g} stays within ε = {eps:g}."
            if power is None:
                means += " How much of the claim this pair can reveal is unknown (its exact ε is not computed)."
            elif power < LOW_PAIR_POWER:
                means += (f" But this pair can reveal at most ε = {num(exact)}, {power:.0%} of the claim: a mechanism "
                          f"that breaks its claim on other inputs would pass here too, so finding no violation on it says little.")
            else:
                means += (f" The pair is a strong one (its exact ε {num(exact)} is {power:.0%} of the claim), so the "
                          f"test looked where a violation would show.")
            if expect == "violation":
                means += " The violation the plan expected was NOT detected."
        if verdict == "INCONCLUSIVE" and ev.get("min_pair_power") is not None:
            means += (f" The plan requires a proven pair power of {number(ev, 'min_pair_power'):g}; this audit proved "
                      f"{num(proven, 2) if proven is not None else 'none'}, so no verdict is given.")
        not_shown = []
        if not violated:
            not_shown.append("that the mechanism is LDP: an audit can refute a privacy claim, never prove it — a lower "
                             "bound within the claim is not an upper bound")
            if eps > maxc:
                not_shown.append(f"any violation at all: {num(n)} reports per input can certify at most ε ≈ {maxc:.3g}, "
                                 f"below the claimed {eps:g}")
        else:
            not_shown.append(f"how far beyond the claim the worst case goes: {lb:.3g} is a lower bound"
                             + (f" (this pair's exact ε is {num(exact)})" if exact is not None else ""))
        not_shown.append("other input pairs: only the candidates of the search were tried" if searched else
                         f"other input pairs: only {ev.get('pair')} was tried")
        if not sampler:
            not_shown.append(f"the code you deploy: this audits fedaudit's implementation of {name}; audit your own "
                             f"with sampler = \"package.module:function\"")
        steps = []
        if violated and expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case (it fails if the audit ever stops "
                         "catching this violation)")
        elif violated:
            steps.append(f"fix the calibration so the worst-case ε is at most {eps:g}"
                         + (f" (this pair's exact ε is {num(exact)})" if exact is not None else "")
                         + f", or state the guarantee the mechanism gives (ε ≥ {lb:.3g} is certified)")
        else:
            if expect == "violation":
                steps.append("find out whether the mechanism was fixed (then set expect = \"pass\") or the audit lost "
                             "power (use pair = \"search\" or more samples)")
            if not searched and (power is None or power < 1):
                steps.append("run with pair = \"search\" to look for a pair closer to the worst case")
            if eps > maxc:
                steps.append(f"raise samples (now {num(n)}) until the certifiable ε exceeds the claim")
            elif exact is not None and lb < 0.9 * exact:
                steps.append(f"a larger sample (now {num(n)} per input) brings the certified bound {lb:.3g} closer to "
                             f"the pair's exact ε {num(exact)}")
            steps.append("a white-box proof of the mechanism's ε for the guarantee itself: the audit only looks for "
                         "counterexamples")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """A violation is a certified lower bound above the claim, ``epsilon_lower > epsilon_claimed``;
        without one the claim holds, but is INCONCLUSIVE when ``min_pair_power`` is set and the
        power the audit proved of its pair (:func:`proven_power`) is below it."""
        eps = number(evidence, "epsilon_claimed")
        lower = number(evidence, "epsilon_lower")
        violated = bool(lower > eps)
        need = number(evidence, "min_pair_power", optional=True)
        weak = need is not None and not violated and proven_power(lower, eps, number(evidence, "pair_power",
                                                                                       optional=True)) < need
        return Decision(holds=not violated, violated=violated, inconclusive=weak)
