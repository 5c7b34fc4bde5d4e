"""Claim kind ``variance``: the MSE of SSTQ against d/k, checked against bounds.

MSE of private SSTQ at every k and the log–log slope of MSE on d/k. The claim holds when the
CI's upper end meets ``max_mse``/``max_slope`` (lower end for ``min_slope``); a violation is
detected when the CI lies entirely on the wrong side of a bound. The measurements' seeded blocks
run on the engine (plan keys ``backend``, ``workers``; :func:`fedaudit.audit.variance.variance_vs_dk`),
with the same evidence on every backend.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from fedaudit.reports.diff import Tracked
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, EvidenceError, Progress, mapping, number, rows
from fedaudit.experiments.keys import Key, engine_keys, key_error, require_bound
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["Variance", "slope_ci", "rescaled_ci"]


#: numbers (report coordinates) the MSE measurements draw per core-second, measured on SSTQ at
#: d = 1024 and 4096 (about 1e7): the rate :meth:`Variance.estimate` assumes
DRAWS_PER_SECOND = 1e7


def _z(confidence: float) -> float:
    from scipy import stats

    return float(stats.norm.isf((1 - confidence) / 2))


def slope_ci(dk: list[float], results: list[Any], z: float) -> tuple[float, float, float]:
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


def _interval(value: Any, what: str) -> tuple[float, float]:
    """A recorded ``[low, high]`` confidence interval as two floats (an EvidenceError otherwise)."""
    if not isinstance(value, list) or len(value) != 2:
        raise EvidenceError(f"evidence {what!r} is {value!r}, not a [low, high] interval")
    return number({what: value[0]}, what), number({what: value[1]}, what)


def _bound_checks(evidence: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The checks of the bounds in ``evidence["bounds"]`` (null: unset), each with its bound, the
    measured value, the CI it is decided on and ``holds``/``violated``:

    * ``max_mse``: over the ks, the largest CI upper end ≤ bound holds; the largest CI lower end
      > bound is a violation (some k's MSE is above the bound at the confidence);
    * ``max_slope``: slope CI upper end ≤ bound holds, its lower end > bound is a violation;
    * ``min_slope``: slope CI lower end ≥ bound holds, its upper end < bound is a violation.

    It reads the per-k CIs (``per_k``) and the slope and its CI (``slope_private``,
    ``slope_private_ci``), as the run has them or as a report records them."""
    bounds = mapping(evidence, "bounds")
    checks = []
    most = number(bounds, "max_mse", nullable=True)
    if most is not None:
        per_k = rows(evidence, "per_k")
        cis = [_interval(row.get("ci"), "per_k ci") for row in per_k]
        lo, hi = max(lo for lo, _ in cis), max(hi for _, hi in cis)
        checks.append({"check": "max_mse", "bound": bounds["max_mse"], "value": max(number(r, "mse") for r in per_k),
                       "ci": [lo, hi], "holds": hi <= most, "violated": lo > most})
    for key in ("max_slope", "min_slope"):
        bound = number(bounds, key, nullable=True)
        if bound is None:
            continue
        lo, hi = _interval(evidence.get("slope_private_ci"), "slope_private_ci")
        holds, violated = (hi <= bound, lo > bound) if key == "max_slope" else (lo >= bound, hi < bound)
        checks.append({"check": key, "bound": bounds[key], "value": number(evidence, "slope_private"),
                       "ci": [lo, hi], "holds": holds, "violated": violated})
    return checks


def rescaled_ci(r: Any, z: float) -> tuple[float, float]:
    """The CLT interval of an MSEResult at another confidence: mse ± z·se (se from its own CI)."""
    se = (r.ci_high - r.mse) / _z(r.confidence)
    return max(0.0, r.mse - z * se), r.mse + z * se


