"""Upper bounds on sizes and the Gaussian δ: bad values are one clear FedAuditError naming the
parameter and its allowed range, raised before any work (never a silent default, a MemoryError or
a run that never ends)."""

import time

import numpy as np
import pytest

from fedaudit.audit import audit_ldp, audit_worst_case, measure_mse, search_pairs, variance_vs_dk
from fedaudit.audit.bounds import MAX_SAMPLES
from fedaudit.cli import main
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms import SSTQ, Gaussian, Laplace, SSTQSketch, make_mechanism
from fedaudit.mechanisms.base import MAX_LEVELS

E4 = np.eye(4)

BAD = [
    ("audit samples 1e30", lambda: audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], samples=1e30),
     "samples must be an integer in [100, 10^12"),
    ("audit samples 10^12 + 1", lambda: audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], samples=MAX_SAMPLES + 1),
     "samples must be an integer in [100, 10^12"),
    ("worst-case samples", lambda: audit_worst_case(Laplace(1, 1.0), samples=10**13, search_samples=300),
     "samples must be an integer in [100, 10^12"),
    ("search samples", lambda: search_pairs(Laplace(1, 1.0), samples=10**13), "samples must be an integer in [200, 10^12"),
    ("search rounds", lambda: search_pairs(Laplace(1, 1.0), samples=300, rounds=10**6), "rounds must be an integer in [0, 100]"),
    ("mse samples", lambda: measure_mse(Laplace(1, 1.0), [1.0], samples=1e30), "samples must be an integer in [2, 10^12"),
    ("variance samples", lambda: variance_vs_dk(8, [2], 1.0, samples=10**13), "samples must be an integer in [2, 10^12"),
    ("variance levels", lambda: variance_vs_dk(8, [2], 1.0, levels=2**40, samples=100), "levels must be an integer in [2, 2^24"),
    ("sstq levels 2^40", lambda: SSTQ(4, 2, 2**40, 1.0), "levels must be an integer in [2, 2^24=16777216]"),
    ("sstq levels 1", lambda: SSTQ(4, 2, 1, 1.0), "levels must be an integer in [2, 2^24"),
    ("sketch levels", lambda: SSTQSketch(4, 2, 2**40, 1.0), "levels must be an integer in [2, 2^24"),
    ("registry levels", lambda: make_mechanism("sstq", 8, 1.0, levels=2**25), "levels must be an integer in [2, 2^24"),
    ("clamping-bias rotations", lambda: SSTQ(4, 2, 2, 1.0).clamping_bias(E4[0], rotations=10**13),
     "rotations must be an integer in [2, 10^12"),
    ("gaussian delta 0", lambda: Gaussian(4, 1.0, 0.0), "delta must be in (0, 1) for the Gaussian mechanism, got delta=0"),
    ("gaussian delta 0 (int)", lambda: Gaussian(4, 1.0, 0), "delta must be in (0, 1) for the Gaussian mechanism"),
    ("gaussian delta 1", lambda: Gaussian(4, 1.0, 1.0), "delta must be a finite real number in (0, 1)"),
    ("gaussian delta 0 by name", lambda: make_mechanism("gaussian", 4, 1.0, delta=0.0), "delta must be in (0, 1)"),
    ("audit of a gaussian at claimed delta 0", lambda: audit_ldp(Gaussian(4, 1.0, 1e-5), E4[0], -E4[0], delta=0.0,
                                                                  samples=1000),
     "delta must be in (0, 1) for Gaussian"),
]


@pytest.mark.parametrize("call, needle", [(c, n) for _, c, n in BAD], ids=[b[0] for b in BAD])
def test_bad_sizes_and_delta_raise_at_once(call, needle):
    t0 = time.perf_counter()
    with pytest.raises(FedAuditError) as info:
        call()
    assert needle in str(info.value) and "\n" not in str(info.value)
    assert time.perf_counter() - t0 < 5.0  # rejected up front, not after drawing samples


def test_the_bounds_themselves_are_accepted():
    m = SSTQ(4, 2, MAX_LEVELS, 1.0)  # the largest grid allocates and works
    assert m.grid.shape == (MAX_LEVELS,)
    r = m.sample(E4[0], 5, 0)
    assert r.shape == (5, 3) and (r[:, 1:] <= MAX_LEVELS - 1).all()
    assert Gaussian(4, 1.0, 1e-300).delta == 1e-300
    assert audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], samples=100.0, seed=0).samples == 100


def test_pure_claim_on_a_pure_mechanism_is_still_allowed():
    r = audit_ldp(Laplace(1, 1.0), [1.0], [-1.0], delta=0.0, samples=1000, seed=0)
    assert r.delta_claimed == 0.0


@pytest.mark.parametrize("argv", [
    ["audit", "ldp", "--mechanism", "gaussian", "--dim", "4", "--delta", "0", "--samples", "1000"],
    ["audit", "ldp", "--mechanism", "laplace", "--dim", "1", "--samples", "1e30"],
    ["audit", "ldp", "--mechanism", "sstq", "--dim", "8", "--levels", str(2**40), "--samples", "1000"],
])
def test_cli_rejects_with_exit_code_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") <= 1 and ("delta must be in (0, 1)" in err or "must be an integer in [" in err)
