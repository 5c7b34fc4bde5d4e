"""The sparse-upload privacy audit (fedaudit.audit.sparse_upload) against pipelines whose ε is known.

Toy pipeline: |θ| = 8, m = 2; the local update opens coordinate 7 (instead of coordinate 1) with
probability p_x on dataset D_x, everything else fixed. The report depends on D only through that
Bernoulli, so its exact ε is max(log(p1/p0), log((1−p0)/(1−p1))); a randomized-response upload of
the bit with parameter ε_rr is ε_rr-LDP whatever the update.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from fedaudit.audit.bounds import expected_epsilon_lower_bound
from fedaudit.audit.sparse_upload import audit_upload, packet_row, upload_sampler
from fedaudit.errors import FedAuditError

DIM, M = 8, 2
P0, P1 = 0.1, 0.5
EXACT = max(math.log(P1 / P0), math.log((1 - P0) / (1 - P1)))  # log 5


def toy_update(p: float, rng: np.random.Generator):
    log_alpha = np.linspace(1.0, -1.0, DIM)  # coordinates 0, 1 on top
    if rng.random() < p:
        log_alpha[7] = 2.0  # the record opened gate 7: top-2 becomes {0, 7}
    return SimpleNamespace(weights=np.arange(DIM, dtype=float), log_alpha=log_alpha)


def plain_report(update, rng):
    idx = np.argsort(-update.log_alpha, kind="stable")[:M]
    return packet_row(idx, update.weights[idx], update.log_alpha[idx], DIM)


def rr_report(eps: float):
    keep = math.exp(eps) / (1 + math.exp(eps))

    def report(update, rng):
        bit = float(update.log_alpha[7] > 1.5)
        return np.array([bit if rng.random() < keep else 1.0 - bit])

    return report


def run(report, epsilon, samples=4000, seed=0):
    sampler = upload_sampler(toy_update, (P0, P1), report)
    return audit_upload(sampler, upload="toy", epsilon=epsilon, dim=DIM, m=M, bytes_sparse=M * 12,
                        bytes_dense=DIM * 4, neighbour={"record": "toy"}, samples=samples, confidence=0.95, seed=seed)


def test_packet_row_layout():
    row = packet_row(np.array([3, 0]), np.array([1.5, -2.0]), np.array([0.25, 0.75]), 4)
    np.testing.assert_array_equal(row, [1, 0, 0, 1, -2.0, 0, 0, 1.5, 0.75, 0, 0, 0.25])
    with pytest.raises(FedAuditError, match=r"packet indices must lie in \[0, 4\)"):
        packet_row(np.array([4]), np.array([1.0]), np.array([0.0]), 4)


def test_sampler_draws_the_chosen_dataset_with_the_pipeline_rates():
    sampler = upload_sampler(toy_update, (P0, P1), plain_report)
    rng = np.random.default_rng(1)
    n = 4000
    for x, p in ((np.zeros(1), P0), (np.ones(1), P1)):
        rows = sampler(x, n, rng)
        assert rows.shape == (n, 3 * DIM)
        assert (rows[:, :DIM].sum(axis=1) == M).all()  # exactly m coordinates sent
        rate = rows[:, 7].mean()
        assert abs(rate - p) < 4 * math.sqrt(p * (1 - p) / n)


def test_plain_upload_bound_is_below_the_exact_epsilon_and_near_its_expectation():
    res = run(plain_report, None)
    assert res.epsilon_claimed is None and not res.violation
    assert res.epsilon_lower <= EXACT
    n = res.ldp["certification_samples"]
    # the best event {gate 7 sent} has rates (P1, P0); three binomial sds of slack on the mean bound
    expected = expected_epsilon_lower_bound(P1, P0, n, alpha=0.05)
    sd = math.sqrt((1 - P0) / (P0 * n) + (1 - P1) / (P1 * n))
    assert res.epsilon_lower >= expected - 3 * sd
    assert res.bytes_ratio == pytest.approx(M * 12 / (DIM * 4))
    d = res.to_dict()
    assert d["upload"] == "toy" and d["ldp"]["epsilon_claimed"] is None and "summary" not in d
    assert "no stated ε" in res.summary()


def test_private_upload_stays_below_its_stated_epsilon_and_a_false_claim_is_caught():
    ok = run(rr_report(0.5), 0.5)
    assert not ok.violation and ok.epsilon_lower <= 0.5
    bad = run(plain_report, 0.3)  # the plain upload (exact ε = log 5) stated as 0.3-LDP
    assert bad.violation and bad.epsilon_lower > 0.3
    assert "VIOLATED" in bad.summary()


# ----------------------------------------------------------------------------- the E-FLoPS client pipeline
def _inclusion_rates(draws: int = 60):
    """P[j* among the m sent indices] on D0 and D1, measured independently of the audit: direct
    local_update calls and the wire encoder's own selection."""
    import torch

    from fedaudit.audit.sparse_upload import neighbouring_datasets
    from fedaudit.fl.eflops import EFLoPS, EFLoPSState, local_update
    from fedaudit.fl.gates import GatedModel, HardConcrete
    from fedaudit.mechanisms.gated import GatedSparseUpload

    dim, m = 64, 3
    d0, d1, info = neighbouring_datasets(dim, 20, m, np.random.default_rng(7))
    j = info["outlier_coordinate"]
    assert j not in info["true_support"] and d1[0][-1, j] == pytest.approx(8.0) and d1[1][-1] == pytest.approx(16.0)
    np.testing.assert_array_equal(d0[0][:-1], d1[0][:-1])  # neighbours: only the last record differs
    state = EFLoPSState(EFLoPS(density=0.05, temperature=0.01, anneal=None, local_steps=5),
                        GatedModel(torch.nn.Linear(dim, 1, bias=False).double()), "mse", np.zeros(dim),
                        HardConcrete.log_alpha_for(0.5) + 0.01 * np.random.default_rng(8).standard_normal(dim), 0.0, 0.01)
    wire = GatedSparseUpload(dim, m)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [np.mean([j in wire.select(local_update(state, d, rng=np.random.default_rng(s))).indices
                         for s in range(draws)]) for d in (d0, d1)]
    finally:
        torch.set_num_threads(threads)


