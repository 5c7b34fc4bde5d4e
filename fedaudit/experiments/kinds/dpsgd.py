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

from typing import Any, Callable, Mapping

from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, fmt_number, number
from fedaudit.experiments.keys import Key

__all__ = ["DPSGD", "cumulative", "audit_evidence", "canary_decision", "audit_plot", "one_run_ceiling",
           "accountant_curve", "audit_keys"]


def cumulative(progress: Progress) -> Callable[[int], None]:
    """The audits call ``progress(k)`` with the number of steps (rounds) done so far; the runner
    counts increments. This adapter passes on ``k − (the last k)``."""
    last = [0]

    def advance(done: int) -> None:
        if done > last[0]:
            progress(done - last[0])
            last[0] = done

    return advance


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


def audit_evidence(res: Any, *, count_name: str, count: int, claimed_epsilon: float, delta: float,
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
    plot = audit_plot(res, count_name=count_name, count=count, claimed_epsilon=claimed_epsilon, delta=delta,
                      confidence=confidence, curve=curve)
    caveats = [f"the GDP ε {fmt_number(res.gdp.epsilon, '.3f')} is an estimate, not a bound: the verdict rests on "
               f"the certified one-run bounds"]
    if claimed_epsilon > cap and not refuted:
        caveats.append(f"with {res.canaries} canaries the Steinke bound cannot exceed ε = {cap:.3g}, below the claimed "
                       f"{claimed_epsilon:g}: only the accountant could have shown a violation")
    return Evidence(holds=decision.holds, violated=refuted, evidence=evidence, summary="; ".join(parts),
                    plots=(plot,), caveats=tuple(caveats))


def audit_plot(res: Any, *, count_name: str, count: int, claimed_epsilon: float | None, delta: float,
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


def accountant_curve(sigma: float, q: float, total: int, delta: float, method: str, points: int, final: float,
                     progress: Progress, *, backend: str | None = None, workers: int | None = None,
                     address: str | None = None) -> tuple[list[int], list[float]]:
    """ε after ``points`` counts from 1 to ``total`` of ``total`` Poisson-subsampled Gaussian steps
    (rounds), the last one ``final`` (the accountant's own value): each point is the accountant
    ``method`` of :data:`~fedaudit.accounting.ACCOUNTANTS` on ``dpsgd_event(σ, q, n)`` (one
    construction of the event's PLD, the accountant's), PLD at the coarser interval
    :data:`~fedaudit.experiments.kinds.accounting.CURVE_DISCRETIZATION` (still an upper bound). The
    points are independent and run as engine chunks (:func:`~fedaudit.experiments.kinds.accounting.run_curve`
    with ``backend``, ``workers``, ``address``), so the curve is bit-identical on every backend."""
    from fedaudit.engine import check_run_options
    from fedaudit.experiments.kinds.accounting import CURVE_DISCRETIZATION, curve_points, run_curve

    backend, workers, address = check_run_options(backend, workers, address)
    xs = curve_points(total, points)
    settings = {"discretization": CURVE_DISCRETIZATION} if method == "pld" else None
    ys = run_curve(_curve_chunk, (sigma, q, delta, method, settings), xs[:-1], progress,
                   {"backend": backend, "workers": workers, "address": address})
    progress(1)
    return xs, [*ys, final]


def _curve_chunk(task: tuple[tuple, list[int]]) -> list[float]:
    """An engine chunk of :func:`accountant_curve`: ε at δ after each of its counts n by the ``method``
    accountant with ``settings`` (None: its defaults). (Opacus's PRV ε moves in the last bit with the
    BLAS thread count; the engine runs every chunk with one thread on every backend, so the curve is
    the same on each.)"""
    (sigma, q, delta, method, settings), counts = task
    from fedaudit.accounting import account, dpsgd_event

    return [account(dpsgd_event(sigma, q, n), delta=delta, accountant=method, **(settings or {})).epsilon
            for n in counts]


#: core-seconds a canary audit of DP training needs before its first step, and per step (measured:
#: 6-7 s for 60 to 240 DP-SGD steps on the built-in data)
SETUP_SECONDS = 10.0
STEP_SECONDS = 5e-3


def audit_keys(count: str, count_help: str, max_canaries: int) -> dict[str, Key]:
    """The keys DP-SGD and DP-FedAvg claims share (``max_canaries``: the audit's own limit)."""
    from fedaudit.experiments.keys import engine_keys

    return {
        "noise_multiplier": Key("float", low=0, open_low=True, help="the noise multiplier training uses"),
        "claimed_noise_multiplier": Key("float", None, low=0, open_low=True,
                                        help="what the accountant is told (default: noise_multiplier); "
                                             "noise_multiplier = claimed/10 is an under-calibrated run"),
        "sample_rate": Key("float", low=0, high=1, open_low=True, help="Poisson sampling rate per " + count_help),
        count: Key("int", low=1, high=1_000_000, help=f"number of {count}"),
        "claimed_epsilon": Key("float", low=0, open_low=True, help="the claim: the run is (claimed_epsilon, delta)-DP"),
        "delta": Key("float", 1e-5, low=0, high=1, open_low=True, open_high=True, help="δ of the claim and the audit"),
        "canaries": Key("int", 1000, low=20, high=max_canaries, help="canaries, each included with probability 1/2"),
        "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
        "curve_points": Key("int", 30, low=2, high=200, help="points of the accountant's ε curve"),
        **engine_keys("the accountant's ε curve (the training run itself is sequential)"),
    }


class DPSGD(ClaimKind):
    """Train with Opacus DP-SGD once with canaries; the accountant must be within the claimed (ε, δ) and the audit must not refute it."""

    name = "dpsgd"
    guarantee = "privacy"
    unit = "steps"
    figures = ("epsilon_vs_steps",)

    def keys(self) -> dict[str, Key]:
        from fedaudit.accounting import accountants_for, dpsgd_event
        from fedaudit.audit.canaries import MAX_CANARIES, THREATS

        return {
            **audit_keys("steps", "step (examples)", MAX_CANARIES),
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

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        sigma = p["noise_multiplier"] if p["claimed_noise_multiplier"] is None else p["claimed_noise_multiplier"]
        verb = "is not" if expect == "violation" else "is"
        return (f"DP-SGD (σ = {sigma:g}, q = {p['sample_rate']:g}, {p['steps']} steps) {verb} "
                f"({p['claimed_epsilon']:g}, {p['delta']:g})-DP ({p['threat']} canary audit)")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["steps"] + p["curve_points"]

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """:data:`SETUP_SECONDS` (Opacus, the model, the canaries) and :data:`STEP_SECONDS` per
        training step; ``steps`` and ``canaries`` are bounded, so a claim stays within the budget."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        return Cost(memory=BASE_MEMORY, seconds=SETUP_SECONDS + p["steps"] * STEP_SECONDS,
                    basis=f"{p['steps']} steps")

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.dpsgd_audit import audit_dpsgd

        p = spec.params
        res = audit_dpsgd(noise_multiplier=p["noise_multiplier"], max_grad_norm=p["max_grad_norm"],
                          sample_rate=p["sample_rate"], steps=p["steps"], delta=p["delta"], canaries=p["canaries"],
                          dataset=p["dataset"], threat=p["threat"],
                          claimed_noise_multiplier=p["claimed_noise_multiplier"], seed=spec.seed,
                          progress=cumulative(progress), confidence=p["confidence"], accountant=p["accountant"],
                          learning_rate=p["learning_rate"])

        curve = accountant_curve(res.claimed_noise_multiplier, res.sample_rate, res.steps, p["delta"],
                                 res.accountant.method, p["curve_points"], res.accountant.epsilon, progress,
                                 backend=p["backend"], workers=p["workers"])
        what = f"{res.dataset}, {res.threat}, accuracy {res.accuracy:.3f}"
        return audit_evidence(res, count_name="steps", count=res.steps, claimed_epsilon=p["claimed_epsilon"],
                              delta=p["delta"], confidence=p["confidence"], curve=curve, expect=spec.expect,
                              what=what, extra={"accuracy": res.accuracy, "training_seconds": res.training_seconds},
                              decide=self.decide)

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """:func:`canary_decision`: the accountant's ε within the claimed ε and no certified one-run
        bound, max(Steinke, f-DP), above the accountant's ε or the claimed ε; such a bound is a
        detected violation."""
        return canary_decision(evidence)
