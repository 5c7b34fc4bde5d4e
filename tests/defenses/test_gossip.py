"""Robust gossip (fedaudit.defenses.gossip), its attacks (fedaudit.attacks.gossip) and the simulator
(fedaudit.fl.gossip).

Known answers are hand computations on one node with weights (0.1, 0.2, 0.3, 0.15) and
distances (1, 2, 4, 10); graph spectra are checked against closed forms (complete graph, ring,
path); the attack experiments use seeded graphs and states, with the parameters stated in each
test.
"""

import math

import numpy as np
import pytest

from fedaudit.attacks.gossip import (
    Dissensus,
    Spectral,
    attack_deviation,
    dissensus_direction,
    line_maximize,
    spectral_direction,
)
from fedaudit.defenses.gossip import (
    GossipGraph,
    algebraic_connectivity,
    byzantine_weight,
    clipped_gossip_threshold,
    complete_graph,
    consensus_error,
    cs_plus_threshold,
    erdos_renyi_graph,
    fiedler_vector,
    gossip_graph,
    honest_gossip_step,
    resolve_rule,
    ring_graph,
    robust_gossip_step,
    robust_sum,
    spectral_gap,
    two_worlds_graph,
)
from fedaudit.errors import FedAuditError
from fedaudit.fl.gossip import simulate_gossip

RULES = ["plain", "cs+", "gts", "clippedgossip"]
ROBUST = ["cs+", "gts", "clippedgossip"]

# one node: weights and 1-D differences x_i − y_j (distances 1, 2, 4, 10; W = 0.75)
W4 = np.array([0.1, 0.2, 0.3, 0.15])
D4 = np.array([[1.0], [-2.0], [4.0], [10.0]])


def _state(n, d=3, seed=0):
    return np.random.default_rng(seed).normal(size=(n, d))


# =============================================================================== graphs
def test_metropolis_weights_give_doubly_stochastic_mixing():
    g = erdos_renyi_graph(15, 0.3, rng=3)
    deg = g.degrees
    i, j = np.nonzero(g.adjacency)
    assert np.allclose(g.weights[i, j], 1.0 / (1.0 + np.maximum(deg[i], deg[j])))
    M = np.eye(g.n) - g.laplacian
    assert np.allclose(M.sum(axis=0), 1) and np.allclose(M.sum(axis=1), 1)
    assert (M >= -1e-15).all() and np.array_equal(M, M.T)


def test_graph_builders_structure():
    r = ring_graph(6, weights="unitary")
    assert (r.degrees == 2).all() and r.weights[0, 5] == 1.0 and r.weights[0, 2] == 0.0
    k = complete_graph(5)
    assert np.allclose(k.weights[~np.eye(5, dtype=bool)], 1 / 5)
    tw = two_worlds_graph(4, bridges=2, weights="unitary")
    assert tw.n == 8 and tw.adjacency.sum() // 2 == 2 * 6 + 2
    assert tw.weights[0, 4] == tw.weights[1, 5] == 1.0 and tw.weights[2, 6] == 0.0
    assert not tw.is_connected([0, 1, 2, 6, 7]) and tw.is_connected()
    assert list(r.neighbours(0)) == [1, 5]
    given = gossip_graph(np.array([[0, 0.5], [0.5, 0]]), weights="given")
    assert given.weights[0, 1] == 0.5


def test_erdos_renyi_is_seeded_and_connected():
    a = erdos_renyi_graph(25, 0.15, rng=7)
    b = erdos_renyi_graph(25, 0.15, rng=7)
    c = erdos_renyi_graph(25, 0.15, rng=8)
    assert np.array_equal(a.weights, b.weights) and not np.array_equal(a.weights, c.weights)
    assert a.is_connected()


@pytest.mark.parametrize("n", [3, 6, 11])
def test_algebraic_connectivity_closed_forms(n):
    assert algebraic_connectivity(complete_graph(n, "unitary")) == pytest.approx(n)
    ring = ring_graph(n + 1, "unitary")
    assert algebraic_connectivity(ring) == pytest.approx(2 - 2 * math.cos(2 * math.pi / (n + 1)))
    # honest subgraph of a ring without node 0 is the path P_n: μ₂ = 2 − 2cos(π/n)
    assert algebraic_connectivity(ring, {0}) == pytest.approx(2 - 2 * math.cos(math.pi / n))
    assert spectral_gap(complete_graph(n)) == pytest.approx(1.0)  # Metropolis K_n: I − L = J/n


