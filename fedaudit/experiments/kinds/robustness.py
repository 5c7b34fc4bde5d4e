"""Claim kind ``robustness``: the (f, κ)-robustness of a server rule, audited.

ν̂ (a certified lower bound on the rule's κ: the configuration that attains it is in the
evidence) against ``max_nu`` and the published bound: holds when ν̂ ≤ max_nu and the published
bound is not violated. An infinite ν̂ (the rule is not (f, ν)-robust for any ν, e.g. the mean)
never holds, whatever max_nu, although the mean's published κ is ∞ too.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from fedaudit.experiments.components import (
    check_aggregator,
    check_attacks,
    flat_params,
    normalise_spec,
)
from fedaudit.experiments.evidence import robustness_caveats
from fedaudit.reports.diff import Tracked
from fedaudit.experiments.kind import (ClaimKind, Decision, Evidence, EvidenceError, Progress, SelfTest, fmt_number,
                                       mapping, number)
from fedaudit.experiments.keys import Key, engine_keys, key_error
from fedaudit.json import finite_or_none
from fedaudit.reports.explain import Explanation, Field, display_number

__all__ = ["Robustness", "worst_configuration"]


def exceeds_published(nu: float, bound: float | None) -> bool:
    """Whether ν̂ exceeds the published κ (:func:`fedaudit.audit.robustness.exceeds_bound`)."""
    from fedaudit.audit.robustness import exceeds_bound

    return exceeds_bound(nu, bound)


def worst_configuration(res: Any) -> dict[str, Any]:
    """The configuration that attains ν̂: its description, n, f, ν̂ and a one-line ``text``.

    Read from ``RobustnessAudit.worst`` (a mapping or an object) where the audit provides it:
    ``label`` (the audit's one-line description) or else ``attack``, plus ``stage``, ``shape``
    (appended when the description does not name it), ``n``, ``f`` and ``nu``/``nu_empirical``.
    Any field it lacks falls back to the audit's own ``worst_attack``, ``n``, ``f`` and
    ``nu_empirical``, so results without ``worst`` still name their worst case.
    """
    w = getattr(res, "worst", None) or None

    def get(*names: str) -> Any:
        for name in names:
            v = (w.get(name) if isinstance(w, dict) else getattr(w, name, None)) if w is not None else None
            if v is not None:
                return v
        return None

    desc = get("label", "attack")
    nu = get("nu", "nu_empirical")
    raw = float(nu if nu is not None else res.nu_empirical)
    out: dict[str, Any] = {"label": str(desc if desc is not None else res.worst_attack)}
    for key in ("attack", "stage"):
        if get(key) is not None:
            out[key] = str(get(key))
    shape = get("shape", "honest_shape")
    if shape is not None and str(shape) not in out["label"]:
        out["shape"] = str(shape)
    out.update(n=int(get("n") if get("n") is not None else res.n), f=int(get("f") if get("f") is not None else res.f),
               nu=finite_or_none(raw))
    nu_text = "∞" if math.isinf(raw) else fmt_number(out["nu"], ".3g")
    out["where"] = out["label"] + (f" / {out['shape']}" if "shape" in out else "") + f" at n={out['n']}, f={out['f']}"
    out["text"] = f"{out['where']}, ν̂={nu_text}"
    return out


#: core-seconds of one progress unit of a robustness audit, and per entry of its n × d input
UNIT_SECONDS = 0.07
CELL_SECONDS = 2e-6


class Robustness(ClaimKind):
    """ν̂ of the rule (a certified lower bound on its κ) against max_nu and the published bound."""

    name = "robustness"
    guarantee = "robustness"
    evidence_fields = {
        "nu_empirical": Field("ν̂, worst ratio found (lower bound on κ)"),
        "nu_bound": Field("published bound κ"),
        "max_nu": Field("plan's bound on ν̂ (max_nu)"),
        "bound_violation": Field("ν̂ above the published κ"),
        "unbounded": Field("unbounded (ν̂ = ∞)"),
        "worst": Field("configuration that attains ν̂"),
        "nu_lower": Field("any rule's ν ≥ f/(n−2f)"),
        "reaches_lower_bound": Field("ν̂ reaches f/(n−2f)"),
        "aggregator_params": Field("rule's parameters", "", "configuration"),
        "audit": Field("raw audit record", "", "diagnostics"),
    }
    unit = "configurations"
    figures = ("nu_vs_bound",)
    tracked = (Tracked("nu_empirical", "ν̂"),)

    #: ``d`` was the dimension's key before it became ``dim``, the word every other kind uses
    renamed_keys = {"d": "dim"}

    def keys(self) -> dict[str, Key]:
        return {
            "aggregator": Key("str", "nnm+cwtm",
                              help="registry spec, e.g. cwtm or nnm+cwtm; a stage may be 'package.module:attr'"),
            "n": Key("int", 21, low=1, high=1000, help="number of input vectors n"),
            "f": Key("int", 5, low=0, help="number of Byzantine vectors f (n > 2f)"),
            "dim": Key("int", 100, low=1, high=100_000, help="dimension of the vectors (plans before this release: d)"),
            "trials": Key("int", 200, low=1, help="honest draws spread over shapes × attacks"),
            "attacks": Key("list[str]", ["all"], help="attack names or 'all'"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params) "
                                                          "(bucketing's s, say)", examples=({"s": 2},)),
            "search_evals": Key("int", 60, low=0,
                                help="evaluations of the final search around the worst configuration"),
            "max_nu": Key("float", None, low=0, open_low=True,
                          help="largest acceptable ν̂ (the published bound must also hold)"),
            **engine_keys("the attack trials and the optimiser's local runs"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        if p["n"] <= 2 * p["f"]:
            raise key_error(where, "f", f"must satisfy n > 2f (n={p['n']}), got f={p['f']}")
        check_attacks(where, "attacks", p["attacks"], allow_all=True, allow_labelflip=False)
        p["attacks"] = "all" if p["attacks"] == ["all"] else p["attacks"]
        flat_params(where, p)
        check_aggregator(where, "aggregator", p["aggregator"], p["f"], p["n"], "n", p["aggregator_params"])
        p["aggregator"] = normalise_spec(p["aggregator"])

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        attacks = "all attacks" if p["attacks"] == "all" else "/".join(a.upper() for a in p["attacks"])
        bound = f", claimed ν ≤ {p['max_nu']:g}" if p["max_nu"] is not None else ""
        # worded as what was audited, not as its outcome: a FAIL (e.g. the mean's ν̂ = ∞) must not
        # sit under a title saying the rule "is robust"
        return f"Robustness of {p['aggregator'].upper()} at n={p['n']}, f={p['f']} under {attacks}{bound}"

    def work_units(self, p: Mapping[str, Any]) -> int:
        from fedaudit.audit.robustness import progress_units

        # run passes no search budget, so the optimiser runs with the defaults
        return progress_units(p["f"], p["trials"], p["search_evals"], None, dim=p["dim"], aggregator=p["aggregator"],
                              n=p["n"])

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Each progress unit (:meth:`work_units`: a trial, a hill-climb step, a restart of the
        optimiser) costs :data:`UNIT_SECONDS` plus :data:`CELL_SECONDS` per entry of the n × d input
        (measured on cwtm and krum at n = 7..31, d = 100..1000); the trials hold a few n × d float
        matrices and Krum-like rules n² distances."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        from fedaudit.audit.self_tests import SELF_TEST_FRACTION

        # the two self-tests audit the mean at SELF_TEST_FRACTION of the trials and search steps each
        units, cells = self.work_units(p) * (1 + 2 * SELF_TEST_FRACTION), p["n"] * p["dim"]
        return Cost(memory=BASE_MEMORY + 16 * 8 * cells + 8 * p["n"] ** 2,
                    seconds=units * (UNIT_SECONDS + CELL_SECONDS * cells),
                    basis=f"{units:.0f} trials and search steps (trials, search_evals; auditor self-tests included) "
                          f"on n × d = {cells:.3g} inputs")

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """The robustness auditor's self-tests at the claim's n, dimension and attacks, with
        10% of its trials and search steps (:data:`~fedaudit.audit.self_tests.SELF_TEST_FRACTION`)
        and seeds derived from its seed: a null test — the mean without Byzantine clients, κ = 0,
        so ν̂ must be 0 — and, when f > 0, a planted violation — the mean with the claim's f
        Byzantine clients, κ = ∞, so ν̂ must exceed ``max_nu`` (∞ when unset)
        (:func:`~fedaudit.audit.self_tests.robustness_self_test`)."""
        from fedaudit.audit.self_tests import SELF_TEST_FRACTION, robustness_self_test
        from fedaudit.rng import derive_seed

        p = spec.params
        common = dict(n=p["n"], dim=p["dim"], attacks=p["attacks"],
                      trials=max(1, math.ceil(SELF_TEST_FRACTION * p["trials"])),
                      search_evals=math.ceil(SELF_TEST_FRACTION * p["search_evals"]),
                      engine={k: p[k] for k in ("backend", "workers") if p[k] is not None})
        tests = [SelfTest("null: the mean without Byzantine clients (κ = 0)", "null",
                          lambda: robustness_self_test("null", f=p["f"], seed=derive_seed(spec.seed, "self-test=null"),
                                                       **common))]
        if p["f"] > 0:
            tests.append(SelfTest(f"planted: the mean with f = {p['f']} Byzantine clients (κ = ∞)", "planted",
                                  lambda: robustness_self_test("planted", f=p["f"], threshold=p["max_nu"],
                                                               seed=derive_seed(spec.seed, "self-test=planted"),
                                                               **common)))
        return tests

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.robustness import audit_robustness
        from fedaudit.defenses.registry import make_aggregator

        p = spec.params
        params = dict(p["aggregator_params"] or {})
        rule = make_aggregator(p["aggregator"], p["f"], **params) if params else p["aggregator"]
        res = audit_robustness(rule, n=p["n"], f=p["f"], dim=p["dim"], trials=p["trials"], attacks=p["attacks"],
                               seed=spec.seed, search_evals=p["search_evals"], progress=progress,
                               **{k: p[k] for k in ("backend", "workers") if p[k] is not None})
        nu = res.nu_empirical
        decision = self.decide({"nu_empirical": nu, "nu_bound": res.nu_bound, "max_nu": p["max_nu"],
                                "audit": {"per_configuration": res.per_configuration}}, spec.expect)
        within_max = p["max_nu"] is None or nu <= p["max_nu"]  # the summary's words
        worst = worst_configuration(res)
        parts = [f"ν̂ = {fmt_number(nu)}, attained by {worst['where']}",
                 f"universal lower bound f/(n−2f) = {res.nu_lower:.4g}",
                 "published bound " + ("none" if res.nu_bound is None else fmt_number(res.nu_bound))
                 + (" VIOLATED" if res.violation else "")]
        if not math.isfinite(nu):
            parts.append("UNBOUNDED: ν̂ = ∞, the rule is not (f, ν)-robust for any ν")
        if p["max_nu"] is not None:
            parts.append(f"max_nu {p['max_nu']:g} " + ("met" if within_max else "EXCEEDED"))
            if p["max_nu"] < res.nu_lower:
                parts.append("note: max_nu is below the universal lower bound, no rule can meet it")
        evidence = {
            "nu_empirical": nu, **({"aggregator_params": params} if params else {}), "nu_bound": res.nu_bound,
            "nu_lower": res.nu_lower, "max_nu": p["max_nu"], "bound_violation": res.violation, "unbounded": res.unbounded,
            "reaches_lower_bound": res.reaches_lower_bound,
            "worst": {k: v for k, v in worst.items() if k not in ("text", "where")},
            "audit": res.to_dict(),
        }
        top = dict(list(res.per_configuration.items())[:12])
        rule_name = res.aggregator + ("" if not params else "(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")")
        plots = ({"type": "nu_vs_bound", "title": f"ν̂ per configuration — {rule_name}; worst: {worst['text']}",
                  "configurations": top, "nu_bound": res.nu_bound, "nu_lower": res.nu_lower, "nu_empirical": nu,
                  "nu_max": p["max_nu"]},)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary="; ".join(parts),
                        plots=plots, caveats=tuple(robustness_caveats(res)))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The robustness claim in words: (f, κ)-robustness of the rule, the omniscient attacker
        and search that produced ν̂, what ν̂ is (a lower bound on κ: an attack found it), against
        the plan's bound and the published κ (re-verified or not), and the next step."""
        num = display_number
        audit = ev.get("audit") or {}
        p = {**audit, **dict(ev.get("parameters") or {})}
        rule, n, f = p.get("aggregator", "the rule"), p.get("n"), p.get("f")
        nu, bound, cap = number(ev, "nu_empirical"), number(ev, "nu_bound", nullable=True), \
            number(ev, "max_nu", nullable=True)
        lower = number(ev, "nu_lower")
        verified = bool((audit.get("bound") or {}).get("verified", True))
        worst = ev.get("worst") or {}
        goals = ([f"{num(cap)} (the plan's max_nu)"] if cap is not None else []) + (
            [f"the published κ = {num(bound)}"] if bound is not None else [])
        claimed = (f"The aggregation rule {rule} is (f, κ)-robust at n = {n}, f = {f}: whatever f clients send, the "
                   f"squared distance of its output to the honest clients' mean is at most κ times their spread "
                   f"(mean squared distance to that mean)" + (f", and no attack drives that ratio ν above "
                                                              f"{' or '.join(goals)}" if goals else "") + "."
                   + (" The plan expects this to be refuted." if expect == "violation" else ""))
        attacks = ", ".join(map(str, p.get("attacks") or [])) or "none"
        tested = (f"Omniscient Byzantine threat model: f = {f} of n = {n} clients know every honest input and the rule. "
                  f"{num(p.get('trials'))} trials of the attacks {attacks} and an optimiser search over all inputs "
                  f"({num(p.get('search_evals'))} evaluations) in dimension {num(p.get('dim', p.get('d')))}; ν̂ is the "
                  f"largest ratio any of them produced.")
        where = worst.get("label", "?")
        if not math.isfinite(nu):
            means = "ν̂ = ∞: an attack drove the output arbitrarily far, so the rule is not (f, κ)-robust for any κ."
        else:
            means = f"The worst case found is ν̂ = {num(nu, 3)} ({where}): the rule's true κ is at least this."
            if bound is not None:
                means += (" It EXCEEDS the published κ = " + num(bound) + ": the bound does not hold for this "
                          "implementation (or its recorded formula is wrong)." if exceeds_published(nu, bound) else
                          f" It stays within the published κ = {num(bound)}.")
            if cap is not None:
                means += f" The plan's bound ν̂ ≤ {num(cap)} is " + ("met." if nu <= cap else "EXCEEDED.")
            if nu < lower:
                means += (f" ν̂ is below f/(n−2f) = {num(lower)}, which no rule's κ can beat: the attacks did not find "
                          f"the worst case, so ν̂ understates κ.")
            elif nu <= lower * 1.01:
                means += (f" ν̂ equals f/(n−2f) = {num(lower)}, the least any rule can guarantee: on what the attacks "
                          f"found, the rule is as robust as any rule can be.")
        not_shown = ["that the rule is (f, κ)-robust: ν̂ is what the attacks found, a lower bound on κ; a stronger "
                     "attack may find more"]
        if bound is not None and not verified:
            not_shown.append(f"that the published κ = {num(bound)} is right: its formula was recorded from the paper "
                             f"and not re-verified, so staying within it is only as good as that formula")
        if bound is None and cap is None:
            not_shown.append("any bound: the rule has no published κ and the plan set no max_nu")
        not_shown.append("how training behaves: ν̂ is about one aggregation step (stress and convergence claims test "
                         "whole training runs)")
        steps = []
        if verdict == "PASS" and expect == "pass":
            steps.append(f"a stronger search (raise search_evals, now {num(p.get('search_evals'))}, or trials) to "
                         f"look for a worse configuration")
            if cap is None:
                steps.append("set max_nu to the κ your convergence analysis needs: without it only the published "
                             "bound is checked")
        elif expect == "pass":
            steps.append(f"replay the worst configuration ({where}) to confirm it, then use a rule with a smaller κ "
                         f"(e.g. with NNM or bucketing before it) or fewer Byzantine clients")
        elif verdict == "PASS":
            steps.append("nothing to fix: keep the claim as a regression case")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """ν̂ is re-derived from the recorded rows, the largest ν of ``audit.per_configuration`` (0
        when the rule broke down on every configuration), and must be the recorded
        ``nu_empirical``. The claim holds when ν̂ is finite, ν̂ ≤ ``max_nu`` (when set) and ν̂ does
        not exceed the published bound ``nu_bound`` (when the rule has one;
        :func:`~fedaudit.audit.robustness.exceeds_bound`); otherwise it is violated. An infinite ν̂
        (the rule is not (f, ν)-robust for any ν, e.g. the mean) is a violation whatever
        ``max_nu`` and even where the published κ is ∞ too: ∞ ≤ ∞ is no robustness guarantee. The
        stored ``bound_violation`` and ``unbounded`` flags are not read."""
        from fedaudit.audit.robustness import exceeds_bound

        per = mapping(mapping(evidence, "audit"), "per_configuration")
        nu = max((number(per, label) for label in per), default=0.0)
        recorded = number(evidence, "nu_empirical")
        if recorded != nu:
            raise EvidenceError(f"evidence 'nu_empirical' is {recorded!r}, but the largest ν of "
                                f"audit.per_configuration is {nu!r}")
        cap = number(evidence, "max_nu", nullable=True)
        holds = (math.isfinite(nu) and (cap is None or nu <= cap)
                 and not exceeds_bound(nu, number(evidence, "nu_bound", nullable=True)))
        return Decision(holds=holds, violated=not holds)
