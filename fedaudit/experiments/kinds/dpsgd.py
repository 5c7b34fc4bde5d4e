"""Claim kind ``dpsgd``: a DP-SGD configuration is (ε, δ)-DP — its accountant says so and a canary
audit of one Opacus training run does not refute it.

The run (:func:`fedaudit.audit.dpsgd_audit.audit_dpsgd`) trains with ``noise_multiplier`` while
the accountant is told ``claimed_noise_multiplier`` (default: the same σ; σ/10 trained with σ
claimed is the broken configuration of issue #11). The claim holds when the accountant's ε of
the claimed configuration is at most ``claimed_epsilon`` *and* no certified one-run bound (Steinke,
Nasr, Jagielski 2023; its f-DP refinement, Mahloujifar, Melis, Chaudhuri 2024) exceeds the
accountant's ε or the claimed ε. A violation is detected when such a certified bound does (P[false
alarm] ≤ 1 − ``confidence``); the Gaussian-DP estimate is reported, never used for the verdict.
With m canaries the Steinke bound is capped (≈ 5.78 for m = 1000 at δ = 1e-5), so above the cap
only the f-DP refinement (which assumes a Gaussian trade-off curve) can refute a claim; the
evidence states the cap (``one_run_ceiling``).

The ``epsilon_vs_steps`` figure draws the accountant's ε after 1…steps steps of the claimed
configuration, the claimed ε as a line and the audited bounds as points at the last step.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.experiments.evidence import (CANARY_FIELDS, CANARY_SETUP_SECONDS, CANARY_TRACKED, canary_audit_keys,
                                           canary_claimed_epsilon, canary_claimed_text, canary_decision,
                                           canary_evidence, canary_explanation,
                                           canary_self_tests)
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress
from fedaudit.experiments.keys import Key
from fedaudit.reports.explain import Explanation

__all__ = ["DPSGD"]


#: core-seconds of one DP-SGD training step of a canary audit, after
#: :data:`~fedaudit.experiments.evidence.CANARY_SETUP_SECONDS` (measured: 6-7 s for 60 to 240 steps
#: on the built-in data)
STEP_SECONDS = 5e-3


class DPSGD(ClaimKind):
    """Train with Opacus DP-SGD once with canaries; the accountant must be within the claimed (ε, δ) and the audit must not refute it."""

    name = "dpsgd"
    guarantee = "privacy"
    unit = "steps"
    figures = ("epsilon_vs_steps",)
    tracked = CANARY_TRACKED
    evidence_fields = CANARY_FIELDS

    def keys(self) -> dict[str, Key]:
        from fedaudit.accounting import accountants_for, dpsgd_event
        from fedaudit.audit.canaries import MAX_CANARIES, THREATS

        return {
            **canary_audit_keys("steps", "step (examples)", MAX_CANARIES),
            "accountant": Key("str", "pld", choices=accountants_for(dpsgd_event(1.0, 0.5, 1)),
                              help="a registered accountant of the Poisson-subsampled Gaussian: pld (dp-accounting), "
                                   "rdp or prv (Opacus), dpa-rdp (dp-accounting), or your own"),
            "max_grad_norm": Key("float", 1.0, low=0, open_low=True, help="per-example clipping norm C"),
            "dataset": Key("str", "digits", choices=("digits", "synthetic")),
            "threat": Key("str", "white-box", choices=THREATS,
                          help="white-box: gradient canaries scored by the likelihood ratio of all iterates; "
                               "white-box-final: the same canaries, only the first and last model seen; "
                               "black-box: mislabelled inputs scored by the final loss"),
            "learning_rate": Key("float", 0.5, low=0, open_low=True),
        }

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """Central noise on per-example clipped gradients, accounted per example (Poisson sampling of
        examples): an example-level guarantee of Gaussian noise, never pure DP."""
        return {"trust": "central", "unit": "example", "epsilon": p["claimed_epsilon"], "delta": p["delta"],
                "flavours": ("approximate", "renyi", "zcdp", "gdp"), "accountant": p["accountant"]}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        sigma = p["noise_multiplier"] if p["claimed_noise_multiplier"] is None else p["claimed_noise_multiplier"]
        verb = "is not" if expect == "violation" else "is"
        return (f"DP-SGD (σ = {sigma:g}, q = {p['sample_rate']:g}, {p['steps']} steps) {verb} "
                f"({canary_claimed_text(p)}, {p['delta']:g})-DP ({p['threat']} canary audit)")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["steps"] + p["curve_points"]

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """:data:`~fedaudit.experiments.evidence.CANARY_SETUP_SECONDS` (Opacus, the model, the
        canaries) and :data:`STEP_SECONDS` per training step; ``steps`` and ``canaries`` are
        bounded, so a claim stays within the budget."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        return Cost(memory=BASE_MEMORY, seconds=CANARY_SETUP_SECONDS + p["steps"] * STEP_SECONDS,
                    basis=f"{p['steps']} steps")

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.accounting.curves import epsilon_dpsgd_curve
        from fedaudit.audit.dpsgd_audit import audit_dpsgd
        from fedaudit.progress import increments_from_totals

        p = spec.params
        res = audit_dpsgd(noise_multiplier=p["noise_multiplier"], max_grad_norm=p["max_grad_norm"],
                          sample_rate=p["sample_rate"], steps=p["steps"], delta=p["delta"], canaries=p["canaries"],
                          dataset=p["dataset"], threat=p["threat"],
                          claimed_noise_multiplier=p["claimed_noise_multiplier"], seed=spec.seed,
                          progress=increments_from_totals(progress), confidence=p["confidence"], accountant=p["accountant"],
                          learning_rate=p["learning_rate"])

        curve = epsilon_dpsgd_curve(res.claimed_noise_multiplier, res.sample_rate, res.steps, p["delta"],
                                    res.accountant.method, p["curve_points"], res.accountant.epsilon, progress,
                                    backend=p["backend"], workers=p["workers"])
        what = f"{res.dataset}, {res.threat}, accuracy {res.accuracy:.3f}"
        return canary_evidence(res, count_name="steps", count=res.steps,
                               claimed_epsilon=canary_claimed_epsilon(p, res),
                               delta=p["delta"], confidence=p["confidence"], curve=curve, expect=spec.expect,
                               what=what, extra={"accuracy": res.accuracy, "training_seconds": res.training_seconds},
                               decide=self.decide)

    def explain(self, params: Mapping[str, Any], evidence: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The canary audit in words (:func:`~fedaudit.experiments.evidence.canary_explanation`, example level)."""
        return canary_explanation(evidence, verdict, expect, level="example", count_name="steps")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list:
        """:func:`~fedaudit.experiments.evidence.canary_self_tests`: a null score set and canaries
        without noise, through the claim's one-run auditor."""
        return canary_self_tests(spec, evidence)

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """:func:`~fedaudit.experiments.evidence.canary_decision`: the accountant's ε within the claimed ε and no certified one-run
        bound, max(Steinke, f-DP), above the accountant's ε or the claimed ε; such a bound is a
        detected violation."""
        return canary_decision(evidence)