def test_fiedler_vector_splits_two_worlds():
    g = two_worlds_graph(6, bridges=1)
    u = fiedler_vector(g, {5, 11})
    assert u[5] == u[11] == 0.0 and np.linalg.norm(u) == pytest.approx(1.0)
    left, right = u[:5], u[6:11]
    assert (np.sign(left) == np.sign(left[0])).all() and (np.sign(right) == -np.sign(left[0])).all()
    assert algebraic_connectivity(two_worlds_graph(6, 1), {5, 11}) < 0.1 < algebraic_connectivity(complete_graph(12))


@pytest.mark.parametrize("bad, match", [
    (np.array([[0, 1], [0.5, 0]]), "symmetric"),
    (np.array([[0, -1], [-1, 0]]), "non-negative"),
    (np.array([[1, 1], [1, 0]]), "zero diagonal"),
    (np.ones((2, 3)), "square"),
    (np.array([[0, np.nan], [np.nan, 0]]), "finite"),
    (np.zeros((1, 1)), "at least 2 nodes"),
])
def test_graph_validation_errors(bad, match):
    with pytest.raises(FedAuditError, match=match):
        GossipGraph(bad)
    with pytest.raises(FedAuditError, match=match):
        gossip_graph(bad)


def test_input_validation_errors():
    g = ring_graph(5)
    X = _state(5)
    with pytest.raises(FedAuditError, match="weights must be one of"):
        gossip_graph(np.ones((3, 3)) - np.eye(3), weights="max-degree")
    with pytest.raises(FedAuditError, match="byzantine node"):
        robust_gossip_step(X, g, "cs+", byzantine={7})
    with pytest.raises(FedAuditError, match="at least one honest"):
        robust_gossip_step(X, g, "cs+", byzantine=range(5))
    with pytest.raises(FedAuditError, match=r"unknown gossip rule 'median'; choose one of: plain, cs\+, gts, clippedgossip"):
        robust_gossip_step(X, g, "median")
    with pytest.raises(FedAuditError, match="rule must be a gossip rule name"):
        robust_gossip_step(X, g, 3)
    with pytest.raises(FedAuditError, match="X must have n=5 rows"):
        robust_gossip_step(_state(4), g)
    with pytest.raises(FedAuditError, match="messages must have shape"):
        robust_gossip_step(X, g, byzantine={0}, messages=np.zeros((5, 2)))
    with pytest.raises(FedAuditError, match="eta"):
        robust_gossip_step(X, g, eta=0.0)
    with pytest.raises(FedAuditError, match="b must be"):
        robust_gossip_step(X, g, b=np.ones(4))
    with pytest.raises(FedAuditError, match="graph must be a GossipGraph"):
        robust_gossip_step(X, np.eye(5))
    with pytest.raises(FedAuditError, match="connected"):
        erdos_renyi_graph(30, 0.01, rng=0, max_tries=3)
    with pytest.raises(FedAuditError, match="x0 must have n=5 rows"):
        simulate_gossip(_state(6), g, {0}, "cs+", 3)


# =============================================================================== rules: known answers
@pytest.mark.parametrize("b, tau, F", [(0.0, math.inf, 0.1 - 0.4 + 1.2 + 1.5), (0.1, 4.0, 1.5), (0.15, 4.0, 1.5),
                                       (0.25, 2.0, 0.1 - 0.4 + 0.6 + 0.3), (0.375, 0.0, 0.0), (0.5, 0.0, 0.0)])
def test_cs_plus_hand_computation(b, tau, F):
    # C = (0.1, 0.3, 0.6, 0.75); τ = first distance with C ≥ W − 2b
    assert cs_plus_threshold(W4, np.abs(D4[:, 0]), b) == tau
    assert robust_sum("cs+", W4, D4, b)[0] == pytest.approx(F, abs=1e-15)


@pytest.mark.parametrize("b, F", [(0.0, 2.4), (0.15, 0.9), (0.25, 0.1 - 0.4 + 0.2 * 4), (0.05, 0.9 + 0.1 * 10),
                                  (0.75, 0.0), (1.0, 0.0)])
