"""``audit_ldp`` and the pair search: soundness, tightness, planted bugs, determinism, bad input.

Statistical assertions use fixed seeds, so every outcome is deterministic; the comments say why
each threshold is safe for a correct implementation (not just for the seed at hand).
"""

import hashlib
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaudit.audit.bounds import epsilon_lower_bound
from fedaudit.audit import pair_search
import fedaudit.audit.ldp as ldp_mod
from fedaudit.audit.ldp import audit_ldp, audit_ldp_streams
from fedaudit.audit.pair_search import audit_worst_case, search_pairs
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import SSTQ, VQSGD, Duchi, Laplace, PrivUnitG, RandomizedResponse
from fedaudit.mechanisms.gaussian import analytic_gaussian_sigma
from fedaudit.testing.planted import (
    CleartextIndicesSSTQ,
    LeakedNormSSTQ,
    ScaledLaplace,
    UnsplitBudgetSSTQ,
    scaled_gaussian_sampler,
)
from fedaudit.mechanisms.published import SSTQSketch

RUNTIME_FIELDS = ("runtime_s", "sampling_s")


def stable(result):
    """to_dict() without wall-clock fields."""
    return {k: v for k, v in result.to_dict().items() if k not in RUNTIME_FIELDS}


def check_invariants(r):
    """What every LDPAudit must satisfy, whatever the mechanism or seed."""
    assert r.violation == (r.epsilon_claimed is not None and r.epsilon_lower > r.epsilon_claimed)
    if r.epsilon_claimed:
        assert r.tightness == pytest.approx(r.epsilon_lower / r.epsilon_claimed, rel=1e-15)
    assert 0.0 <= r.epsilon_lower <= r.max_certifiable + 1e-12
    assert r.selection_samples + r.certification_samples == r.samples
    ev = r.event
    assert ev["n"] == r.certification_samples and 0 <= ev["tp"] <= ev["n"] and 0 <= ev["fp"] <= ev["n"]
    assert r.epsilon_lower == pytest.approx(
        float(epsilon_lower_bound(ev["tp"], ev["n"], ev["fp"], ev["n"], delta=r.delta_claimed, confidence=r.confidence)), abs=1e-12)
    json.dumps(r.to_dict(), allow_nan=False)  # strict JSON, inf included
    return r


def audit(*args, **kw):
    return check_invariants(audit_ldp(*args, **kw))


E16 = np.eye(16)
E8 = np.eye(8)


def unit(d, i=0):
    return np.eye(d)[i]


# --------------------------------------------------------------------------- soundness
# Correct mechanisms at pairs whose exact ε is known (the pair's worst-case privacy loss).
CORRECT = {
    "rr-2": (lambda: RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1)),
    "rr-4": (lambda: RandomizedResponse(4, 2.0), unit(4, 0), unit(4, 3)),
    "laplace-1": (lambda: Laplace(1, 1.0), np.array([1.0]), np.array([-1.0])),
    "laplace-4": (lambda: Laplace(4, 1.0), unit(4), -unit(4)),
    "sstq-16": (lambda: SSTQ(16, 2, 4, 1.0), E16[0], -E16[0]),
    "vqsgd-4": (lambda: VQSGD(4, 2.0), unit(4), -unit(4)),
    "duchi-8": (lambda: Duchi(8, 1.0), E8[0], -E8[0]),
    "privunitg-4": (lambda: PrivUnitG(4, 2.0), unit(4), -unit(4)),
    "privunitg-8": (lambda: PrivUnitG(8, 1.0), E8[0], -E8[0]),
}
_MECHS = {name: (make(), x0, x1) for name, (make, x0, x1) in CORRECT.items()}

#: Soundness runs use confidence 0.999: the certificate guarantees P[ε_lb > ε_exact] ≤ α = 1e-3 per
#: run. A Clopper–Pearson certificate only exceeds the truth when *both* one-sided bounds err in
#: the lucky direction together (≈ P[Z > 3.29·√2] ≈ 2e-6 per run for two comparable rates), so a
#: correct implementation fails none of the ~200 fixed-seed runs below in practice; a biased
#: bound or a selection that leaks into certification is caught at once.
SOUND_CONFIDENCE = 0.999


def _sound(r, exact_known=True):
    check_invariants(r)
    assert not r.violation, (r.epsilon_lower, r.epsilon_claimed, r.event)
    if exact_known:
        assert r.epsilon_exact is not None
        assert r.epsilon_lower <= r.epsilon_exact + 1e-9, (r.epsilon_lower, r.epsilon_exact, r.event)


@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_mechanisms_never_violate_over_seeds(name):
    mech, x0, x1 = _MECHS[name]
    for seed in range(20):
        r = audit_ldp(mech, x0, x1, samples=2000 + 150 * seed, seed=seed, confidence=SOUND_CONFIDENCE)
        _sound(r)


@settings(max_examples=25)
@given(name=st.sampled_from(sorted(CORRECT)), seed=st.integers(0, 2**32 - 1), samples=st.integers(2000, 5000),
       test=st.sampled_from(["auto", "black-box"]))
