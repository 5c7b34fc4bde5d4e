"""Claim kind ``dp-fedavg`` (formerly ``fedavg-dp``): a DP-FedAvg configuration is client-level (ε, δ)-DP — its accountant
says so and a canary-client audit of one training run does not refute it.

The run (:func:`fedaudit.audit.dp_fedavg_audit.audit_dp_fedavg`) samples clients with probability q
per round, clips their updates to ``clip`` and adds N(0, (z·clip)²) to the sum with the real z
(``noise_multiplier``), while the accountant (:func:`fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg`,
PLD) is told ``claimed_noise_multiplier``. m canary clients, each included with probability ½, send
a fixed random direction and are scored by the final model's alignment with it. The verdict is the
one of the ``dpsgd`` kind (:func:`fedaudit.experiments.evidence.canary_decision`): the accountant within the claim
and no certified one-run bound above the accountant's or the claimed ε; a certified bound above
either is a detected violation. The figure draws ε(rounds) of the claimed configuration.
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

__all__ = ["DPFedAvg"]


#: core-seconds of one client's local step in DP-FedAvg (measured: about 3e-5 on the built-in data)
CLIENT_STEP_SECONDS = 5e-5


class DPFedAvg(ClaimKind):
    """Train DP-FedAvg once with canary clients; the client-level accountant must be within the claimed (ε, δ) and the audit must not refute it."""

    name = "dp-fedavg"
    former_names = ("fedavg-dp",)
    guarantee = "privacy"
    unit = "rounds"
    figures = ("epsilon_vs_steps",)
    figure_names = {"epsilon_vs_steps": "ε against rounds"}
    tracked = CANARY_TRACKED
    evidence_fields = CANARY_FIELDS

    def keys(self) -> dict[str, Key]:
        from fedaudit.audit.dp_fedavg_audit import FEDAVG_AUDIT_DATASETS, MAX_AUDIT_CANARIES

        keys = canary_audit_keys("rounds", "round (clients)", MAX_AUDIT_CANARIES)
        keys["sample_rate"] = Key("float", low=0, high=1, open_low=True, help="probability that a client takes part "
                                                                              "in a round")
        return {
            **keys,
            "clip": Key("float", 1.0, low=0, open_low=True, help="L2 clipping norm C of each client's update"),
            "clients": Key("int", 50, low=1, high=100_000, help="honest clients (the canary clients come on top)"),
            "dataset": Key("str", "synthetic", choices=FEDAVG_AUDIT_DATASETS),
            "local_lr": Key("float", 0.5, low=0, open_low=True, help="clients' local step size"),
            "local_steps": Key("int", 1, low=1, high=1000, help="local steps per round"),
            "server_lr": Key("float", 1.0, low=0, open_low=True, help="server step size"),
        }

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """Central Gaussian noise on the sum of clipped client updates, accounted per client."""
        return {"trust": "central", "unit": "client", "epsilon": p["claimed_epsilon"], "delta": p["delta"],
                "flavours": ("approximate", "renyi", "zcdp", "gdp"), "accountant": None}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        z = p["noise_multiplier"] if p["claimed_noise_multiplier"] is None else p["claimed_noise_multiplier"]
        verb = "is not" if expect == "violation" else "is"
        return (f"DP-FedAvg (z = {z:g}, q = {p['sample_rate']:g}, {p['rounds']} rounds) {verb} client-level "
                f"({canary_claimed_text(p)}, {p['delta']:g})-DP (canary-client audit)")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["rounds"] + p["curve_points"]

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every round trains ``sample_rate`` of the clients and canary clients for ``local_steps``
        steps each, at :data:`CLIENT_STEP_SECONDS` per client step."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        steps = p["rounds"] * p["sample_rate"] * (p["clients"] + p["canaries"]) * p["local_steps"]
        return Cost(memory=BASE_MEMORY + 8 * 64 * (p["clients"] + p["canaries"]),
                    seconds=CANARY_SETUP_SECONDS + steps * CLIENT_STEP_SECONDS,
                    basis=f"rounds × sample_rate × (clients + canaries) × local_steps = {steps:.3g} client steps")

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.accounting.curves import epsilon_dpsgd_curve
        from fedaudit.audit.dp_fedavg_audit import audit_dp_fedavg
        from fedaudit.progress import increments_from_totals

        p = spec.params
        res = audit_dp_fedavg(noise_multiplier=p["noise_multiplier"], clip=p["clip"], sample_rate=p["sample_rate"],
                             rounds=p["rounds"], delta=p["delta"], canaries=p["canaries"], clients=p["clients"],
                             claimed_noise_multiplier=p["claimed_noise_multiplier"], dataset=p["dataset"],
                             local_lr=p["local_lr"], local_steps=p["local_steps"], server_lr=p["server_lr"],
                             confidence=p["confidence"], seed=spec.seed, progress=increments_from_totals(progress))

        # client-level DP-FedAvg composes the same subsampled-Gaussian event as DP-SGD, per round
        curve = epsilon_dpsgd_curve(res.claimed_noise_multiplier, res.sample_rate, res.rounds, p["delta"],
                                    res.accountant.method, p["curve_points"], res.accountant.epsilon, progress,
                                    backend=p["backend"], workers=p["workers"])
        what = f"{res.dataset}, {res.clients} clients, test accuracy {res.test_accuracy:.3f}"
        return canary_evidence(res, count_name="rounds", count=res.rounds,
                               claimed_epsilon=canary_claimed_epsilon(p, res),
                               delta=p["delta"], confidence=p["confidence"], curve=curve, expect=spec.expect,
                               what=what, extra={"test_accuracy": res.test_accuracy, "clients": res.clients},
                               decide=self.decide)

    def explain(self, params: Mapping[str, Any], evidence: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The canary audit in words (:func:`~fedaudit.experiments.evidence.canary_explanation`, client level)."""
        return canary_explanation(evidence, verdict, expect, level="client", count_name="rounds")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list:
        """:func:`~fedaudit.experiments.evidence.canary_self_tests`: a null score set and canaries
        without noise, through the claim's one-run auditor."""
        return canary_self_tests(spec, evidence)

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The ``dpsgd`` kind's rule, :func:`~fedaudit.experiments.evidence.canary_decision`: the
        client-level accountant's ε within the claimed ε and no certified one-run bound (Steinke or
        f-DP) above the accountant's ε or the claimed ε; such a bound is a detected violation."""
        return canary_decision(evidence)
