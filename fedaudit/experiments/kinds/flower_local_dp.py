"""Claim kind ``flower-local-dp``: Flower's ``LocalDpMod`` delivers the (ε, δ)-LDP it is configured with.

The claim is the mod's configuration: ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)`` is
(ε, δ)-LDP for one client's update. Two kinds of evidence decide it
(:func:`fedaudit.integrations.flower.local_dp_audit.audit_local_dp_mod`): the exact ε of its calibration
under local DP (white box: the analytic Gaussian mechanism at L2 sensitivity 2·clipping_norm) and two
certified black-box lower bounds on the pair ±u, ‖u‖ = C — from ``real_calls`` calls of Flower's own mod
per input, and from ``samples`` draws per input of its vectorised equivalent, which every one of those
real calls matched bit for bit (the substitution that makes 10⁷ draws feasible: the real mod runs at
≈ 10³ calls per second). The claim fails when the exact ε or a certified bound exceeds the claimed ε;
the evidence then carries the σ and the ``sensitivity`` setting that would deliver the claim. The mod is
only as private as the ``sensitivity`` it is given: local DP needs ``sensitivity = 2·clipping_norm``
(which Flower's documentation does not state; it passes ``sensitivity`` as a value of its own), and with
``sensitivity = clipping_norm`` Flower's formula calibrates for half the LDP sensitivity, so that
configuration fails: ship it with ``expect = "violation"``.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.reports.diff import Tracked
from fedaudit.guarantees import Bound
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, SelfTest, number
from fedaudit.experiments.keys import REQUIRED, Key
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["FlowerLocalDp"]


#: core-seconds of one real call of Flower's LocalDpMod, and of one vectorised sample of its noise
#: (measured: 4-5e-4 and about 1e-7)
CALL_SECONDS = 5e-4
SAMPLE_SECONDS = 1e-7


def _self_test_samples(p: Mapping[str, Any], certifying: Any = None) -> tuple[int, int]:
    """Draws per input of the null and the planted self-test: 10% of ``samples``
    (:func:`~fedaudit.audit.self_tests.self_test_samples`), the planted one doubled while an audit
    whose certification split is ``certifying(n)`` could not certify an ε above the claim
    (:func:`~fedaudit.audit.self_tests.planted_samples`; the self-tests pass the projection
    audit's split, the estimate — which must not need flwr — the default split, close to it)."""
    from fedaudit.audit.self_tests import planted_samples, self_test_samples

    return (self_test_samples(p["samples"], p["confidence"], p["delta"]),
            planted_samples(p["samples"], p["epsilon"], p["delta"], p["confidence"], certifying))


class FlowerLocalDp(ClaimKind):
    """Audit Flower's ``LocalDpMod(clipping_norm, sensitivity, epsilon, delta)`` against its configured (ε, δ)-LDP: the exact ε of its calibration under local DP (any two clipped updates, L2 sensitivity 2·clipping_norm) and certified black-box lower bounds from Flower's own mod and from its bit-identical vectorised equivalent; it fails when any of them exceeds the claimed ε (needs ``pip install 'fedaudit[flower]'``)."""

    name = "flower-local-dp"
    guarantee = "privacy"
    unit = "samples"
    figures = ()
    tracked = (Tracked("epsilon_true", "ε of the calibration as implemented", bound=Bound.UPPER),
               Tracked("epsilon_lower_real", "certified ε (real pipeline)", bound=Bound.LOWER),
               Tracked("epsilon_lower_vectorised", "certified ε (vectorised)", bound=Bound.LOWER))
    evidence_fields = {
        "epsilon_claimed": Field("configured (claimed) ε"),
        "epsilon_true": Field("exact ε of the calibration under local DP"),
        "epsilon_lower_real": Field("certified lower bound on ε (Flower's own mod)"),
        "epsilon_lower_vectorised": Field("certified lower bound on ε (verified equivalent)"),
        "violation": Field("violation detected"),
        "white_box_violation": Field("exact ε above the claim"),
        "certified_violation": Field("a certified bound above the claim"),
        "delta_claimed": Field("configured δ"),
        "delta_at_claimed_epsilon": Field("δ the calibration gives at the claimed ε"),
        "sigma_flower": Field("σ Flower adds"),
        "sigma_needed": Field("σ the claim needs"),
        "sensitivity_needed": Field("sensitivity setting that delivers the claim"),
        "l2_sensitivity": Field("L2 sensitivity under local DP (2·clipping_norm)"),
        "epsilon_if_sensitivity": Field("ε if the sensitivity setting were the local-DP one"),
        "confidence": Field("confidence of certified bounds", "", "configuration"),
        "distinguisher": Field("distinguishing test", "", "configuration"),
        "max_certifiable_real": Field("largest ε the real calls can certify", "", "diagnostics"),
        "max_certifiable_vectorised": Field("largest ε the vectorised draws can certify", "", "diagnostics"),
        "equivalence_calls": Field("real calls compared with the equivalent", "", "diagnostics"),
        "equivalence_mismatches": Field("mismatches among those calls", "", "diagnostics"),
        "mod_calls_per_second": Field("real mod calls per second", "", "diagnostics"),
        "audits": Field("raw audit records", "", "diagnostics"),
    }

    def keys(self) -> dict[str, Key]:
        return {
            "clipping_norm": Key("float", 1.0, low=0, open_low=True, help="LocalDpMod's clipping_norm C"),
            "sensitivity": Key("float", None, low=0, open_low=True,
                               help="LocalDpMod's sensitivity (default: clipping_norm)"),
            "epsilon": Key("float", REQUIRED, low=0, open_low=True, help="the configured (claimed) ε"),
            "delta": Key("float", 1e-5, low=0, high=1, open_low=True, open_high=True, help="the configured δ"),
            "samples": Key("int", 10_000_000, low=100, high=10**9,
                           help="draws per input from the verified vectorised equivalent of the mod"),
            "real_calls": Key("int", 20_000, low=100, high=10**7,
                              help="calls of Flower's real LocalDpMod per input (≈ 10³ per second)"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True,
                              help="confidence of the certified lower bounds"),
        }

    def cross_check(self, where: str, params: dict[str, Any], expect: str) -> None:
        if params["sensitivity"] is None:
            params["sensitivity"] = params["clipping_norm"]

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """Flower's LocalDpMod: each client adds Gaussian noise to its own clipped update."""
        return {"trust": "local", "unit": "client", "epsilon": p["epsilon"], "delta": p["delta"],
                "flavours": ("approximate", "renyi", "zcdp", "gdp"), "accountant": None}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        verb = "is not" if expect == "violation" else "is"
        return (f"Flower's LocalDpMod(clipping_norm={p['clipping_norm']:g}, sensitivity={p['sensitivity']:g}) {verb} "
                f"({p['epsilon']:g}, {p['delta']:g})-LDP for one client's update")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return 2 * (p["real_calls"] + p["samples"])

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Each real call of the mod costs :data:`CALL_SECONDS`, each vectorised sample
        :data:`SAMPLE_SECONDS` (the auditor self-tests' draws included); both counts are bounded,
        so a claim stays within the budget."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        draws = 2 * (p["samples"] + sum(_self_test_samples(p)))
        return Cost(memory=BASE_MEMORY, seconds=2 * p["real_calls"] * CALL_SECONDS + draws * SAMPLE_SECONDS,
                    basis=f"2·real_calls = {2 * p['real_calls']} calls of the mod, 2·samples = {2 * p['samples']} draws "
                          f"(+ {draws - 2 * p['samples']} for the auditor self-tests)")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """The projection auditor's self-tests
        (:func:`~fedaudit.integrations.flower.local_dp_audit.local_dp_mod_self_test`), with the
        claim's pair, claimed (ε, δ) and confidence, each on a seed derived from the claim's: a
        null test — the mod's vectorised equivalent on the same update twice, ε_lb must be 0 — on
        10% of ``samples`` (:func:`~fedaudit.audit.self_tests.self_test_samples`), and a planted
        violation — the equivalent without its noise, exact ε ∞ — on
        :func:`~fedaudit.audit.self_tests.planted_samples` (the projection audit's own split)."""
        from fedaudit.integrations.flower.local_dp_audit import local_dp_mod_self_test, projection_splits
        from fedaudit.rng import derive_seed

        p = spec.params
        null_n, planted_n = _self_test_samples(p, lambda n: projection_splits(n)[1])
        common = dict(confidence=p["confidence"], pair_seed=spec.seed)
        args = (p["clipping_norm"], p["sensitivity"], p["epsilon"], p["delta"])
        return [
            SelfTest("null: the mod's equivalent on the same update twice", "null",
                     lambda: local_dp_mod_self_test("null", *args, samples=null_n,
                                                    seed=derive_seed(spec.seed, "self-test=null"), **common)),
            SelfTest("planted: the mod's equivalent without noise (exact ε ∞)", "planted",
                     lambda: local_dp_mod_self_test("planted", *args, samples=planted_n,
                                                    seed=derive_seed(spec.seed, "self-test=planted"), **common)),
        ]

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.integrations.flower.local_dp_audit import audit_local_dp_mod

        p = spec.params
        res = audit_local_dp_mod(p["clipping_norm"], p["sensitivity"], p["epsilon"], p["delta"],
                                 real_calls=p["real_calls"], samples=p["samples"], confidence=p["confidence"],
                                 seed=spec.seed, progress=progress)
        cal, real, vec = res.calibration, res.real, res.vectorised
        decision = self.decide({"epsilon_claimed": cal.epsilon, "epsilon_true": cal.epsilon_true,
                                "epsilon_lower_real": real.epsilon_lower,
                                "epsilon_lower_vectorised": None if vec is None else vec.epsilon_lower}, spec.expect)
        if decision.violated != bool(res.violation):
            raise AssertionError(f"the LocalDpMod audit's violation flag {res.violation} disagrees with the kind's rule")
        c, conf = cal.clipping_norm, f"{res.confidence:.0%}"

        def above(flag: bool) -> str:
            return "ABOVE" if flag else "within"

        parts = [f"σ = {cal.sigma / c:.4g}·C; under LDP (Δ = 2C) the true ε is {cal.epsilon_true:.4f}, "
                 f"{above(cal.violation)} the claimed {cal.epsilon:g} (×{cal.epsilon_true / cal.epsilon:.3g}; "
                 f"δ at ε = {cal.epsilon:g} is {cal.delta_at_epsilon:.3g} against the claimed {cal.delta:g})",
                 f"certified at {conf}: ε ≥ {real.epsilon_lower:.3f} from {res.real_calls:,} calls of Flower's mod "
                 f"per input ({above(real.violation)} the claim)"]
        if vec is None:
            parts.append(f"{res.equivalence_mismatches:,} of {res.equivalence_calls:,} real calls differ from the "
                         f"vectorised equivalent: no vectorised bound")
        else:
            parts.append(f"ε ≥ {vec.epsilon_lower:.3f} from {res.samples:,} draws per input of the vectorised "
                         f"equivalent, bit-identical to all {res.equivalence_calls:,} real calls "
                         f"({above(vec.violation)} the claim)")
        if cal.violation:
            parts.append(f"the claim needs σ ≥ {cal.sigma_needed / c:.4g}·C, i.e. sensitivity = "
                         f"{cal.sensitivity_needed / c:.4f}·C in Flower's formula")
        if spec.expect == "violation":
            parts.append("expected a violation, " + ("detected" if decision.violated else "NOT detected"))
        evidence = {
            "epsilon_claimed": cal.epsilon, "delta_claimed": cal.delta, "epsilon_true": cal.epsilon_true,
            "delta_at_claimed_epsilon": cal.delta_at_epsilon,
            "epsilon_lower_real": real.epsilon_lower,
            "epsilon_lower_vectorised": None if vec is None else vec.epsilon_lower,
            "violation": res.violation, "white_box_violation": cal.violation,
            "certified_violation": res.certified_violation,
            "sigma_flower": cal.sigma, "sigma_needed": cal.sigma_needed, "sensitivity_needed": cal.sensitivity_needed,
            "l2_sensitivity": cal.l2_sensitivity, "epsilon_if_sensitivity": cal.epsilon_if_sensitivity,
            "confidence": res.confidence,
            "max_certifiable_real": real.max_certifiable,
            "max_certifiable_vectorised": None if vec is None else vec.max_certifiable,
            "equivalence_calls": res.equivalence_calls, "equivalence_mismatches": res.equivalence_mismatches,
            "mod_calls_per_second": res.mod_calls_per_second, "seconds": res.seconds,
            "distinguisher": "projection on x0 − x1 (the likelihood ratio of the Gaussian shift)",
            "audits": {"real": real.to_dict(), "vectorised": None if vec is None else vec.to_dict()},
        }
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence,
                        summary=f"LocalDpMod claimed ε = {cal.epsilon:g}, δ = {cal.delta:g}: " + "; ".join(parts))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """LocalDpMod's claim in words: the configured (ε, δ) as local DP of one client's update,
        the white-box exact ε of Flower's calibration and the black-box certified bounds, the
        sensitivity setting that would deliver the claim, and what neither shows."""
        num = display_number
        p = dict(ev.get("parameters") or params or {})
        eps, delta = number(ev, "epsilon_claimed"), number(ev, "delta_claimed")
        true = number(ev, "epsilon_true")
        real, vec = number(ev, "epsilon_lower_real"), number(ev, "epsilon_lower_vectorised", nullable=True)
        conf = percent(number(ev, "confidence"))
        c, sens = p.get("clipping_norm"), p.get("sensitivity")
        claimed = (f"Flower's LocalDpMod(clipping_norm = {num(c)}, sensitivity = {num(sens)}, ε = {num(eps)}, "
                   f"δ = {num(delta)}) makes each client's update ({num(eps)}, {num(delta)})-LDP: whatever two updates "
                   f"a client could send, what leaves the client is at most e^ε times likelier under one (up to δ)."
                   + (" The plan expects this to be false for this configuration." if expect == "violation" else ""))
        tested = (f"White box: the exact ε of Flower's Gaussian calibration at the local-DP sensitivity 2·clipping_norm "
                  f"= {num(number(ev, 'l2_sensitivity', optional=True))}. Black box: two updates ±u with ‖u‖ = "
                  f"clipping_norm, {num(p.get('real_calls'))} calls of Flower's real mod and {num(p.get('samples'))} "
                  f"draws of a vectorised equivalent (bit-identical on every real call compared) per input, told apart "
                  f"by a projection test; certified lower bounds on ε at {conf}.")
        if true > eps or real > eps or (vec is not None and vec > eps):
            means = (f"The mod does not deliver the claim: its exact ε under local DP is {num(true, 3)}, above the "
                     f"configured {num(eps)}" if true > eps else "A certified lower bound exceeds the configured ε")
            means += (f" (certified ≥ {num(real, 3)} from the real mod" + (f", ≥ {num(vec, 3)} from its equivalent"
                                                                          if vec is not None else "") + ").")
            if ev.get("sensitivity_needed") is not None:
                means += (f" Flower calibrates σ = {num(ev.get('sigma_flower'))} from its sensitivity setting; the claim "
                          f"needs σ ≥ {num(ev.get('sigma_needed'))}, i.e. sensitivity = "
                          f"{num(ev.get('sensitivity_needed'))}.")
        else:
            means = (f"The calibration delivers the claim: its exact ε under local DP is {num(true, 3)} ≤ {num(eps)}, "
                     f"and the certified bounds (≥ {num(real, 3)} real, "
                     + (f"≥ {num(vec, 3)} equivalent" if vec is not None else "no equivalent bound") + ") agree.")
        if expect == "violation":
            means += " The plan expected a violation: " + ("detected." if verdict == "PASS" else "NOT detected.")
        not_shown = ["anything after the client: LocalDpMod protects one update; what the server aggregates, "
                     "releases or composes over rounds is not accounted here (an accounting claim does that)",
                     "that the black-box bounds are the true ε: they are lower bounds; the exact ε is the white-box number",
                     "your deployment's settings unless they are the ones above (Flower passes sensitivity through "
                     "as given; its documentation does not say it must be 2·clipping_norm)"]
        steps = []
        if verdict != "PASS" and expect == "pass" and ev.get("sensitivity_needed") is not None:
            steps.append(f"fix the calibration: set sensitivity = {num(ev.get('sensitivity_needed'))} (the local-DP "
                         f"sensitivity, 2·clipping_norm) so Flower adds σ ≥ {num(ev.get('sigma_needed'))}")
        elif verdict == "PASS" and expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case")
        else:
            steps.append("account the rounds: compose this per-round ε over the rounds each client takes part in "
                         "(an accounting claim)")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """A violation is the calibration's exact ε under local DP above the claim,
        ``epsilon_true > epsilon_claimed``, or a certified lower bound above it —
        ``epsilon_lower_real`` (Flower's own mod) or ``epsilon_lower_vectorised`` (its verified
        equivalent; null when it did not match the mod and certified nothing); without one the
        claim holds (an audit refutes, it never proves). The stored ``violation`` flags are not
        read: they follow from these numbers."""
        claimed = number(evidence, "epsilon_claimed")
        vectorised = number(evidence, "epsilon_lower_vectorised", nullable=True)
        violated = bool(number(evidence, "epsilon_true") > claimed or number(evidence, "epsilon_lower_real") > claimed
                        or (vectorised is not None and vectorised > claimed))
        return Decision(holds=not violated, violated=violated)
