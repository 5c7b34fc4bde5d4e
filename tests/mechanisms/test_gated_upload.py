"""The gated sparse upload: selection, wire format, byte counts, strict decoding, aggregation rule."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaudit.defenses import Mean
from fedaudit.errors import FedAuditError
from fedaudit.mechanisms.gated import (HEADER_BYTES, LOG_ALPHA_CLOSED, ClientUpdate, GatedSparseUpload, SparsePacket,
                                       m_for_density, top_m_indices)


def _update(rng, p):
    return ClientUpdate(rng.normal(size=p), rng.normal(size=p))


# --------------------------------------------------------------------------- ClientUpdate / m
def test_client_update_validates():
    with pytest.raises(FedAuditError, match="log_alpha must have the shape"):
        ClientUpdate(np.zeros(3), np.zeros(4))
    with pytest.raises(FedAuditError, match="weights must contain only finite"):
        ClientUpdate([0.0, np.nan], [0.0, 0.0])
    with pytest.raises(FedAuditError, match="at least 1"):
        ClientUpdate(np.zeros(0), np.zeros(0))
    u = ClientUpdate([1, 2], [3, 4])
    assert u.dim == 2 and u.weights.dtype == np.float64 and not u.weights.flags.writeable


def test_m_for_density_is_the_decimal_floor():
    assert m_for_density(0.05, 1000) == 50
    assert m_for_density(0.29, 100) == 29  # binary 0.29*100 = 28.999999999999996
    assert m_for_density(0.025, 101) == 2
    for bad in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(FedAuditError, match="density"):
            m_for_density(bad, 100)
    with pytest.raises(FedAuditError, match=r"density must be in \[1/dim"):
        m_for_density(0.001, 100)


def test_constructor_bounds():
    with pytest.raises(FedAuditError, match=r"m must be an integer in \[1, dim=5\]"):
        GatedSparseUpload(5, 0)
    with pytest.raises(FedAuditError, match=r"m must be an integer in \[1, dim=5\]"):
        GatedSparseUpload(5, 6)
    with pytest.raises(FedAuditError, match="index_bytes must be 4 for dim > 65536"):
        GatedSparseUpload(70_000, 5, index_bytes=2)
    with pytest.raises(FedAuditError, match="value_dtype must be one of"):
        GatedSparseUpload(5, 2, value_dtype="float16")
    assert GatedSparseUpload(65_536, 1).index_bytes == 2
    assert GatedSparseUpload(65_537, 1).index_bytes == 4


# --------------------------------------------------------------------------- selection
def test_selection_by_hand_ties_by_lower_index():
    la = np.array([0, 3, 3, 1, 5, -1, 3, 2, 0, 9.0])
    u = ClientUpdate(np.arange(10.0), la)
    p = GatedSparseUpload(10, 4).select(u)
    assert p.indices.tolist() == [1, 2, 4, 9]   # 9 (9), 5 (4), then the 3's at 1, 2 (not 6)
    assert p.values.tolist() == [1, 2, 4, 9] and p.gate_stats.tolist() == [3, 3, 5, 9]


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40), st.data())
def test_top_m_matches_a_full_sort(scores, data):
    s = np.asarray(scores, dtype=float)
    m = data.draw(st.integers(1, s.size))
    want = sorted(sorted(range(s.size), key=lambda j: (-s[j], j))[:m])  # independent: key sort
    assert top_m_indices(s, m).tolist() == want


# --------------------------------------------------------------------------- wire format
@pytest.mark.parametrize("dim,m,vd,ib", [(10, 3, "float32", 2), (100, 100, "float64", 2), (70_000, 7, "float32", 4),
                                         (50, 5, "float64", 4)])
def test_packet_bytes_exact_and_round_trip(dim, m, vd, ib):
    rng = np.random.default_rng(dim + m)
    g = GatedSparseUpload(dim, m, value_dtype=vd, index_bytes=ib if dim <= 65536 else None)
    assert g.index_bytes == ib
    vb = {"float32": 4, "float64": 8}[vd]
    assert g.packet_bytes() == 16 + m * (ib + 2 * vb) == HEADER_BYTES + m * (ib + 2 * vb)
    assert g.dense_bytes() == dim * vb and g.dense_bytes(gates=True) == 2 * dim * vb
    u = _update(rng, dim)
    blob = g.encode(u)
    assert len(blob) == g.packet_bytes()
    q = g.decode(blob)
    sel = g.select(u)
    np.testing.assert_array_equal(q.indices, sel.indices)
    np.testing.assert_array_equal(q.values, sel.values)
    np.testing.assert_array_equal(q.gate_stats, sel.gate_stats)
    # the values are exactly the client's, rounded once to the wire dtype
    np.testing.assert_array_equal(q.values, u.weights[sel.indices].astype(vd).astype(float))
    assert g.encode(q) == blob  # canonical: one packet, one byte string


def test_header_layout_by_hand():
    g = GatedSparseUpload(300, 2)
    u = ClientUpdate(np.zeros(300), np.r_[np.zeros(298), 1.0, 2.0])
    blob = g.encode(u)
    assert blob[:4] == b"FAGS" and blob[4] == 1 and blob[5] == 2 and blob[6] == 4 and blob[7] == 0
    assert struct.unpack_from("<II", blob, 8) == (300, 2)
    assert struct.unpack_from("<HH", blob, 16) == (298, 299)
    assert struct.unpack_from("<ffff", blob, 20) == (0.0, 0.0, 1.0, 2.0)


def test_encode_rejects_values_beyond_the_wire_dtype():
    g = GatedSparseUpload(3, 1)
    with pytest.raises(FedAuditError, match="must fit in float32"):
        g.encode(ClientUpdate([1e39, 0, 0], [5.0, 0, 0]))


# --------------------------------------------------------------------------- hostile packets
def _blob(g, **over):
    h = {"magic": b"FAGS", "version": 1, "ib": g.index_bytes, "vb": g.value_bytes, "res": 0, "dim": g.dim, "m": g.m}
    h.update({k: v for k, v in over.items() if k in h})
    idx = over.get("idx", np.arange(g.m))
    vals = over.get("vals", np.zeros(g.m))
    head = struct.pack("<4sBBBBII", h["magic"], h["version"], h["ib"], h["vb"], h["res"], h["dim"], h["m"])
    return head + np.asarray(idx, "<u2").tobytes() + np.asarray(vals, "<f4").tobytes() + np.zeros(g.m, "<f4").tobytes()


@pytest.mark.parametrize("over,match", [
    ({"magic": b"XXXX"}, "magic"), ({"version": 2}, "version"), ({"res": 1}, "reserved"),
    ({"dim": 11}, "dim must be 10"), ({"m": 2}, "m must be 3"), ({"vb": 8}, "value_bytes"),
    ({"idx": [0, 10, 11]}, r"indices must be in \[0, dim=10\)"), ({"idx": [2, 2, 5]}, "strictly increasing"),
    ({"idx": [5, 2, 7]}, "strictly increasing"), ({"vals": [0, np.nan, 0]}, "finite"),
    ({"vals": [0, np.inf, 0]}, "finite"),
])
def test_decode_rejects_malformed(over, match):
    g = GatedSparseUpload(10, 3)
    assert g.decode(_blob(g)).m == 3  # the unmodified packet is valid
    with pytest.raises(FedAuditError, match=match):
        g.decode(_blob(g, **over))


def test_decode_rejects_truncated_and_trailing():
    g = GatedSparseUpload(10, 3)
    blob = _blob(g)
    for cut in (0, 5, HEADER_BYTES, len(blob) - 1):
        with pytest.raises(FedAuditError, match="truncated"):
            g.decode(blob[:cut])
    with pytest.raises(FedAuditError, match="trailing"):
        g.decode(blob + b"\0")
    with pytest.raises(FedAuditError, match="must be bytes"):
        g.decode("FAGS")


@settings(max_examples=300)
@given(st.binary(max_size=80), st.booleans())
def test_decoder_random_bytes_only_fedaudit_error(data, with_header):
    g = GatedSparseUpload(10, 3)
    if with_header:  # a valid header followed by random payload exercises the body checks
        data = _blob(g)[:HEADER_BYTES] + data[: g.packet_bytes() - HEADER_BYTES].ljust(g.packet_bytes() - HEADER_BYTES, b"\0")
    try:
        p = g.decode(data)
    except FedAuditError:
        return
    assert p.m == 3 and np.all(np.diff(p.indices) > 0) and p.indices[-1] < 10
    assert np.isfinite(p.values).all() and np.isfinite(p.gate_stats).all()


def test_receive_drops_hostile_blobs():
    g = GatedSparseUpload(10, 3)
    good = g.encode(ClientUpdate(np.ones(10), np.arange(10.0)))
    packets, dropped = g.receive([good, b"junk", _blob(g, vals=[np.nan, 0, 0]), good[:-2]])
    assert len(packets) == 1 and dropped == [1, 2, 3]


# --------------------------------------------------------------------------- aggregation
def _tiny():
    g = GatedSparseUpload(5, 2, rule="senders", unsent_decay=0.0)
    prev = ClientUpdate([10, 20, 30, 40, 50], [-1, -2, -3, -4, -5])
    a = SparsePacket([0, 2], [1.0, 3.0], [0.5, 0.25])
    b = SparsePacket([2, 3], [5.0, 7.0], [1.0, 2.0])
    return g, prev, a, b


def test_senders_rule_by_hand():
    g, prev, a, b = _tiny()
    out = g.aggregate([a, b], prev, weights=[1.0, 3.0])
    # j=0: only a; j=2: (1*3 + 3*5)/4 = 4.5; j=3: only b; j=1, 4: nobody -> previous
    np.testing.assert_allclose(out.weights, [1.0, 20, 4.5, 7.0, 50])
    np.testing.assert_allclose(out.log_alpha, [0.5, -2, (0.25 + 3.0) / 4, 2.0, -5])


def test_dense_rule_is_mean_of_reconstructions():
    g, prev, a, b = _tiny()
    gd = GatedSparseUpload(5, 2, rule="dense", unsent_decay=0.0)
    out = gd.aggregate([a, b], prev)
    rows = np.stack([gd.reconstruct(p, prev).weights for p in (a, b)])
    np.testing.assert_allclose(out.weights, Mean()(rows))
    np.testing.assert_allclose(out.weights, [(1 + 10) / 2, 20, 4.0, (40 + 7) / 2, 50])
    gates = np.stack([gd.reconstruct(p, prev).log_alpha for p in (a, b)]).mean(axis=0)
    np.testing.assert_allclose(out.log_alpha, gates)


def test_unsent_gates_decay_toward_closed():
    _, prev, a, b = _tiny()
    g = GatedSparseUpload(5, 2, rule="senders", unsent_decay=0.5)
    out = g.aggregate([a, b], prev)
    c = LOG_ALPHA_CLOSED
    np.testing.assert_allclose(out.log_alpha[[1, 4]], [-2 + 0.5 * (c + 2), -5 + 0.5 * (c + 5)])
    np.testing.assert_allclose(out.weights[[1, 4]], [20, 50])


def test_votes_rule_counts_non_senders_with_the_decayed_gate():
    """Issue #12: "votes" = FedAvg of reconstructions whose unsent gates are φ̄ + κ·(c − φ̄), weights as "dense"."""
    _, prev, a, b = _tiny()
    kappa, c = 0.25, LOG_ALPHA_CLOSED
    gv = GatedSparseUpload(5, 2, rule="votes", unsent_decay=kappa)
    out = gv.aggregate([a, b], prev, weights=[1.0, 3.0])
    dense = GatedSparseUpload(5, 2, rule="dense", unsent_decay=kappa).aggregate([a, b], prev, weights=[1.0, 3.0])
    np.testing.assert_allclose(out.weights, dense.weights)
    decayed = prev.log_alpha + kappa * (c - prev.log_alpha)
    rows = np.stack([gv.reconstruct(p, prev).log_alpha for p in (a, b)])
    for i, p in enumerate((a, b)):   # reconstruction: sent gates from the packet, the rest decayed
        unsent = np.setdiff1d(np.arange(5), p.indices)
        np.testing.assert_allclose(rows[i, unsent], decayed[unsent])
        np.testing.assert_allclose(rows[i, p.indices], p.gate_stats)
    np.testing.assert_allclose(out.log_alpha, np.array([1.0, 3.0]) @ rows / 4.0)
    # κ = 0: the dense rule exactly
    np.testing.assert_allclose(GatedSparseUpload(5, 2, rule="votes", unsent_decay=0.0).aggregate([a, b], prev).log_alpha,
                               GatedSparseUpload(5, 2, rule="dense", unsent_decay=0.0).aggregate([a, b], prev).log_alpha)