def test_the_outlier_record_moves_the_gate_ranking():
    p0, p1 = _inclusion_rates()
    assert p0 < 0.1 and p1 > 0.5  # measured: 0.0 and 0.76 on 50 draws


def test_plain_upload_leaks_and_the_private_one_stays_within_its_epsilon():
    from fedaudit.audit.sparse_upload import audit_sparse_upload

    plain = audit_sparse_upload("plain", samples=200, seed=0)
    # the event {j* sent} alone has rates (≥ 0.5, ≤ 0.1): its expected certified bound on n draws
    n = plain.ldp["certification_samples"]
    assert plain.epsilon_lower >= expected_epsilon_lower_bound(0.5, 0.1, n) - 0.5
    assert plain.epsilon_lower <= plain.max_certifiable and plain.epsilon_claimed is None
    # wire sizes from the documented format: 16-byte header, m·(uint16 index + 2 float32) / 2 float64
    assert (plain.m, plain.bytes_sparse, plain.bytes_dense) == (3, 16 + 3 * (2 + 8), 64 * 4)
    private = audit_sparse_upload("private", samples=200, seed=0, epsilon=1.0)
    assert not private.violation and private.epsilon_lower <= 1.0 and private.epsilon_claimed == 1.0
    assert private.bytes_sparse == 16 + 3 * (2 + 16)
    assert private.neighbour["outlier_coordinate"] == plain.neighbour["outlier_coordinate"]


@pytest.mark.slow
def test_a_private_upload_run_far_above_its_stated_epsilon_is_caught():
    """Power of the pipeline audit on the private variant: run at ε = 256 but stated 1, it is refuted
    from the kind's default 2000 draws (measured ε_lb 2.20); at ε = 64 it is not (ε_lb 0): this neighbouring
    pair shows no smaller mis-statement."""
    from fedaudit.audit.sparse_upload import audit_sparse_upload

    res = audit_sparse_upload("private", epsilon=256.0, claimed_epsilon=1.0, samples=2000, seed=0)
    assert res.violation and 1.0 < res.epsilon_lower <= res.max_certifiable


@pytest.mark.parametrize("kwargs, needle", [
    ({"density": 0.0}, r"density must be"),
    ({"density": 1.0}, r"density must be"),
    ({"density": 0.01}, r"density must be in \[1/dim, 1\)"),  # m = floor(0.64) = 0
    ({"temperature": -0.5}, r"temperature must be a finite real number in \[0"),
    ({"upload": "dense"}, r"upload must be one of 'plain', 'private'"),
    ({"dim": 2}, r"dim must be an integer in \[4, 4096\]"),
    ({"claimed_epsilon": 0.0}, r"claimed_epsilon must be"),
])
def test_bad_audit_input_names_the_parameter(kwargs, needle):
    from fedaudit.audit.sparse_upload import audit_sparse_upload

    with pytest.raises(FedAuditError, match=needle):
        audit_sparse_upload(**{"samples": 200, **kwargs})