def test_gts_drops_exactly_weight_b(b, F):
    # b = 0.25 drops all of d=10 (0.15) and 0.10 of the 0.3 at d=4: fractional boundary
    assert robust_sum("gts", W4, D4, b)[0] == pytest.approx(F, abs=1e-15)


def test_gts_kept_weight_is_w_minus_b_in_every_direction():
    rng = np.random.default_rng(1)
    w = rng.uniform(0.05, 0.3, size=9)
    u = rng.normal(size=4)
    u /= np.linalg.norm(u)
    dists = np.sort(rng.uniform(0.5, 5, size=9))
    D = dists[:, None] * u[None, :]  # all differences on one ray: F = (Σ κ_j d_j) u
    for b in (0.0, 0.07, 0.31, w.sum() / 2):
        keep_to = w.sum() - b
        C = np.cumsum(w)
        kappa = np.clip(keep_to - (C - w), 0, w)
        assert kappa.sum() == pytest.approx(keep_to)
        assert np.allclose(robust_sum("gts", w, D, b), (kappa * dists).sum() * u, atol=1e-14)


@pytest.mark.parametrize("b, tau2", [(0.15, (0.1 * 1 + 0.2 * 4 + 0.3 * 16) / 0.15),
                                     (0.25, (0.1 * 1 + 0.2 * 4 + 0.2 * 16) / 0.25)])
def test_clipped_gossip_hand_computation(b, tau2):
    # τ² = (1/b) Σ over the nearest weight W − b (0.6 resp. 0.5, the latter cutting d=4 at 0.2)
    tau = math.sqrt(tau2)
    assert clipped_gossip_threshold(W4, np.abs(D4[:, 0]), b) == pytest.approx(tau)
    want = 0.1 * 1 - 0.2 * 2 + 0.3 * min(4, tau) + 0.15 * min(10, tau)
    assert robust_sum("clippedgossip", W4, D4, b)[0] == pytest.approx(want, abs=1e-14)
    # in several dimensions clipping shrinks the norm and keeps the direction
    R = np.linalg.qr(np.random.default_rng(0).normal(size=(3, 3)))[0]
    Dm = np.hstack([D4, np.zeros((4, 2))]) @ R.T
    assert np.allclose(robust_sum("clippedgossip", W4, Dm, b), np.array([want, 0, 0]) @ R.T)
    assert clipped_gossip_threshold(W4, np.abs(D4[:, 0]), 0.0) == math.inf


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("rule", ROBUST)
def test_b_zero_equals_plain_gossip(rule, seed):
    g = erdos_renyi_graph(18, 0.3, rng=seed)
    X = _state(18, 4, seed)
    M = _state(18, 4, seed + 100) * 50
    plain = robust_gossip_step(X, g, "plain", byzantine={2, 5}, messages=M, b=0.0)
    robust = robust_gossip_step(X, g, rule, byzantine={2, 5}, messages=M, b=0.0)
    assert np.allclose(robust, plain, rtol=0, atol=1e-13)
    # plain gossip is X − ηLX
    assert np.allclose(robust_gossip_step(X, g, "plain", b=0.0, eta=0.7), X - 0.7 * g.laplacian @ X)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rule", ROBUST)
def test_no_byzantine_positive_budget_still_contracts(rule, seed):
    """No Byzantine node, every node budgets b = 0.1 on a connected G(30, 0.2): every round
    decreases the consensus error and 30 rounds reduce it by > 100×."""
    g = erdos_renyi_graph(30, 0.2, rng=seed)
    X = _state(30, 4, seed)
    errs = [consensus_error(X)]
    for _ in range(30):
        X = robust_gossip_step(X, g, rule, b=0.1)
        errs.append(consensus_error(X))
    assert (np.diff(errs) <= 1e-12).all()
    assert errs[-1] < errs[0] / 100


