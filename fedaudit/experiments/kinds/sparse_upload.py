"""Claim kind ``sparse-upload``: the private gated sparse upload keeps its stated ε on neighbouring
client datasets, next to what the plain upload leaks and the bytes both save.

Two black-box audits (:func:`fedaudit.audit.sparse_upload.audit_sparse_upload`) of one client's
upload pipeline D ↦ upload(local_update(state, D)) on datasets D0, D1 that differ in one outlier
record: the plain top-m upload (no claim unless the plan sets ``plain_claimed_epsilon``; its
certified ε is expected to be large, the index set moves with the record) and the private variant
``gated-private`` (its stated ε, ``claimed_epsilon``, default the ε it runs at). The claim holds
when each stated ε is at least its upload's certified lower bound (an audit can only refute a
claim) and, when the plan sets ``max_bytes_ratio``, the gated packet is at most that share of a
dense FedAvg upload of float32 weights. A certified bound above a stated ε is a detected violation
(P[false alarm] ≤ 1 − ``confidence`` per audited claim); only certified bounds decide it. A claim
"the plain upload is ε-DP" is refuted this way (``plain_claimed_epsilon = 1`` with
``expect = "violation"`` is the shipped regression case). The private claim is decided by the
worst-pair audit (:func:`fedaudit.audit.sparse_upload.audit_worst_pair`, ``worst_samples`` draws
per input): the stated ε is a guarantee over any two inputs of the clamped domain, and one record
moves the inputs only slightly, so the data-level bound (reported next to it, not deciding) says
what one record leaks, not whether ε holds. The evidence carries both bounds, the worst pair's
exact ε and the tightness ε_lb/ε_pair; below ½ of the stated ε the summary says how little the
PASS shows. The audits' draws run on the engine (plan keys ``backend``, ``workers``;
default the plan's ``[engine]``), with the same evidence on every backend.

The training run behind ``fedaudit sparse`` is :func:`fedaudit.fl.sparse_training.train_sparse`.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.reports.diff import Tracked
from fedaudit.guarantees import Bound
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, SelfTest, number
from fedaudit.experiments.keys import Key, engine_keys
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["SparseUpload"]

#: operations (records × local steps × parameters) of the sparse-upload audit per core-second
OPS_PER_SECOND = 4e6


def _neighbour_text(neighbour: Any) -> str:
    """The neighbouring datasets in a few words: " (record 19 of 20 replaced)" from the evidence's
    ``neighbour`` object, its text when it is one, nothing when absent."""
    if isinstance(neighbour, Mapping) and "replaced_record" in neighbour:
        return f" (record {neighbour['replaced_record']} of {neighbour.get('records', '?')} replaced)"
    return f" ({neighbour})" if isinstance(neighbour, str) else ""


class SparseUpload(ClaimKind):
    """Audit one client's gated sparse upload: the private variant's certified ε lower bound on its worst input pair must stay within its stated ε (its bound on neighbouring local datasets is reported), and the plain upload's bound on neighbouring datasets within ``plain_claimed_epsilon`` when the plan states one (else it is reported next to it, with the bytes per client per round against dense FedAvg)."""

    evidence_fields = {
        "epsilon_stated": Field("stated ε of the private upload"),
        "epsilon_private_worst_lower": Field("certified lower bound on ε (private, worst pair)"),
        "violation": Field("violation detected"),
        "epsilon_plain_stated": Field("stated ε of the plain upload"),
        "epsilon_plain_lower": Field("certified lower bound on ε (plain, one record)"),
        "epsilon_worst_pair": Field("ε of the worst pair"),
        "worst_pair_exact": Field("that ε is exact"),
        "worst_claim_ratio": Field("certified share of the stated ε"),
        "epsilon_private_lower": Field("certified lower bound on ε (private, one record)"),
        "bytes_private": Field("private packet", "bytes"),
        "bytes_plain": Field("plain packet", "bytes"),
        "bytes_dense": Field("dense FedAvg upload (float32)", "bytes"),
        "bytes_ratio": Field("private ÷ dense bytes"),
        "max_bytes_ratio": Field("largest ratio allowed"),
        "private_violation": Field("private bound above its stated ε"),
        "plain_violation": Field("plain bound above its stated ε"),
        "private_data_violation": Field("one-record bound above the stated ε"),
        "epsilon_run": Field("ε the private upload runs at", "", "configuration"),
        "confidence": Field("confidence of certified bounds", "", "configuration"),
        "neighbour": Field("neighbouring datasets", "", "configuration"),
        "m": Field("coordinates uploaded (m)", "", "configuration"),
        "dim": Field("model dimension", "", "configuration"),
        "worst_mode": Field("how the worst pair was found", "", "configuration"),
        "worst_samples": Field("draws per input (worst pair)", "", "configuration"),
        "private_tightness": Field("one-record bound ÷ stated ε", "", "diagnostics"),
        "worst_tightness": Field("worst-pair bound ÷ the pair's ε", "", "diagnostics"),
        "worst_max_certifiable": Field("largest ε the worst-pair draws can certify", "", "diagnostics"),
        "max_certifiable": Field("largest ε the one-record draws can certify", "", "diagnostics"),
        "plain_max_certifiable": Field("largest ε the plain draws can certify", "", "diagnostics"),
        "audits": Field("raw audit records", "", "diagnostics"),
    }

    name = "sparse-upload"
    guarantee = "privacy"
    unit = "uploads"
    figures = ()
    tracked = (Tracked("epsilon_private_worst_lower", "certified ε (worst pair)", bound=Bound.LOWER),
               Tracked("epsilon_private_lower", "certified ε (private upload)", bound=Bound.LOWER),
               Tracked("epsilon_plain_lower", "certified ε (plain upload)", bound=Bound.LOWER))

    def keys(self) -> dict[str, Key]:
        return {
            "dim": Key("int", 64, low=4, high=4096, help="parameters |θ| of the client's linear model"),
            "density": Key("float", 0.05, low=0, high=1, open_low=True, open_high=True,
                           help="target density ρ: the upload sends m = ⌊ρ·|θ|⌋ coordinates"),
            "temperature": Key("float", 0.01, low=0, help="temperature T of the gates' entropy regularizer (0: FLoPS)"),
            "records": Key("int", 20, low=2, high=100_000, help="records in the client's local dataset"),
            "local_steps": Key("int", 5, low=1, high=1000, help="local training steps per upload"),
            "epsilon": Key("float", 1.0, low=0, open_low=True, help="the ε the private upload is run at"),
            "claimed_epsilon": Key("float", None, low=0, open_low=True,
                                   help="the ε the claim states for the private upload (default: epsilon); a claim "
                                        "below the ε the upload runs at is a mis-stated upload"),
            "plain_claimed_epsilon": Key("float", None, low=0, open_low=True,
                                         help="an ε the claim states for the plain gated upload (default: "
                                              "none, its bound is reported only); a certified bound above it is a "
                                              "violation"),
            "samples": Key("int", 2000, low=100, high=10_000_000, help="uploads drawn per dataset and audit"),
            "worst_samples": Key("int", 100_000, low=100, high=10_000_000,
                                 help="reports drawn per input for the private upload's worst-pair audit"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
            "max_bytes_ratio": Key("float", None, low=0, high=1, open_low=True,
                                   help="optional: the gated packet must be at most this share of the dense upload"),
            **engine_keys("the audits' draws (the uploads drawn on the data and the worst pair)"),
        }

    def dp_facts(self, p: Mapping[str, Any]) -> Mapping[str, Any]:
        """One client's upload randomized on the client, audited for one record of its local data."""
        stated = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        return {"trust": "local", "unit": "example", "delta": None, "flavours": None, "accountant": None,
                "epsilon": p["plain_claimed_epsilon"] if p["plain_claimed_epsilon"] is not None else stated}

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        verb = "is not" if expect == "violation" else "is"
        claim = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        what = f"The private gated upload {verb} {claim:g}-DP"
        if p["plain_claimed_epsilon"] is not None:
            what = (f"The plain gated upload is not {p['plain_claimed_epsilon']:g}-DP" if expect == "violation"
                    else f"The plain gated upload is {p['plain_claimed_epsilon']:g}-DP and the private one {claim:g}-DP")
        return (f"{what} (ρ = {p['density']:g}, |θ| = {p['dim']}): audited on the private mechanism's worst input "
                f"pair, with one client record's leak (neighbouring datasets) next to it")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return 2 * 2 * p["samples"] + 2 * p["worst_samples"]

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every upload drawn (:meth:`work_units`, and the auditor self-tests' draws of the
        mechanism) costs ``records × local_steps × dim`` operations of local training and gating at
        :data:`OPS_PER_SECOND` (measured at the defaults: 1.5 ms an upload; an overestimate for the
        mechanism's own draws, which train nothing)."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        from fedaudit.audit.self_tests import planted_samples, self_test_samples

        stated = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        checks = 2 * (self_test_samples(p["worst_samples"], p["confidence"])
                      + planted_samples(p["worst_samples"], stated, 0.0, p["confidence"]))
        uploads, per = self.work_units(p) + checks, p["records"] * p["local_steps"] * p["dim"]
        return Cost(memory=BASE_MEMORY + 8 * p["records"] * p["dim"],
                    seconds=uploads * per / OPS_PER_SECOND,
                    basis=f"(4·samples + 2·worst_samples + {checks} self-test draws) = {uploads} uploads × records × "
                          f"local_steps × dim = {uploads * per:.3g} operations")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """The self-tests of the auditor that decides the private claim, the worst-pair audit
        (:func:`~fedaudit.audit.sparse_upload.worst_pair_self_test`), with its pair, distinguisher,
        confidence and stated ε, each on a seed derived from the claim's: a null test — the
        private upload on the same input twice, ε_lb must be 0 — on 10% of ``worst_samples``
        (:func:`~fedaudit.audit.self_tests.self_test_samples`), and a planted violation — the
        upload with a fingerprint of its input appended, exact ε ∞ — on
        :func:`~fedaudit.audit.self_tests.planted_samples`. Neither trains: they draw from the
        mechanism, as the worst-pair audit does."""
        from fedaudit.audit.self_tests import planted_samples, self_test_samples
        from fedaudit.audit.sparse_upload import worst_pair_self_test
        from fedaudit.mechanisms.gated import GatedPrivateUpload, m_for_density
        from fedaudit.rng import derive_seed

        p = spec.params
        stated = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        mechanism = GatedPrivateUpload(p["dim"], m_for_density(p["density"], p["dim"]), p["epsilon"])
        common = dict(claimed_epsilon=stated, confidence=p["confidence"],
                      **{k: p[k] for k in ("backend", "workers") if p[k] is not None})
        n = p["worst_samples"]
        return [
            SelfTest("null: the private upload on the same input twice", "null",
                     lambda: worst_pair_self_test("null", mechanism, samples=self_test_samples(n, p["confidence"]),
                                                  seed=derive_seed(spec.seed, "self-test=null"), **common)),
            SelfTest("planted: the private upload with its input leaked (exact ε ∞)", "planted",
                     lambda: worst_pair_self_test("planted", mechanism,
                                                  samples=planted_samples(n, stated, 0.0, p["confidence"]),
                                                  seed=derive_seed(spec.seed, "self-test=planted"), **common)),
        ]

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.ldp import LOW_PAIR_POWER
        from fedaudit.audit.sparse_upload import audit_sparse_upload
        from fedaudit.rng import derive_seed

        p = spec.params
        stated = p["epsilon"] if p["claimed_epsilon"] is None else p["claimed_epsilon"]
        plain_stated = p["plain_claimed_epsilon"]
        common = dict(dim=p["dim"], density=p["density"], temperature=p["temperature"], epsilon=p["epsilon"],
                      records=p["records"], local_steps=p["local_steps"], samples=p["samples"],
                      confidence=p["confidence"], progress=progress,
                      **{k: p[k] for k in ("backend", "workers") if p[k] is not None})
        plain = audit_sparse_upload("plain", seed=derive_seed(spec.seed, "upload=plain"),
                                    claimed_epsilon=plain_stated, **common)
        private = audit_sparse_upload("private", seed=derive_seed(spec.seed, "upload=private"),
                                      claimed_epsilon=stated, pair="both", worst_samples=p["worst_samples"], **common)
        worst = private.worst
        ratio = private.bytes_sparse / private.bytes_dense
        decision = self.decide({"epsilon_private_worst_lower": worst.epsilon_lower, "epsilon_stated": stated,
                                "epsilon_plain_lower": plain.epsilon_lower, "epsilon_plain_stated": plain_stated,
                                "bytes_private": private.bytes_sparse, "bytes_dense": private.bytes_dense,
                                "max_bytes_ratio": p["max_bytes_ratio"]}, spec.expect)
        violated = decision.violated
        if violated != bool(worst.violation or plain.violation):
            raise AssertionError(f"the upload audits' violation flags ({worst.violation}, {plain.violation}) disagree "
                                 f"with the kind's rule")
        bytes_ok = p["max_bytes_ratio"] is None or ratio <= p["max_bytes_ratio"]  # the summary's words
        conf = f"{private.confidence:.0%}"
        if plain_stated is None:
            plain_part = (f"plain upload: certified ε ≥ {plain.epsilon_lower:.3f} (no claim; at most "
                          f"{plain.max_certifiable:.2f} certifiable with {plain.samples} draws)")
        else:
            plain_part = (f"plain upload: certified ε ≥ {plain.epsilon_lower:.3f} at {conf} "
                          + ("ABOVE" if plain.violation else "within") + f" its stated ε = {plain_stated:g}")
        which = "exact" if worst.pair_exact else "≥"
        private_part = (f"private upload: worst-pair certified ε ≥ {worst.epsilon_lower:.3f} at {conf} "
                        + ("ABOVE" if worst.violation else "within") + f" its stated ε = {stated:g}"
                        + ("" if stated == p["epsilon"] else f" (run at ε = {p['epsilon']:g})")
                        + f" (the pair's ε {which} {worst.epsilon_pair:.3f}, tightness {worst.tightness:.2f}, "
                        f"{worst.mode}); one record: certified ε ≥ {private.epsilon_lower:.3f}")
        # the upload a claim is mainly about comes first: the plain one when the plan states its ε
        parts = [*((private_part, plain_part) if plain_stated is None else (plain_part, private_part)),
                 f"bytes per client per round: plain {plain.bytes_sparse}, private {private.bytes_sparse}, "
                 f"dense FedAvg {private.bytes_dense} ({ratio:.1%})"
                 + ("" if bytes_ok else f" ABOVE the maximum ratio {p['max_bytes_ratio']:g}")]
        tightness = private.epsilon_lower / stated
        shown = worst.epsilon_lower / stated
        for name, res, eps in (("private worst-pair", worst, stated), ("plain", plain, plain_stated)):
            if eps is not None and res.max_certifiable <= eps and not res.violation:
                parts.append(f"with {res.samples} draws no bound on the {name} audit above {res.max_certifiable:.2f} "
                             f"is certifiable: a violation of ε = {eps:g} could not have been detected")
        if not worst.violation and shown < LOW_PAIR_POWER:
            parts.append(f"the worst-pair audit certified {shown:.2f} of the stated ε: its PASS does not show "
                         f"that ε is tight (more worst_samples certify more)")
        if spec.expect == "violation":
            parts.append("expected a violation, " + ("detected" if violated else "NOT detected"))
        evidence = {
            "epsilon_private_lower": private.epsilon_lower, "epsilon_stated": stated, "epsilon_run": p["epsilon"],
            "epsilon_plain_lower": plain.epsilon_lower, "epsilon_plain_stated": plain_stated,
            "private_tightness": tightness, "epsilon_private_worst_lower": worst.epsilon_lower,
            "epsilon_worst_pair": worst.epsilon_pair, "worst_pair_exact": worst.pair_exact,
            "worst_tightness": worst.tightness, "worst_claim_ratio": shown, "worst_mode": worst.mode,
            "worst_samples": worst.samples, "worst_max_certifiable": worst.max_certifiable,
            "private_data_violation": bool(private.violation),
            "violation": violated, "private_violation": bool(worst.violation),
            "plain_violation": bool(plain.violation), "confidence": private.confidence,
            "max_certifiable": private.max_certifiable, "plain_max_certifiable": plain.max_certifiable,
            "m": private.m, "dim": private.dim,
            "bytes_plain": plain.bytes_sparse, "bytes_private": private.bytes_sparse,
            "bytes_dense": private.bytes_dense, "bytes_ratio": ratio, "max_bytes_ratio": p["max_bytes_ratio"],
            "neighbour": private.neighbour, "seconds": plain.runtime_s + private.runtime_s,
            "audits": {"plain": plain.to_dict(), "private": private.to_dict()},
        }
        return Evidence(holds=decision.holds, violated=violated, evidence=evidence, summary="; ".join(parts))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The sparse-upload claim in words: the private upload's stated ε (and the plain one's,
        when stated) against certified lower bounds on the worst input pair and on one record,
        the bytes saved, and what lower bounds never show."""
        num = display_number
        stated, worst = number(ev, "epsilon_stated"), number(ev, "epsilon_private_worst_lower")
        plain_stated = number(ev, "epsilon_plain_stated", nullable=True)
        plain = number(ev, "epsilon_plain_lower")
        conf = percent(number(ev, "confidence"))
        ratio, most = number(ev, "bytes_ratio"), number(ev, "max_bytes_ratio", nullable=True)
        claimed = (f"One client's gated private sparse upload (the top-{num(ev.get('m'))} of {num(ev.get('dim'))} "
                   f"coordinates) is ε = {num(stated)}-DP for any two inputs"
                   + (f", and the plain upload is ε = {num(plain_stated)}-DP on datasets differing in one record"
                      if plain_stated is not None else "")
                   + (f"; the private packet is at most {percent(most)} of a dense FedAvg upload" if most is not None
                      else "") + "." + (" The plan expects this to be refuted." if expect == "violation" else ""))
        tested = (f"Black-box audits of the upload pipeline D ↦ upload(local_update(state, D)): the private upload on "
                  f"its worst input pair ({ev.get('worst_mode')}, {num(ev.get('worst_samples'))} draws per input) and "
                  f"both uploads on local datasets that differ in one outlier record{_neighbour_text(ev.get('neighbour'))}; "
                  f"certified lower bounds on ε at {conf}.")
        parts = []
        if plain_stated is not None:
            parts.append(f"the plain upload leaks ε ≥ {num(plain, 3)}, " + ("ABOVE" if plain > plain_stated else
                                                                          "within") + f" its stated {num(plain_stated)}")
        else:
            parts.append(f"the plain upload leaks ε ≥ {num(plain, 3)} on one record (no claim is made for it)")
        parts.append(f"the private upload's worst pair certifies ε ≥ {num(worst, 3)}, "
                     + ("ABOVE" if worst > stated else "within") + f" its stated {num(stated)}"
                     + f" ({num(number(ev, 'worst_claim_ratio'), 2)} of it)")
        parts.append(f"the private packet is {percent(ratio)} of a dense upload"
                     + ("" if most is None else (" (within " if ratio <= most else " (ABOVE ") + f"{percent(most)})"))
        means = "; ".join(parts)
        means = means[0].upper() + means[1:] + "."
        if expect == "violation":
            means += " The plan expected a violation: " + ("detected." if verdict == "PASS" else "NOT detected.")
        not_shown = ["that the private upload is ε-DP: a certified bound within the stated ε is a lower bound, not a "
                     "proof",
                     "what the rest of training releases (the model, other rounds): one upload is audited"]
        if worst <= stated and number(ev, "worst_claim_ratio") < 0.5:
            not_shown.append(f"that the stated ε is tight: the worst-pair audit certified only "
                             f"{num(number(ev, 'worst_claim_ratio'), 2)} of it")
        steps = []
        if verdict != "PASS" and expect == "pass":
            steps.append("raise the private upload's noise (lower epsilon) or state the ε it was shown to leak")
        elif verdict == "PASS" and expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case")
        else:
            steps.append(f"more worst_samples (now {num(ev.get('worst_samples'))}) certify more of the stated ε")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """A violation is a certified bound above a stated ε: the private upload's worst-pair bound
        ``epsilon_private_worst_lower > epsilon_stated``, or the plain upload's
        ``epsilon_plain_lower > epsilon_plain_stated`` when the plan states one (null: nothing is
        claimed). The claim holds when there is no violation and, with ``max_bytes_ratio`` set, the
        gated packet is at most that share of the dense upload, ``bytes_private / bytes_dense <=
        max_bytes_ratio`` (a byte budget exceeded fails the claim without being a privacy
        violation). The data-level bound of the private upload is reported, never read here, nor
        are the stored ``violation`` flags."""
        plain_stated = number(evidence, "epsilon_plain_stated", nullable=True)
        violated = bool(number(evidence, "epsilon_private_worst_lower") > number(evidence, "epsilon_stated")
                        or (plain_stated is not None and number(evidence, "epsilon_plain_lower") > plain_stated))
        most = number(evidence, "max_bytes_ratio", nullable=True)
        bytes_ok = most is None or number(evidence, "bytes_private") / number(evidence, "bytes_dense") <= most
        return Decision(holds=not violated and bytes_ok, violated=violated)