def test_zero_weight_client_counts_as_not_sending():
    g, prev, a, b = _tiny()
    out = g.aggregate([a, b], prev, weights=[0.0, 1.0])
    np.testing.assert_allclose(out.weights, [10, 20, 5.0, 7.0, 50])


def test_aggregate_bad_input():
    g, prev, a, b = _tiny()
    with pytest.raises(FedAuditError, match="at least one packet"):
        g.aggregate([], prev)
    with pytest.raises(FedAuditError, match="non-negative"):
        g.aggregate([a, b], prev, weights=[-1, 2])
    with pytest.raises(FedAuditError, match=r"weights must have shape \(2,\)"):
        g.aggregate([a, b], prev, weights=[1, 2, 3])
    with pytest.raises(FedAuditError, match="m=2 coordinates"):
        g.aggregate([SparsePacket([0], [1.0], [1.0])], prev)
    with pytest.raises(FedAuditError, match=r"indices must be in \[0, dim=5\)"):
        g.aggregate([SparsePacket([0, 5], [1.0, 1.0], [1.0, 1.0])], prev)
    with pytest.raises(FedAuditError, match="previous must have dim=5"):
        g.aggregate([a], ClientUpdate([1.0], [1.0]))


def test_round_trip_aggregation_equals_packet_aggregation():
    rng = np.random.default_rng(7)
    g = GatedSparseUpload(200, 20, rule="senders")
    prev = _update(rng, 200)
    ups = [_update(rng, 200) for _ in range(6)]
    w = rng.uniform(1, 5, size=6)
    direct = g.aggregate([g.select(u) for u in ups], prev, w)
    wired = g.aggregate([g.encode(u) for u in ups], prev, w)
    np.testing.assert_array_equal(direct.weights, wired.weights)
    # independent computation: per-coordinate loop
    want = prev.weights.copy()
    for j in range(200):
        senders = [(wi, u.weights[j]) for wi, u in zip(w, ups) if j in g.select(u).indices]
        if senders:
            want[j] = sum(wi * np.float32(v) for wi, v in senders) / sum(wi for wi, _ in senders)
    np.testing.assert_allclose(direct.weights, want, rtol=1e-12)