@pytest.mark.parametrize("magnitude", [1e3, 1e8, 1e14, 1e200])
def test_cs_plus_bounds_a_huge_byzantine_message(magnitude):
    """K_10 (Metropolis w = 0.1), node 0 Byzantine sends magnitude·1 to everyone. In one CS+ step an
    honest node moves by its clipped honest sum plus at most w·τ, with τ ≤ its largest honest
    distance (independent of the magnitude); plain gossip moves by ≈ w·magnitude."""
    g = complete_graph(10)
    X = _state(10, 3, 1)
    M = np.full((10, 3), magnitude)
    step = robust_gossip_step(X, g, "cs+", byzantine={0}, messages=M)
    plain = robust_gossip_step(X, g, "plain", byzantine={0}, messages=M)
    for i in range(1, 10):
        hon = [k for k in range(1, 10) if k != i]
        diffs = X[i] - X[hon]
        dist = np.linalg.norm(diffs, axis=1)
        tau = cs_plus_threshold(np.full(9, 0.1), np.append(dist, magnitude * np.linalg.norm(X[i] / magnitude - 1)), 0.1)
        assert tau <= dist.max()
        honest_part = X[i] - 0.1 * (diffs * np.minimum(1, tau / dist)[:, None]).sum(axis=0)
        assert np.linalg.norm(step[i] - honest_part) <= 0.1 * tau * (1 + 1e-12)
        assert np.linalg.norm(step[i] - X[i]) <= 0.1 * tau * 9 * (1 + 1e-12)
        assert np.abs(plain[i] - X[i]).min() >= 0.1 * magnitude * 0.9
    assert np.array_equal(step[0], X[0])  # Byzantine rows are not updated


def test_malformed_messages_are_ignored_and_edge_messages_match_receiver_messages():
    g = erdos_renyi_graph(12, 0.5, rng=2)
    X = _state(12, 2, 2)
    byz = {1, 4}
    for rule in RULES:
        nan_msgs = np.full((12, 2), np.nan)
        assert np.array_equal(robust_gossip_step(X, g, rule, byzantine=byz, messages=nan_msgs),
                              robust_gossip_step(X, g, rule, byzantine=byz, messages=X))
        R = _state(12, 2, 9)
        E = np.broadcast_to(R[None, :, :], (12, 12, 2))  # [sender, receiver] = R[receiver]
        assert np.array_equal(robust_gossip_step(X, g, rule, byzantine=byz, messages=R),
                              robust_gossip_step(X, g, rule, byzantine=byz, messages=E))


def test_default_budget_is_true_byzantine_weight():
    g = two_worlds_graph(5, 1)
    b = byzantine_weight(g, {4, 9})
    assert b[4] == 0.0 and b[0] == pytest.approx(1 / 6) and b[1] == pytest.approx(1 / 5)
    X = _state(10, 2, 3)
    M = _state(10, 2, 4)
    assert np.array_equal(robust_gossip_step(X, g, "cs+", byzantine={4, 9}, messages=M),
                          robust_gossip_step(X, g, "cs+", byzantine={4, 9}, messages=M, b=b))
    assert resolve_rule("CS-Plus")[0] == "cs+" and resolve_rule("clipped")[0] == "clippedgossip"


def test_gossip_rules_registry_keeps_every_spelling_and_takes_references():
    from fedaudit.defenses.gossip import GOSSIP_RULES, clipped_gossip, cs_plus, gts, plain_gossip

    assert {"plain", "cs+", "gts", "clippedgossip"} <= set(GOSSIP_RULES.names())
    spellings = {"plain": plain_gossip, "gossip": plain_gossip, "cs+": cs_plus, "CS+": cs_plus, "csplus": cs_plus,
                 "cs_plus": cs_plus, "cs-plus": cs_plus, "cs+rg": cs_plus, "gts": gts, "gts_rg": gts, "GTS-RG": gts,
                 "clippedgossip": clipped_gossip, "clipped": clipped_gossip, "clipped_gossip": clipped_gossip,
                 "clipped-gossip": clipped_gossip, "cs_he": clipped_gossip, "cs-he": clipped_gossip}
    for name, fn in spellings.items():
        assert resolve_rule(name)[1] is fn, name
    assert resolve_rule("fedaudit.defenses.gossip:gts") == ("fedaudit.defenses.gossip:gts", gts)
    assert [n for n, _ in GOSSIP_RULES.describe()] == list(GOSSIP_RULES.names())