def test_correct_mechanisms_never_violate_property(name, seed, samples, test):
    mech, x0, x1 = _MECHS[name]
    _sound(audit_ldp(mech, x0, x1, samples=samples, seed=seed, distinguisher=test, confidence=SOUND_CONFIDENCE))


def test_correct_gaussian_black_box_never_violates():
    """A correctly calibrated (ε=1, δ=1e-5) float Gaussian sampler: exact ε unknown to the audit."""
    sampler = scaled_gaussian_sampler(analytic_gaussian_sigma(1.0, 1e-5, 2.0), 1.0)
    for seed in range(10):
        r = audit_ldp(sampler, unit(4), -unit(4), epsilon=1.0, delta=1e-5, samples=3000, seed=seed,
                      confidence=SOUND_CONFIDENCE)
        _sound(r, exact_known=False)
        assert r.epsilon_exact is None and r.mechanism == {"mechanism": "black-box sampler"}


# --------------------------------------------------------------------------- tightness
# Tightness runs use the default 95% confidence and assert only the lower end: at 95% a
# certificate of a *tight* event exceeds the true ε in up to 5% of seeds (≈0.5% in practice for
# Laplace, where the FPR's relative error dominates) — e.g. Laplace(1, 1.0) at 1e6 draws, seed 7,
# certifies 1.0008 > 0.9995 and is "in violation". Validity is tested at 0.999 above.
def test_rr_tightness_at_2e5():
    """Binary RR ε=1, 2e5 samples (1.8e5 certify). Ceiling with expected counts: 0.990; the
    log-ratio's SE is √(2(1−p)/(p·n)) ≈ 0.002, so 0.95 leaves ~20 SE for noise and selection."""
    r = audit(RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1), samples=200_000, seed=0)
    n = r.certification_samples
    p = math.e / (1 + math.e)
    ceiling = float(epsilon_lower_bound(p * n, n, (1 - p) * n, n))
    assert ceiling == pytest.approx(0.990, abs=1e-3)
    assert r.epsilon_lower >= 0.95 and r.epsilon_exact == 1.0
    assert r.tightness >= 0.95


def test_laplace_tightness_at_2e5_likelihood_ratio():
    """Laplace(d=1, ε=1), x = ±1: the best event {r ≥ 1} has rates (½, ½e^−ε) and certifies
    0.985 at 1.8e5 draws with expected counts. The log-ratio's SE is √((1−p)/(pn) + (1−q)/(qn))
    ≈ 0.0055; 0.93 leaves ~10 SE for noise and the threshold chosen on 1e4 selection draws.
    (seed 0 gives 0.977)."""
    m = Laplace(1, 1.0)
    r = audit(m, [1.0], [-1.0], samples=200_000, seed=0, distinguisher="likelihood-ratio")
    n = r.certification_samples
    q = 0.5 * math.exp(-r.epsilon_exact)
    assert float(epsilon_lower_bound(0.5 * n, n, q * n, n)) == pytest.approx(0.985, abs=1e-3)
    assert r.test == "likelihood-ratio"
    assert r.epsilon_lower >= 0.93


def test_laplace_tightness_at_2e5_auto_every_seed():
    """Selection scores events by the bound they would certify at the pessimistic ends of their
    selection-split rates, so few-count tail events no longer win by chance (seeds 0..11 give
    0.944-0.992 against a CP ceiling near 0.985 at this N)."""
    m = Laplace(1, 1.0)
    worst = min(audit_ldp(m, [1.0], [-1.0], samples=200_000, seed=s).epsilon_lower for s in range(12))
    assert worst >= 0.93


def test_rr_tightness_at_1e6():
    """The issue's 1e6-sample target: binary RR ε=1 ≥ 0.97 (ceiling 0.9955, SE ≈ 0.001)."""
    r = audit(RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1), samples=1_000_000, seed=0)
    assert r.epsilon_lower >= 0.97


@pytest.mark.slow
def test_rr_and_laplace_tightness_at_1e6_many_seeds():
    for seed in range(10):
        r = audit(RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1), samples=1_000_000, seed=seed)
        assert r.epsilon_lower >= 0.97
        # research/privacy.md: Laplace ε=1 best threshold at 1e6 → 0.994 (expected counts); the
        # selection split is 1e5 here, so the tail-event winner's curse costs little (≥ 0.98 seen)
        r = audit(Laplace(1, 1.0), [1.0], [-1.0], samples=1_000_000, seed=seed)
        assert r.epsilon_lower >= 0.95


# --------------------------------------------------------------------------- planted bugs
SIGMA = analytic_gaussian_sigma(1.0, 1e-5, 2.0)  # (1, 1e-5)-DP for L2 sensitivity 2 (the unit ball)
FLAT4 = np.full(4, 0.5)  # ‖·‖ = 1

