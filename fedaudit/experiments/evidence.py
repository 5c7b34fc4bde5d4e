"""Evidence pieces that several claim kinds share with each other or with the CLI.

A claim kind module holds one :class:`~fedaudit.experiments.kind.ClaimKind` and the evidence
formatting only it uses; what two kinds (or a kind and a ``fedaudit audit`` command) both need
lives here, so no kind imports another.

* The canary audits of DP training — the ``dpsgd`` and ``dp-fedavg`` kinds, ``fedaudit audit
  dpsgd|dp-fedavg --plot``: their plan keys (:func:`canary_audit_keys`), their decision rule
  (:func:`canary_decision`), evidence and summary (:func:`canary_evidence`), figure
  (:func:`canary_plot`), the one-run cap (:func:`one_run_ceiling`), their plain-language account
  (:func:`canary_explanation`), evidence layout (:data:`CANARY_FIELDS`) and the auditor's
  self-tests (:func:`canary_self_tests`).
* Robustness audits — the ``robustness`` kind and ``fedaudit audit robustness``:
  :func:`robustness_caveats`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from fedaudit.experiments.keys import Key, engine_keys
from fedaudit.experiments.kind import Decision, Evidence, SelfTest, fmt_number, number
from fedaudit.guarantees import Bound
from fedaudit.reports.diff import Tracked
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["CANARY_TRACKED", "canary_audit_keys", "canary_claimed_epsilon", "canary_claimed_text", "canary_decision", "canary_evidence",
           "canary_self_tests", "canary_plot", "one_run_ceiling", "canary_explanation", "CANARY_FIELDS",
           "robustness_caveats", "CANARY_SETUP_SECONDS"]


#: the numbers ``fedaudit diff`` compares in a DP-SGD or DP-FedAvg canary audit: the accountant's ε
#: and the certified one-run lower bounds (the GDP estimate is not a bound and is left out)
CANARY_TRACKED = (Tracked("accountant_epsilon", "accountant ε", bound=Bound.UPPER),
                  Tracked("epsilon_one_run", "certified one-run ε (Steinke)", bound=Bound.LOWER),
                  Tracked("epsilon_one_run_fdp", "certified one-run ε (f-DP)", bound=Bound.LOWER))


#: core-seconds a canary audit of DP training needs before its first step (Opacus, the model, the
#: canaries; measured: 6-7 s for 60 to 240 DP-SGD steps on the built-in data)
CANARY_SETUP_SECONDS = 10.0


def canary_audit_keys(count: str, count_help: str, max_canaries: int) -> dict[str, Key]:
    """The keys DP-SGD and DP-FedAvg claims share (``max_canaries``: the audit's own limit)."""
    return {
        "noise_multiplier": Key("float", low=0, open_low=True, help="the noise multiplier training uses"),
        "claimed_noise_multiplier": Key("float", None, low=0, open_low=True,
                                        help="what the accountant is told (default: noise_multiplier); "
                                             "noise_multiplier = claimed/10 is an under-calibrated run"),
        "sample_rate": Key("float", low=0, high=1, open_low=True, help="Poisson sampling rate per " + count_help),
        count: Key("int", low=1, high=1_000_000, help=f"number of {count}"),
        "claimed_epsilon": Key("float", None, low=0, open_low=True,
                               help="the claim: the run is (claimed_epsilon, delta)-DP (default: the accountant's "
                                    "ε of the claimed configuration, so that the claim is the accountant's own and "
                                    "a certified bound above it is a violation)"),
        "delta": Key("float", 1e-5, low=0, high=1, open_low=True, open_high=True, help="δ of the claim and the audit"),
        "canaries": Key("int", 1000, low=20, high=max_canaries, help="canaries, each included with probability 1/2"),
        "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
        "curve_points": Key("int", 30, low=2, high=200, help="points of the accountant's ε curve"),
        **engine_keys("the accountant's ε curve (the training run itself is sequential)"),
    }


def canary_claimed_epsilon(p: Mapping[str, Any], res: Any) -> float:
    """The ε a canary-audit claim states: ``claimed_epsilon``, or when unset the accountant's ε of
    the claimed configuration (the claim is then the accountant's own)."""
    return res.accountant.epsilon if p["claimed_epsilon"] is None else p["claimed_epsilon"]


def canary_claimed_text(p: Mapping[str, Any]) -> str:
    """The claimed ε as a title writes it: the number, or "the accountant's ε" when unset."""
    return "the accountant's ε" if p["claimed_epsilon"] is None else f"{p['claimed_epsilon']:g}"


def one_run_ceiling(canaries: int, delta: float, confidence: float) -> float:
    """The largest ε a one-run audit of ``canaries`` canaries can certify: every canary guessed,
    all correctly (Steinke, Nasr, Jagielski 2023; 1000 canaries at δ = 1e-5: ≈ 5.78)."""
    from fedaudit.audit.one_run import one_run_epsilon

    return one_run_epsilon(canaries, canaries, canaries, delta=delta, confidence=confidence)


def canary_decision(evidence: Mapping[str, Any]) -> Decision:
    """The decision of a DP-SGD or DP-FedAvg canary audit from its recorded numbers. With
    ε_cert = max(``epsilon_one_run``, ``epsilon_one_run_fdp``) — the Steinke bound and its f-DP
    refinement on the (ε, δ)-DP curve, both certified — a violation is ε_cert above the
    accountant's ε (``accountant_epsilon``) or above the claim (``claimed_epsilon``); the claim
    holds when ``accountant_epsilon <= claimed_epsilon`` and there is no violation. The GDP
    estimate is never read, nor the stored ``violation``/``accountant_violated`` flags (they
    follow from these numbers)."""
    accountant = number(evidence, "accountant_epsilon")
    claimed = number(evidence, "claimed_epsilon")
    certified = max(number(evidence, "epsilon_one_run"), number(evidence, "epsilon_one_run_fdp"))
    refuted = bool(certified > accountant or certified > claimed)
    return Decision(holds=bool(accountant <= claimed) and not refuted, violated=refuted)


def canary_evidence(res: Any, *, count_name: str, count: int, claimed_epsilon: float, delta: float,
                    confidence: float, curve: tuple[list[int], list[float]], expect: str, what: str,
                    extra: Mapping[str, Any],
                    decide: Callable[[Mapping[str, Any], str], Decision] | None = None) -> Evidence:
    """The evidence, verdict inputs, summary and figure of a DP-SGD or DP-FedAvg canary audit
    (``res`` a DPSGDAudit or DPFedAvgAudit). ``decide`` (the kind's :meth:`~ClaimKind.decide`;
    default :func:`canary_decision`) gives the verdict inputs."""
    acc = res.accountant
    bounds = {"one_run": res.one_run.epsilon, "one_run_fdp": res.one_run_fdp.epsilon}
    numbers = {"accountant_epsilon": acc.epsilon, "claimed_epsilon": claimed_epsilon,
               "epsilon_one_run": bounds["one_run"], "epsilon_one_run_fdp": bounds["one_run_fdp"]}
    decision = canary_decision(numbers) if decide is None else decide(numbers, expect)
    within = acc.epsilon <= claimed_epsilon  # the summary's words; the verdict is the decision's
    refuted = decision.violated
    cap = one_run_ceiling(res.canaries, delta, confidence)
    conf = f"{confidence:.0%}"
    parts = [f"accountant ε = {fmt_number(acc.epsilon, '.4g')} ({acc.method}) at δ = {delta:g} "
             + ("within" if within else "ABOVE") + f" the claimed ε = {claimed_epsilon:g}",
             f"certified one-run ε ≥ {res.one_run.epsilon:.3f} (Steinke), ≥ {res.one_run_fdp.epsilon:.3f} (f-DP) at "
             f"{conf}; GDP estimate {fmt_number(res.gdp.epsilon, '.3f')} (not a bound)"]
    if refuted:
        over = "the accountant's ε" if res.violation else "the claimed ε"
        parts.append(f"VIOLATION: a certified bound exceeds {over}")
    else:
        parts.append("no violation detected")
    if claimed_epsilon > cap:
        parts.append(f"with {res.canaries} canaries the Steinke bound cannot exceed ε = {cap:.3g} (below the claim)")
    parts.append(f"{what}; {res.seconds:.1f} s")
    if expect == "violation":
        parts.append("expected a violation, " + ("detected" if refuted else "NOT detected"))
    xs, ys = curve
    evidence = {
        "accountant_epsilon": acc.epsilon, "accountant_method": acc.method, "claimed_epsilon": claimed_epsilon,
        "delta": delta, "within_claim": within,
        "epsilon_one_run": bounds["one_run"], "epsilon_one_run_fdp": bounds["one_run_fdp"],
        "epsilon_gdp_estimate": res.gdp.epsilon, "confidence": confidence, "violation": refuted,
        "accountant_violated": bool(res.violation), "one_run_ceiling": cap,
        "noise_multiplier": res.noise_multiplier, "claimed_noise_multiplier": res.claimed_noise_multiplier,
        "canaries": res.canaries, "canaries_in": res.canaries_in, **extra, "seconds": res.seconds,
        "curve": {count_name: xs, "epsilon": ys},
        "audit": res.to_dict(),
    }
    plot = canary_plot(res, count_name=count_name, count=count, claimed_epsilon=claimed_epsilon, delta=delta,
                      confidence=confidence, curve=curve)
    caveats = [f"the GDP ε {fmt_number(res.gdp.epsilon, '.3f')} is an estimate, not a bound: the verdict rests on "
               f"the certified one-run bounds"]
    if claimed_epsilon > cap and not refuted:
        caveats.append(f"with {res.canaries} canaries the Steinke bound cannot exceed ε = {cap:.3g}, below the claimed "
                       f"{claimed_epsilon:g}: only the accountant could have shown a violation")
    return Evidence(holds=decision.holds, violated=refuted, evidence=evidence, summary="; ".join(parts),
                    plots=(plot,), caveats=tuple(caveats))


def canary_self_tests(spec: Any, evidence: Mapping[str, Any]) -> list[SelfTest]:
    """The one-run canary auditor's self-tests of a DP-SGD or DP-FedAvg claim, at its canary count,
    δ, confidence and claimed ε, on seeds derived from its seed
    (:func:`~fedaudit.audit.self_tests.one_run_self_test`): a null test — canary scores drawn
    independently of membership, certified ε must be 0 — and a planted violation — canaries
    without noise, certified ε must exceed the claimed ε. Both score canaries directly, no
    training: they cost nothing next to the claim's run."""
    from fedaudit.audit.self_tests import one_run_self_test
    from fedaudit.rng import derive_seed

    common = dict(canaries=int(number(evidence, "canaries")), delta=number(evidence, "delta"),
                  confidence=number(evidence, "confidence"), claimed_epsilon=number(evidence, "claimed_epsilon"))
    return [SelfTest("null: canary scores independent of membership", "null",
                     lambda: one_run_self_test("null", seed=derive_seed(spec.seed, "self-test=null"), **common)),
            SelfTest("planted: canaries without noise", "planted",
                     lambda: one_run_self_test("planted", seed=derive_seed(spec.seed, "self-test=planted"), **common))]


def canary_plot(res: Any, *, count_name: str, count: int, claimed_epsilon: float | None, delta: float,
                confidence: float, curve: tuple[list[int], list[float]]) -> dict[str, Any]:
    """The ``epsilon_vs_steps`` specification of a canary audit: the accountant's curve, the claim
    (None: no line) and the Steinke, f-DP (certified) and GDP (estimate) points at the last count."""
    xs, ys = curve
    points = [{"label": label, "steps": count, "epsilon": r.epsilon, "confidence": r.confidence,
               "epsilon_bound": r.epsilon_bound.value, **({} if r.epsilon_bound.certified else {"certified": False})}
              for label, r in (("one-run (Steinke)", res.one_run), ("one-run f-DP", res.one_run_fdp), ("GDP", res.gdp))]
    return {"type": "epsilon_vs_steps", "title": f"accountant ε against {count_name} (claimed configuration) and "
                                                 f"the audited lower bounds at the last {count_name[:-1]}",
            "steps": xs, "epsilon": ys, "epsilon_claimed": claimed_epsilon, "delta": delta, "x_label": count_name,
            "accountant": f"accountant ({res.accountant.method.upper()})", "lower_bounds": points}


#: the evidence table of a canary audit (``dpsgd``, ``dp-fedavg``): the decisive numbers first
CANARY_FIELDS: dict[str, Field] = {
    "claimed_epsilon": Field("claimed ε"),
    "accountant_epsilon": Field("accountant's ε (claimed configuration)"),
    "epsilon_one_run": Field("certified lower bound on ε (one-run, Steinke)"),
    "epsilon_one_run_fdp": Field("certified lower bound on ε (one-run, f-DP)"),
    "violation": Field("violation detected (a certified bound above either ε)"),
    "within_claim": Field("accountant's ε within the claim"),
    "one_run_ceiling": Field("largest ε the Steinke bound can certify"),
    "epsilon_gdp_estimate": Field("GDP ε estimate (not a bound)"),
    "accountant_violated": Field("a certified bound above the accountant's ε"),
    "delta": Field("δ", "", "configuration"),
    "accountant_method": Field("accountant", "", "configuration"),
    "noise_multiplier": Field("noise multiplier trained with", "", "configuration"),
    "claimed_noise_multiplier": Field("noise multiplier the accountant is told", "", "configuration"),
    "canaries": Field("canaries", "", "configuration"),
    "canaries_in": Field("canaries included (drawn)", "", "configuration"),
    "confidence": Field("confidence of certified bounds", "", "configuration"),
    "accuracy": Field("test accuracy of the trained model", "", "diagnostics"),
    "test_accuracy": Field("test accuracy of the trained model", "", "diagnostics"),
    "clients": Field("honest clients", "", "configuration"),
    "training_seconds": Field("training time", "s", "diagnostics"),
    "curve": Field("accountant's ε curve (figure)", "", "diagnostics"),
    "audit": Field("raw audit record", "", "diagnostics"),
}

#: what each threat model of a canary audit lets the adversary see (:data:`fedaudit.audit.canaries.THREATS`)
_THREAT_WORDS = {
    "white-box": "white-box: planted gradient canaries, scored by the likelihood ratio of every intermediate model",
    "white-box-final": "white-box, final model only: planted gradient canaries, only the first and last models seen",
    "black-box": "black-box: mislabelled canary inputs, scored by the final model's loss on them",
}


def canary_explanation(ev: Mapping[str, Any], verdict: str, expect: str, *, level: str,
                       count_name: str) -> Explanation:
    """The plain-language account of a DP-SGD or DP-FedAvg canary audit (``level``: "example"
    or "client"; ``count_name``: "steps" or "rounds") from its recorded evidence: the accountant's
    ε of the claimed configuration, the certified one-run bounds of one real training run, what
    such lower bounds never show (that the run is DP; they are far below the true ε), and the
    next step (the calibration fix, more canaries, a stronger threat model)."""
    num = display_number
    claimed, delta = number(ev, "claimed_epsilon"), number(ev, "delta")
    acc, steinke, fdp = number(ev, "accountant_epsilon"), number(ev, "epsilon_one_run"), number(ev, "epsilon_one_run_fdp")
    cap, conf = number(ev, "one_run_ceiling"), number(ev, "confidence")
    sigma, told = number(ev, "noise_multiplier"), number(ev, "claimed_noise_multiplier")
    audit = ev.get("audit") or {}
    threat = str(audit.get("threat", "white-box"))
    count = audit.get(count_name)
    m = int(number(ev, "canaries"))
    certified = max(steinke, fdp)
    run = "DP-SGD training" if level == "example" else "DP-FedAvg training"
    claimed_text = (f"The {run} run is (ε = {num(claimed)}, δ = {num(delta)})-DP at the {level} level: adding or removing "
                    f"one {level}'s data changes the probability of any trained model by at most a factor e^ε "
                    f"(up to δ).")
    if expect == "violation":
        claimed_text += " The plan expects this claim to be refuted (a broken configuration kept as a regression case)."
    tested = (f"Two things. (1) The {ev.get('accountant_method')} accountant's ε for the configuration as claimed "
              f"(noise multiplier {num(told)}, {num(count)} {count_name}). (2) One real training run with noise "
              f"multiplier {num(sigma)} and {num(m)} canaries, each included with probability ½ — threat model "
              f"{_THREAT_WORDS.get(threat, threat)} — from which a one-run audit (Steinke, Nasr, Jagielski 2023, and "
              f"its f-DP refinement) certifies lower bounds on ε at {percent(conf)} confidence.")
    if certified > acc or certified > claimed:
        over = "the accountant's ε" if certified > acc else "the claimed ε"
        means = (f"The run leaks more than accounted: a certified lower bound ε ≥ {num(certified, 3)} exceeds {over} "
                 f"({num(acc if certified > acc else claimed)}). The training does not do what its accountant is told"
                 + (f" (it trains with noise multiplier {num(sigma)}, the accountant assumes {num(told)})."
                    if sigma != told else "."))
    else:
        means = (f"The accountant's ε = {num(acc)} is " + ("within" if acc <= claimed else "ABOVE")
                 + f" the claimed {num(claimed)}, and the certified one-run bounds (≥ {num(steinke, 3)}, "
                   f"≥ {num(fdp, 3)} by f-DP) stay below both: no violation detected.")
        if claimed > cap:
            means += (f" With {num(m)} canaries the Steinke bound cannot exceed ε = {num(cap, 3)}, below the claim: "
                      f"only the accountant or the f-DP refinement could have shown a violation.")
    if expect == "violation":
        means += " The plan expected a violation: " + ("detected." if verdict == "PASS" else "NOT detected.")
    not_shown = [f"that the run is (ε, δ)-DP: one-run bounds are lower bounds, usually far below the true ε — they "
                 f"catch implementations that leak far more than accounted, not small miscalibrations",
                 f"the GDP estimate {num(ev.get('epsilon_gdp_estimate'), 3)}: it is an estimate, not a bound, and no "
                 f"verdict rests on it",
                 "releases beyond this run (hyper-parameter tuning, repeated training, published metrics)"]
    if threat != "white-box":
        not_shown.append("what an adversary who sees every intermediate model could extract (threat = \"white-box\")")
    steps = []
    if verdict != "PASS" and expect == "pass" and sigma != told:
        steps.append(f"fix the calibration: train with the noise multiplier the accountant is told ({num(told)}), "
                     f"not {num(sigma)}")
    elif verdict != "PASS" and expect == "pass" and acc > claimed:
        steps.append(f"claim what the accountant gives (ε = {num(acc)}) or raise the noise multiplier until its ε is "
                     f"within {num(claimed)}")
    elif verdict == "PASS" and expect == "violation":
        steps.append("nothing to fix: keep the claim as a regression case")
    else:
        if claimed > cap:
            steps.append(f"more canaries (now {num(m)}) raise the Steinke ceiling ε = {num(cap, 3)} toward the claim")
        if threat != "white-box":
            steps.append("a white-box audit (threat = \"white-box\": every intermediate model seen) certifies more")
        steps.append("the accountant is the guarantee: check that the deployed code is configured exactly as the "
                     "claimed configuration (noise multiplier, sampling rate, steps)")
    return Explanation(claimed=claimed_text, tested=tested, means=means, does_not_show=tuple(not_shown),
                       next_steps=tuple(steps))


def robustness_caveats(res: Any) -> list[str]:
    """The caveat of a robustness audit measured against a published bound that was not
    re-verified (:class:`~fedaudit.defenses.kappa.KappaBound` ``verified=False``): staying within
    it is only as good as the recorded formula."""
    bound = getattr(res, "bound", None) or {}
    if res.nu_bound is None or bound.get("verified", True):
        return []
    return [f"the published bound κ = {fmt_number(res.nu_bound)} ({bound.get('formula', 'formula not recorded')}) "
            f"was not re-verified against the paper: being within it is only as good as the recorded formula"]
