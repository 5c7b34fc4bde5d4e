"""Client-level canary audit of DP-FedAvg: calibrated runs are never flagged, under-calibrated
ones are, and the canary scores follow their analytic law K_i + N(0, T z²)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from fedaudit.audit.dp_fedavg_audit import DPFedAvgAudit, audit_dp_fedavg
from fedaudit.errors import FedAuditError

CFG = dict(sample_rate=0.5, rounds=5, delta=1e-5, canaries=1000, clients=20)


@pytest.fixture(scope="module")
def calibrated():
    return audit_dp_fedavg(noise_multiplier=4.0, seed=0, **CFG)


def test_calibrated_runs_are_never_flagged(calibrated):
    for res in (calibrated, audit_dp_fedavg(noise_multiplier=4.0, seed=1, **CFG)):
        assert isinstance(res, DPFedAvgAudit) and not res.violation and res.violated_by == ()
        assert res.accountant.epsilon == pytest.approx(1.167, abs=2e-3)  # PLD, z = 4, q = ½, 5 rounds
        assert 0 <= res.one_run.epsilon < res.accountant.epsilon
        assert res.one_run_fdp.epsilon < res.accountant.epsilon
        assert res.one_run.method == "steinke" and res.one_run_fdp.method == "fdp"
        assert res.canaries == 1000 and 400 < res.canaries_in < 600


def test_noise_divided_by_ten_is_flagged():
    res = audit_dp_fedavg(noise_multiplier=0.4, claimed_noise_multiplier=4.0, seed=0, **CFG)
    assert res.violation and res.claimed_noise_multiplier == 4.0 and res.noise_multiplier == 0.4
    assert res.violated_by == ("steinke", "fdp") and res.epsilon_lower == res.one_run_fdp.epsilon
    assert res.accountant.noise_multiplier == 4.0  # the accountant is told the claim
    assert res.one_run.epsilon > 2 * res.accountant.epsilon
    assert res.one_run_fdp.epsilon >= res.one_run.epsilon
    assert "VIOLATION" in res.summary()


def test_a_server_that_does_not_clip_is_flagged(monkeypatch):
    """Canaries send 10·C·u_i; skipping the clipping multiplies their signal by 10."""
    import fedaudit.fl.dp_fedavg as dp

    def no_clip(updates, clip):
        U = np.asarray(updates, dtype=np.float64)
        return U, np.linalg.norm(U, axis=1), np.zeros(U.shape[0], dtype=bool)

    monkeypatch.setattr(dp, "clip_updates", no_clip)
    res = audit_dp_fedavg(noise_multiplier=4.0, seed=0, **CFG)
    assert res.violation and res.one_run.epsilon > res.accountant.epsilon


def test_scores_follow_their_analytic_law(calibrated):
    """Excluded canaries score N(0, T z²); included ones Bin(T, q) + N(0, T z²) (mean qT, variance
    Tq(1−q) + Tz²): honest updates never reach the canary block and directions are orthonormal.
    Checked at 99.9% (normal CI for the mean, χ² CI for the variance)."""
    T, q, z = CFG["rounds"], CFG["sample_rate"], 4.0
    for s, n, mean, var in ((calibrated.scores_out, 1000 - calibrated.canaries_in, 0.0, T * z * z),
                            (calibrated.scores_in, calibrated.canaries_in, q * T, T * q * (1 - q) + T * z * z)):
        assert abs(s["mean"] - mean) < 3.3 * math.sqrt(var / n)
        lo, hi = (stats.chi2.ppf(p, n - 1) / (n - 1) for p in (0.0005, 0.9995))
        assert lo * var <= s["std"] ** 2 <= hi * var


def test_without_noise_scores_are_exact_participation_counts():
    res = audit_dp_fedavg(noise_multiplier=0.0, claimed_noise_multiplier=4.0, seed=2, **CFG)
    assert res.scores_out == {"mean": pytest.approx(0.0, abs=1e-9), "std": pytest.approx(0.0, abs=1e-9)}
    n = res.canaries_in
    assert abs(res.scores_in["mean"] - 2.5) < 3.3 * math.sqrt(1.25 / n)
    # only the included canaries never sampled ((1 − q)^T = 1/32 of them) tie with the excluded
    assert res.violation and res.one_run.precision > 0.95


def test_result_is_strict_json_and_reproducible(calibrated):
    d = json.loads(json.dumps(calibrated.to_dict(), allow_nan=False))
    assert d["accountant"]["unit"] == "client" and d["one_run"]["method"] == "steinke"
    assert d["violation"] is False and d["seconds"] > 0 and d["dim"] >= 1000
    assert "no violation" in calibrated.summary()
    again = audit_dp_fedavg(noise_multiplier=4.0, seed=0, **CFG)
    assert again.scores_in == calibrated.scores_in and again.one_run.epsilon == calibrated.one_run.epsilon


def test_progress_reports_every_round():
    seen = []
    audit_dp_fedavg(noise_multiplier=4.0, seed=0, progress=seen.append, **{**CFG, "canaries": 40, "rounds": 3})
    assert seen == [1, 2, 3]


@pytest.mark.parametrize("kw,name", [
    (dict(noise_multiplier=-1.0), "noise_multiplier"), (dict(sample_rate=0.0), "sample_rate"),
    (dict(sample_rate=1.5), "sample_rate"), (dict(clip=0.0), "clip"), (dict(clients=0), "clients"),
    (dict(canaries=5), "canaries"), (dict(rounds=0), "rounds"), (dict(delta=0.0), "delta"),
    (dict(delta=1.0), "delta"), (dict(claimed_noise_multiplier=0.0), "claimed_noise_multiplier"),
    (dict(noise_multiplier=0.0), "claimed_noise_multiplier"), (dict(dataset="mnist"), "dataset"),
    (dict(canaries=4097), "canaries"), (dict(accountant="gdp"), "accountant"), (dict(fdp_curve="laplace"), "fdp_curve"),
])
def test_bad_input_names_the_parameter(kw, name):
    args = dict(noise_multiplier=1.0, sample_rate=0.5, rounds=2, canaries=40)
    args.update(kw)
    with pytest.raises(FedAuditError, match=name):
        audit_dp_fedavg(**args)


def test_dp_curve_and_rdp_accountant_options():
    res = audit_dp_fedavg(noise_multiplier=0.4, claimed_noise_multiplier=4.0, seed=0, accountant="rdp",
                         fdp_curve="dp", **CFG)
    assert res.accountant.method == "rdp" and res.accountant.epsilon > 1.167  # RDP is looser than PLD
    assert res.one_run_fdp.curve == "dp" and res.violation


@pytest.mark.slow
def test_larger_audit_on_digits():
    """2000 canary clients, 20 rounds on digits: calibrated not flagged, z/10 flagged."""
    cfg = dict(sample_rate=0.5, rounds=20, canaries=2000, clients=50, dataset="digits")
    ok = audit_dp_fedavg(noise_multiplier=8.0, seed=0, **cfg)
    assert not ok.violation and ok.test_accuracy > 0.5
    bad = audit_dp_fedavg(noise_multiplier=0.8, claimed_noise_multiplier=8.0, seed=0, **cfg)
    assert bad.violation and bad.one_run.epsilon > bad.accountant.epsilon
    assert np.isfinite(bad.gdp.epsilon)


def test_the_former_module_path_still_imports():
    """Issue #24: the module is ``fedaudit.audit.dp_fedavg_audit``; the old path re-exports it."""
    from fedaudit.audit import fedavg_audit

    assert fedavg_audit.audit_dp_fedavg is audit_dp_fedavg and fedavg_audit.DPFedAvgAudit is DPFedAvgAudit
