"""DP-SGD accounting against dp-accounting (PLD, RDP) and Opacus (RDP, PRV), computed here
independently; reference values from ../shared/research/privacy.md section 4."""

from __future__ import annotations

import json

import pytest
from dp_accounting import dp_event, pld, rdp

from fedaudit.accounting.dpsgd import DPSGDAccount, epsilon_dpsgd, noise_multiplier_for
from fedaudit.errors import FedAuditError

REF = dict(noise_multiplier=1.1, sample_rate=256 / 60000, steps=14062, delta=1e-5)


def _event(sigma, q, steps):
    return dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)


def _dp_pld(sigma, q, steps, delta, interval):
    acc = pld.PLDAccountant(value_discretization_interval=interval)
    acc.compose(_event(sigma, q, steps))
    return acc.get_epsilon(delta)


def _dp_rdp(sigma, q, steps, delta):
    acc = rdp.RdpAccountant()
    acc.compose(_event(sigma, q, steps))
    return acc.get_epsilon(delta)


def test_reference_case_pld_within_half_percent_of_finer_dp_accounting():
    got = epsilon_dpsgd(**REF, method="pld")
    fine = _dp_pld(1.1, 256 / 60000, 14062, 1e-5, interval=3e-5)
    assert got.epsilon == pytest.approx(fine, rel=5e-3)
    assert got.epsilon >= fine  # a pessimistic (upper) estimate, coarser grid
    assert 2.37 < got.epsilon < 2.40  # note: PLD 2.391 at Δ=1e-3, PRV [2.371, 2.392]
    assert got.method == "pld" and got.delta == 1e-5


def test_reference_case_rdp_and_prv():
    r = epsilon_dpsgd(**REF, method="rdp")
    assert r.epsilon == pytest.approx(_dp_rdp(1.1, 256 / 60000, 14062, 1e-5), rel=5e-3)
    assert r.epsilon == pytest.approx(2.597, abs=1e-3)
    p = epsilon_dpsgd(**REF, method="prv")
    assert 2.371 <= p.epsilon <= 2.392 + 1e-3  # upper end of the PRV error interval
    assert p.epsilon < r.epsilon  # RDP is the looser bound


@pytest.mark.parametrize("sigma,q,steps,ref_rdp,ref_pld", [
    (1.0, 0.01, 5000, 4.589, 4.204),
    (2.0, 0.05, 2000, None, None),
])
def test_grid_cross_checks_both_libraries(sigma, q, steps, ref_rdp, ref_pld):
    delta = 1e-5
    got_rdp = epsilon_dpsgd(sigma, q, steps, delta, method="rdp").epsilon
    got_pld = epsilon_dpsgd(sigma, q, steps, delta, method="pld").epsilon
    assert got_rdp == pytest.approx(_dp_rdp(sigma, q, steps, delta), rel=5e-3)
    assert got_pld == pytest.approx(_dp_pld(sigma, q, steps, delta, interval=1e-3), rel=5e-3)
    if ref_rdp is not None:
        assert got_rdp == pytest.approx(ref_rdp, rel=2e-3)
        assert got_pld == pytest.approx(ref_pld, rel=5e-3)
    assert got_pld < got_rdp


def test_high_epsilon_setting_the_two_rdp_libraries_differ():
    # σ=0.8, q=4096/50000, 1220 steps: Opacus's orders give 38.29, dp-accounting's default orders
    # (several fail to converge there) give 40.18; both stay upper bounds above PLD's 35.53.
    sigma, q, steps, delta = 0.8, 4096 / 50000, 1220, 1e-5
    got_rdp = epsilon_dpsgd(sigma, q, steps, delta, method="rdp").epsilon
    got_pld = epsilon_dpsgd(sigma, q, steps, delta, method="pld").epsilon
    assert got_rdp == pytest.approx(38.29, abs=0.01)
    assert got_pld == pytest.approx(35.53, rel=5e-3)
    assert got_pld < got_rdp < _dp_rdp(sigma, q, steps, delta)


