"""Flower's central DP: its accountant against fedaudit's (fast), its wrappers in real simulations (slow).

Fast: Flower's ``RdpAccountant`` is dp-accounting's RDP with its default orders (equal to fedaudit's
``dpa-rdp`` to rounding), never below dp-accounting's PLD (no under-counting), and it differs from
Opacus's RDP (fedaudit's ``rdp``) exactly where the orders differ: above 63 (Flower tighter) and where
dp-accounting drops low fractional orders whose series does not converge (Flower looser).
Slow: each wrapper in a real ``run_simulation`` with canary clients (:mod:`~fedaudit.integrations.flower.central_dp`).
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pytest

pytest.importorskip("flwr")

from fedaudit.accounting.accountants import account, dpsgd_event  # noqa: E402
from fedaudit.integrations.flower.accountant_check import PLD_SLACK, cross_check, flower_epsilon  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_rdp_warnings():
    """dp-accounting logs one WARNING per RDP order it drops; the tests read the ε, not the log."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    yield
    root.setLevel(level)


def test_flower_accountant_is_dp_accountings_rdp_and_never_below_the_pld():
    rows = cross_check(sigmas=(0.8, 2.0), rates=(0.1, 1.0), rounds=(1, 10))
    assert len(rows) == 2 * 2 * 2 + 2 * 2  # poisson (σ, q, T) + no-amplification (σ, T)
    for r in rows:
        assert r.agrees, r  # the same backend, the same orders
        assert not r.under_counts, r
        assert r.eps_flower >= r.eps_pld * (1 - PLD_SLACK) and r.eps_rdp >= r.eps_pld * (1 - PLD_SLACK), r
        assert r.ratio >= 1 - PLD_SLACK
    by = {(r.sampling, r.sigma, r.rate, r.rounds): r for r in rows}
    for sigma in (0.8, 2.0):  # no amplification is the Poisson event at q = 1
        for t in (1, 10):
            assert by[("no-amplification", sigma, 1.0, t)].eps_flower == by[("poisson", sigma, 1.0, t)].eps_flower


def test_flower_is_tighter_than_opacus_rdp_where_its_optimal_order_is_above_63():
    eps, order = flower_epsilon(5.0, 0.01, 1, 1e-5)
    assert order > 63  # dp-accounting's orders go on to 128 … 1024; Opacus's stop at 63
    opacus = account(dpsgd_event(5.0, 0.01, 1), delta=1e-5, accountant="rdp").epsilon
    assert eps < opacus


def test_flower_is_looser_than_opacus_rdp_where_dp_accounting_drops_low_orders():
    """σ = 0.5, q = 0.1, T = 1000: dp-accounting's series for orders 1.1 … 1.5 does not converge and it drops
    them (its own WARNING), so Flower's best order is 1.7 and its ε far above Opacus's (which keeps them)."""
    eps, order = flower_epsilon(0.5, 0.1, 1000, 1e-5)
    opacus = account(dpsgd_event(0.5, 0.1, 1000), delta=1e-5, accountant="rdp").epsilon
    assert order == pytest.approx(1.7) and eps > 1.5 * opacus


def test_a_sample_rate_that_is_not_a_whole_number_of_clients_is_refused():
    from fedaudit.errors import FedAuditError

    with pytest.raises(FedAuditError, match="whole number"):
        flower_epsilon(1.0, 0.0015, 1, 1e-5)


# --------------------------------------------------------------------------- real simulations (slow)

def _z_tolerance(run) -> float:
    """5 standard errors of the RMS of d Gaussian draws (relative SE 1/√(2d))."""
    return 5.0 / math.sqrt(2 * run.d)


@pytest.mark.slow
@pytest.mark.parametrize("wrapper", ["server-fixed", "client-fixed"])
def test_fixed_wrappers_add_the_configured_noise_and_a_correct_claim_is_not_flagged(wrapper):
    from fedaudit.integrations.flower.central_dp import audit_central_dp, run_central_dp

    run = run_central_dp(wrapper, noise_multiplier=0.8, rounds=8, seed=1)
    for r in run.rounds:
        assert r.clip == pytest.approx(1.0, rel=1e-9) and r.clip_next == 1.0
        assert r.z_effective == pytest.approx(0.8, rel=_z_tolerance(run))
    assert run.eps_flower_run == pytest.approx(flower_epsilon(0.8, 1.0, 8, 1e-5, sampling="no-amplification",
                                                              population=run.clients)[0], rel=1e-12)
    audit = audit_central_dp(run)
    assert not audit.violation and audit.one_run.epsilon < audit.eps_claim


@pytest.mark.slow
def test_a_wrapper_with_far_less_noise_than_its_accountant_is_told_is_flagged():
    from fedaudit.integrations.flower.central_dp import audit_central_dp, run_central_dp

    run = run_central_dp("server-fixed", noise_multiplier=0.02, rounds=8, seed=2)
    audit = audit_central_dp(run, z_claimed=3.0)
    assert audit.violation and audit.one_run.epsilon > audit.eps_claim


@pytest.mark.slow
@pytest.mark.parametrize("wrapper", ["server-adaptive", "client-adaptive"])
def test_adaptive_wrappers_noise_with_the_next_rounds_clip(wrapper):
    """Measured: z_eff,t = s_t·m/C_t equals z_Δ·C_{t+1}/C_t (the noise is scaled by the clip *after* this
    round's update, dp_adaptive_clipping.py:213-223 and 319-322), not z_Δ. At C₀ = 0.1 (Flower's default) the
    honest updates and the probe are clipped, so the clipped fraction (≥ 5/6) is above the target 0.5 and
    Flower *lowers* C (its norm bit counts clipped updates, differential_privacy.py:94): z_eff < z_Δ in every
    round, and the combined multiplier of Flower's own split, (z_eff⁻² + (2σ_b)⁻²)^(−1/2) with σ_b = m/20,
    falls below the configured z."""
    from fedaudit.integrations.flower.central_dp import run_central_dp

    z = 0.5
    run = run_central_dp(wrapper, noise_multiplier=z, clipping_norm=0.1, canaries=1, rounds=8, seed=3,
                         clip_norm_lr=0.5)
    assert run.z_used == pytest.approx((z ** -2 - (2 * run.clients / 20) ** -2) ** -0.5)
    tol = _z_tolerance(run)
    for prev, r in zip(run.rounds, run.rounds[1:]):
        assert r.clip == pytest.approx(prev.clip_next, rel=1e-9)  # the bound measured next round is Flower's update
    ratios = np.array([r.z_effective / run.z_used for r in run.rounds])
    steps = np.array([r.clip_next / r.clip for r in run.rounds])
    assert np.all(np.abs(ratios / steps - 1) < tol), (ratios, steps)
    assert abs(np.mean(np.log(ratios)) - np.mean(np.log(steps))) < tol / math.sqrt(len(ratios))
    assert all(r.clipped >= run.clients - 1 for r in run.rounds)
    assert np.all(steps < 1) and np.all(ratios < 1)
    z_eff = np.array([r.z_effective for r in run.rounds])
    combined = (z_eff ** -2 + (2 * run.clients / 20) ** -2) ** -0.5
    assert np.all(combined < z), combined
