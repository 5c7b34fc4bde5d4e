"""Claim kind ``library-mechanism``: a DP mechanism of a library delivers the guarantee it claims.

The mechanism is named by text (:mod:`fedaudit.targets.catalog`): ``library`` (``diffprivlib``,
``opendp``, ``nvflare``, ``opacus``, or ``planted`` for fedaudit's copy of a since-fixed bug),
``mechanism`` (a diffprivlib class, an OpenDP constructor, an nvflare filter, Opacus's
``noising-step``, ``bitvec-pre-0.15``) and ``params`` (its constructor's keywords). Its claim is the
one read off the object (diffprivlib's ε and δ, OpenDP's privacy map, SVTPrivacy's ledger, the
Gaussian ε of Opacus's σ). Two modes, ``calibration`` (white box: the exact privacy profile of the
mechanism as implemented, at its own parameters and, with ``grid``, over the default (ε, δ) grid of
constructor runs) and ``blackbox`` (real library calls on neighbouring inputs; a certified lower
bound on ε), or ``both``.

The claim fails when a calibration point is under-calibrated (achieved δ above the claimed δ by more
than the relative tolerance; for a pure claim, a true ε above it) or when the certified lower bound
exceeds the claimed ε. A claim on a library that is not installed is INCONCLUSIVE with the install
command, so a plan of every supported library runs wherever some are missing. The evidence records
the library's version, so a result names what it was measured on.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.kind import (BASE_MEMORY, ClaimKind, Cost, Decision, Evidence, EvidenceError, Progress,
                                       SelfTest, number, rows)
from fedaudit.experiments.keys import REQUIRED, Key
from fedaudit.reports.explain import Explanation, Field, display_number, percent

__all__ = ["LibraryMechanism", "CALL_RATES"]

#: real calls per core-second of each library's black box (measured on a 2-core machine: diffprivlib
#: Laplace ≈ 29,000/s and Snapping ≈ 17,000/s, OpenDP scalars ≈ 1,800/s and bit vectors ≈ 2,600/s,
#: NVFlare's filter ≈ 700/s on 8 coordinates; Opacus and the planted sampler are vectorised), halved
#: for a loaded machine
CALL_RATES = {"diffprivlib": 8_000.0, "opendp": 900.0, "nvflare": 300.0, "opacus": 500_000.0,
              "planted": 500_000.0}
#: core-seconds of one calibration point (a constructor run and an mpmath profile), and of the grid
CALIBRATION_SECONDS = 1.0
GRID_SECONDS = 120.0
MODES = ("calibration", "blackbox", "both")


def _catalog():
    from fedaudit.targets import catalog

    return catalog


def _self_test_samples(p: Mapping[str, Any], epsilon: float | None, delta: float = 0.0) -> tuple[int, int]:
    """Draws per input of the black-box self-tests: 10% of ``samples`` (null,
    :func:`~fedaudit.audit.self_tests.self_test_samples`) and, for the planted test, that doubled
    while it could not certify an ε above the claimed ``epsilon``
    (:func:`~fedaudit.audit.self_tests.planted_samples`; None, before the claim is read off the
    object, as for the cost estimate: the null test's count)."""
    from fedaudit.audit.self_tests import planted_samples, self_test_samples

    null = self_test_samples(p["samples"], p["confidence"], delta)
    return null, null if epsilon is None else planted_samples(p["samples"], epsilon, delta, p["confidence"])


class LibraryMechanism(ClaimKind):
    """Audit one DP mechanism of a library (diffprivlib, OpenDP, NVIDIA FLARE, Opacus, or a planted copy of a since-fixed bug) against the guarantee read off the object: the exact privacy profile of the mechanism as implemented (``mode = "calibration"``) and a certified black-box lower bound on ε from real library calls (``"blackbox"``), or both; it fails when a calibration point is under-calibrated or the certified bound exceeds the claimed ε, and is INCONCLUSIVE when the library is not installed."""

    name = "library-mechanism"
    guarantee = "privacy"
    unit = "checks"
    figures = ()

    evidence_fields = {
        "library": Field("library", "", "configuration"),
        "mechanism": Field("mechanism", "", "configuration"),
        "version": Field("library version", "", "configuration"),
        "installed": Field("installed where the plan ran", "", "configuration"),
        "mode": Field("audit mode", "", "configuration"),
        "reason": Field("why there is no verdict"),
        "calibration": Field("white-box calibration"),
        "calibration_points": Field("calibration points (its own first)"),
        "blackbox": Field("black-box audit of real calls"),
    }

    def keys(self) -> dict[str, Key]:
        catalog = _catalog()
        return {
            "library": Key("str", REQUIRED, choices=tuple(catalog.LIBRARIES),
                           help="the library: diffprivlib, opendp, nvflare, opacus, or planted (fedaudit's copy of "
                                "OpenDP's pre-0.15 bit-vector bug)"),
            "mechanism": Key("str", REQUIRED, help="a diffprivlib mechanism class (GaussianAnalytic), an OpenDP "
                                                   "constructor (laplace, gaussian, randomized_response_bool, "
                                                   "randomized_response, bitvec), an nvflare filter (SVTPrivacy, "
                                                   "PercentilePrivacy), 'noising-step' (opacus), 'bitvec-pre-0.15' "
                                                   "(planted)"),
            "params": Key("params", None, help="the constructor's keywords, e.g. { epsilon = 1.0, delta = 1e-20, "
                                               "sensitivity = 1.0 } (nvflare: also dim, the model size; opendp "
                                               "randomized_response: categories = k)"),
            "mode": Key("str", "both", choices=MODES,
                        help="calibration (white box), blackbox (real calls) or both; nvflare, opacus and planted "
                             "have the black box only"),
            "grid": Key("bool", False, help="calibration: also rebuild the mechanism over the default (ε, δ) grid "
                                            "(ε 0.01…100, δ 1e-3…1e-30), not only at its own parameters"),
            "delta": Key("float", None, low=0, high=1, open_low=True, open_high=True,
                         help="OpenDP gaussian: the δ its zCDP claim is read at in the calibration (default 1e-6)"),
            "samples": Key("int", 20_000, low=100, high=10**7, help="black box: draws per input"),
            "real_calls": Key("int", None, low=100, high=10**7,
                              help="black box, diffprivlib Laplace/Gaussian/GaussianAnalytic: real calls per input, "
                                   "checked bit for bit against the vectorised equivalent that draws the rest "
                                   "(default: all samples are real calls)"),
            "confidence": Key("float", 0.95, low=0, high=1, open_low=True, open_high=True,
                              help="black box: confidence of the certified lower bound"),
        }

    def cross_check(self, where: str, params: dict[str, Any], expect: str) -> None:
        """The mode must be one the library has; where the library is installed, the mechanism is
        built once (its name and keywords checked by the library's own constructor)."""
        catalog = _catalog()
        params["params"] = dict(params.get("params") or {})
        modes = catalog.LIBRARIES[params["library"]][1]
        wanted = ("calibration", "blackbox") if params["mode"] == "both" else (params["mode"],)
        missing = [m for m in wanted if m not in modes]
        if missing:
            raise FedAuditError(f"{where}: library {params['library']!r} has no {missing[0]} mode here; set key "
                                f"'mode' to {' or '.join(repr(m) for m in modes)}")
        if catalog.library_status(params["library"])[0]:
            try:
                catalog.build(params["library"], params["mechanism"], params["params"])
            except FedAuditError as exc:
                raise FedAuditError(f"{where}: {exc}") from None

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        verb = "does not deliver" if expect == "violation" else "delivers"
        return f"{p['library']} {p['mechanism']} {verb} the guarantee it claims"

    def work_units(self, p: Mapping[str, Any]) -> int:
        return 2

    def estimate(self, p: Mapping[str, Any]) -> Cost:
        """Calibration: :data:`CALIBRATION_SECONDS` at the object's own point, :data:`GRID_SECONDS`
        with the grid; black box: 2·samples real calls at the library's :data:`CALL_RATES`."""
        seconds, basis = 0.0, []
        if p["mode"] in ("calibration", "both"):
            seconds += GRID_SECONDS if p["grid"] else CALIBRATION_SECONDS
            basis.append("the default grid of constructor runs" if p["grid"] else "one exact profile")
        if p["mode"] in ("blackbox", "both"):
            rate = CALL_RATES[p["library"]]
            calls = 2 * (p["samples"] + sum(_self_test_samples(p, None)))
            seconds += calls / rate
            basis.append(f"2·samples = {2 * p['samples']} real calls (+ {calls - 2 * p['samples']} for the auditor "
                         f"self-tests) at ≈ {rate:g}/s")
        return Cost(memory=BASE_MEMORY, seconds=seconds, basis="; ".join(basis))

    def self_tests(self, spec, evidence: Mapping[str, Any]) -> list[SelfTest]:
        """The black-box auditor's self-tests (mode ``blackbox`` or ``both``, the library
        installed): the claim's own black-box pipeline — the library's sampler, pair, claimed
        (ε, δ), distinguisher and confidence — with ``self_test`` set
        (:func:`~fedaudit.targets.catalog.blackbox`), each on a seed derived from the claim's: a
        null test — the library on the pair's first input twice, ε_lb must be 0 — on 10% of
        ``samples``, and a planted violation — its report with a fingerprint of its input
        appended, exact ε ∞ — on :func:`~fedaudit.audit.self_tests.planted_samples`. The
        calibration is a computation with no auditor: none is declared for it (an independent
        recomputation of its exact profile, in mpmath down to δ = 10⁻³⁰, would need a second
        high-precision implementation of each library's noise)."""
        bb = evidence.get("blackbox")
        if not evidence.get("installed") or not isinstance(bb, Mapping):
            return []
        from fedaudit.rng import derive_seed

        p = spec.params
        claimed = number(bb, "epsilon_claimed")
        null_n, planted_n = _self_test_samples(p, claimed, number(bb, "delta_claimed"))

        def run(kind: str, n: int) -> dict[str, Any]:
            from fedaudit.audit.self_tests import LDP_PLANTED, ldp_evidence

            seed = derive_seed(spec.seed, f"self-test={kind}")
            real = None if p["real_calls"] is None else min(p["real_calls"], n)
            res = _catalog().blackbox(p["library"], p["mechanism"], dict(p["params"]), samples=n, seed=seed,
                                      confidence=p["confidence"], real_calls=real, self_test=kind)
            return ldp_evidence(kind, res.epsilon_lower, epsilon=max(res.epsilon_claimed, 1e-12),
                                planted=LDP_PLANTED[kind].replace("mechanism", f"{p['library']} sampler"),
                                pair=f"{res.x0} vs {res.x1}", distinguisher=res.audit.test,
                                samples=res.audit.samples, confidence=res.audit.confidence, delta=res.delta_claimed,
                                seed=seed, real_calls=res.real_calls, max_certifiable=res.audit.max_certifiable)

        return [SelfTest(f"null: the {p['library']} sampler on the same input twice", "null",
                         lambda: run("null", null_n)),
                SelfTest(f"planted: the {p['library']} sampler with its input leaked (exact ε ∞)", "planted",
                         lambda: run("planted", planted_n))]

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        catalog = _catalog()
        p = spec.params
        lib, mech, kw = p["library"], p["mechanism"], dict(p["params"])
        installed, version = catalog.library_status(lib)
        evidence: dict[str, Any] = {"library": lib, "mechanism": mech, "version": version, "installed": installed,
                                    "mode": p["mode"]}
        if not installed:
            from fedaudit.extras import EXTRAS

            dist = catalog.LIBRARIES[lib][0]
            evidence["reason"] = (f"{dist} is not installed here: pip install 'fedaudit[{EXTRAS.get(dist, dist)}]' "
                                  f"to run this claim")
            progress(2)
            return Evidence(holds=False, violated=False, inconclusive=True, evidence=evidence,
                            summary=f"{lib} {mech}: INCONCLUSIVE, {evidence['reason']}")
        parts, caveats = [], []
        if p["mode"] in ("calibration", "both"):
            cal = catalog.calibration(lib, mech, kw, grid=p["grid"], delta=p["delta"])
            evidence["calibration"] = {"mechanism": cal.mechanism, "version": cal.version, "claim": cal.claim,
                                       "method": cal.method, "exact": cal.exact, "tolerance": cal.tolerance,
                                       "violation": cal.violation, "summary": cal.summary(), "notes": cal.notes}
            evidence["calibration_points"] = [asdict(pt) for pt in [cal.own, *cal.grid]]
            own = cal.own
            achieved = "—" if own.delta_achieved is None else f"{own.delta_achieved:.4g}"
            parts.append(f"at its own (ε = {own.epsilon:g}, δ = {own.delta:g}): achieved δ = {achieved}, true ε = "
                         f"{own.epsilon_true:.6g}; " + cal.summary().split(": ", 1)[-1])
            caveats.extend(cal.notes)
        progress(1)
        if p["mode"] in ("blackbox", "both"):
            bb = catalog.blackbox(lib, mech, kw, samples=p["samples"], seed=spec.seed, confidence=p["confidence"],
                                  real_calls=p["real_calls"])
            evidence["blackbox"] = {"mechanism": bb.mechanism, "version": bb.version,
                                    "epsilon_claimed": bb.epsilon_claimed, "delta_claimed": bb.delta_claimed,
                                    "epsilon_lower": bb.epsilon_lower, "confidence": bb.audit.confidence,
                                    "samples": bb.audit.samples, "real_calls": bb.real_calls,
                                    "calls_per_second": bb.calls_per_second, "vectorised": bb.vectorised,
                                    "equivalence_calls": bb.equivalence_calls,
                                    "equivalence_mismatches": bb.equivalence_mismatches,
                                    "reproducible": bb.reproducible, "seconds": bb.seconds, "x0": bb.x0, "x1": bb.x1,
                                    "violation": bb.violation, "notes": bb.notes}
            parts.append(bb.summary().split(": ", 1)[-1])
            caveats.extend(bb.notes)
            if not bb.reproducible:
                caveats.append(f"{lib} draws from OS entropy (no seed): a rerun certifies a different bound")
        progress(1)
        decision = self.decide(evidence, spec.expect)
        flags = [evidence.get("calibration", {}).get("violation", False),
                 evidence.get("blackbox", {}).get("violation", False)]
        if decision.violated != any(flags):
            raise AssertionError(f"the library audit's violation flags {flags} disagree with the kind's rule")
        if spec.expect == "violation":
            parts.append("expected a violation, " + ("detected" if decision.violated else "NOT detected"))
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence,
                        summary=f"{version} {mech}: " + "; ".join(parts), caveats=tuple(caveats))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """A library mechanism's claim in words: the guarantee read off the object, the white-box
        calibration (exact privacy profile at its own parameters and the grid) and the black-box
        certified bound of real calls, which of them refutes the claim, and what neither shows."""
        num = display_number
        lib, mech, version = ev.get("library"), ev.get("mechanism"), ev.get("version") or ev.get("library")
        if not ev.get("installed", True):
            return Explanation(
                claimed=f"{lib}'s {mech} delivers the privacy guarantee it states.",
                tested="Nothing: the library is not installed where the plan ran.",
                means=f"No verdict: {ev.get('reason', 'the library is missing')}.",
                does_not_show=("anything about the mechanism: it was neither built nor called",),
                next_steps=(str(ev.get("reason", "install the library")).split(": ", 1)[-1],))
        cal, bb = ev.get("calibration"), ev.get("blackbox")
        points = [pt for pt in ev.get("calibration_points") or [] if isinstance(pt, Mapping)]
        own = points[0] if points else {}
        claim = (cal or {}).get("claim") or (f"ε = {num((bb or {}).get('epsilon_claimed'))}, "
                                              f"δ = {num((bb or {}).get('delta_claimed'))}")
        claimed = (f"{version}'s {mech} with {params.get('params') or 'its parameters'} delivers the guarantee it "
                   f"states ({claim})." + (" The plan expects it not to." if expect == "violation" else ""))
        tests = []
        if cal is not None:
            tests.append(f"white box: the exact privacy profile of the mechanism as implemented ({cal.get('method')}) "
                         f"at its own parameters" + (f" and at {len(points) - 1} more points of the default grid"
                                                     if len(points) > 1 else "")
                         + f", a point failing when its achieved δ exceeds the claimed δ by more than "
                           f"{percent(number(cal, 'tolerance'))}")
        if bb is not None:
            tests.append(f"black box: {num(bb.get('real_calls') or bb.get('samples'))} real library calls per input "
                         f"on two neighbouring inputs, a certified lower bound on ε at "
                         f"{percent(number(bb, 'confidence'))}")
        tested = "; ".join(tests)
        tested = tested[0].upper() + tested[1:] + "."
        parts = []
        if cal is not None:
            bad = [pt for pt in points if pt.get("violation")]
            parts.append(f"at its own (ε = {num(own.get('epsilon'))}, δ = {num(own.get('delta'))}) the achieved δ is "
                         f"{num(own.get('delta_achieved'))} and the true ε {num(own.get('epsilon_true'))}"
                         + (f"; {len(bad)} of {len(points)} calibration point(s) are under-calibrated" if bad else
                            f"; every one of the {len(points)} calibration point(s) meets its claim"))
        if bb is not None:
            lb, eps = number(bb, "epsilon_lower"), number(bb, "epsilon_claimed")
            parts.append(f"the real calls certify ε ≥ {num(lb, 3)}, " + ("ABOVE" if lb > max(eps, 1e-12) else "within")
                         + f" the claimed {num(eps)}")
        means = "; ".join(parts)
        means = (means[0].upper() + means[1:] + ".") if means else "Nothing was measured."
        if expect == "violation":
            means += " The plan expected a violation: " + ("detected." if verdict == "PASS" else "NOT detected.")
        not_shown = [f"other versions of {lib}: the result is for {version}",
                     "how the mechanism is used: composition over calls and what else is released are not accounted"]
        if bb is not None:
            not_shown.append("that the claim holds: the black-box bound is a lower bound; the calibration is the "
                             "white-box check" if cal is not None else
                             "that the claim holds: a black-box lower bound can only refute it (run mode = \"both\")")
        steps = []
        if verdict == "FAIL" and expect == "pass":
            steps.append(f"report the under-calibration to {lib}'s maintainers with the failing points, or "
                         f"calibrate the noise yourself for the claimed (ε, δ)")
        elif verdict == "PASS" and expect == "violation":
            steps.append("nothing to fix: keep the claim as a regression case")
        elif cal is None:
            steps.append("add the white-box calibration (mode = \"both\") for a check that can confirm the claim")
        elif len(points) == 1:
            steps.append("check the default (ε, δ) grid too (grid = true)")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """INCONCLUSIVE when ``installed`` is false. Otherwise a violation is a calibration point
        (``calibration_points``, the object's own first) with achieved δ above its claimed δ by more
        than the relative ``tolerance`` (δ = 0: any achieved δ > 0; a point without an achieved δ:
        its true ε above its ε by more than the tolerance; refused points count for nothing), or a
        black-box ``epsilon_lower`` above ``epsilon_claimed`` (a claim ε = 0 is audited as 10⁻¹²).
        The stored ``violation`` flags are not read."""
        installed = evidence.get("installed")
        if not isinstance(installed, bool):
            raise EvidenceError(f"evidence 'installed' is {installed!r}, not true/false")
        if not installed:
            return Decision(holds=False, violated=False, inconclusive=True)
        violated = False
        if "calibration" in evidence:
            tol = number(evidence["calibration"], "tolerance")
            for pt in rows(evidence, "calibration_points"):
                if pt.get("refused") is not None:
                    continue
                achieved = number(pt, "delta_achieved", nullable=True)
                if achieved is not None:
                    delta = number(pt, "delta")
                    violated |= achieved > delta * (1 + tol) if delta > 0 else achieved > 0
                else:
                    violated |= number(pt, "epsilon_true") > number(pt, "epsilon") * (1 + tol)
        if "blackbox" in evidence:
            bb = evidence["blackbox"]
            violated |= number(bb, "epsilon_lower") > max(number(bb, "epsilon_claimed"), 1e-12)
        if "calibration" not in evidence and "blackbox" not in evidence:
            raise EvidenceError("the evidence has neither 'calibration' nor 'blackbox'")
        return Decision(holds=not violated, violated=violated)
