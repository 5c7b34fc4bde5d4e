"""Audit of Flower's LocalDpMod (issue #13): the white-box ε of its calibration against two independent
computations (dp-accounting's Gaussian PLD and a scipy root of the Balle–Wang curve); Flower's real mod
equals the vectorised equivalent bit for bit (clipped and unclipped updates); the certified black-box
bounds stay below the true ε and refute the claim at ε = 4, while a calibration that delivers the claim
is not refuted; the claim kind fails Flower's configuration (and passes it as an expected violation);
bad input names the parameter."""

from __future__ import annotations

import copy
import json
import math

import jsonschema
import numpy as np
import pytest
from tests.helpers import UnitCounter, check_rederived
from scipy.optimize import brentq
from scipy.stats import norm

pytest.importorskip("flwr")

from flwr.clientapp.mod import LocalDpMod  # noqa: E402

from fedaudit.errors import FedAuditError  # noqa: E402
from fedaudit.experiments.plan import load_plan  # noqa: E402
from fedaudit.experiments.runner import run_plan  # noqa: E402
from fedaudit.integrations.flower.local_dp_audit import (  # noqa: E402
    AUDIT_MODEL, LocalDpModEquivalent, LocalDpModSampler, audit_local_dp_mod, flower_sigma, local_dp_mod_epsilon)
from fedaudit.integrations.flower.records import Layout, unflatten  # noqa: E402
from fedaudit.reports import load_schema  # noqa: E402

DELTA = 1e-5
#: flower_facts §5 (whitebox.py): claimed ε → (σ/C, true ε at Δ = 2C, δ at the claimed ε, σ/C needed)
TABLE = {0.5: (9.6896, 0.7510, 6.71e-4, 14.0637), 1.0: (4.8448, 1.6103, 1.70e-3, 7.4613),
         4.0: (1.2112, 7.9144, 2.34e-2, 2.1623)}


def balle_wang_delta(eps, sigma, sens):
    """δ(ε) of N(0, σ²) at L2 sensitivity Δ (Balle & Wang 2018, Thm. 8), in plain scipy."""
    a, b = sens / (2 * sigma), eps * sigma / sens
    return norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)


@pytest.mark.parametrize("eps", sorted(TABLE))
def test_white_box_epsilon_matches_pld_and_a_scipy_root(eps):
    from dp_accounting.pld import privacy_loss_distribution as pld

    cal = local_dp_mod_epsilon(1.0, 1.0, eps, DELTA)
    sigma, true_eps, delta_at, needed = TABLE[eps]
    assert cal.sigma == pytest.approx(sigma, abs=1e-4) and cal.l2_sensitivity == 2.0
    assert cal.sigma == 1.0 * np.sqrt(2 * np.log(1.25 / DELTA)) / eps  # Flower's own expression
    # independent: a root of the Balle–Wang curve, and dp-accounting's (pessimistic) Gaussian PLD
    root = brentq(lambda e: balle_wang_delta(e, cal.sigma, 2.0) - DELTA, 0.0, 50.0, xtol=1e-13)
    assert cal.epsilon_true == pytest.approx(root, abs=1e-9)
    plds = pld.from_gaussian_mechanism(standard_deviation=cal.sigma, sensitivity=2.0, value_discretization_interval=1e-4)
    assert cal.epsilon_true <= plds.get_epsilon_for_delta(DELTA) <= cal.epsilon_true + 1e-3
    assert cal.epsilon_true == pytest.approx(true_eps, abs=5e-5) and cal.violation
    assert cal.delta_at_epsilon == pytest.approx(balle_wang_delta(eps, cal.sigma, 2.0), rel=1e-9)
    assert cal.delta_at_epsilon == pytest.approx(delta_at, rel=5e-3)
    # the σ that delivers the claim: δ(ε) = δ at Δ = 2C, and Flower's formula reaches it at sensitivity_needed
    assert cal.sigma_needed == pytest.approx(needed, abs=1e-4)
    assert balle_wang_delta(eps, cal.sigma_needed, 2.0) == pytest.approx(DELTA, rel=1e-6)
    fixed = local_dp_mod_epsilon(1.0, cal.sensitivity_needed, eps, DELTA)
    assert fixed.sigma >= cal.sigma_needed and fixed.epsilon_true <= eps and not fixed.violation
    assert fixed.epsilon_true == pytest.approx(eps, abs=1e-9)
    # Flower's implicit reading (Δ = sensitivity = C) is conservative: the gap is the LDP sensitivity 2C
    assert cal.epsilon_if_sensitivity == pytest.approx(
        brentq(lambda e: balle_wang_delta(e, cal.sigma, 1.0) - DELTA, 0.0, 50.0, xtol=1e-13), abs=1e-9)
    assert cal.epsilon_if_sensitivity < eps
    assert f"true ε = {cal.epsilon_true:.4f} ABOVE the claimed {eps:g}" in cal.summary()