# (mechanism or sampler, x0, x1, extra kwargs, tests that must flag it)
PLANTED = {
    # budget not split over k coordinates: all 4 coordinates move, true ε ≈ 4·log(.615/.385) ≈ 1.9
    "unsplit-budget d=4": (lambda: UnsplitBudgetSSTQ(4, 4, 2, 1.0), FLAT4, -FLAT4, {}, ("auto", "black-box")),
    "unsplit-budget d=16": (lambda: UnsplitBudgetSSTQ(16, 4, 4, 1.0), E16[0], -E16[0], {}, ("auto",)),
    # noise scale halved: true ε = 2
    "scaled-laplace": (lambda: ScaledLaplace(1, 1.0, factor=2), np.array([1.0]), np.array([-1.0]), {},
                       ("auto", "black-box")),
    # the clipped norm in the clear: disjoint supports for different norms (ε = ∞)
    "leaked-norm": (lambda: LeakedNormSSTQ(16, 2, 4, 1.0), E16[0], 0.5 * E16[0], {}, ("auto", "black-box")),
    # top-k indices of |x| in the clear: e1 and e10 have disjoint index sets (ε = ∞)
    "cleartext-indices": (lambda: CleartextIndicesSSTQ(16, 2, 4, 1.0), E16[0], E16[9], {}, ("auto", "black-box")),
    # σ three times too small, black box
    "scaled-gaussian": (lambda: scaled_gaussian_sampler(SIGMA, 3.0), unit(32), -unit(32),
                        {"epsilon": 1.0, "delta": 1e-5}, ("auto", "black-box")),
}
PLANTED_CASES = [(name, t) for name, spec in PLANTED.items() for t in spec[4]]


@pytest.mark.parametrize("name, test", PLANTED_CASES, ids=[f"{n}-{t}" for n, t in PLANTED_CASES])
def test_planted_bugs_are_flagged(name, test):
    make, x0, x1, kw, _ = PLANTED[name]
    r = audit(make(), x0, x1, samples=20_000, seed=0, distinguisher=test, **kw)
    assert r.violation, (r.epsilon_lower, r.event)
    assert r.epsilon_lower > r.epsilon_claimed
    if r.epsilon_exact is not None:  # fixed seed: at 95% exceeding the truth is possible but rare
        assert r.epsilon_lower <= r.epsilon_exact
    if name in ("leaked-norm", "cleartext-indices"):
        # one report tells the inputs apart: TP = n, FP = 0 and ε_lb hits the ceiling at this N
        assert r.event["fp"] == 0 and r.event["tp"] == r.event["n"]
        assert r.epsilon_lower == pytest.approx(r.max_certifiable)
    if name == "leaked-norm":
        assert r.epsilon_exact == math.inf and r.to_dict()["epsilon_exact"] == "inf"


def test_same_planted_bug_fixed_is_not_flagged():
    """Controls at the same seed and budget as the planted runs: the correct siblings pass."""
    sampler = scaled_gaussian_sampler(SIGMA, 1.0)
    r = audit(sampler, unit(32), -unit(32), epsilon=1.0, delta=1e-5, samples=20_000, seed=0)
    assert not r.violation
    r = audit(ScaledLaplace(1, 1.0, factor=1), [1.0], [-1.0], samples=20_000, seed=0)
    assert not r.violation and r.epsilon_exact == pytest.approx(Laplace(1, 1.0).epsilon_for_pair([1.0], [-1.0]))
    r = audit(SSTQ(4, 4, 2, 1.0), FLAT4, -FLAT4, samples=20_000, seed=0)
    assert not r.violation


def test_claim_smaller_than_truth_is_flagged():
    """The claim is the user's: Laplace(ε=1) audited against ε=0.5 is a violation."""
    r = audit(Laplace(1, 1.0), [1.0], [-1.0], epsilon=0.5, samples=20_000, seed=0)
    assert r.epsilon_claimed == 0.5 and r.violation
    assert r.tightness == pytest.approx(r.epsilon_lower / 0.5)


@pytest.mark.parametrize("x1_scale, min_eps", [(-1.0, 4.0), (0.5, 6.0)])
def test_published_sketch_flagged_with_large_epsilon(x1_scale, min_eps):
    """The seed's SSTQ sketch claims ε=1. Antipodal: exact ε 8 (budget not split, value range
    unbounded); e1 vs ½e1: the norm leaks (ε = ∞). At 2e4 samples seed 0 certifies 4.65 and 6.40
    (ceiling 8.49); the thresholds sit ~0.6 below."""
    m = SSTQSketch(64, 8, 8, 1.0)
    r = audit(m, unit(64), x1_scale * unit(64), samples=20_000, seed=0)
    assert r.violation and r.epsilon_lower >= min_eps
    assert r.epsilon_lower <= r.epsilon_exact


@pytest.mark.slow
def test_unsplit_budget_black_box_at_1e6():
    """Rotated d=16, k=4: the black box needs ~1e6 draws (1e5 certifies only ~1.01)."""
    r = audit(UnsplitBudgetSSTQ(16, 4, 4, 1.0), E16[0], -E16[0], samples=1_000_000, seed=0, distinguisher="black-box")
    assert r.violation