# =============================================================================== attacks
def test_dissensus_reverses_plain_gossip_pull():
    """He et al.: with y_i = x_i + c·a_i, plain gossip gives x_i⁺ = x_i − η(1 − c·b_i)·a_i."""
    g = erdos_renyi_graph(14, 0.4, rng=5)
    byz = {0, 3}
    X = _state(14, 3, 5)
    a = dissensus_direction(X, g, byz)
    b = byzantine_weight(g, byz)
    c, eta = 7.0, 0.8
    out = robust_gossip_step(X, g, "plain", byzantine=byz, messages=Dissensus(c)(X, g, byz, rule="plain"), eta=eta)
    h = [i for i in range(14) if i not in byz]
    assert np.allclose(out[h], X[h] - eta * (1 - c * b[h])[:, None] * a[h])
    assert np.allclose(honest_gossip_step(X, g, byz, eta)[h], X[h] - eta * a[h])


def test_spectral_attack_pumps_the_fiedler_mode():
    g = two_worlds_graph(6, 1)
    byz = {5, 11}
    X = _state(12, 2, 6)
    u = fiedler_vector(g, byz)
    a = spectral_direction(X, g, byz)
    assert np.allclose(a, np.outer(u, u @ X))
    att = Spectral(c=20.0)
    msgs = att(X, g, byz, rule="plain")
    attacked = robust_gossip_step(X, g, "plain", byzantine=byz, messages=msgs)
    ref = honest_gossip_step(X, g, byz)
    assert np.linalg.norm(u @ attacked) > np.linalg.norm(u @ ref)
    assert attack_deviation(X, g, byz, msgs, "plain") > 0


def test_line_maximize_finds_the_peak_with_exactly_the_budget():
    calls = []

    def f(c):
        calls.append(c)
        return -(math.log(c) - math.log(5.0)) ** 2

    c, v = line_maximize(f, 1e-2, 1e3, evals=16)
    assert len(calls) == 16
    assert abs(math.log(c / 5.0)) < 0.1 and v == max(f(x) for x in calls[:16])


def test_line_search_picks_top_of_range_against_plain_gossip():
    g = two_worlds_graph(5, 1)
    X = _state(10, 2, 8)
    _, c = Dissensus(c_range=(0.1, 100.0)).plan(X, g, {4, 9}, rule="plain")
    assert c == pytest.approx(100.0)


# =============================================================================== simulator
def test_simulator_is_deterministic_under_a_seed():
    g = erdos_renyi_graph(12, 0.4, rng=0)
    x0 = _state(12, 3, 0)

    def noisy(X, graph, byzantine, *, rule, eta, b, rng):  # a randomised attack
        return X + 5 * rng.normal(size=X.shape)

    t1 = simulate_gossip(x0, g, {0, 1}, "cs+", 10, noisy, rng=42)
    t2 = simulate_gossip(x0, g, {0, 1}, "cs+", 10, noisy, rng=42)
    t3 = simulate_gossip(x0, g, {0, 1}, "cs+", 10, noisy, rng=43)
    assert np.array_equal(t1.states, t2.states) and np.array_equal(t1.consensus_error, t2.consensus_error)
    assert not np.array_equal(t1.states, t3.states)
    d1 = simulate_gossip(x0, g, {0, 1}, "gts", 10, Dissensus(), rng=1)
    d2 = simulate_gossip(x0, g, {0, 1}, "gts", 10, Dissensus(), rng=1)
    assert np.array_equal(d1.states, d2.states) and np.array_equal(d1.c, d2.c)
    assert d1.states.shape == (11, 10, 3) and d1.honest == tuple(range(2, 12))
    assert d1.to_dict()["attack"] == "dissensus" and len(d1.to_dict()["consensus_error"]) == 11


def test_simulator_without_attack_reaches_consensus_and_keeps_the_mean():
    g = erdos_renyi_graph(20, 0.4, rng=1)
    x0 = _state(20, 5, 0)
    tr = simulate_gossip(x0, g, {0, 1}, "plain", 50)
    assert tr.final_error < 1e-12 * tr.consensus_error[0]
    full = simulate_gossip(x0, g, (), "plain", 50)
    assert full.mean_drift[-1] < 1e-12  # doubly stochastic: the average is preserved
    one_d = simulate_gossip(x0[:, 0], g, {0}, "cs+", 5)
    assert one_d.states.shape == (6, 19, 1)