# --------------------------------------------------------------------------- private variant
from fedaudit.audit import audit_ldp  # noqa: E402
from fedaudit.guarantees import PureLDP  # noqa: E402
from fedaudit.mechanisms.gated import GatedPrivateUpload  # noqa: E402
from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism  # noqa: E402


def _extreme_pair(p, c=1.0, a=4.0):
    """θ̃ = ±c e_0, log α = ±a(e_0 − rest): the index-0 gate flips from most to least open."""
    t = np.r_[c, np.zeros(p - 1)]
    la = np.r_[a, -a * np.ones(p - 1)]
    return np.r_[t, la], np.r_[-t, -la]


def test_private_budget_split_and_bad_input():
    M = GatedPrivateUpload(10, 2, 3.0, select_share=0.5, gate_share=0.2)
    assert M.guarantee == PureLDP(3.0) and M.dim == 20 and M.report_width == 30
    assert (M.epsilon_select, M.epsilon_gates) == (1.5, pytest.approx(0.6)) and M.epsilon_values == pytest.approx(0.9)
    # the selection rate r is the largest rational below eps_s/(4Km) up to 2^-20 relative
    assert M.rate_num / M.rate_den <= 1.5 / (4 * 4096 * 2) and M.selection_rate == pytest.approx(1.5 / (4 * 4096 * 2), rel=1e-6)
    from fractions import Fraction
    for eps, s_, g_ in ((0.3, 0.1, 0.2), (1.1, 0.7, 0.1), (2.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0 - 1e-9)):
        Mx = GatedPrivateUpload(10, 2, eps, select_share=s_, gate_share=g_)
        assert Fraction(Mx.epsilon_select) + Fraction(Mx.epsilon_values) + Fraction(Mx.epsilon_gates) <= Fraction(eps)
        assert Mx.epsilon_values == pytest.approx(eps * (1 - s_ - g_), rel=1e-6)
    with pytest.raises(FedAuditError, match="select_share \\+ gate_share must be < 1"):
        GatedPrivateUpload(10, 2, 1.0, select_share=0.6, gate_share=0.4)
    with pytest.raises(FedAuditError, match=r"m must be an integer in \[1, params"):
        GatedPrivateUpload(10, 0, 1.0)
    with pytest.raises(FedAuditError, match="epsilon"):
        GatedPrivateUpload(10, 2, -1.0)
    with pytest.raises(FedAuditError, match="dim must be an even integer"):
        make_mechanism("gated-private", 7, 1.0)
    m = make_mechanism("gated-private", 8, 1.0, k=2)
    assert isinstance(m, GatedPrivateUpload) and (m.params_dim, m.m) == (4, 2) and "gated-private" in MECHANISMS