# --------------------------------------------------------------------------- determinism
def test_result_does_not_depend_on_chunk():
    m = RandomizedResponse(3, 1.0)
    runs = [stable(audit(m, unit(3, 0), unit(3, 2), samples=60_000, seed=5, chunk=c))
            for c in (None, 1, 20_000, 50_000, 10**9)]
    assert all(r == runs[0] for r in runs[1:])


def test_result_does_not_depend_on_chunk_wide_reports_and_black_box():
    m = SSTQ(16, 2, 4, 1.0)
    runs = [stable(audit(m, E16[0], -E16[0], samples=30_000, seed=3, chunk=c)) for c in (None, 20_000, 10**9)]
    assert all(r == runs[0] for r in runs[1:])
    sampler = scaled_gaussian_sampler(SIGMA, 1.0)
    runs = [stable(audit(sampler, unit(4), -unit(4), epsilon=1.0, samples=30_000, seed=3, chunk=c))
            for c in (None, 9000, 10**9)]
    assert all(r == runs[0] for r in runs[1:])


def test_progress_counts_every_report_whatever_the_chunk():
    for chunk in (None, 50_000):
        seen = []
        r = audit(RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1), samples=60_000, seed=1, chunk=chunk,
                  progress=seen.append)
        assert sum(seen) == 2 * r.samples


def test_deterministic_under_seed_and_seeds_differ():
    m = Laplace(1, 1.0)
    a = stable(audit(m, [1.0], [-1.0], samples=5000, seed=11))
    b = stable(audit(m, [1.0], [-1.0], samples=5000, seed=11))
    c = stable(audit(m, [1.0], [-1.0], samples=5000, seed=12))
    assert a == b
    assert a["seed"] == 11 and c["seed"] == 12
    assert (a["event"]["tp"], a["event"]["fp"], a["event"]["threshold"]) != \
           (c["event"]["tp"], c["event"]["fp"], c["event"]["threshold"])


def test_numpy_integer_seed_is_recorded():
    m = RandomizedResponse(2, 1.0)
    a = audit(m, unit(2, 0), unit(2, 1), samples=1000, seed=np.int64(4))
    b = audit(m, unit(2, 0), unit(2, 1), samples=1000, seed=4)
    assert a.seed == 4 and stable(a) == stable(b)


# --------------------------------------------------------------------------- serialisation
def test_to_dict_is_strict_json_with_infinities():
    r = audit(LeakedNormSSTQ(16, 2, 4, 1.0), E16[0], 0.5 * E16[0], samples=2000, seed=0, distinguisher="likelihood-ratio")
    d = r.to_dict()
    text = json.dumps(d, allow_nan=False)  # raises on inf/nan anywhere, nested included
    back = json.loads(text)
    assert back["epsilon_exact"] == "inf"
    assert back["event"]["threshold"] in ("inf", "-inf")  # the LR of a one-sided report is ±∞
    assert back["epsilon_lower"] == pytest.approx(r.epsilon_lower)
    assert back["x0"] == E16[0].tolist() and back["mechanism"]["mechanism"] == "planted-leaked-norm-sstq"


def test_to_dict_round_trips():
    r = audit(RandomizedResponse(2, 1.0), unit(2, 0), unit(2, 1), samples=3000, seed=0)
    d = r.to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == json.loads(json.dumps(d))
    for key in ("epsilon_lower", "epsilon_claimed", "delta_claimed", "violation", "epsilon_exact", "tpr", "fpr",
                "test", "samples", "seed"):
        assert key in d


# --------------------------------------------------------------------------- bad input
def _ok_sampler(x, size, rng):
    return np.asarray(x)[None, :] + rng.standard_normal((size, len(x)))


