"""Audits of library mechanisms (fedaudit.targets): diffprivlib, OpenDP, NVFlare, Opacus noise, and the
planted pre-0.15 OpenDP bit-vector bug. Each test skips with a reason when its library is missing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fedaudit.errors import FedAuditError


def _lib(name: str):
    return pytest.importorskip(name, reason=f"{name} is not installed (pip install 'fedaudit[targets]')")


# --------------------------------------------------------------------------- diffprivlib
def test_diffprivlib_gaussian_analytic_under_calibrated_for_tiny_delta():
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import calibration_check

    c = calibration_check(M.GaussianAnalytic(epsilon=1.0, delta=1e-6, sensitivity=1.0), epsilons=(1.0, 5.0),
                          deltas=(1e-6, 1e-30))
    assert not c.own.violation
    bad = {(p.epsilon, p.delta) for p in c.violations}
    assert (1.0, 1e-30) in bad and (5.0, 1e-30) in bad and (1.0, 1e-6) not in bad
    assert c.worst.delta_achieved > 1e-20  # the scale stops growing: δ floors near 1e-17..1e-16


def test_diffprivlib_classic_gaussian_calibrated_where_it_accepts():
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import calibration_check

    c = calibration_check(M.Gaussian(epsilon=0.5, delta=1e-6, sensitivity=1.0), epsilons=(0.1, 1.0, 2.0),
                          deltas=(1e-3, 1e-15, 1e-30))
    assert not c.violation
    assert all(p.refused for p in c.grid if p.epsilon > 1)  # "Epsilon cannot be greater than 1"


def test_diffprivlib_pure_mechanisms_and_equivalence():
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import blackbox_audit, calibration_check

    for m in (M.Geometric(epsilon=1.0, sensitivity=1), M.Binary(epsilon=1.0, value0="a", value1="b")):
        assert not calibration_check(m, epsilons=(0.5, 2.0)).violation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = blackbox_audit(M.Laplace(epsilon=1.0, sensitivity=1.0), samples=20_000, real_calls=2_000, seed=3,
                           lattice=False)
    assert b.equivalence_calls == 4_000 and b.equivalence_mismatches == 0 and b.vectorised == 20_000
    assert not b.violation and 0.5 < b.epsilon_lower <= 1.0


def test_diffprivlib_float_output_support_is_caught_and_snapping_passes():
    """Mironov 2012: fl(x − b·L) near 0 is on the ulp(Δ)/2 lattice for x = Δ, not for x = 0."""
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import blackbox_audit

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lap = blackbox_audit(M.Laplace(epsilon=1.0, sensitivity=1.0), samples=20_000, real_calls=2_000, seed=0)
        snap = blackbox_audit(M.Snapping(epsilon=1.0, sensitivity=1.0, lower=-10, upper=10), samples=4_000, seed=0)
        off = blackbox_audit(M.Laplace(epsilon=1.0, sensitivity=1.0), samples=20_000, real_calls=2_000, seed=0,
                             lattice=False)
    assert lap.violation and lap.epsilon_lower > 5 and lap.equivalence_mismatches == 0
    assert not snap.violation and not off.violation  # the indicator is what exposes it


def test_diffprivlib_unsupported_is_a_user_error():
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import blackbox_audit

    with pytest.raises(FedAuditError, match="not audited"):
        blackbox_audit(M.Exponential(epsilon=1.0, sensitivity=1.0, utility=[0, 1]), samples=100)


# --------------------------------------------------------------------------- OpenDP and the planted regression
def test_opendp_claims_match_exact_profiles():
    _lib("opendp")
    from fedaudit.targets import blackbox_audit, calibration_check
    from fedaudit.targets.opendp import OpenDPTarget

    for t in (OpenDPTarget.laplace(2.0, integer=True), OpenDPTarget.randomized_response_bool(0.75),
              OpenDPTarget.randomized_response([0, 1, 2], 0.6), OpenDPTarget.bitvec(0.9, max_weight=2),
              OpenDPTarget.gaussian(2.0, integer=True)):
        c = calibration_check(t, deltas=(1e-6, 1e-12)) if t.kind == "gaussian" else calibration_check(t)
        assert not c.violation, c.summary()
    b = blackbox_audit(OpenDPTarget.laplace(1.0), samples=1_500, seed=0)  # float output snapped to its grid
    assert not b.violation and b.real_calls >= 3_000 and not b.reproducible


def test_planted_unrandomised_bit_is_caught_and_current_bitvec_passes():
    _lib("opendp")
    from fedaudit.targets.base import audit_sampler
    from fedaudit.targets.opendp import OpenDPTarget, bitvec_sampler
    from fedaudit.targets.planted import UnrandomisedBitRR

    planted = UnrandomisedBitRR(0.99, nbits=16)
    bad = audit_sampler(planted, np.zeros(16), np.ones(16), epsilon=planted.claimed_epsilon(16), delta=0.0,
                        samples=2_000, seed=0)
    assert bad.violation and bad.epsilon_lower > 3 * planted.claimed_epsilon(16)
    t = OpenDPTarget.bitvec(0.99, nbytes=2)  # the same f, bits and pair, the real 0.16 measurement
    assert abs(t.claimed()[0] - planted.claimed_epsilon(16)) < 1e-12
    good = audit_sampler(bitvec_sampler(t.measurement, 2), np.zeros(16), np.ones(16), epsilon=t.claimed()[0],
                         delta=0.0, samples=2_000, seed=0)
    assert not good.violation


# --------------------------------------------------------------------------- NVFlare, Opacus
def test_nvflare_percentile_privacy_is_deterministic_and_svt_reads_its_budget():
    _lib("nvflare")
    from nvflare.app_common.filters import PercentilePrivacy, SVTPrivacy

    from fedaudit.targets import blackbox_audit
    from fedaudit.targets.nvflare import svt_claim

    claim = svt_claim(SVTPrivacy(fraction=0.25, epsilon=1.0, noise_var=0.25, gamma=1.0), 8)
    assert claim["epsilon_total"] == pytest.approx(1.5) and claim["n_upload"] == 2
    b = blackbox_audit(PercentilePrivacy(percentile=50, gamma=1.0), samples=1_000, seed=0)
    assert b.epsilon_lower > 4.0  # told apart with certainty: only the sample size limits the bound


def test_opacus_noise_std_and_low_precision():
    _lib("opacus")
    from fedaudit.targets.opacus_noise import noise_check

    for dtype in ("float32", "bfloat16"):
        c = noise_check(1.2, 0.5, dtype=dtype, samples=20_000, seed=1)
        assert not c.violation and c.returned_dtype == dtype
    assert noise_check(1.0, 1.0, dtype="bfloat16", samples=20_000).distinct_values < 3_000


def test_opacus_float_noising_step_support_is_caught():
    _lib("opacus")
    from fedaudit.targets.opacus_noise import blackbox_audit, off_lattice_probability

    b = blackbox_audit(1.0, 1.0, dtype="float32", secure_mode=True, samples=10_000, seed=0)
    assert b.violation and b.audit.fpr == 0.0
    assert b.audit.tpr <= off_lattice_probability(1.0) + 0.02  # the selected event is at most that often hit


@pytest.mark.slow
def test_diffprivlib_full_default_grid_and_discrete_gaussian():
    M = _lib("diffprivlib.mechanisms")
    from fedaudit.targets import calibration_check

    c = calibration_check(M.GaussianDiscrete(epsilon=1.0, delta=1e-6, sensitivity=1))
    assert c.violation and c.worst.delta == 1e-30
    assert not calibration_check(M.Gaussian(epsilon=1.0, delta=1e-6, sensitivity=1.0)).violation


@pytest.mark.slow
def test_nvflare_svt_release_float_support_is_caught():
    _lib("nvflare")
    from nvflare.app_common.filters import SVTPrivacy

    from fedaudit.targets import blackbox_audit

    f = SVTPrivacy(fraction=0.25, epsilon=1.0, noise_var=0.25, gamma=1.0, tau=0.5)
    assert blackbox_audit(f, samples=3_000, seed=1).violation
    assert not blackbox_audit(f, samples=3_000, seed=1, lattice=False).violation


def test_off_lattice_is_zero_for_every_output_of_the_shifted_input():
    """The indicator's soundness argument: fl(c + n) with |result| < c/2 is a multiple of ulp(c)/2."""
    from fedaudit.targets.base import off_lattice

    rng = np.random.default_rng(0)
    for c in (1.0, 0.3, 7.0):
        n = rng.normal(0, c, 200_000)
        assert off_lattice(c + n, c).sum() == 0
        assert off_lattice(n, c).mean() > 0.1  # 0 + n: much of |n| < c/2 is off the lattice