def test_dissensus_on_two_worlds_breaks_plain_gossip_not_cs_plus():
    """Two 10-cliques joined by 2 bridges (Metropolis), nodes 9 and 19 Byzantine (budget
    b_i = 1/11 or 1/10 on their neighbours; μ₂(L_H) ≈ 0.034 < b, beyond the consensus regime),
    x0 ~ N(0, I_5), dissensus with the 16-point line search, 50 rounds. Plain gossip explodes
    (line search picks c = 10³, error grows ~10⁴×/round); CS+ never exceeds the initial error.
    CS+ does not reach consensus here: each bridge weighs as much as a Byzantine edge and is
    clipped, so the two worlds stay apart (error ≈ 0.29)."""
    g = two_worlds_graph(10, bridges=2)
    x0 = _state(20, 5, 0)
    byz = {9, 19}
    plain = simulate_gossip(x0, g, byz, "plain", 50, Dissensus(), rng=0)
    cs = simulate_gossip(x0, g, byz, "cs+", 50, Dissensus(), rng=0)
    e0 = plain.consensus_error[0]
    assert plain.diverged or plain.final_error > 1e20 * e0
    assert np.all(np.diff(plain.consensus_error[:20]) > 0)
    assert np.all(cs.consensus_error <= e0) and cs.final_error < 0.1 * e0
    assert cs.mean_drift[-1] < 0.2


def test_cs_plus_stalls_on_two_worlds():
    """The mechanism documented in cs_plus: each world reaches consensus internally, the gap
    between the world means freezes (round 50 = round 200), the stalled state is a fixed point
    of CS+, and at every bridge endpoint the bridge weight is at most twice the Byzantine
    budget, so the bridge difference is clipped to τ = 0 while plain gossip (b = 0) would still
    pull the worlds together."""
    g = two_worlds_graph(10, bridges=2)
    x0 = _state(20, 5, 0)
    byz = {9, 19}
    b = byzantine_weight(g, byz)
    for i, j in ((0, 10), (1, 11)):
        assert g.weights[i, j] <= 2 * b[i] and g.weights[j, i] <= 2 * b[j]
    gaps = []
    for rounds in (50, 200):
        tr = simulate_gossip(x0, g, byz, "cs+", rounds, Dissensus(), rng=0)
        S = tr.states[-1]
        left = [k for k, i in enumerate(tr.honest) if i < 10]
        right = [k for k, i in enumerate(tr.honest) if i >= 10]
        assert consensus_error(S[left]) < 1e-20 and consensus_error(S[right]) < 1e-20
        gaps.append(np.linalg.norm(S[left].mean(0) - S[right].mean(0)))
    assert gaps[0] > 0.5 and gaps[1] == pytest.approx(gaps[0], rel=1e-12)
    X = np.zeros((20, 5))
    X[sorted(set(range(20)) - byz)] = S
    X[9], X[19] = S[left[0]], S[right[0]]
    msgs = Dissensus()(X, g, byz, rule="cs+")
    np.testing.assert_array_equal(robust_gossip_step(X, g, "cs+", byzantine=byz, messages=msgs), X)
    moved = robust_gossip_step(X, g, "plain", byzantine=byz, messages=X, b=0.0)
    assert np.abs(moved[0] - X[0]).max() > 1e-3  # the bridge alone would pull


def test_mean_drift_matches_an_independent_computation():
    """mean_drift[t] = ‖x̄_H^t − x̄_H^0‖. Without attack every node follows plain gossip, so
    X_t = (I − ηL)^t X_0 and the honest mean drifts towards the Byzantine nodes' values; with a
    fixed-c dissensus on plain gossip x_i⁺ = x_i − η(1 − c·b_i)·(L_H X)_i for honest i (He et al.),
    Byzantine rows frozen."""
    g = erdos_renyi_graph(12, 0.4, rng=3)
    x0 = _state(12, 3, 4)
    x0[[0, 1]] += 5.0  # Byzantine nodes start far away: the honest mean must move
    byz = [0, 1]
    h = list(range(2, 12))
    eta = 0.9
    M = np.eye(12) - eta * g.laplacian
    tr = simulate_gossip(x0, g, set(byz), "plain", 15, eta=eta)
    want = [np.linalg.norm((np.linalg.matrix_power(M, t) @ x0)[h].mean(0) - x0[h].mean(0)) for t in range(16)]
    np.testing.assert_allclose(tr.mean_drift, want, rtol=1e-10, atol=1e-13)
    assert tr.mean_drift[0] == 0.0 and tr.mean_drift[-1] > 0.5
    c = 3.0
    bw = byzantine_weight(g, byz)
    LH = g.weights * np.isin(np.arange(12), h)[None, :]
    X = x0.copy()
    want = [0.0]
    for _ in range(10):
        a = LH.sum(1)[:, None] * X - LH @ X
        X[h] = X[h] - eta * (1 - c * bw[h])[:, None] * a[h]
        want.append(np.linalg.norm(X[h].mean(0) - x0[h].mean(0)))
    tr = simulate_gossip(x0, g, set(byz), "plain", 10, Dissensus(c), eta=eta)
    np.testing.assert_allclose(tr.mean_drift, want, rtol=1e-9, atol=1e-12)
    assert tr.mean_drift[-1] > 0.1