def _nan_on_x1(x, size, rng):
    out = _ok_sampler(x, size, rng)
    if x[0] < 0:
        out[size // 2, 0] = np.nan
    return out


BAD = [
    ("x0 == x1", lambda: audit_ldp(Laplace(2, 1.0), [0.5, 0.0], [0.5, 0.0], samples=500), "x0 and x1 must differ"),
    ("x0 shape vs mechanism", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0, 0], [0, 1.0], samples=500),
     "x0 must have shape (2,)"),
    ("x1 shape vs mechanism", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0, 0], samples=500),
     "x1 must have shape (2,)"),
    ("x1 shape vs x0 (black box)", lambda: audit_ldp(_ok_sampler, [1.0, 0], [1.0], epsilon=1.0, samples=500),
     "x1 must have shape (2,)"),
    ("x0 not finite", lambda: audit_ldp(Laplace(2, 1.0), [np.nan, 0], [0, 1.0], samples=500),
     "x0 must contain only finite values"),
    ("x outside the mechanism's domain", lambda: audit_ldp(RandomizedResponse(3, 1.0), [1, 0, 0], [0.5, 0.5, 0],
                                                          samples=500), "(input x1)"),
    ("samples < 100", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=99), "samples must be an integer in [100"),
    ("confidence = 1", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, confidence=1.0),
     "confidence must be a finite real number in (0, 1)"),
    ("confidence = 0", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, confidence=0.0),
     "confidence must be"),
    ("confidence > 1", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, confidence=95),
     "confidence must be"),
    ("black box without epsilon", lambda: audit_ldp(_ok_sampler, [1.0], [0.0], samples=500),
     "epsilon (the claimed guarantee) is required"),
    ("negative epsilon", lambda: audit_ldp(_ok_sampler, [1.0], [0.0], epsilon=-1.0, samples=500), "epsilon must be"),
    ("delta = 1", lambda: audit_ldp(_ok_sampler, [1.0], [0.0], epsilon=1.0, delta=1.0, samples=500), "delta must be"),
    ("NaN from the sampler on x1", lambda: audit_ldp(_nan_on_x1, [1.0], [-1.0], epsilon=1.0, samples=500),
     "non-finite value nan for input x1"),
    ("inf from the sampler on x0", lambda: audit_ldp(lambda x, s, r: np.full((s, 2), np.inf), [1.0], [-1.0],
                                                     epsilon=1.0, samples=500), "non-finite value inf for input x0"),
    ("too few rows", lambda: audit_ldp(lambda x, s, r: np.zeros((max(1, s - 1), 1)), [1.0], [-1.0], epsilon=1.0,
                                       samples=500), "rows for size=2 (input x0)"),
    ("too many rows on x1", lambda: audit_ldp(lambda x, s, r: np.zeros((s + (x[0] < 0), 1)), [1.0], [-1.0],
                                              epsilon=1.0, samples=500), "(input x1)"),
    ("scalar from the sampler", lambda: audit_ldp(lambda x, s, r: 0.0, [1.0], [-1.0], epsilon=1.0, samples=500),
     "sampler returned a scalar"),
    ("non-numeric reports", lambda: audit_ldp(lambda x, s, r: np.array(["a"] * s), [1.0], [-1.0], epsilon=1.0,
                                              samples=500), "not an array of real numbers (input x0)"),
    ("empty reports", lambda: audit_ldp(lambda x, s, r: np.zeros((s, 0)), [1.0], [-1.0], epsilon=1.0, samples=500),
     "0 columns"),
    ("report width changes with the input", lambda: audit_ldp(lambda x, s, r: np.zeros((s, 1 + (x[0] < 0))), [1.0],
                                                              [-1.0], epsilon=1.0, samples=500),
     "width 2, expected 1 (input x1)"),
    ("sampler raises", lambda: audit_ldp(lambda x, s, r: 1 / 0, [1.0], [-1.0], epsilon=1.0, samples=500),
     "sampler failed on input x0: ZeroDivisionError"),
    ("not a mechanism", lambda: audit_ldp("laplace", [1.0], [-1.0], epsilon=1.0, samples=500),
     "mechanism must be a fedaudit Mechanism or a callable"),
    ("unknown test", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, distinguisher="magic"),
     "distinguisher must be one of"),
    ("LR on a black box", lambda: audit_ldp(_ok_sampler, [1.0], [-1.0], epsilon=1.0, samples=500,
                                            distinguisher="likelihood-ratio"), "needs a Mechanism with a tractable log_prob"),
    ("chunk = 0", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, chunk=0), "chunk must be"),
    ("negative seed", lambda: audit_ldp(Laplace(2, 1.0), [1.0, 0], [0, 1.0], samples=500, seed=-1), "seed must be"),
    ("search without dim", lambda: search_pairs(_ok_sampler, epsilon=1.0, samples=500), "dim is required"),
]


@pytest.mark.parametrize("call, needle", [(c, n) for _, c, n in BAD], ids=[b[0] for b in BAD])
def test_bad_input_raises_one_clear_error(call, needle):
    with pytest.raises(FedAuditError) as info:
        call()
    msg = str(info.value)
    assert needle in msg and "\n" not in msg


# --------------------------------------------------------------------------- pair search
def test_search_pairs_laplace_small_budget():
    m = Laplace(4, 1.0)
    found = search_pairs(m, samples=1000, rounds=1, seed=0)
    assert not np.array_equal(found.x0, found.x1)
    for x in (found.x0, found.x1):
        assert np.linalg.norm(x) <= m.clip * (1 + 1e-12)
    # ranked by the small-sample certified bound, the exact pair loss breaking ties
    keys = [(c["epsilon_lower"], c["epsilon_exact"]) for c in found.candidates]
    assert len(keys) >= 7 and keys == sorted(keys, reverse=True) and found.score == keys[0][0]
    assert found.candidates[0]["pair"] == found.name
    assert found.candidates[0]["epsilon_exact"] == pytest.approx(m.epsilon_for_pair(found.x0, found.x1))
    # for the L2 ball the flat antipodal pair maximises the L1 distance, hence Laplace's loss
    # (ε = 1); 1000 draws cannot rank dense pairs among themselves, but every dense candidate
    # (exact ≥ 0.77) certifies more than the sparse ones (exact 0.5 or 0.25) at this seed
    assert found.candidates[0]["epsilon_exact"] > 0.75
    assert found.to_dict()["x0"] == found.x0.tolist()