def test_white_box_scales_with_the_clipping_norm():
    a, b = local_dp_mod_epsilon(1.0, 1.0, 1.0, DELTA), local_dp_mod_epsilon(3.0, 3.0, 1.0, DELTA)
    assert b.epsilon_true == pytest.approx(a.epsilon_true, rel=1e-12)
    assert b.sigma_needed == pytest.approx(3 * a.sigma_needed, rel=1e-12)
    assert b.sensitivity_needed == pytest.approx(3 * a.sensitivity_needed, rel=1e-12)
    json.dumps(a.to_dict(), allow_nan=False)


LAYOUT = Layout(keys=tuple(k for k, _ in AUDIT_MODEL), shapes=tuple(s for _, s in AUDIT_MODEL),
                dtypes=("float64",) * len(AUDIT_MODEL))


def test_flowers_mod_equals_the_vectorised_equivalent_bit_for_bit():
    rng = np.random.default_rng(3)
    sent = rng.standard_normal(LAYOUT.dim)
    u = rng.standard_normal(LAYOUT.dim)
    u /= np.linalg.norm(u)
    real = LocalDpModSampler(LocalDpMod(1.0, 1.0, 1.0, DELTA), unflatten(sent, LAYOUT))
    equivalent = LocalDpModEquivalent(1.0, flower_sigma(1.0, 1.0, DELTA), sent, LAYOUT)
    np.random.seed(12345)
    before = np.random.get_state()[1].copy()
    for x, seed in ((u, 1), (-u, 2), (5 * u, 3), (0.25 * u, 4)):  # ‖5u‖ = 5: clipped jointly over both arrays
        got = real.draw(x, 80, seed)
        ref = equivalent.draw(x, 80, seed)
        assert np.array_equal(got.view(np.uint64), ref.view(np.uint64))
        assert len(np.unique(got[:, 0])) == 80  # fresh noise per call
    assert np.array_equal(np.random.get_state()[1], before)  # the caller's global numpy state is restored
    # independent of the equivalent's code: the clipped mean is old + min(1, C/‖x‖)·x and σ is Flower's
    big = real.draw(5 * u, 400, 9) - sent
    assert np.allclose(big.mean(0), u, atol=4 * 4.8448 / np.sqrt(400))
    assert np.std(big - u) == pytest.approx(4.8448, rel=0.05)
    # a wrong equivalent (no clipping) is caught
    no_clip = LocalDpModEquivalent(100.0, flower_sigma(1.0, 1.0, DELTA), sent, LAYOUT)
    assert not np.array_equal(real.draw(5 * u, 5, 3), no_clip.draw(5 * u, 5, 3))


def test_certified_bounds_are_sound_and_refute_the_claim_at_eps4():
    res = audit_local_dp_mod(epsilon=4.0, real_calls=300, samples=1_000_000, seed=0)
    cal = res.calibration
    assert res.equivalent and res.equivalence_calls == 2 * 300 + 2  # + the audit's two width-probe draws
    assert res.real.samples == 300 and res.vectorised.samples == 1_000_000
    assert 0.0 <= res.epsilon_lower_real <= cal.epsilon_true
    assert 4.0 < res.epsilon_lower_vectorised <= cal.epsilon_true  # certified violation, and sound
    assert res.vectorised.violation and res.certified_violation and res.violation
    assert res.real.confidence == 0.95 and res.vectorised.selection_samples == 100_000
    assert res.vectorised.certification_samples == 900_000 and res.vectorised.certified.n_in == 900_000
    assert "from 1,000,000 vectorised draws" in res.summary()
    json.dumps(res.to_dict(), allow_nan=False)


def test_a_calibration_that_delivers_the_claim_is_not_refuted():
    fixed = local_dp_mod_epsilon(1.0, 1.0, 4.0, DELTA).sensitivity_needed
    res = audit_local_dp_mod(1.0, fixed, 4.0, DELTA, real_calls=200, samples=1_000_000, seed=1)
    assert not res.calibration.violation and not res.violation
    assert res.epsilon_lower_vectorised <= 4.0 and res.epsilon_lower_vectorised > 2.0  # not a vacuous audit


@pytest.mark.parametrize("kwargs, match", [
    ({"clipping_norm": 0.0}, "clipping_norm must be a finite real number > 0"),
    ({"sensitivity": 0}, "sensitivity must be .*adds no noise"),
    ({"sensitivity": -1.0}, "sensitivity must be a finite real number > 0"),
    ({"epsilon": 0.0}, "epsilon must be a finite real number > 0"),
    ({"epsilon": float("nan")}, "epsilon must be a finite real number"),
    ({"delta": 0.0}, "delta must be in \\(0, 1\\)"),
    ({"delta": 1.25}, "delta must be a finite real number in \\(0, 1\\)"),
])
def test_bad_calibration_input_names_the_parameter(kwargs, match):
    args = {"clipping_norm": 1.0, "sensitivity": 1.0, "epsilon": 1.0, "delta": DELTA, **kwargs}
    with pytest.raises(FedAuditError, match=match):
        local_dp_mod_epsilon(**args)