def test_private_selection_law_is_plackett_luce():
    """Set frequencies of 200k reports vs the two-order formula written out by hand (m = 2)."""
    p, n = 4, 200_000
    M = GatedPrivateUpload(p, 2, 4.0)
    la = np.array([4.0, 1.0, -2.0, -9.0])  # -9 clamps to -4
    x = np.r_[np.zeros(p), la]
    R = M.sample(x, n, np.random.default_rng(11))
    w = np.exp(M.selection_rate * 4096 / 4.0 * np.clip(la, -4, 4))  # the grid holds these gates exactly
    W = w.sum()
    for i in range(p):
        for j in range(i + 1, p):
            want = w[i] / W * w[j] / (W - w[i]) + w[j] / W * w[i] / (W - w[j])
            got = np.mean((R[:, i] == 1) & (R[:, j] == 1))
            assert abs(got - want) <= 5 * np.sqrt(want * (1 - want) / n)
    assert np.all(R[:, :p].sum(axis=1) == 2)


def test_private_log_prob_and_pair_epsilon():
    p = 12
    M = GatedPrivateUpload(p, 1, 2.0)
    x0, x1 = _extreme_pair(p)
    R = M.sample(x0, 2000, np.random.default_rng(3))
    loss = M.privacy_loss(R, x0, x1)
    eps_pair = M.epsilon_for_pair(x0, x1)
    assert np.all(np.abs(loss) <= eps_pair + 1e-9) and eps_pair <= M.epsilon
    # analytic: selection of {0} under u0 = a(e0 - rest) vs u1 = -u0 (Plackett-Luce, m = 1), plus the two
    # Laplace parts at their own exact pair loss
    u = M.selection_rate * 4096
    sel = 2 * u + np.log((np.exp(-u) + (p - 1) * np.exp(u)) / (np.exp(u) + (p - 1) * np.exp(-u)))
    want = sel + M.values_mechanism.epsilon_for_pair([1.0], [-1.0]) + M.gates_mechanism.epsilon_for_pair([4.0], [-4.0])
    assert eps_pair == pytest.approx(want, rel=1e-12)
    # impossible reports: two indicators, value off the sent set
    bad = R[:2].copy()
    bad[0, :p] = 1.0
    bad[1, p + int(np.flatnonzero(R[1, :p] == 0)[0])] = 0.5
    assert np.all(M.log_prob(bad, x0) == -np.inf)