class _LaplaceDenseUnknown(Laplace):
    """Laplace whose exact pair loss is "intractable" (None) for pairs with more than one nonzero
    coordinate: the ranking must not put every tractable (sparse, weaker) pair above them."""

    def epsilon_for_pair(self, x0, x1):  # the public hook (issue #22)
        if max(np.count_nonzero(x0), np.count_nonzero(x1)) > 1:
            return None
        return super().epsilon_for_pair(x0, x1)


def test_search_ranks_by_the_certified_bound_not_by_having_an_exact_value():
    """d = 4: dense antipodal pairs have loss 0.83–1, the sparse ±e1 pair 0.5; with the dense
    pairs' exact value unknown, a dense pair must still win on its certified bound (ranking
    known-exact pairs first picked ±e1)."""
    m = _LaplaceDenseUnknown(4, 1.0)
    found = search_pairs(m, samples=4000, rounds=0, seed=0)
    assert found.candidates[0]["epsilon_exact"] is None and np.count_nonzero(found.x0) == 4
    assert any(c["epsilon_exact"] is not None for c in found.candidates[1:])
    lbs = [c["epsilon_lower"] for c in found.candidates]
    assert lbs == sorted(lbs, reverse=True) and found.score == lbs[0]


def test_search_pairs_black_box_needs_dim_and_stays_in_ball():
    sampler = scaled_gaussian_sampler(SIGMA, 1.0)
    found = search_pairs(sampler, dim=4, clip=2.0, epsilon=1.0, samples=500, rounds=1, seed=1)
    assert found.x0.shape == found.x1.shape == (4,)
    assert max(np.linalg.norm(found.x0), np.linalg.norm(found.x1)) <= 2.0 * (1 + 1e-12)


def test_search_pairs_rr_returns_one_hot_pair():
    found = search_pairs(RandomizedResponse(5, 1.0), samples=1000, seed=0)
    for x in (found.x0, found.x1):
        assert set(np.unique(x)) <= {0.0, 1.0} and x.sum() == 1.0
    assert np.argmax(found.x0) != np.argmax(found.x1)


def test_audit_worst_case_certifies_on_independent_seeds():
    m = Laplace(4, 1.0)
    res = audit_worst_case(m, samples=3000, search_samples=1000, rounds=1, seed=7)
    check_invariants(res)
    assert res.seed == 7 and res.search is not None
    assert {"best", "score", "candidates", "x0", "x1"} <= set(res.search)
    assert res.x0 == res.search["x0"] and res.x1 == res.search["x1"]
    for x in (res.x0, res.x1):
        assert np.linalg.norm(x) <= 1 + 1e-12
    # The documented stream layout: SeedSequence(seed).spawn(2) = (search, certify). Re-running
    # each half on its own child reproduces it, so the certification draws share no stream with
    # anything the search saw.
    search_seq, cert_seq = np.random.SeedSequence(7).spawn(2)
    found = pair_search._search_pairs(m, dim=None, clip=None, epsilon=None, delta=None, samples=1000, rounds=1,
                                      streams=search_seq, distinguisher="auto", progress=None)
    assert found.name == res.search["best"] and found.x0.tolist() == res.x0
    again = audit_ldp_streams(m, found.x0, found.x1, samples=3000, streams=cert_seq)
    drop = set(RUNTIME_FIELDS) | {"seed", "search"}
    assert {k: v for k, v in again.to_dict().items() if k not in drop} == \
           {k: v for k, v in res.to_dict().items() if k not in drop}
    json.dumps(res.to_dict(), allow_nan=False)


def test_certification_independent_of_search_budget():
    """Binary RR has a single candidate pair, so whatever the search spends, the certified
    result must be identical: the certification stream does not depend on the search."""
    m = RandomizedResponse(2, 1.0)
    a = audit_worst_case(m, samples=5000, search_samples=300, seed=3)
    b = audit_worst_case(m, samples=5000, search_samples=2000, seed=3)
    assert a.search["best"] == b.search["best"] == "e0 vs e1"
    assert a.search["score"] != b.search["score"]
    drop = set(RUNTIME_FIELDS) | {"search"}
    assert {k: v for k, v in a.to_dict().items() if k not in drop} == \
           {k: v for k, v in b.to_dict().items() if k not in drop}
    assert a.x0 == [1.0, 0.0] and a.x1 == [0.0, 1.0]


def test_search_on_rr_flags_nothing_and_on_planted_bug_flags():
    ok = audit_worst_case(RandomizedResponse(4, 1.0), samples=5000, search_samples=1000, seed=0)
    assert not ok.violation
    x0, x1 = np.asarray(ok.x0), np.asarray(ok.x1)
    assert x0.sum() == x1.sum() == 1.0 and set(np.unique(np.r_[x0, x1])) == {0.0, 1.0}
    bad = audit_worst_case(ScaledLaplace(2, 1.0, factor=3), samples=5000, search_samples=1000, rounds=1, seed=0)
    assert bad.violation and bad.epsilon_lower > 1.0