def test_dissensus_on_er_graph_cs_plus_reaches_consensus():
    """G(20, 0.4) seed 1 (μ₂(L_H) ≈ 0.27, b_max = 2/9), nodes 0, 1 Byzantine: under dissensus with
    line search CS+ and ClippedGossip reach consensus while plain gossip diverges."""
    g = erdos_renyi_graph(20, 0.4, rng=1)
    x0 = _state(20, 5, 0)
    byz = {0, 1}
    e0 = simulate_gossip(x0, g, byz, "plain", 0).consensus_error[0]
    assert simulate_gossip(x0, g, byz, "plain", 30, Dissensus(), rng=0).final_error > 1e20 * e0
    for rule in ("cs+", "clippedgossip"):
        assert simulate_gossip(x0, g, byz, rule, 50, Dissensus(), rng=0).final_error < 1e-5 * e0


def test_single_node_helpers_validate():
    with pytest.raises(FedAuditError, match="distances must be a finite array of shape"):
        cs_plus_threshold(W4, np.ones((4, 2)), 0.1)
    with pytest.raises(FedAuditError, match="diffs must be a finite array"):
        robust_sum("gts", W4, np.ones((3, 2)), 0.1)
    with pytest.raises(FedAuditError, match="b must be"):
        robust_sum("gts", W4, D4, -0.1)


def test_gossip_update_is_the_core_of_the_validated_step():
    """The public one-round core (used by the simulator and the attacks' line search) gives the
    same bits as the validated step, with the same messages, budget and η, on every node or on a
    subset of the honest nodes."""
    from fedaudit.defenses.gossip import budget_vector, byzantine_mask, check_messages, gossip_update

    g = erdos_renyi_graph(12, 0.4, rng=1)
    X = _state(12, seed=4)
    byz = [2, 7]
    msgs = _state(12, seed=5) * 10
    for rule in RULES:
        mask = byzantine_mask(g, byz)
        _, fn = resolve_rule(rule)
        ref = robust_gossip_step(X, g, rule, byzantine=byz, messages=msgs, eta=0.5, b=None)
        core = gossip_update(X, g, fn, mask, check_messages(msgs, 12, 3), 0.5, budget_vector(g, mask, None))
        np.testing.assert_array_equal(core, ref)
        part = gossip_update(X, g, fn, mask, check_messages(msgs, 12, 3), 0.5, budget_vector(g, mask, 0.2),
                             np.array([0, 5]))
        np.testing.assert_array_equal(part[[0, 5]], robust_gossip_step(X, g, rule, byzantine=byz, messages=msgs,
                                                                       eta=0.5, b=0.2)[[0, 5]])
        np.testing.assert_array_equal(np.delete(part, [0, 5], axis=0), np.delete(X, [0, 5], axis=0))
    with pytest.raises(FedAuditError, match="at least one honest node"):
        byzantine_mask(g, range(12))


def test_gossip_attacks_report_their_params():
    from fedaudit.attacks.gossip import Dissensus, Spectral

    assert Dissensus(2.0).params() == {"c": 2.0, "c_range": (1e-2, 1e3), "evals": 16}
    assert Spectral(c_range=(0.1, 5.0), evals=4).params() == {"c": None, "c_range": (0.1, 5.0), "evals": 4}