def test_bad_audit_input_names_the_parameter():
    with pytest.raises(FedAuditError, match="real_calls must be an integer in \\[100, 10\\^12=1000000000000\\], got real_calls=10"):
        audit_local_dp_mod(epsilon=1.0, real_calls=10)
    with pytest.raises(FedAuditError, match="samples must be an integer in \\[100, 10\\^12=1000000000000\\], got samples=0"):
        audit_local_dp_mod(epsilon=1.0, samples=0)
    with pytest.raises(FedAuditError, match="confidence must be"):
        audit_local_dp_mod(epsilon=1.0, confidence=1.0)
    with pytest.raises(FedAuditError, match="mod must be a flwr.clientapp.mod.LocalDpMod"):
        LocalDpModSampler(lambda m, c, n: m, unflatten(np.zeros(LAYOUT.dim), LAYOUT))
    f32 = Layout(keys=("w",), shapes=((2,),), dtypes=("float32",))
    with pytest.raises(FedAuditError, match="sent must hold float64 arrays only"):
        LocalDpModSampler(LocalDpMod(1.0, 1.0, 1.0, DELTA), unflatten(np.zeros(2), f32))
    real = LocalDpModSampler(LocalDpMod(1.0, 1.0, 1.0, DELTA), unflatten(np.zeros(LAYOUT.dim), LAYOUT))
    with pytest.raises(FedAuditError, match="LocalDpMod failed on the update x \\(‖x‖ = 0\\): ZeroDivisionError"):
        real.draw(np.zeros(LAYOUT.dim), 1, 0)

    class ErrorReply(LocalDpMod):  # Flower reports some failures as an error reply instead of raising
        def __call__(self, msg, ctxt, call_next):
            from flwr.app import Error, Message

            return Message(Error(code=6, reason="LocalDpMod expects exactly one ArrayRecord"), reply_to=msg)

    failing = LocalDpModSampler(ErrorReply(1.0, 1.0, 1.0, DELTA), unflatten(np.zeros(LAYOUT.dim), LAYOUT))
    with pytest.raises(FedAuditError, match="LocalDpMod returned an error reply: LocalDpMod expects exactly one"):
        failing.draw(np.ones(LAYOUT.dim), 1, 0)


# --------------------------------------------------------------------------- claim kind
CLAIM = {"id": "mod4", "kind": "flower-local-dp", "epsilon": 4.0, "real_calls": 200, "samples": 200_000}


def plan(*claims):
    return {"plan": {"title": "LocalDpMod", "seed": 0}, "claim": [copy.deepcopy(c) for c in claims]}


def test_claim_kind_fails_flowers_configuration_and_passes_it_as_an_expected_violation():
    fixed = local_dp_mod_epsilon(1.0, 1.0, 4.0, DELTA).sensitivity_needed
    units = UnitCounter()
    rep = run_plan(plan(CLAIM, {**CLAIM, "id": "known", "expect": "violation", "samples": 100},
                        # 2000 draws: at 100 no audit certifies ε > 3.4, so the planted self-test could not
                        # catch a violation of ε = 4 and the PASS would be INCONCLUSIVE (issue #26 §5)
                        {**CLAIM, "id": "fixed", "sensitivity": fixed, "samples": 2000}), progress=units)
    assert units.total["mod4"] == (2 * 200_200, "samples") and units.done["mod4"] == 2 * 200_200
    bad, known, ok = rep.claims
    assert [c.error for c in rep.claims] == [None] * 3
    ev = bad.evidence
    assert bad.verdict == "FAIL" and ev["violation"] and ev["white_box_violation"]
    assert ev["epsilon_true"] == pytest.approx(7.9144, abs=5e-5) and ev["epsilon_claimed"] == 4.0
    assert ev["epsilon_lower_real"] <= ev["epsilon_true"] and ev["epsilon_lower_vectorised"] <= ev["epsilon_true"]
    assert ev["equivalence_mismatches"] == 0 and ev["equivalence_calls"] == 402
    assert ev["sigma_needed"] == pytest.approx(2.1623, abs=1e-4)
    assert ev["parameters"]["sensitivity"] == 1.0  # defaulted to clipping_norm
    assert "true ε is 7.9144, ABOVE the claimed 4" in bad.summary and "sensitivity = 1.7853·C" in bad.summary
    assert known.verdict == "PASS" and "expected a violation, detected" in known.summary
    # decided by the exact ε: 100 draws certify nothing above 4
    assert not known.evidence["certified_violation"] and known.evidence["white_box_violation"]
    assert ok.verdict == "PASS" and not ok.evidence["violation"] and ok.evidence["epsilon_true"] <= 4.0
    assert "the claim needs" not in ok.summary
    # decide() of the recorded evidence: the exact ε, then each certified bound, against the claim
    check_rederived(bad, flips=[(lambda e: e.update(epsilon_claimed=8.0), "PASS")],
                    missing=[lambda e: e.pop("epsilon_true"), lambda e: e.pop("epsilon_lower_vectorised")])
    check_rederived(known, flips=[(lambda e: e.update(epsilon_true=3.9), "FAIL")])
    check_rederived(ok, flips=[(lambda e: e.update(epsilon_lower_real=4.01), "FAIL"),
                               (lambda e: e.update(epsilon_lower_vectorised=4.01), "FAIL"),
                               (lambda e: e.update(epsilon_true=4.01), "FAIL")])
    jsonschema.validate(json.loads(json.dumps(rep.seal().to_dict())), load_schema())