def test_private_audit_certifies_below_the_claim_and_close_on_the_extreme_pair():
    p = 16
    M = GatedPrivateUpload(p, 1, 2.0)
    x0, x1 = _extreme_pair(p)
    res = audit_ldp(M, x0, x1, samples=200_000, seed=1)
    assert not res.violation and res.epsilon_lower <= M.epsilon
    assert res.epsilon_exact == pytest.approx(M.epsilon_for_pair(x0, x1))
    assert res.epsilon_lower >= 0.8 * res.epsilon_exact  # measured 1.78 of exact 1.935 (claim 2)
    bb = audit_ldp(M, x0, x1, samples=100_000, seed=2, distinguisher="black-box")  # as a sampler would be audited
    assert 0.5 <= bb.epsilon_lower <= M.epsilon


def test_private_reports_aggregate_through_the_upload():
    p, m = 20, 3
    M = GatedPrivateUpload(p, m, 8.0)
    rng = np.random.default_rng(5)
    X = np.c_[rng.uniform(-1, 1, (4, p)), rng.uniform(-4, 4, (4, p))]
    R = M.encode(X, rng)
    packets = [M.to_packet(r) for r in R]
    g = GatedSparseUpload(p, m, value_dtype="float64", rule="senders")
    prev = ClientUpdate(np.zeros(p), np.zeros(p))
    blobs = [g.encode(q) for q in packets]
    out = g.aggregate(blobs, prev)
    dec = M.decode(R)
    sent = R[:, :p].sum(axis=0)
    want = np.where(sent > 0, dec[:, :p].sum(axis=0) / np.maximum(sent, 1), 0.0)
    np.testing.assert_allclose(out.weights, want)
    with pytest.raises(FedAuditError, match="exactly m=3"):
        M.to_packet(np.zeros(3 * p))


