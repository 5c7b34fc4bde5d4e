"""Byzantine attacks on the gated sparse upload: valid packets, hand-checked values and supports,
effect on the aggregate, robust rules on the reconstructions, hostile bytes never crash the server."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaudit.attacks.registry import ATTACKS, SPARSE_ATTACKS, make_sparse_attack
from fedaudit.attacks.sparse import ArbitraryPackets, SparseALIE, SparseAttack, SparseIPM
from fedaudit.attacks.byzantine import GaussianNoise
from fedaudit.defenses.registry import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.gated import ClientUpdate, GatedSparseUpload, SparsePacket


def _setting(p=40, m=6, n=9, seed=0, shared=None):
    """n honest clients around a common state; ``shared`` coordinates get the highest gates for all."""
    rng = np.random.default_rng(seed)
    g = GatedSparseUpload(p, m, rule="senders")
    prev = ClientUpdate(rng.normal(size=p), rng.normal(size=p))
    honest = []
    for _ in range(n):
        la = rng.normal(size=p)
        if shared is not None:
            la[shared] += 10.0
        honest.append(g.select(ClientUpdate(prev.weights + 0.1 * rng.normal(size=p) + 1.0, la)))
    return g, prev, honest, rng


def _dense(g, prev, honest):
    W = np.stack([g.reconstruct(h, prev).weights for h in honest])
    G = np.stack([g.reconstruct(h, prev).log_alpha for h in honest])
    return W, G


def test_registry_is_separate_from_dense_attacks():
    assert {"sparse-alie", "sparse-ipm", "sparse-arbitrary"} <= set(SPARSE_ATTACKS.names())
    assert not set(SPARSE_ATTACKS.names()) & set(ATTACKS.names())
    assert isinstance(make_sparse_attack("sparse-ipm", tau=2.0), SparseIPM)
    with pytest.raises(FedAuditError, match="did you mean 'sparse-alie'"):
        make_sparse_attack("sparse-alei")
    with pytest.raises(FedAuditError, match="takes no keyword .z."):
        make_sparse_attack("sparse-ipm", z=1.0)
    with pytest.raises(FedAuditError, match="support must be one of"):
        SparseALIE(support="everything")


def test_sparse_alie_by_hand():
    g, prev, honest, rng = _setting()
    out = SparseALIE(z=1.5, support="impact")(honest, 2, rng, upload=g, previous=prev)
    W, G = _dense(g, prev, honest)
    mu, sd = W.mean(axis=0), W.std(axis=0, ddof=1)
    S = np.sort(np.argsort(-sd, kind="stable")[: g.m])  # ALIE's shift is z·σ_j: largest σ
    for pk in out:
        assert pk.m == g.m
        np.testing.assert_array_equal(pk.indices, S)
        np.testing.assert_array_equal(pk.values, (mu - 1.5 * sd)[S].astype(np.float32))
        gmu, gsd = G.mean(axis=0), G.std(axis=0, ddof=1)
        np.testing.assert_array_equal(pk.gate_stats, (gmu - 1.5 * gsd)[S].astype(np.float32))


def test_sparse_ipm_popular_support_and_open_gates():
    shared = [3, 17, 25]
    g, prev, honest, rng = _setting(shared=shared)
    out = SparseIPM(tau=2.0, support="popular", gates="open")(honest, 3, rng, upload=g, previous=prev)
    W, G = _dense(g, prev, honest)
    counts = np.bincount(np.concatenate([h.indices for h in honest]), minlength=g.dim)
    assert np.all(counts[shared] == len(honest))
    for pk in out:
        assert set(shared) <= set(pk.indices.tolist())
        # every chosen coordinate was sent at least as often as every unchosen one
        assert counts[pk.indices].min() >= np.delete(counts, pk.indices).max()
        np.testing.assert_array_equal(pk.values, (-2.0 * W.mean(axis=0))[pk.indices].astype(np.float32))
        np.testing.assert_array_equal(pk.gate_stats, G.max(axis=0)[pk.indices].astype(np.float32))


def test_attacks_move_the_aggregate_toward_the_attack():
    g, prev, honest, rng = _setting(shared=[0, 1, 2, 3, 4, 5])
    clean = g.aggregate(honest, prev)
    byz = SparseIPM(tau=3.0, support="popular")(honest, 4, rng, upload=g, previous=prev)
    attacked = g.aggregate(honest + byz, prev)
    S = byz[0].indices
    # senders rule: at j in S the honest mean (~ prev + 1) is mixed with -3·mu at weight 4/13
    W, _ = _dense(g, prev, honest)
    sent = np.array([[j in h.indices for j in S] for h in honest])
    hon_mean = np.array([W[sent[:, k], j].mean() for k, j in enumerate(S)])
    want = (hon_mean * sent.sum(axis=0) + 4 * byz[0].values) / (sent.sum(axis=0) + 4)
    np.testing.assert_allclose(attacked.weights[S], want, rtol=1e-6)
    assert np.all(np.sign(attacked.weights[S] - clean.weights[S]) == -np.sign(clean.weights[S]))
    rest = np.setdiff1d(np.arange(g.dim), S)
    np.testing.assert_array_equal(attacked.weights[rest], clean.weights[rest])


def test_robust_rule_on_reconstructions_resists_what_mean_does_not():
    f, n = 3, 10
    g, prev, honest, rng = _setting(n=n - f, shared=[0, 1, 2, 3, 4, 5])
    clean = g.aggregate(honest, prev, aggregator=make_aggregator("mean", 0))
    errs = {}
    for attack in (SparseIPM(tau=20.0, support="popular"), ArbitraryPackets(mode="random", scale=1e4)):
        byz = attack(honest, f, rng, upload=g, previous=prev)
        packets, dropped = g.receive(honest + byz)
        assert dropped == []
        for rule in ("mean", "nnm+cwtm"):
            out = g.aggregate(packets, prev, aggregator=make_aggregator(rule, f))
            errs[attack.name, rule] = float(np.linalg.norm(out.weights - clean.weights))
    for name in ("sparse-ipm", "sparse-arbitrary"):
        assert errs[name, "nnm+cwtm"] < 0.2 * errs[name, "mean"]
    assert errs["sparse-arbitrary", "mean"] > 1e3  # a valid but huge packet moves the mean by ~ f/n · 1e4
    with pytest.raises(FedAuditError, match="weights must be None with an aggregator"):
        g.aggregate(packets, prev, [1.0] * len(packets), aggregator=make_aggregator("mean", 0))


@pytest.mark.parametrize("mode", ["out-of-range", "repeated", "nan", "truncated", "header"])
def test_hostile_bytes_are_rejected_and_dropped(mode):
    g, prev, honest, rng = _setting()
    blobs = ArbitraryPackets(mode=mode)(honest, 4, rng, upload=g, previous=prev)
    assert len(blobs) == 4 and all(isinstance(b, bytes) for b in blobs)
    for b in blobs:
        with pytest.raises(FedAuditError):
            g.decode(b)
    packets, dropped = g.receive(list(honest) + blobs)
    assert dropped == list(range(len(honest), len(honest) + 4))
    np.testing.assert_array_equal(g.aggregate(packets, prev).weights, g.aggregate(honest, prev).weights)


def test_mix_cycles_the_modes_and_m1_repeated_falls_back():
    g, prev, honest, rng = _setting()
    blobs = ArbitraryPackets()(honest, 12, rng, upload=g, previous=prev)
    _, dropped = g.receive(blobs)
    assert dropped == [i for i in range(12) if i % 6 != 5]  # every 6th ("random") is a valid packet
    g1 = GatedSparseUpload(10, 1)
    h1 = [g1.select(ClientUpdate(np.ones(10), np.arange(10.0)))] * 3
    (b,) = ArbitraryPackets(mode="repeated")(h1, 1, rng, upload=g1, previous=ClientUpdate(np.zeros(10), np.zeros(10)))
    with pytest.raises(FedAuditError, match="indices"):
        g1.decode(b)
    # dim = 2^16 with uint16 indices: no index >= dim is representable, so the packet's header is wrong
    g2 = GatedSparseUpload(2**16, 2)
    h2 = [g2.select(ClientUpdate(np.ones(2**16), np.arange(2.0**16)))] * 2
    (b,) = ArbitraryPackets(mode="out-of-range")(h2, 1, rng, upload=g2, previous=ClientUpdate(np.zeros(2**16), np.zeros(2**16)))
    with pytest.raises(FedAuditError, match="magic"):
        g2.decode(b)


def test_bad_context():
    g, prev, honest, rng = _setting()
    a = SparseALIE()
    assert a(honest, 0, rng, upload=g, previous=prev) == []
    with pytest.raises(FedAuditError, match="upload must be a GatedSparseUpload"):
        a(honest, 1, rng, upload=None, previous=prev)
    with pytest.raises(FedAuditError, match="previous must be a ClientUpdate"):
        a(honest, 1, rng, upload=g, previous=prev.weights)
    with pytest.raises(FedAuditError, match="positions \\[1\\]"):
        a([honest[0], b"junk"], 1, rng, upload=g, previous=prev)
    with pytest.raises(FedAuditError, match="at least 2 honest"):
        SparseALIE(z=1.0)(honest[:1], 1, rng, upload=g, previous=prev)
    with pytest.raises(FedAuditError, match="at least one packet"):
        SparseIPM()([], 1, rng, upload=g, previous=prev)
    with pytest.raises(FedAuditError, match="must fit in float32"):
        SparseIPM(tau=1e40)(honest, 1, rng, upload=g, previous=prev)
    with pytest.raises(FedAuditError, match="attack must be a fedaudit Attack"):
        SparseAttack(lambda h, f, r: h)


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 30), st.data())
def test_any_wrapped_attack_emits_valid_packets(p, data):
    m = data.draw(st.integers(1, p))
    n = data.draw(st.integers(2, 6))
    seed = data.draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    g = GatedSparseUpload(p, m)
    prev = ClientUpdate(rng.normal(size=p), rng.normal(size=p))
    honest = [g.select(ClientUpdate(rng.normal(size=p), rng.normal(size=p))) for _ in range(n)]
    attack = data.draw(st.sampled_from([SparseALIE(support="random"), SparseIPM(support="popular", gates="open"),
                                        SparseAttack(GaussianNoise(sigma=100.0), support="impact")]))
    out = attack(honest, 2, rng, upload=g, previous=prev)
    packets, dropped = g.receive(out)
    assert dropped == [] and all(isinstance(q, SparsePacket) and q.m == m for q in packets)