def test_the_claim_is_read_from_the_typed_guarantee():
    """audit_ldp reads the claimed ε/δ from ``mechanism.guarantee`` by type: a mechanism whose
    guarantee is ApproxLDP is audited at its δ (and δ = 0 is refused), whatever attributes it has."""
    from fedaudit.audit.ldp import claimed_guarantee
    from fedaudit.guarantees import ApproxLDP, PureLDP

    class Relaxed(Laplace):
        def __init__(self):
            super().__init__(1, 1.0)
            self.guarantee = ApproxLDP(0.5, 0.01)  # a weaker, approximate claim

    m = Relaxed()
    assert (m.epsilon, m.delta) == (0.5, 0.01)
    assert claimed_guarantee(m, None, None) == (ApproxLDP(0.5, 0.01), 0.01)
    assert claimed_guarantee(m, 2.0, 1e-3) == (ApproxLDP(2.0, 1e-3), 1e-3)
    assert claimed_guarantee(Laplace(1, 1.0), None, None) == (PureLDP(1.0), 0.0)
    assert claimed_guarantee(Laplace(1, 1.0), None, 0.1) == (ApproxLDP(1.0, 0.1), 0.1)
    assert claimed_guarantee(VQSGD(2, None), None, None) == (None, 0.0)
    res = audit_ldp(m, [1.0], [-1.0], samples=20_000, seed=0)
    assert (res.epsilon_claimed, res.delta_claimed) == (0.5, 0.01)
    ref = audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], samples=20_000, seed=0, epsilon=0.5, delta=0.01)
    assert res.epsilon_lower == ref.epsilon_lower and res.event == ref.event
    with pytest.raises(FedAuditError, match=r"delta must be in \(0, 1\) for Relaxed"):
        audit_ldp(m, [1.0], [-1.0], samples=1000, delta=0.0)


def test_entry_points_take_integer_seeds_and_streams_go_to_audit_ldp_streams():
    m = Laplace(1, 1.0)
    with pytest.raises(FedAuditError, match="audit_ldp_streams"):
        audit_ldp(m, [1.0], [-1.0], samples=1000, seed=np.random.SeedSequence(1))
    with pytest.raises(FedAuditError, match="seed must be a non-negative integer"):
        search_pairs(m, samples=1000, seed=np.random.default_rng(1))
    with pytest.raises(FedAuditError, match="streams must be a numpy SeedSequence"):
        audit_ldp_streams(m, [1.0], [-1.0], samples=1000, streams=3)
    a = audit_ldp(m, [1.0], [-1.0], samples=5000, seed=11)
    b = audit_ldp_streams(m, [1.0], [-1.0], samples=5000, streams=np.random.SeedSequence(11))
    assert a.seed == 11 and b.seed is None
    drop = set(RUNTIME_FIELDS) | {"seed"}
    assert {k: v for k, v in a.to_dict().items() if k not in drop} == \
           {k: v for k, v in b.to_dict().items() if k not in drop}


def test_torch_reports_and_scores_are_accepted_at_the_boundary():
    """A sampler may return torch tensors and ScoreAuditor may take them: the audit sees the
    same float64 values as with numpy (fedaudit.arrays does the conversion)."""
    torch = pytest.importorskip("torch")
    from fedaudit.audit import ScoreAuditor

    def numpy_sampler(x, size, rng):
        return np.asarray(x)[None, :] + rng.laplace(0.0, 2.0, size=(size, len(x)))

    def torch_sampler(x, size, rng):
        return torch.from_numpy(numpy_sampler(x, size, rng))

    a = audit_ldp(numpy_sampler, [1.0], [-1.0], epsilon=1.0, samples=4000, seed=2)
    b = audit_ldp(torch_sampler, [1.0], [-1.0], epsilon=1.0, samples=4000, seed=2)
    assert stable(a) == stable(b)
    s_in, s_out = np.random.default_rng(0).normal(1.0, 1.0, 200), np.random.default_rng(1).normal(0.0, 1.0, 200)
    assert ScoreAuditor(torch.from_numpy(s_in), torch.tensor(s_out)).epsilon_lower() == \
           ScoreAuditor(s_in, s_out).epsilon_lower()
    with pytest.raises(FedAuditError, match="scores_in must hold real numbers, got complex"):
        ScoreAuditor(torch.zeros(20, dtype=torch.complex64), s_out)