class Variance(ClaimKind):
    """MSE of SSTQ against d/k (private and not) next to vqSGD and PrivUnitG; check the bounds."""

    name = "variance"
    guarantee = "utility"
    evidence_fields = {
        "checks": Field("bounds checked against the measurement"),
        "slope_private": Field("log–log slope of private MSE on d/k"),
        "slope_private_ci": Field("confidence interval of that slope"),
        "slope_nonprivate": Field("slope without privacy (reference)"),
        "per_k": Field("MSE at each k"),
        "references": Field("MSE of other mechanisms at the same ε (reference)"),
        "bounds": Field("bounds declared by the plan", "", "configuration"),
        "confidence": Field("confidence of the intervals", "", "configuration"),
        "samples": Field("reports per measurement", "", "configuration"),
        "curve": Field("raw measurements (figure)", "", "diagnostics"),
    }
    unit = "reports"
    figures = ("mse_vs_dk",)
    tracked = (Tracked("slope_private", "MSE slope on d/k", ci="slope_private_ci"),)

    def keys(self) -> dict[str, Key]:
        from fedaudit.audit.bounds import MAX_SAMPLES
        from fedaudit.mechanisms.base import MAX_LEVELS

        return {
            "dim": Key("int", 1024, low=1, high=1_000_000),
            "ks": Key("list[int]", low=1, help="SSTQ k values (each <= dim)"),
            "epsilon": Key("float", 1.0, low=0, open_low=True),
            "levels": Key("int", 2, low=2, high=MAX_LEVELS),
            "clip": Key("float", 1.0, low=0, open_low=True),
            "samples": Key("int", 20_000, low=100, high=MAX_SAMPLES, help="reports per measurement"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True),
            "max_mse": Key("float", None, low=0, open_low=True,
                           help="bound on the private SSTQ MSE at every k (CI upper end must meet it)"),
            "max_slope": Key("float", None, help="bound on the log-log slope of private SSTQ MSE on d/k (CI upper end)"),
            "min_slope": Key("float", None, help="bound on the slope from below (CI lower end)"),
            **engine_keys("the measurements' seeded blocks"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        big = [k for k in p["ks"] if k > p["dim"]]
        if big:
            raise key_error(where, "ks", f"must list integers in [1, dim={p['dim']}], got {big[0]}")
        if p["min_slope"] is not None and p["max_slope"] is not None and p["min_slope"] > p["max_slope"]:
            raise key_error(where, "min_slope", f"must be <= max_slope={p['max_slope']:g}, got {p['min_slope']:g}")
        if (p["min_slope"] is not None or p["max_slope"] is not None) and len(p["ks"]) < 2:
            raise key_error(where, "ks", "must list at least two k values to fit a slope")
        require_bound(where, p, expect, ("max_mse", "max_slope", "min_slope"))

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        bits = []
        if p["max_mse"] is not None:
            bits.append(f"MSE ≤ {p['max_mse']:g}")
        if p["min_slope"] is not None or p["max_slope"] is not None:
            lo = "−∞" if p["min_slope"] is None else f"{p['min_slope']:g}"
            hi = "∞" if p["max_slope"] is None else f"{p['max_slope']:g}"
            bits.append(f"slope on d/k in [{lo}, {hi}]")
        tail = (": " + ", ".join(bits)) if bits else ""
        return f"SSTQ MSE vs d/k at d={p['dim']}, ε={p['epsilon']:g}{tail}"

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["samples"] * (2 * len(p["ks"]) + 3)

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """``samples`` reports of ``dim`` numbers for each of the 2·len(ks) + 3 measurements, at
        :data:`DRAWS_PER_SECOND`, one seed kept per block of 2,000 reports, and the measured
        mechanisms (a few ``dim``-long arrays each)."""
        from fedaudit.experiments.kind import draw_cost

        measurements = 2 * len(p["ks"]) + 3
        return draw_cost(self.work_units(p), p["dim"], DRAWS_PER_SECOND,
                         f"samples × (2·len(ks) + 3) at dim = {p['dim']}", block=2_000,
                         memory=measurements * 4 * 8 * p["dim"])

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.variance import variance_vs_dk

        p = spec.params
        curve = variance_vs_dk(p["dim"], p["ks"], p["epsilon"], levels=p["levels"], clip=p["clip"],
                               samples=p["samples"], seed=spec.seed, progress=progress, backend=p["backend"],
                               workers=p["workers"])
        z = _z(p["confidence"])
        dk = list(curve.d_over_k)
        cis = [rescaled_ci(r, z) for r in curve.sstq]
        cis0 = [rescaled_ci(r, z) for r in curve.sstq_nonprivate]
        slope, slope_lo, slope_hi = slope_ci(dk, list(curve.sstq), z) if len(dk) >= 2 else (math.nan,) * 3
        label_p, label_0 = f"SSTQ ε={curve.epsilon:g}", "SSTQ no privacy"
        measured = {
            "bounds": {k: p[k] for k in ("max_mse", "max_slope", "min_slope")},
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
        checks = _bound_checks(measured)
        decision = self.decide(measured, spec.expect)
        evidence = {"checks": checks, **measured}
        conf = f"{p['confidence']:.0%}"
        slope_text = (f"{slope:+.3f} ({conf} CI [{slope_lo:+.3f}, {slope_hi:+.3f}])" if math.isfinite(slope)
                      else f"undefined ({len(curve.sstq)} value(s) of k: a slope needs two)")
        parts = [f"private SSTQ slope of MSE on d/k {slope_text}",
                 f"MSE {min(r.mse for r in curve.sstq):.4g}–{max(r.mse for r in curve.sstq):.4g} "
                 f"(PrivUnitG {curve.privunitg.mse:.4g}, vqSGD {curve.vqsgd.mse:.4g})"]
        for c in checks:
            state = "holds" if c["holds"] else ("VIOLATED" if c["violated"] else "not shown at " + conf)
            parts.append(f"{c['check']} {c['bound']:g}: {state}")
        if not checks:
            parts.append("no bound declared (measurement only)")
        hlines = {f"vqSGD ε={curve.epsilon:g}": curve.vqsgd.mse, "vqSGD no privacy": curve.vqsgd_nonprivate.mse,
                  f"PrivUnitG ε={curve.epsilon:g} (optimal)": curve.privunitg.mse}
        if p["max_mse"] is not None:
            hlines["bound max_mse"] = p["max_mse"]
        plots = ({"type": "mse_vs_dk", "title": f"MSE vs d/k at d={curve.dim}, s={curve.levels} ({conf} CIs)",
                  "d_over_k": dk,
                  "series": {label_p: {"mse": [r.mse for r in curve.sstq], "ci_low": [c[0] for c in cis],
                                       "ci_high": [c[1] for c in cis]},
                             label_0: {"mse": [r.mse for r in curve.sstq_nonprivate], "ci_low": [c[0] for c in cis0],
                                       "ci_high": [c[1] for c in cis0]}},
                  "hlines": hlines,
                  "slopes": {label_p: slope, label_0: curve.slope_nonprivate}},)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary="; ".join(parts),
                        plots=plots)

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The utility claim in words: the bound on SSTQ's MSE or on its growth with d/k, how the
        MSE was measured (reports per k, confidence intervals), which bound the intervals settle
        and which they leave open, and that utility says nothing of privacy."""
        num = display_number
        conf = percent(number(ev, "confidence"))
        curve = ev.get("curve") or {}
        dim, eps, ks = curve.get("dim"), curve.get("epsilon"), curve.get("ks") or [r.get("k") for r in ev["per_k"]]
        wants = {"max_mse": "MSE ≤ {b} at every k", "max_slope": "MSE growing with d/k no faster than (d/k)^{b} "
                 "(log–log slope ≤ {b})", "min_slope": "MSE growing with d/k at least as fast as (d/k)^{b} "
                 "(log–log slope ≥ {b})"}
        checks = rows(ev, "checks")
        said = ["MSE not growing with d/k (log–log slope ≤ 0)" if c.get("check") == "max_slope" and c["bound"] == 0
                else wants[c["check"]].format(b=num(c["bound"])) for c in checks if c.get("check") in wants]
        claimed = (f"Private SSTQ at d = {num(dim)}, ε = {num(eps)} keeps "
                   + ("; ".join(said) if said else "its MSE as measured (no bound declared)") + f", for k in {ks}."
                   + (" The plan expects this claim to be refuted." if expect == "violation" else ""))
        tested = (f"Utility, not privacy: {num(int(number(ev, 'samples')))} random inputs encoded and decoded at each k "
                  f"(private and non-private), the MSE measured with {conf} confidence intervals and the log–log slope "
                  f"of MSE on d/k fitted with its own {conf} interval; a bound holds when the interval lies on its "
                  f"side, is violated when the interval lies entirely on the other.")
        parts = []
        for c in checks:
            lo, hi = c["ci"]
            digits = next((d for d in range(4, 12) if num(lo, d) != num(hi, d)), 12)  # an interval shown as two numbers
            state = ("holds: the whole interval meets the bound" if c["holds"] else
                     "is VIOLATED: the whole interval lies beyond the bound" if c["violated"] else
                     "is undecided: the interval straddles the bound")
            parts.append(f"{c['check']} {num(c['bound'])} {state} (measured {num(c['value'], digits)}, {conf} "
                         f"interval [{num(lo, digits)}, {num(hi, digits)}])")
        slope = number(ev, "slope_private")
        means = ("; ".join(parts) + "." if parts else "No bound was declared: the report only records the measurement.")
        if math.isfinite(slope):
            means += (f" The private MSE's log–log slope is {num(slope, 3)}; without privacy it is "
                      f"{num(number(ev, 'slope_nonprivate'), 3)} (for comparison).")
        if expect == "violation":
            means += " The plan expected the claim to be refuted: " + ("it is." if verdict == "PASS" else "it is NOT.")
        not_shown = ["privacy: the MSE is measured at the stated ε; whether SSTQ is ε-LDP is an ldp claim's question",
                     f"other dimensions, ε or levels, or k outside {ks}: a slope fitted on {len(ks)} points is not a "
                     f"law beyond them"]
        steps = []
        if verdict == "INCONCLUSIVE" or any(not c["holds"] and not c["violated"] for c in checks):
            steps.append(f"more samples (now {num(int(number(ev, 'samples')))}) narrow the intervals until the "
                         f"bound is decided")
        elif expect == "violation" and verdict == "PASS":
            steps.append("nothing to fix: keep the claim as a regression case")
        elif verdict == "FAIL" and expect == "pass":
            steps.append("revise the claimed bound to what was measured, or change the mechanism's parameters")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """Each bound set in ``bounds`` is checked on the recorded CIs (:func:`_bound_checks`): the
        claim holds when every check's CI lies on the right side of its bound (``max_mse``: every
        k's CI upper end ≤ the bound; ``max_slope``: the slope CI's upper end ≤ it; ``min_slope``:
        its lower end ≥ it), and a violation is detected when one check's CI lies entirely on the
        wrong side. A CI across a bound is neither (FAIL under either ``expect``). No bound: a
        measurement, which holds. The stored ``checks`` rows are not read: they are recomputed."""
        checks = _bound_checks(evidence)
        return Decision(holds=all(c["holds"] for c in checks), violated=any(c["violated"] for c in checks))