def test_private_log_prob_m2_matches_hand_formula():
    """log_prob of noise-free rows = log P[S] + 2m·log P[Z = 0]; P[S] by the two-order formula sums to 1."""
    p, m = 4, 2
    M = GatedPrivateUpload(p, m, 3.0)
    theta, la = np.array([0.5, -0.25, 0.0, 1.0]), np.array([3.0, -1.0, 0.5, 2.0])
    x = np.r_[theta, la]
    gv, gg = M.values_mechanism.grid, M.gates_mechanism.grid
    w = np.exp(M.selection_rate * np.rint(la * 4096 / 4.0))
    W = w.sum()
    const = m * (np.log(np.tanh(0.5 / M.values_mechanism.scale_grid)) + np.log(np.tanh(0.5 / M.gates_mechanism.scale_grid)))
    total = 0.0
    for i in range(p):
        for j in range(i + 1, p):
            row = np.zeros(3 * p)
            row[[i, j]] = 1.0
            row[p + np.array([i, j])] = gv * np.rint(theta[[i, j]] / gv)
            row[2 * p + np.array([i, j])] = gg * np.rint(la[[i, j]] / gg)
            ps = np.exp(M.log_prob(row[None, :], x)[0] - const)
            assert ps == pytest.approx(w[i] / W * w[j] / (W - w[i]) + w[j] / W * w[i] / (W - w[j]), rel=1e-12)
            total += ps
    assert total == pytest.approx(1.0, rel=1e-12)


def test_aggregator_path_with_mean_is_the_dense_rule():
    from fedaudit.defenses.registry import make_aggregator

    g, prev, a, b = _tiny()
    g = GatedSparseUpload(5, 2, rule="senders", unsent_decay=0.25)
    out = g.aggregate([a, b], prev, aggregator=make_aggregator("mean", 0))
    want = GatedSparseUpload(5, 2, rule="dense", unsent_decay=0.25).aggregate([a, b], prev)
    np.testing.assert_allclose(out.weights, want.weights)
    np.testing.assert_allclose(out.log_alpha, want.log_alpha)
    with pytest.raises(FedAuditError, match="aggregator must be callable"):
        g.aggregate([a], prev, aggregator="mean")


def test_private_m_equal_p_sends_everything():
    M = GatedPrivateUpload(3, 3, 1.0)
    R = M.sample(np.r_[0.5, -0.5, 0.0, 1.0, 2.0, 3.0], 50, np.random.default_rng(0))
    assert np.all(R[:, :3] == 1.0)
    assert M.epsilon_for_pair(np.zeros(6), np.r_[1.0, 0, 0, 0, 0, 0]) == pytest.approx(
        M.values_mechanism.epsilon_for_pair([1.0, 0, 0], [0.0, 0, 0]))  # the selection carries no loss
