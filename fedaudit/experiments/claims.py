"""One runner per claim kind: run the audit a :class:`~fedaudit.experiments.plan.ClaimSpec` names and
turn its result into a :class:`~fedaudit.reports.model.Claim` (verdict, evidence, plot specs).

Verdicts. Each runner decides two things from the evidence: whether the claim *holds* and
whether a violation was *detected* with confidence. With ``expect = "pass"`` the verdict is
PASS when the claim holds, else FAIL; with ``expect = "violation"`` (a known-bad system kept as a
regression case) it is PASS when the violation is detected, else FAIL. INCONCLUSIVE marks a run
that raised (``error`` says why; see :mod:`fedaudit.experiments.runner`) and an ldp audit too weak
to mean anything (below).

* **ldp** — the certified lower bound ε_lb (at ``confidence``) against the claimed ε: a
  violation is ε_lb > ε_claimed (certified: P[false alarm] ≤ 1 − confidence); "holds" means no
  violation was detected by this audit — an audit can only refute an LDP claim, never prove it.
  The *pair power* ε_exact(pair)/ε_claimed bounds what the pair can show (:func:`pair_power`).
  With ``min_pair_power`` set, a run that certified no violation on a pair of lower (or
  unknown) power is INCONCLUSIVE whatever ``expect`` says: the absence of a violation on such a
  pair is evidence neither for nor against the claim. A certified violation is decisive at any
  power. The evidence lists the mechanism's own parameters (``Mechanism.params()``) and states
  the claimed ε (and δ, for approximate-DP mechanisms only) once.
* **variance** — MSE of private SSTQ at every k and the log–log slope of MSE on d/k. The claim
  holds when the CI's upper end meets ``max_mse``/``max_slope`` (lower end for ``min_slope``);
  a violation is detected when the CI lies entirely on the wrong side of a bound.
* **robustness** — ν̂ (a certified lower bound on the rule's κ: the configuration that attains it
  is in the evidence) against ``max_nu`` and the published bound: holds when ν̂ ≤ max_nu and the
  published bound is not violated.
* **stress** — every cell (aggregator × attack × f × β) must reach ``min_accuracy`` and stay at or
  below ``max_loss``; a diverged cell meets neither.
* **convergence** — rounds to a target loss L* (stated with its basis), speedups over the
  baseline (ratios of those rounds), whether each run reached a plateau (:func:`plateau_status`),
  final loss and accuracy against the optional thresholds; a diverged run meets none.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
from typing import Any, Callable

import numpy as np

from fedaudit.reports.model import Claim
from fedaudit.experiments.plan import ClaimSpec

__all__ = ["RUNNERS", "run_claim", "work_units", "trim"]

Advance = Callable[[int], None]

#: lists with more numbers than this are replaced by a short description in the evidence
MAX_NUMBERS = 512


# ----------------------------------------------------------------------------- helpers
def _count_numbers(value: Any) -> int:
    if isinstance(value, (list, tuple)):
        return sum(_count_numbers(v) for v in value)
    return 1 if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _shape(value: Any) -> list[int]:
    shape = []
    while isinstance(value, (list, tuple)):
        shape.append(len(value))
        value = value[0] if value else None
    return shape


def trim(value: Any, max_numbers: int = MAX_NUMBERS) -> Any:
    """``value`` with every list of more than ``max_numbers`` numbers (at any depth) replaced by
    ``{"omitted": "...", "shape": [...], "numbers": N}`` — raw inputs stay out of the report."""
    if isinstance(value, dict):
        return {k: trim(v, max_numbers) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        n = _count_numbers(value)
        if n > max_numbers:
            return {"omitted": f"{n} numbers (too large for the report)", "shape": _shape(value), "numbers": n}
        return [trim(v, max_numbers) for v in value]
    return value


def _finite_or_none(v: Any) -> float | None:
    if v is None:
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def _verdict(expect: str, holds: bool, violated: bool) -> str:
    if expect == "violation":
        return "PASS" if violated else "FAIL"
    return "PASS" if holds else "FAIL"


def _g(v: Any, spec: str = ".4g") -> str:
    if v is None:
        return "—"
    if isinstance(v, float) and math.isinf(v):
        return "∞" if v > 0 else "−∞"
    return format(v, spec)


def _claim(spec: ClaimSpec, verdict: str, evidence: dict[str, Any], summary: str, plots: list[dict],
           parameters: bool = True) -> Claim:
    """The Claim of a run. With ``parameters`` the plan's parameters that are set (not None) follow
    the results in the evidence, so a report shows what was found before how it was configured
    (kinds whose evidence states its own parameters pass False)."""
    if parameters:
        evidence = {**evidence, "parameters": {k: v for k, v in spec.params.items() if v is not None}}
    return Claim(id=spec.id, kind=spec.kind, title=spec.title, expect=spec.expect, verdict=verdict,
                 evidence=trim(evidence), summary=summary, plots=plots, seed=spec.seed)


def _z(confidence: float) -> float:
    from scipy import stats

    return float(stats.norm.isf((1 - confidence) / 2))


# ----------------------------------------------------------------------------- ldp
_LDP_PAIRS = ("antipodal", "flat", "zero-boundary")


def _ldp_pair(p: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    d, c = p["dim"], p["clip"]
    e = np.eye(d)
    if p["pair"] == "one-hot":
        return e[0], e[1]
    flat = c * np.ones(d) / np.sqrt(d)
    return {"antipodal": (c * e[0], -c * e[0]), "flat": (flat, -flat), "zero-boundary": (np.zeros(d), c * e[0])}[p["pair"]]


def _curve_sizes(p: dict[str, Any]) -> list[int]:
    n = p["samples"]
    return [n // 16, n // 4] if p["curve"] else []


def _ldp_units(p: dict[str, Any]) -> int:
    total = 2 * p["samples"] + 2 * sum(_curve_sizes(p))
    if p["pair"] == "search":
        candidates = 2 if p["mechanism"] == "rr" else 7 + 2 * 8  # structured pairs + 2 rounds × 8 local moves
        total += 2 * candidates * p["search_samples"]
    return total


def run_ldp(spec: ClaimSpec, advance: Advance) -> Claim:
    """Certify a lower bound on ε (pair given or searched); optionally at N/16 and N/4 as well."""
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.audit.pair_search import audit_worst_case
    from fedaudit.engine import derive_seed
    from fedaudit.mechanisms.registry import make_mechanism

    p = spec.params
    mech = make_mechanism(p["mechanism"], p["dim"], p["epsilon"], k=p["k"], levels=p["levels"], clip=p["clip"],
                          delta=p["delta"], rotate=p["rotate"])
    eps = p["claimed_epsilon"] if p["claimed_epsilon"] is not None else mech.epsilon
    delta = p["claimed_delta"] if p["claimed_delta"] is not None else mech.delta
    common = dict(epsilon=eps, delta=delta, confidence=p["confidence"], test=p["test"], progress=advance)
    if p["pair"] == "search":
        res = audit_worst_case(mech, clip=p["clip"], samples=p["samples"], search_samples=p["search_samples"],
                               seed=spec.seed, **common)
        x0, x1 = np.asarray(res.x0), np.asarray(res.x1)
        pair_name = res.search["best"]
    else:
        x0, x1 = _ldp_pair(p)
        res = audit_ldp(mech, x0, x1, samples=p["samples"], seed=spec.seed, **common)
        pair_name = {"antipodal": "+clip·e1 vs −clip·e1", "flat": "+clip·1/√d vs −clip·1/√d",
                     "zero-boundary": "0 vs clip·e1", "one-hot": "e0 vs e1"}[p["pair"]]
    # the curve: the same pair certified on fewer, independent draws (seeds named by the size)
    curve = []
    for n in _curve_sizes(p):
        small = audit_ldp(mech, x0, x1, samples=n, seed=derive_seed(spec.seed, f"curve={n}"), **common)
        curve.append({"samples": n, "epsilon_lower": small.epsilon_lower, "seed": small.seed,
                      "violation": small.violation})
    curve.append({"samples": res.samples, "epsilon_lower": res.epsilon_lower, "seed": spec.seed,
                  "violation": res.violation})

    violated = bool(res.violation)
    power = pair_power(res, eps)
    notes = [str(n) for n in (getattr(res, "notes", None) or [])]
    weak = p["min_pair_power"] is not None and not violated and (power is None or power < p["min_pair_power"])
    verdict = "INCONCLUSIVE" if weak else _verdict(spec.expect, holds=not violated, violated=violated)
    conf = f"{res.confidence:.0%}"
    if violated:
        exact = "" if res.epsilon_exact is None else f"; exact ε of the pair {_g(res.epsilon_exact, '.3g')}"
        summary = (f"VIOLATION: certified ε ≥ {res.epsilon_lower:.3f} at {conf} exceeds the claimed "
                   f"ε = {eps:g} ({pair_name}, {res.test}){exact}")
    else:
        summary = (f"no violation detected: certified ε ≥ {res.epsilon_lower:.3f} at {conf} is within the claimed "
                   f"ε = {eps:g} ({pair_name}, {res.test}, max certifiable {res.max_certifiable:.2f}); "
                   + _power_sentence(power, res.epsilon_exact, eps, p["pair"] == "search"))
    if weak:
        need = p["min_pair_power"]
        summary += (f" — INCONCLUSIVE: min_pair_power {need:g} not met "
                    + ("(the pair's exact ε is unknown)" if power is None else f"({power:.2f} < {need:g})"))
    if spec.expect == "violation":
        summary += " — expected a violation" + (", detected" if violated else ", NOT detected")
    # the audit's own notes, less the one the pair-power sentence above already says
    fresh = [n for n in notes if not ("says little" in n and "says little" in summary)]
    if fresh:
        summary += ". Notes: " + "; ".join(n.rstrip(".") for n in fresh) + "."
    mechanism = {"name": p["mechanism"], **_mechanism_params(mech)}
    evidence: dict[str, Any] = {"mechanism": mechanism, "epsilon_claimed": eps}
    if delta or p["claimed_delta"] is not None:  # δ only where the guarantee has one
        evidence["delta_claimed"] = delta
    if mech.epsilon is not None and not math.isclose(mech.epsilon, eps):
        evidence["epsilon_mechanism"] = mech.epsilon  # calibrated at one ε, audited against another
    evidence.update({
        "pair": pair_name, "distinguisher": res.test, "samples": res.samples, "confidence": res.confidence,
        **({"search_samples": p["search_samples"]} if p["pair"] == "search" else {}),
        "epsilon_lower": res.epsilon_lower, "epsilon_exact": res.epsilon_exact,
        "pair_power": power, **({"min_pair_power": p["min_pair_power"]} if p["min_pair_power"] is not None else {}),
        "violation": violated, "max_certifiable": res.max_certifiable,
        **({"notes": notes} if notes else {}),
        "curve": curve,
        "audit": {k: v for k, v in res.to_dict().items() if k not in _LDP_SHOWN},
    })
    ev = res.event
    plots = [
        {"type": "epsilon_vs_samples", "title": "certified ε lower bound vs samples per input",
         "samples": [c["samples"] for c in curve], "epsilon_lower": [c["epsilon_lower"] for c in curve],
         "epsilon_claimed": eps, "epsilon_exact": res.epsilon_exact},
        {"type": "privacy_region", "title": f"certified event ({ev['event']}, positive {ev['positive_input']})",
         "tpr": res.tpr, "fpr": res.fpr, "epsilon": eps, "delta": delta,
         "tpr_lower": ev["tpr_lower"], "fpr_upper": ev["fpr_upper"], "epsilon_lower": res.epsilon_lower},
    ]
    return _claim(spec, verdict, evidence, summary, plots, parameters=False)


#: LDPAudit fields the ldp evidence already shows under its own names (left out of ``audit``)
_LDP_SHOWN = frozenset({"epsilon_lower", "epsilon_claimed", "delta_claimed", "violation", "epsilon_exact", "test",
                        "samples", "seed", "confidence", "max_certifiable", "mechanism", "pair_power", "notes"})


def _mechanism_params(mech: Any) -> dict[str, Any]:
    """The mechanism's own constructor parameters (``Mechanism.params()``) without ε and δ, which
    the evidence states once, as the claim (``epsilon_claimed``, ``delta_claimed``)."""
    params = mech.params() if callable(getattr(mech, "params", None)) else {}
    return {k: v for k, v in params.items() if k not in ("epsilon", "delta")}


def pair_power(res: Any, claimed_epsilon: float) -> float | None:
    """How much of the claim the audited pair can test: ε_exact(pair) / ε_claimed.

    ``LDPAudit.pair_power`` when the audit provides it, else computed from ``epsilon_exact``
    (``None`` when the pair's exact ε is unknown). An audit of a pair with power p can certify at
    most ε = p·ε_claimed however many samples it draws, so a PASS on a pair with p ≪ 1 says
    little about the claim: even a mechanism that breaks the claim elsewhere passes it.
    """
    given = getattr(res, "pair_power", None)
    if given is not None:
        return _finite_or_none(given)
    exact = getattr(res, "epsilon_exact", None)
    if exact is None or not claimed_epsilon or not math.isfinite(claimed_epsilon):
        return None
    return _finite_or_none(float(exact) / float(claimed_epsilon))


def _power_sentence(power: float | None, exact: float | None, eps: float, searched: bool) -> str:
    """The summary's sentence on pair power; below ``fedaudit.audit.ldp.LOW_PAIR_POWER`` (0.5
    where the audit does not define it) it adds that a PASS says little."""
    from fedaudit.audit import ldp

    if power is None:
        return "the pair's exact ε is unknown, so how much of the claim it tests is unknown"
    text = f"this pair's exact ε {_g(exact, '.3g')} is {power:.2f} of the claimed {eps:g}"
    if power < getattr(ldp, "LOW_PAIR_POWER", 0.5):
        text += " — a PASS says little" + ("" if searched else "; use pair = 'search'")
    return text


# ----------------------------------------------------------------------------- variance
def _variance_units(p: dict[str, Any]) -> int:
    return p["samples"] * (2 * len(p["ks"]) + 3)


def _slope_ci(dk: list[float], results: list[Any], z: float) -> tuple[float, float, float]:
    """Least-squares slope of log MSE on log(d/k) with a delta-method CI: the measurements are
    independent, Var(log MSE_i) ≈ (se_i / MSE_i)², se_i = (ci_high − mse)/z_0.95 (CLT), and the
    slope is Σ c_i log MSE_i with c_i = (u_i − ū)/Σ(u − ū)², u = log(d/k)."""
    from fedaudit.audit.variance import loglog_slope

    u = np.log(np.asarray(dk, float))
    c = (u - u.mean()) / np.sum((u - u.mean()) ** 2)
    slope = loglog_slope(dk, [r.mse for r in results])
    z95 = [_z(r.confidence) for r in results]
    var_log = np.array([((r.ci_high - r.mse) / zz / r.mse) ** 2 if r.mse > 0 else 0.0 for r, zz in zip(results, z95)])
    half = z * float(np.sqrt(np.sum(c ** 2 * var_log)))
    return slope, slope - half, slope + half


def _rescaled_ci(r: Any, z: float) -> tuple[float, float]:
    """The CLT interval of an MSEResult at another confidence: mse ± z·se (se from its own CI)."""
    se = (r.ci_high - r.mse) / _z(r.confidence)
    return max(0.0, r.mse - z * se), r.mse + z * se


def run_variance(spec: ClaimSpec, advance: Advance) -> Claim:
    """MSE of SSTQ against d/k (private and not) next to vqSGD and PrivUnitG; check the bounds."""
    from fedaudit.audit.variance import variance_vs_dk

    p = spec.params
    curve = variance_vs_dk(p["dim"], p["ks"], p["epsilon"], levels=p["levels"], clip=p["clip"],
                           samples=p["samples"], seed=spec.seed, progress=advance)
    z = _z(p["confidence"])
    dk = list(curve.d_over_k)
    cis = [_rescaled_ci(r, z) for r in curve.sstq]
    cis0 = [_rescaled_ci(r, z) for r in curve.sstq_nonprivate]
    slope, slope_lo, slope_hi = _slope_ci(dk, list(curve.sstq), z) if len(dk) >= 2 else (math.nan,) * 3
    checks, holds, violated = [], True, False
    if p["max_mse"] is not None:
        worst_hi = max(hi for _, hi in cis)
        worst_lo = max(lo for lo, _ in cis)
        ok, bad = worst_hi <= p["max_mse"], worst_lo > p["max_mse"]
        checks.append({"check": "max_mse", "bound": p["max_mse"], "value": max(r.mse for r in curve.sstq),
                       "ci": [worst_lo, worst_hi], "holds": ok, "violated": bad})
        holds, violated = holds and ok, violated or bad
    if p["max_slope"] is not None:
        ok, bad = slope_hi <= p["max_slope"], slope_lo > p["max_slope"]
        checks.append({"check": "max_slope", "bound": p["max_slope"], "value": slope, "ci": [slope_lo, slope_hi],
                       "holds": ok, "violated": bad})
        holds, violated = holds and ok, violated or bad
    if p["min_slope"] is not None:
        ok, bad = slope_lo >= p["min_slope"], slope_hi < p["min_slope"]
        checks.append({"check": "min_slope", "bound": p["min_slope"], "value": slope, "ci": [slope_lo, slope_hi],
                       "holds": ok, "violated": bad})
        holds, violated = holds and ok, violated or bad
    verdict = _verdict(spec.expect, holds, violated)
    conf = f"{p['confidence']:.0%}"
    parts = [f"private SSTQ slope of MSE on d/k {slope:+.3f} ({conf} CI [{slope_lo:+.3f}, {slope_hi:+.3f}])",
             f"MSE {min(r.mse for r in curve.sstq):.4g}–{max(r.mse for r in curve.sstq):.4g} "
             f"(PrivUnitG {curve.privunitg.mse:.4g}, vqSGD {curve.vqsgd.mse:.4g})"]
    for c in checks:
        state = "holds" if c["holds"] else ("VIOLATED" if c["violated"] else "not shown at " + conf)
        parts.append(f"{c['check']} {c['bound']:g}: {state}")
    if not checks:
        parts.append("no bound declared (measurement only)")
    label_p, label_0 = f"SSTQ ε={curve.epsilon:g}", "SSTQ no privacy"
    evidence = {
        "checks": checks,
        "slope_private": slope, "slope_private_ci": [slope_lo, slope_hi],
        "slope_nonprivate": curve.slope_nonprivate,
        "confidence": p["confidence"],
        "per_k": [{"k": k, "d_over_k": x, "mse": r.mse, "ci": list(ci), "unbiased": r.unbiased,
                   "mse_nonprivate": r0.mse, "ci_nonprivate": list(ci0)}
                  for k, x, r, ci, r0, ci0 in zip(curve.ks, dk, curve.sstq, cis, curve.sstq_nonprivate, cis0)],
        "references": {"privunitg": curve.privunitg.mse, "vqsgd": curve.vqsgd.mse,
                       "vqsgd_nonprivate": curve.vqsgd_nonprivate.mse},
        "samples": curve.samples,
        "curve": curve.to_dict(),
    }
    hlines = {f"vqSGD ε={curve.epsilon:g}": curve.vqsgd.mse, "vqSGD no privacy": curve.vqsgd_nonprivate.mse,
              f"PrivUnitG ε={curve.epsilon:g} (optimal)": curve.privunitg.mse}
    if p["max_mse"] is not None:
        hlines["bound max_mse"] = p["max_mse"]
    plots = [{"type": "mse_vs_dk", "title": f"MSE vs d/k at d={curve.dim}, s={curve.levels} ({conf} CIs)",
              "d_over_k": dk,
              "series": {label_p: {"mse": [r.mse for r in curve.sstq], "ci_low": [c[0] for c in cis],
                                   "ci_high": [c[1] for c in cis]},
                         label_0: {"mse": [r.mse for r in curve.sstq_nonprivate], "ci_low": [c[0] for c in cis0],
                                   "ci_high": [c[1] for c in cis0]}},
              "hlines": hlines,
              "slopes": {label_p: slope, label_0: curve.slope_nonprivate}}]
    return _claim(spec, verdict, evidence, "; ".join(parts), plots)


# ----------------------------------------------------------------------------- robustness
def _robustness_units(p: dict[str, Any]) -> int:
    from fedaudit.audit.robustness import progress_units

    # run_robustness passes no search budget, so the optimiser runs with the defaults
    return progress_units(p["f"], p["trials"], p["search_evals"], None, d=p["d"], aggregator=p["aggregator"], n=p["n"])


def run_robustness(spec: ClaimSpec, advance: Advance) -> Claim:
    """ν̂ of the rule (a certified lower bound on its κ) against max_nu and the published bound."""
    from fedaudit.audit.robustness import audit_robustness
    from fedaudit.defenses.registry import make_aggregator

    p = spec.params
    params = rule_params(p["aggregator"], p.get("aggregator_params"), spec.seed)
    rule = make_aggregator(p["aggregator"], p["f"], **params) if params else p["aggregator"]
    res = audit_robustness(rule, n=p["n"], f=p["f"], d=p["d"], trials=p["trials"], attacks=p["attacks"],
                           seed=spec.seed, search_evals=p["search_evals"], progress=advance)
    nu = res.nu_empirical
    within_max = p["max_nu"] is None or nu <= p["max_nu"]
    holds = within_max and not res.violation
    verdict = _verdict(spec.expect, holds=holds, violated=not holds)
    worst = worst_configuration(res)
    parts = [f"ν̂ = {_g(nu)}, attained by {worst['where']}",
             f"universal lower bound f/(n−2f) = {res.nu_lower:.4g}",
             "published bound " + ("none" if res.nu_bound is None else _g(res.nu_bound))
             + (" VIOLATED" if res.violation else "")]
    if p["max_nu"] is not None:
        parts.append(f"max_nu {p['max_nu']:g} " + ("met" if within_max else "EXCEEDED"))
        if p["max_nu"] < res.nu_lower:
            parts.append("note: max_nu is below the universal lower bound, no rule can meet it")
    evidence = {
        "nu_empirical": nu, **({"aggregator_params": params} if params else {}), "nu_bound": res.nu_bound, "nu_lower": res.nu_lower,
        "bound_violation": res.violation, "unbounded": res.unbounded,
        "reaches_lower_bound": res.reaches_lower_bound,
        "worst": {k: v for k, v in worst.items() if k not in ("text", "where")},
        "audit": res.to_dict(),
    }
    top = dict(list(res.per_configuration.items())[:12])
    rule_name = res.aggregator + ("" if not params else "(" + ", ".join(f"{k}={v}" for k, v in params.items()) + ")")
    plots = [{"type": "nu_vs_bound", "title": f"ν̂ per configuration — {rule_name}; worst: {worst['text']}",
              "configurations": top, "nu_bound": res.nu_bound, "nu_lower": res.nu_lower, "nu_empirical": nu,
              "nu_max": p["max_nu"]}]
    return _claim(spec, verdict, evidence, "; ".join(parts), plots)


def rule_params(spec: str, params: dict[str, Any] | None, seed: int) -> dict[str, Any]:
    """The make_aggregator keywords a claim builds ``spec`` with: the plan's ``aggregator_params``
    plus, when a stage takes a ``seed`` (bucketing) and the plan gives none,
    ``derive_seed(claim seed, "aggregator=<spec>")`` — so a randomised rule is as reproducible
    as the rest of the claim."""
    from fedaudit.engine import derive_seed
    from fedaudit.experiments.plan import _accepted_keywords

    out = dict(params or {})
    if "seed" not in out and "seed" in _accepted_keywords(spec):
        out["seed"] = derive_seed(seed, f"aggregator={spec}")
    return out


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
               nu=_finite_or_none(raw))
    nu_text = "∞" if math.isinf(raw) else _g(out["nu"], ".3g")
    out["where"] = out["label"] + (f" / {out['shape']}" if "shape" in out else "") + f" at n={out['n']}, f={out['f']}"
    out["text"] = f"{out['where']}, ν̂={nu_text}"
    return out


# ----------------------------------------------------------------------------- stress
def _stress_units(p: dict[str, Any]) -> int:
    return len(p["aggregators"]) * len(p["attacks"]) * len(p["fs"]) * len(p["betas"])


def _cell_ok(rec: dict[str, Any], p: dict[str, Any]) -> tuple[bool, list[str]]:
    why = []
    acc, loss = rec.get("final_accuracy"), rec.get("final_loss")
    if p["min_accuracy"] is not None and (acc is None or acc < p["min_accuracy"]):
        why.append("diverged" if acc is None else f"accuracy {acc:.3f} < {p['min_accuracy']:g}")
    if p["max_loss"] is not None and (loss is None or loss > p["max_loss"]):
        why.append("loss diverged" if loss is None else f"loss {loss:.4g} > {p['max_loss']:g}")
    return not why, why


def run_stress(spec: ClaimSpec, advance: Advance, workdir: str | None = None) -> Claim:
    """Train every cell of the grid and check the worst case over attacks in every cell.

    ``workdir`` holds the grid's ``cells.jsonl`` (a rerun into it skips finished cells; the caller
    removes it); by default a temporary directory removed when the claim ends."""
    from fedaudit.fl.stress import StressConfig, run_stress as _run_stress
    from fedaudit.experiments.plan import _stress_config_kw

    p = spec.params
    kw = _stress_config_kw(p, seed=spec.seed)
    kw["aggregator_params"] = {a: params for a in p["aggregators"]
                               if (params := rule_params(a, (p.get("aggregator_params") or {}).get(a), spec.seed))} or None
    config = StressConfig(**kw)
    with contextlib.nullcontext(workdir) if workdir is not None else \
            tempfile.TemporaryDirectory(prefix="fedaudit-stress-") as tmp:
        res = _run_stress(config, tmp, workers=p["workers"], backend=p["backend"], progress=advance, plot=False)
    s = res.summary
    cells, failing = [], []
    for row in s["cells"]:
        ok, why = _cell_ok(row, p)
        cells.append({**row, "meets": ok, "why": why})
        if not ok:
            failing.append({"key": row["key"], "why": why})
    holds = not failing and bool(s["complete"])
    verdict = _verdict(spec.expect, holds=holds, violated=bool(failing))
    accs = [c["final_accuracy"] for c in cells]
    losses = [c["final_loss"] for c in cells]
    worst_acc = None if any(a is None for a in accs) else min(accs, default=None)
    worst_loss = None if any(v is None for v in losses) else max(losses, default=None)
    req = []
    if p["min_accuracy"] is not None:
        req.append(f"accuracy ≥ {p['min_accuracy']:g}")
    if p["max_loss"] is not None:
        req.append(f"loss ≤ {p['max_loss']:g}")
    summary = (f"{len(cells) - len(failing)}/{len(cells)} cells meet {' and '.join(req)}; worst accuracy "
               f"{'diverged' if worst_acc is None else f'{worst_acc:.3f}'}, worst loss "
               f"{'diverged' if worst_loss is None else f'{worst_loss:.4g}'}"
               + (f"; failing: {', '.join(f['key'] for f in failing[:3])}" + (" …" if len(failing) > 3 else "")
                  if failing else ""))
    evidence = {
        "requirement": {"min_accuracy": p["min_accuracy"], "max_loss": p["max_loss"]},
        "cells_meeting": len(cells) - len(failing), "cells": len(cells),
        "worst_accuracy": worst_acc, "worst_loss": worst_loss,
        "failing": failing,
        "per_cell": [{k: c[k] for k in ("key", "final_accuracy", "final_loss", "breakdown", "breakdown_reasons",
                                        "meets", "why", "seed", "runtime_s") if k in c} for c in cells],
        "breakdown_rule": s["breakdown_rule"], "seed_rule": s["seed_rule"],
        "worst_case": s["aggregators"],
        "config": s["config"], "runtime_s": res.runtime_s,
    }
    plots = _stress_plots(config, res, p)
    return _claim(spec, verdict, evidence, summary, plots)


def _stress_plots(config: Any, res: Any, p: dict[str, Any]) -> list[dict]:
    """One heatmap per (f, β) and metric, all panels of a metric on one colour scale — accuracy
    on [0, 1], loss on [0, largest finite loss of the grid] — so equal colours mean equal values
    across panels (as ``fedaudit stress`` draws them); and the accuracy curves of small grids."""
    from fedaudit.fl.stress import Cell

    recs = res.records
    plots = []
    metrics = []
    if p["min_accuracy"] is not None or p["max_loss"] is None:
        metrics.append(("final_accuracy", "final test accuracy"))
    if p["max_loss"] is not None:
        metrics.append(("final_loss", "final honest loss"))
    pairs = [(f, b) for f in config.fs for b in config.betas][:6]
    losses = [v for rec in recs.values() if isinstance(v := rec.get("final_loss"), (int, float)) and math.isfinite(v)]
    scale = {"final_accuracy": (0.0, 1.0), "final_loss": (0.0, max(losses) if losses and max(losses) > 0 else 1.0)}
    for f, b in pairs:
        for field_, label in metrics:
            values = [[(recs.get(Cell(a, t, f, b).key) or {}).get(field_) for t in config.attacks]
                      for a in config.aggregators]
            vmin, vmax = scale[field_]
            plots.append({"type": "heatmap", "title": f"{label} at f={f}, β={b:g} (null = diverged)",
                          "x_label": "attack", "y_label": "aggregator", "x": list(config.attacks),
                          "y": list(config.aggregators), "values": values, "value_label": label,
                          "vmin": vmin, "vmax": vmax})
    if len(recs) <= 12:
        series = {}
        for key, rec in recs.items():
            tr = rec.get("trace") or {}
            if tr.get("round"):
                series[f"{rec['aggregator']} / {rec['attack']} f={rec['f']} β={rec['beta']:g}"] = {
                    "x": tr["round"], "y": tr.get("accuracy", [])}
        if series:
            hl = {"min_accuracy": p["min_accuracy"]} if p["min_accuracy"] is not None else {}
            plots.append({"type": "curves", "title": f"test accuracy during training ({config.optimizer})",
                          "x_label": "round", "y_label": "test accuracy", "log_y": False, "series": series,
                          "hlines": hl})
    return plots


# ----------------------------------------------------------------------------- convergence
def _convergence_units(p: dict[str, Any]) -> int:
    return p["rounds"] * len(p["optimizers"])


def _make_optimizer(name: str, p: dict[str, Any]):
    from fedaudit.defenses import optimizers as opt

    if name == "dgd":
        return opt.DGD(p["lr"])
    if name == "dnag":
        return opt.DNAG(p["lr"], momentum=p["momentum"])
    if name == "robust-accelerated":
        return opt.RobustAccelerated()
    return opt.PIGS(eta=p["eta"])


def _first_at_or_below(rounds: list[int], losses: list[float], level: float) -> int | None:
    for r, v in zip(rounds, losses):
        if math.isfinite(v) and v <= level + 1e-15 * max(1.0, abs(level)):
            return int(r)
    return None


def plateau_status(rounds: list[int], losses: list[float], window: int, tol: float) -> dict[str, Any]:
    """Whether a loss curve reached a plateau, and from which round.

    Definition. With L(k) the honest loss after k rounds, the relative change over the window
    of w rounds ending at round k is Δ(k) = |L(k) − L(k − w)| / |L(k − w)| (k ≥ w). The run is *on a
    plateau at round k* when Δ(k) ≤ τ. It *reached a plateau* when it is on one at its last
    round K; its plateau round is the first k from which Δ(j) ≤ τ for every recorded j ≥ k
    (sustained through K). A curve still falling by more than τ per w rounds at K did not reach
    a plateau, however long it ran. Returns ``reached``, ``round`` (None unless reached) and
    ``final_change`` = signed (L(K) − L(K − w)) / |L(K − w)| (None when K < w or the loss is not finite).
    """
    r = np.asarray(rounds, dtype=np.int64)
    v = np.asarray(losses, dtype=np.float64)
    out: dict[str, Any] = {"reached": False, "round": None, "final_change": None, "window": window, "tol": tol}
    if r.size == 0 or not np.isfinite(v).all():
        return out
    change = np.full(r.size, np.nan)
    for j in range(r.size):
        i = np.searchsorted(r, r[j] - window, side="right") - 1  # the last round ≤ k − w
        if r[j] >= window and i >= 0 and r[i] == r[j] - window and v[i] != 0:
            change[j] = (v[j] - v[i]) / abs(v[i])
    if math.isfinite(change[-1]):
        out["final_change"] = float(change[-1])
    on = np.isfinite(change) & (np.abs(change) <= tol)
    if on[-1]:
        off = np.flatnonzero(~on)
        first = 0 if off.size == 0 else int(off[-1]) + 1
        out.update(reached=True, round=int(r[first]))
    return out


def run_convergence(spec: ClaimSpec, advance: Advance) -> Claim:
    """Run each optimizer on the same federation and oracle randomness; compare rounds to a target loss.

    ℓ_best is the lowest honest loss any run reached. The target loss L* is ``target_loss`` if
    the plan gives one, else the baseline's final level ℓ_B (:func:`~fedaudit.defenses.optimizers.plateau_level`:
    the median of its last 20% of rounds) plus ``target_eps`` of its gap to the best loss,
    L* = ℓ_B + target_eps·|ℓ_B − ℓ_best| — the loss the baseline itself reaches by the end of
    the run. Each optimizer's rounds to target R_o is the first round with L ≤ L* (None when
    it never gets there or diverged); its speedup over the baseline is R_base / R_o (∞ when it
    starts at or below L* and the baseline does not, 0 when it never gets there; when the
    baseline never reaches an explicit target, rounds / R_o is reported as a lower bound).
    Whether each reached a plateau is :func:`plateau_status` (window ``plateau_window``,
    tolerance ``plateau_tol``) — reported next to, never mixed into, the rounds to target.
    """
    from fedaudit.defenses.optimizers import plateau_level, run
    from fedaudit.engine import derive_seed
    from fedaudit.fl.data import load_dataset
    from fedaudit.fl.federation import Federation

    p = spec.params
    agg_kw = rule_params(p["aggregator"], p.get("aggregator_params"), spec.seed)
    data = load_dataset(p["dataset"], path=p["data_path"], seed=derive_seed(spec.seed, "data"))
    fed = Federation.build(data, n_honest=p["n_honest"], f=p["f"], scheme="dirichlet", beta=p["beta"], mu=p["mu"],
                           aggregator=p["aggregator"], attack=p["attack"] if p["f"] > 0 else None,
                           optimal_attack=p["optimal_attack"], seed=derive_seed(spec.seed, "federation"),
                           aggregator_kw=agg_kw or None)
    run_seed = derive_seed(spec.seed, "optimizer")  # the same oracle streams for every optimizer
    traces = {}
    for name in p["optimizers"]:
        done = [0]

        def tick(k, rec, done=done):
            if k > done[0]:
                advance(k - done[0])
                done[0] = k

        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            traces[name] = run(_make_optimizer(name, p), fed, None, p["rounds"], seed=run_seed, callback=tick)
        advance(p["rounds"] - done[0])
    finite = [v for t in traces.values() if not t.diverged for v in t.loss if math.isfinite(v)]
    best = min(finite) if finite else math.nan
    base = p["baseline"]
    per: dict[str, dict[str, Any]] = {}
    for name, t in traces.items():
        ok = not t.diverged and all(math.isfinite(v) for v in t.loss)
        per[name] = {
            "diverged": not ok,
            "final_loss": _finite_or_none(t.loss[-1]) if ok else None,
            "final_accuracy": _finite_or_none(t.test_acc[-1]) if ok and t.test_acc[-1] is not None else None,
            "final_level": plateau_level(t.loss) if ok else None,
            "plateau": plateau_status(list(t.rounds), list(t.loss), p["plateau_window"], p["plateau_tol"]),
            "runtime_s": float(t.wall_time[-1]) if t.wall_time else None,
            "info": t.info,
        }
    level_b = per[base]["final_level"]
    if p["target_loss"] is not None:
        target, basis = p["target_loss"], "target_loss set in the plan"
    elif level_b is not None:
        target = level_b + p["target_eps"] * abs(level_b - best)
        basis = (f"{base}'s final level {level_b:.4g} + {p['target_eps']:g} × its gap to the best loss "
                 f"reached {best:.4g}")
    else:
        target, basis = None, f"undefined: the baseline {base} diverged"
    for name, t in traces.items():
        per[name]["rounds_to_target"] = (None if target is None or per[name]["diverged"]
                                         else _first_at_or_below(list(t.rounds), list(t.loss), target))
    r_base = per[base]["rounds_to_target"]
    for name in traces:
        r = per[name]["rounds_to_target"]
        lower_bound = False
        if name == base:
            speed = 1.0 if r is not None else None
        elif r is None:
            speed = 0.0 if target is not None else None
        elif r_base is None:  # an explicit target the baseline never reached: R_base > rounds
            speed, lower_bound = (math.inf if r == 0 else p["rounds"] / r), True
        elif r == 0:
            speed = 1.0 if r_base == 0 else math.inf
        else:
            speed = r_base / r
        per[name]["speedup"] = speed
        per[name]["speedup_is_lower_bound"] = lower_bound
    checks = []
    for name, limit in (p["max_rounds"] or {}).items():
        v = per[name]["rounds_to_target"]
        checks.append({"check": f"max_rounds[{name}]", "bound": limit, "value": v, "holds": v is not None and v <= limit})
    for name, limit in (p["min_speedup"] or {}).items():
        v = per[name]["speedup"]
        checks.append({"check": f"min_speedup[{name}]", "bound": limit, "value": v,
                       "holds": v is not None and v >= limit})
    if p["max_final_loss"] is not None:
        for name in p["optimizers"]:
            v = per[name]["final_loss"]
            checks.append({"check": f"max_final_loss[{name}]", "bound": p["max_final_loss"], "value": v,
                           "holds": v is not None and v <= p["max_final_loss"]})
    if p["min_final_accuracy"] is not None:
        for name in p["optimizers"]:
            v = per[name]["final_accuracy"]
            checks.append({"check": f"min_final_accuracy[{name}]", "bound": p["min_final_accuracy"], "value": v,
                           "holds": v is not None and v >= p["min_final_accuracy"]})
    holds = all(c["holds"] for c in checks)
    verdict = _verdict(spec.expect, holds=holds, violated=not holds)
    parts = [_convergence_sentence(per, base, target, basis, p)]
    failed = [c["check"] for c in checks if not c["holds"]]
    if checks:
        parts.append("all thresholds met" if not failed else "NOT met: " + ", ".join(failed))
    else:
        parts.append("no threshold declared (measurement only)")
    evidence = {
        "checks": checks, "baseline": base, "target_loss": target, "target_basis": basis, "best_loss": best,
        "plateau_rule": {"window": p["plateau_window"], "tol": p["plateau_tol"],
                         "definition": "on a plateau at round k when |L(k) − L(k−w)| / |L(k−w)| ≤ τ; reached when "
                                       "on one at the last round, from the first round it stays on one"},
        "per_optimizer": per,
        "federation": {"dataset": p["dataset"], "n_honest": p["n_honest"], "f": p["f"], "beta": p["beta"],
                       "aggregator": p["aggregator"], "aggregator_params": agg_kw or None,
                       "attack": p["attack"], "dim": fed.dim},
        "seeds": {"data": derive_seed(spec.seed, "data"), "federation": derive_seed(spec.seed, "federation"),
                  "optimizer": run_seed},
    }
    series = {n: {"x": [int(r) for r in t.rounds], "y": [_finite_or_none(v) for v in t.loss]} for n, t in traces.items()}
    markers = {n: {"x": r["rounds_to_target"], "y": target} for n, r in per.items()
               if r["rounds_to_target"] is not None and target is not None}
    hlines = {"target loss L*": target, "best loss reached": best if math.isfinite(best) else None}
    plots = [{"type": "curves", "title": f"honest loss L_H(x_k) — {p['aggregator']} under {p['attack']}, f={p['f']}",
              "x_label": "round", "y_label": "honest loss", "log_y": True, "series": series,
              "hlines": hlines, "markers": markers, "markers_label": "first round at or below L*"}]
    return _claim(spec, verdict, evidence, "; ".join(parts), plots)


def _convergence_sentence(per: dict[str, dict[str, Any]], base: str, target: float | None, basis: str,
                          p: dict[str, Any]) -> str:
    """"target loss L* = … (basis); rounds to L*: …; speedups with their basis; plateau per optimizer"."""
    if target is None:
        head = f"no target loss ({basis})"
    else:
        rb = per[base]["rounds_to_target"]
        reached = (f"reached in {rb} rounds" if rb is not None
                   else ("diverged" if per[base]["diverged"] else f"not reached in {p['rounds']} rounds"))
        head = f"target loss L* = {target:.4g} ({basis}); baseline {base} {reached}"
    bits = [head]
    for n, r in per.items():
        if n == base:
            continue
        ro = r["rounds_to_target"]
        if r["diverged"]:
            bits.append(f"{n} diverged")
        elif ro is None:
            bits.append(f"{n} never reached L* → speedup 0")
        elif r["speedup_is_lower_bound"]:
            bits.append(f"{n} reached L* in {ro} rounds, {base} not in {p['rounds']} → speedup > {_g(r['speedup'], '.3g')}×")
        else:
            bits.append(f"{n} reached L* in {ro} rounds vs {base} {rb} → speedup {_g(r['speedup'], '.3g')}×")
    w, tol = p["plateau_window"], p["plateau_tol"]
    states = []
    for n, r in per.items():
        st = r["plateau"]
        if r["diverged"]:
            states.append(f"{n} diverged")
        elif st["reached"]:
            states.append(f"{n} from round {st['round']}")
        elif st["final_change"] is None:
            states.append(f"{n} undetermined (fewer than {w} rounds)")
        else:
            states.append(f"{n} not reached ({st['final_change']:+.1%} over its last {w} rounds)")
    bits.append(f"plateau (|ΔL|/L ≤ {tol:g} over {w} rounds): " + ", ".join(states))
    bits.append("final loss " + ", ".join(f"{n} {_g(r['final_loss'])}" for n, r in per.items()))
    return "; ".join(bits)


# ----------------------------------------------------------------------------- dispatch
RUNNERS: dict[str, Callable[[ClaimSpec, Advance], Claim]] = {
    "ldp": run_ldp, "variance": run_variance, "robustness": run_robustness,
    "stress": run_stress, "convergence": run_convergence,
}

_UNITS: dict[str, Callable[[dict[str, Any]], int]] = {
    "ldp": _ldp_units, "variance": _variance_units, "robustness": _robustness_units,
    "stress": _stress_units, "convergence": _convergence_units,
}

UNIT_NAMES = {"ldp": "samples", "variance": "reports", "robustness": "configurations", "stress": "cells",
              "convergence": "rounds"}


def work_units(spec: ClaimSpec) -> int:
    """How many progress units the claim's run reports (an estimate for pair searches)."""
    return max(1, int(_UNITS[spec.kind](spec.params)))


def run_claim(spec: ClaimSpec, advance: Advance | None = None, *, workdir: str | None = None) -> Claim:
    """Run one claim and time it (exceptions propagate; :func:`run_plan` records them).

    ``workdir``: a directory for the claim's intermediate files (stress claims keep their grid
    there, so a killed run resumes cell by cell); other kinds ignore it."""
    t0 = time.perf_counter()
    extra = {"workdir": workdir} if workdir is not None and spec.kind == "stress" else {}
    claim = RUNNERS[spec.kind](spec, advance or (lambda n: None), **extra)
    claim.runtime_s = time.perf_counter() - t0
    return claim