def test_shipped_plan_audits_the_three_configurations_as_known_violations():
    from fedaudit import plans

    with plans.plan_path("flower-local-dp") as path:
        claims = load_plan(path).claims
    assert [(c.kind, c.expect, c.params["epsilon"]) for c in claims] == [
        ("flower-local-dp", "violation", e) for e in (0.5, 1.0, 4.0)]
    assert all(c.params["sensitivity"] == c.params["clipping_norm"] == 1.0 and c.params["delta"] == DELTA
               and c.params["samples"] == 10**7 and c.params["real_calls"] == 20_000 for c in claims)


def test_bad_plan_keys_are_refused_when_the_plan_is_loaded():
    from fedaudit.experiments.plan import parse_plan

    with pytest.raises(FedAuditError, match="epsilon"):
        parse_plan(plan({"id": "x", "kind": "flower-local-dp"}))
    with pytest.raises(FedAuditError, match="real_calls"):
        parse_plan(plan({**CLAIM, "real_calls": 5}))
    with pytest.raises(FedAuditError, match="delta"):
        parse_plan(plan({**CLAIM, "delta": 0}))


def test_projection_audit_has_power_and_no_false_alarm():
    from fedaudit.audit.bounds import expected_epsilon_lower_bound
    from fedaudit.integrations.flower.local_dp_audit import audit_projection

    sigma, u = flower_sigma(1.0, 4.0, DELTA), np.eye(LAYOUT.dim)[0]
    gauss = lambda x, size, rng: x + sigma * rng.standard_normal((size, x.size))  # noqa: E731
    res = audit_projection(gauss, u, -u, epsilon=4.0, delta=DELTA, samples=1_000_000, seed=5)
    # the best threshold event of N(±1, σ²) at 900,000 certification draws, in plain scipy
    t = np.linspace(0.0, 8.0, 801)
    tpr, fpr = norm.sf((t - 1.0) / sigma), norm.sf((t + 1.0) / sigma)
    best = max(expected_epsilon_lower_bound(a, b, 900_000, delta=DELTA) for a, b in zip(tpr[::20], fpr[::20]))
    true_eps = local_dp_mod_epsilon(1.0, 1.0, 4.0, DELTA).epsilon_true
    assert best - 1.0 <= res.epsilon_lower <= true_eps and res.violation  # measured 4.94, best 5.47
    assert res.certified.tp + res.certified.fp > 0 and res.selection_samples == 100_000
    # reports that do not depend on the input: nothing to certify
    blind = lambda x, size, rng: rng.standard_normal((size, x.size))  # noqa: E731
    assert audit_projection(blind, u, -u, epsilon=0.1, delta=DELTA, samples=200_000, seed=6).epsilon_lower < 0.05
    with pytest.raises(FedAuditError, match="x0 and x1 must differ"):
        audit_projection(gauss, u, u, epsilon=1.0, delta=DELTA, samples=1000)


def test_a_failed_equivalence_check_skips_the_vectorised_bound(monkeypatch):
    honest = LocalDpModEquivalent.mean
    monkeypatch.setattr(LocalDpModEquivalent, "mean", lambda self, x: honest(self, x) * (1 + 2**-50))
    res = audit_local_dp_mod(epsilon=1.0, real_calls=100, samples=100, seed=0)
    assert res.equivalence_mismatches == res.equivalence_calls == 202 and not res.equivalent
    assert res.vectorised is None and res.epsilon_lower_vectorised is None
    assert res.equivalence_max_abs_difference > 0
    assert "vectorised stage skipped (equivalence failed)" in res.summary()