@pytest.mark.parametrize("method", ["rdp", "pld"])
def test_monotone_in_steps_and_noise(method):
    q, delta = 0.01, 1e-5
    by_steps = [epsilon_dpsgd(1.0, q, t, delta, method=method).epsilon for t in (10, 300, 3000)]
    assert all(a < b for a, b in zip(by_steps, by_steps[1:]))
    by_noise = [epsilon_dpsgd(s, q, 1000, delta, method=method).epsilon for s in (2.0, 1.0, 0.7)]
    assert all(a < b for a, b in zip(by_noise, by_noise[1:]))


@pytest.mark.parametrize("method,tol", [("rdp", 1e-3), ("pld", 1e-2)])
def test_inverse_is_the_smallest_sufficient_noise(method, tol):
    q, steps, delta, target = 0.01, 1000, 1e-5, 2.0
    sigma = noise_multiplier_for(target, q, steps, delta, method=method, tol=tol)
    assert epsilon_dpsgd(sigma, q, steps, delta, method=method).epsilon <= target
    assert epsilon_dpsgd(sigma * (1 - tol), q, steps, delta, method=method).epsilon > target


def test_inverse_below_one_and_unreachable():
    sigma = noise_multiplier_for(50.0, 0.1, 10, 1e-5, method="rdp")  # needs little noise
    assert sigma < 1.0
    assert epsilon_dpsgd(sigma, 0.1, 10, 1e-5, method="rdp").epsilon <= 50.0
    with pytest.raises(FedAuditError, match="sigma_range"):
        noise_multiplier_for(1e-3, 1.0, 1000, 1e-5, method="rdp", sigma_range=(0.1, 10.0))


def test_result_is_frozen_and_json():
    acc = epsilon_dpsgd(**REF, method="rdp")
    assert isinstance(acc, DPSGDAccount)
    with pytest.raises(AttributeError):
        acc.epsilon = 0.0
    d = json.loads(json.dumps(acc.to_dict(), allow_nan=False))
    assert d["method"] == "rdp" and d["parameters"]["steps"] == 14062
    assert d["parameters"]["noise_multiplier"] == 1.1 and d["epsilon"] == pytest.approx(acc.epsilon)


@pytest.mark.parametrize("kw,name", [
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"), (dict(delta=-1e-5), "delta"),
    (dict(sample_rate=0.0), "sample_rate"), (dict(sample_rate=1.5), "sample_rate"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"), (dict(noise_multiplier=0.0), "noise_multiplier"),
    (dict(steps=0), "steps"), (dict(steps=2.5), "steps"),
])
def test_bad_input_names_the_parameter(kw, name):
    args = {**REF, **kw}
    with pytest.raises(FedAuditError, match=name):
        epsilon_dpsgd(**args, method="rdp")


def test_bad_method_and_sample_rate_one_allowed():
    with pytest.raises(FedAuditError, match="method"):
        epsilon_dpsgd(**REF, method="gdp")
    assert epsilon_dpsgd(1.0, 1.0, 10, 1e-5, method="rdp").epsilon > 0
    with pytest.raises(FedAuditError, match="target_epsilon"):
        noise_multiplier_for(0.0, 0.01, 100, 1e-5)


@pytest.mark.filterwarnings("ignore:Optimal order is the largest alpha")
def test_inverse_agrees_with_opacus_get_noise_multiplier():
    from opacus.accountants.utils import get_noise_multiplier
    q, steps, delta, target = 0.01, 1000, 1e-5, 2.0
    ours = noise_multiplier_for(target, q, steps, delta, method="rdp")
    theirs = get_noise_multiplier(target_epsilon=target, target_delta=delta, sample_rate=q, steps=steps,
                                  accountant="rdp", epsilon_tolerance=0.01)
    assert ours <= theirs <= ours * 1.01  # theirs stops within 0.01 of the target, ours is the smallest