def test_the_training_cap_draws_whole_blocks_up_to_the_cap_and_counts_the_rest(monkeypatch):
    # cap_rows = 1000 (its floor) and blocks of 256 rows: the train split (1500 per input) draws
    # 4 blocks (1024 rows), fits on exactly 1000, and reports the 476 undrawn rows to progress
    monkeypatch.setattr(ldp_mod, "_TRAIN_BYTES", 0)
    monkeypatch.setattr(ldp_mod, "block_rows", lambda width: 256)
    fitted, drawn, seen = [], [], []
    fit = ldp_mod.fit_black_box
    monkeypatch.setattr(ldp_mod, "fit_black_box",
                        lambda t0, t1, **kw: (fitted.append((len(t0), len(t1))), fit(t0, t1, **kw))[1])

    def sampler(x, size, rng):
        drawn.append(size)
        return x[None, :] + rng.laplace(size=(size, 2))

    r = audit_ldp(sampler, np.ones(2), -np.ones(2), epsilon=2.0, samples=30_000, seed=0, backend="serial",
                  progress=seen.append, distinguisher="column")
    assert fitted == [(1000, 1000)]
    assert sum(seen) == 2 * r.samples
    assert sum(drawn) == 2 + 2 * (1024 + 1500 + r.certification_samples)


def test_every_split_and_input_draws_from_its_documented_child_stream():
    # streams.spawn(4) = (probe, train, select, certify); split s, input w, block i <- key (s, w, i)
    keys = []

    def sampler(x, size, rng):
        keys.append((int(x[0] < 0), rng.bit_generator.seed_seq.spawn_key))
        return x[None, :] + rng.laplace(size=(size, 1))

    audit_ldp(sampler, [1.0], [-1.0], epsilon=2.0, samples=5000, seed=0, backend="serial", distinguisher="column")
    blocks = sorted(k for k in keys if len(k[1]) == 3)
    assert blocks == sorted((w, (s, w, 0)) for s in (1, 2, 3) for w in (0, 1))


def test_the_checkpoint_key_records_both_inputs_and_the_chunk(tmp_path):
    ck = tmp_path / "a.ckpt"
    x0, x1 = np.array([1.0, 0.0]), np.array([0.0, 1.0])
    audit_ldp(Laplace(2, 1.0), x0, x1, samples=5000, seed=4, chunk=2000, checkpoint=ck, backend="serial")
    key = json.loads(ck.read_text().splitlines()[0])["key"]
    assert key["x0"] == hashlib.sha256(x0.tobytes()).hexdigest()
    assert key["x1"] == hashlib.sha256(x1.tobytes()).hexdigest()
    assert key["chunk"] == 2000 and key["samples"] == 5000


def test_the_likelihood_ratio_selects_on_each_inputs_own_training_draws(monkeypatch):
    # Laplace at ε = 2 on the pair (1, −1): the LR scores average KL(P0‖P1) = 1 + e^−2 ≈ 1.14 on
    # x0's reports and −1.14 on x1's; each input's pool (train + select, 1000 + 1000) must be its own
    pools = {}
    select = ldp_mod.select_event

    def spy(st, s0, s1, *args):
        pools[st.name] = (s0, s1)
        return select(st, s0, s1, *args)

    monkeypatch.setattr(ldp_mod, "select_event", spy)
    audit_ldp(Laplace(1, 2.0), [1.0], [-1.0], samples=5000, seed=0, distinguisher="likelihood-ratio", backend="serial")
    (s0, s1), = pools.values()
    assert len(s0) == len(s1) == 2000
    assert np.mean(s0) > 0.5 and np.mean(s1) < -0.5


def test_distinguisher_keyword_and_its_deprecated_name_test():
    """Issue #24: the audits take ``distinguisher=`` (the plan key and the CLI flag's word); the
    former ``test=`` still works, with one DeprecationWarning, and gives the same audit; the
    report keeps its field ``test`` (the statistic chosen)."""
    from fedaudit.audit.sparse_upload import audit_worst_pair
    from fedaudit.mechanisms.gated import GatedPrivateUpload

    kw = dict(samples=2000, seed=0, backend="serial")
    new = audit_ldp(Laplace(1, 2.0), [1.0], [-1.0], distinguisher="likelihood-ratio", **kw)
    with pytest.warns(DeprecationWarning, match=r"audit_ldp: test= is deprecated; use distinguisher="):
        old = audit_ldp(Laplace(1, 2.0), [1.0], [-1.0], test="likelihood-ratio", **kw)
    timing = {"runtime_s": 0, "sampling_s": 0}
    assert new.to_dict() | timing == old.to_dict() | timing and new.test == "likelihood-ratio"
    with pytest.raises(FedAuditError, match="give distinguisher .* not both"):
        audit_ldp(Laplace(1, 2.0), [1.0], [-1.0], distinguisher="column", test="likelihood-ratio", **kw)
    with pytest.warns(DeprecationWarning, match=r"search_pairs: test= is deprecated"):
        search_pairs(Laplace(1, 2.0), samples=200, rounds=0, test="likelihood-ratio", backend="serial")
    with pytest.warns(DeprecationWarning, match=r"audit_worst_case: test= is deprecated"):
        audit_worst_case(Laplace(1, 2.0), samples=200, search_samples=200, rounds=0, test="likelihood-ratio",
                         backend="serial")
    with pytest.warns(DeprecationWarning, match=r"audit_worst_pair: test= is deprecated"):
        worst = audit_worst_pair(GatedPrivateUpload(8, 2, 1.0), samples=200, test="black-box", backend="serial")
    assert worst.mode == "black-box"
