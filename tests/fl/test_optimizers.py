"""Server optimizers on inexact oracles: D-GD, D-NAG, the robust accelerated method, PIGS."""

import json
import math

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from fedaudit.audit.convergence import plateau_level, rounds_to_plateau
from fedaudit.fl.optimizers import DGD, DNAG, PIGS, RobustAccelerated, estimate_delta, nesterov_schedule
from fedaudit.fl.problems import FederationProblem, QuadraticProblem
from fedaudit.fl.training import run
from fedaudit.errors import FedAuditError


@pytest.fixture(autouse=True)
def _one_blas_thread():
    # tiny matrices: multi-threaded BLAS only adds overhead (and contention on shared machines)
    with threadpool_limits(1):
        yield


def _spd(d, seed, lo=0.1, hi=4.0):
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return (Q * np.linspace(lo, hi, d)) @ Q.T


@pytest.fixture
def quad():
    d = 8
    A = _spd(d, 0)
    A = (A + A.T) / 2
    b = np.random.default_rng(1).standard_normal(d)
    return QuadraticProblem(A, b)


# ------------------------------------------------------------------ schedule
def test_nesterov_schedule_hand_computed_mu_zero():
    # μ = 0: 2L = 2Lγ²_{k+1}/Γ_{k+1}  ⇔  γ_{k+1}² = Γ_k + γ_{k+1}  ⇔  γ_{k+1} = (1 + √(1 + 4Γ_k))/2
    g, G = nesterov_schedule(L=1.0, mu=0.0, n=4)
    phi = (1 + math.sqrt(5)) / 2
    assert g[0] == 1.0 and G[0] == 1.0
    assert g[1] == pytest.approx(phi, rel=1e-14)                          # 1.6180339887
    assert G[1] == pytest.approx(phi ** 2, rel=1e-14)                     # 2.6180339887
    assert g[2] == pytest.approx((1 + math.sqrt(7 + 2 * math.sqrt(5))) / 2, rel=1e-14)  # 2.1935270853
    assert g[3] == pytest.approx(2.7497913401204452, rel=1e-12)
    assert g[4] == pytest.approx(3.2948796779470477, rel=1e-12)
    np.testing.assert_allclose(G, np.cumsum(g), rtol=1e-14)
    # same for any L when μ = 0 (the schedule only sees μ/L)
    g2, _ = nesterov_schedule(L=7.0, mu=0.0, n=4)
    np.testing.assert_allclose(g2, g, rtol=1e-13)


def test_nesterov_schedule_hand_computed_strongly_convex():
    # L = μ = 1: c_k = 2 + Γ_k/2, γ_{k+1} = (c + √(c² + 8cΓ_k))/4
    g, G = nesterov_schedule(L=1.0, mu=1.0, n=4)
    assert g[1] == pytest.approx((2.5 + math.sqrt(26.25)) / 4, rel=1e-14)   # 1.9058688457
    np.testing.assert_allclose(g, [1.0, 1.9058688457449497, 3.2636626384024483, 5.43066722380645,
                                   8.953163284555528], rtol=1e-12)
    np.testing.assert_allclose(G, [1.0, 2.9058688457449495, 6.169531484147398, 11.600198707953847,
                                   20.553361992509373], rtol=1e-12)
    # the defining equation holds at every step
    for k in range(4):
        assert 2 + G[k] / 2 == pytest.approx(2 * g[k + 1] ** 2 / G[k + 1], rel=1e-12)


def _fgm_three_sequence(problem, L, mu, x0, rounds, rng):
    """Reference: Devolder–Glineur–Nesterov FGM for a (δ, L' = 2L, μ' = μ/2)-oracle, with the
    estimate-sequence minimiser z_k kept explicitly (no elimination)."""
    Lp, mup = 2 * L, mu / 2
    g_s, G_s = nesterov_schedule(L, mu, rounds + 1)
    x = x0.copy()
    acc = Lp * x0.copy()
    ys = []
    for k in range(rounds):
        g = problem.oracle(x, rng)
        y = x - g / Lp
        acc = acc + g_s[k] * (mup * x - g)
        z = acc / (Lp + mup * G_s[k])
        ys.append(y)
        x = (G_s[k] * y + g_s[k + 1] * z) / G_s[k + 1]
    return np.array(ys)


@pytest.mark.parametrize("mu_scale", [0.0, 1.0])
def test_robust_accelerated_two_sequence_equals_three_sequence_fgm(quad, mu_scale):
    # inexact oracle with additive + multiplicative error: the identity is algebraic
    A, b = quad.A, quad.b
    P = QuadraticProblem(A, b, bias=0.05 * np.arange(quad.dim) / quad.dim, alpha=0.1)
    L, mu = P.smoothness(), mu_scale * P.strong_convexity()
    tr = run(RobustAccelerated(L, mu), P, rounds=25, rng=0, record_every=1)
    ref = _fgm_three_sequence(P, L, mu, np.zeros(P.dim), 25, None)
    losses = [P.honest_loss(y) for y in ref]
    np.testing.assert_allclose(tr.loss[1:], losses, rtol=1e-10, atol=1e-12)


def test_robust_accelerated_converges_and_literal_does_not(quad):
    xs = quad.minimizer()
    fstar = quad.honest_loss(xs)
    fgm = run(RobustAccelerated(), quad, rounds=300, rng=0)
    assert np.linalg.norm(fgm.x_final - xs) < 1e-8
    nes = run(RobustAccelerated(variant="nesterov"), quad, rounds=300, rng=0)
    assert np.linalg.norm(nes.x_final - xs) < 1e-8
    # the recursion as printed in the seed is not translation invariant: x* is not a fixed point
    lit = run(RobustAccelerated(variant="literal"), quad, rounds=300, rng=0)
    assert lit.loss[-1] - fstar > 1e-2
    assert np.linalg.norm(lit.x_final - xs) > 0.1 * np.linalg.norm(xs)
    # and when x* = 0 it is fine (shrinkage towards 0 is harmless there)
    P0 = QuadraticProblem(quad.A, np.zeros(quad.dim))
    lit0 = run(RobustAccelerated(variant="literal"), P0, x0=np.ones(quad.dim), rounds=300, rng=0)
    assert np.linalg.norm(lit0.x_final) < 1e-6


def test_robust_accelerated_accelerates_over_gd_on_ill_conditioned_quadratic():
    d = 20
    A = _spd(d, 3, lo=1e-3, hi=1.0)
    A = (A + A.T) / 2
    P = QuadraticProblem(A, np.random.default_rng(4).standard_normal(d))
    fstar = P.honest_loss(P.minimizer())
    gd = run(DGD(1 / P.smoothness()), P, rounds=400, rng=0)
    acc = run(RobustAccelerated(), P, rounds=400, rng=0)
    assert acc.loss[-1] - fstar < 1e-3 * (gd.loss[-1] - fstar)


def test_robust_accelerated_long_run_no_overflow():
    P = QuadraticProblem(np.diag([1.0, 0.5]), np.array([1.0, -1.0]))
    tr = run(RobustAccelerated(), P, rounds=5000, rng=0, record_every=1000)
    assert np.isfinite(tr.loss).all() and not tr.diverged
    np.testing.assert_allclose(tr.x_final, P.minimizer(), atol=1e-10)


# ------------------------------------------------------------------ D-GD / D-NAG
def test_dgd_linear_rate_exact_oracle(quad):
    L, mu = quad.smoothness(), quad.strong_convexity()
    xs = quad.minimizer()
    tr = run(DGD(1 / L), quad, rounds=400, rng=0)
    fstar = quad.honest_loss(xs)
    gaps = np.array(tr.loss) - fstar
    # on a quadratic, GD with step 1/L contracts every eigen-component by ≤ (1 − μ/L), so
    # f(x_k) − f* ≤ (1 − μ/L)^{2k} (f(x_0) − f*)
    bound = (1 - mu / L) ** (2 * np.arange(gaps.size)) * gaps[0]
    assert (gaps <= bound * (1 + 1e-9) + 1e-14).all()
    assert gaps[-1] < 1e-3 * gaps[0]


def test_dnag_matches_torch_sgd_nesterov(quad):
    torch = pytest.importorskip("torch")
    P = QuadraticProblem(quad.A, quad.b, bias=0.1 * np.ones(quad.dim), alpha=0.05)
    lr, m = 0.07, 0.9
    tr = run(DNAG(lr, m), P, rounds=30, rng=0)
    w = torch.zeros(P.dim, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([w], lr=lr, momentum=m, nesterov=True)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        w.grad = torch.from_numpy(P.oracle(w.detach().numpy().copy(), None))
        opt.step()
        losses.append(P.honest_loss(w.detach().numpy()))
    np.testing.assert_allclose(tr.loss[1:], losses, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(tr.x_final, w.detach().numpy(), rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ PIGS
@pytest.mark.parametrize("eta", [0.3, 4.0])
def test_pigs_is_proximal_point_when_surrogate_is_exact(quad, eta):
    x0 = np.random.default_rng(5).standard_normal(quad.dim)
    tr = run(PIGS(eta=eta, gtol=1e-12), quad, x0=x0, rounds=1, rng=0)
    expected = np.linalg.solve(quad.A + np.eye(quad.dim) / eta, x0 / eta + quad.b)
    np.testing.assert_allclose(tr.x_final, expected, atol=1e-8, rtol=0)
    assert tr.extras["prox_converged"] == [True]


def test_pigs_general_step_closed_form_and_fixed_point(quad):
    # L̂ ≠ L_H: x⁺ solves (Â + I/η) x = b̂ − (g − ∇L̂(x_k)) + x_k/η
    A_hat = quad.A + 0.2 * _spd(quad.dim, 9, lo=-1.0, hi=1.0)
    A_hat = (A_hat + A_hat.T) / 2
    b_hat = quad.b + 0.3
    P = QuadraticProblem(quad.A, quad.b, A_hat=A_hat, b_hat=b_hat, bias=0.01 * np.ones(quad.dim))
    x0 = np.random.default_rng(6).standard_normal(quad.dim)
    eta = 0.5
    tr = run(PIGS(eta=eta, gtol=1e-12), P, x0=x0, rounds=1, rng=0)
    c = P.oracle(x0, None) - (A_hat @ x0 - b_hat)
    expected = np.linalg.solve(A_hat + np.eye(P.dim) / eta, b_hat - c + x0 / eta)
    np.testing.assert_allclose(tr.x_final, expected, atol=1e-8, rtol=0)
    # exact oracle: x* is a fixed point and PIGS converges to it
    Pexact = QuadraticProblem(quad.A, quad.b, A_hat=A_hat, b_hat=b_hat)
    delta = estimate_delta(Pexact, iters=500, rng=0)
    tr = run(PIGS(eta=1 / (2 * delta)), Pexact, rounds=200, rng=0)
    np.testing.assert_allclose(tr.x_final, quad.minimizer(), atol=1e-6)


def test_estimate_delta_on_quadratics():
    d = 12
    A1 = _spd(d, 10)
    A1 = (A1 + A1.T) / 2
    rng = np.random.default_rng(11)
    Q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    D = (Q * np.r_[-2.5, np.linspace(-1, 1.2, d - 1)]) @ Q.T   # largest |eig| is negative
    A2 = A1 - (D + D.T) / 2
    P = QuadraticProblem(A1, np.zeros(d), A_hat=A2)
    truth = float(np.max(np.abs(np.linalg.eigvalsh(A1 - A2))))
    assert truth == pytest.approx(2.5, rel=1e-12)
    est = estimate_delta(P, np.zeros(d), iters=2000, rng=0, tol=1e-14)
    assert est == pytest.approx(truth, rel=1e-6)
    # PIGS with eta=None uses 1/(2·m·Δ̂), m = 1.25 by default (Δ is constant on a quadratic)
    tr = run(PIGS(), P, rounds=1, rng=0)
    assert tr.info["eta"] == pytest.approx(1 / (2 * 1.25 * truth), rel=1e-5)
    assert tr.info["delta_hat"] == pytest.approx(truth, rel=1e-5)
    tr = run(PIGS(delta_margin=2.0), P, rounds=1, rng=0)
    assert tr.info["eta"] == pytest.approx(1 / (4 * truth), rel=1e-5)


# ------------------------------------------------------------------ run / Trace
def test_run_trace_contents_and_json(quad):
    P = QuadraticProblem(quad.A, quad.b, noise=0.1)
    calls = []
    tr = run(DGD(0.1), P, rounds=10, rng=3, record_every=3, callback=lambda k, r: calls.append(k))
    assert tr.rounds == [0, 3, 6, 9, 10]
    assert calls == tr.rounds
    assert tr.oracle_rounds == [0, 3, 6, 9]
    assert len(tr.loss) == len(tr.grad_norm) == len(tr.wall_time) == len(tr.test_acc) == 5
    assert len(tr.oracle_err_sq) == len(tr.grad_sq) == 4
    assert all(e > 0 for e in tr.oracle_err_sq)
    assert tr.het_dev_sq == []  # the quadratic has no heterogeneity
    json.dumps(tr.to_dict())
    # same seed ⇒ same run; record_every does not change the trajectory
    tr2 = run(DGD(0.1), P, rounds=10, rng=3, record_every=1)
    assert tr2.loss[-1] == tr.loss[-1]
    tr3 = run(DGD(0.1), P, rounds=10, rng=4)
    assert tr3.loss[-1] != tr.loss[-1]
    tr4 = run(DGD(0.1), P, rounds=10, rng=np.random.SeedSequence(3))
    assert tr4.loss[-1] == tr.loss[-1]


def test_run_flags_divergence(quad):
    tr = run(DGD(3 / quad.smoothness()), quad, rounds=2000, rng=0)
    assert tr.diverged
    assert len(tr.rounds) < 2001


def test_bad_inputs(quad):
    with pytest.raises(FedAuditError, match="lr"):
        DGD(0.0)
    with pytest.raises(FedAuditError, match="lr"):
        DNAG(-1.0)
    with pytest.raises(FedAuditError, match="momentum"):
        DNAG(0.1, momentum=1.0)
    with pytest.raises(FedAuditError, match="eta"):
        PIGS(eta=0.0)
    with pytest.raises(FedAuditError, match="eta"):
        PIGS(eta=float("nan"))
    with pytest.raises(FedAuditError, match="variant"):
        RobustAccelerated(1.0, 0.1, variant="nope")
    with pytest.raises(FedAuditError, match="mu"):
        RobustAccelerated(1.0, 2.0)
    with pytest.raises(FedAuditError, match="rounds"):
        run(DGD(0.1), quad, rounds=0)
    with pytest.raises(FedAuditError, match="record_every"):
        run(DGD(0.1), quad, rounds=2, record_every=0)
    with pytest.raises(FedAuditError, match="x0"):
        run(DGD(0.1), quad, x0=np.zeros(quad.dim + 1), rounds=2)
    with pytest.raises(FedAuditError, match="optimizer"):
        run("dgd", quad, rounds=2)
    with pytest.raises(FedAuditError, match="problem must provide"):
        run(DGD(0.1), object(), rounds=2)
    with pytest.raises(FedAuditError, match="surrogate"):
        run(PIGS(eta=1.0), _NoSurrogate(quad), rounds=1)
    with pytest.raises(FedAuditError, match="iters"):
        estimate_delta(quad, iters=0)
    with pytest.raises(FedAuditError, match="symmetric"):
        QuadraticProblem(np.array([[1.0, 2.0], [0.0, 1.0]]), np.zeros(2))
    with pytest.raises(FedAuditError, match="pass eta"):
        run(PIGS(), quad, rounds=1)  # L̂ = L_H exactly: Δ̂ = 0


class _NoSurrogate:
    def __init__(self, p):
        self.dim, self._p = p.dim, p

    def oracle(self, x, rng):
        return self._p.oracle(x, rng)

    def honest_loss(self, x):
        return self._p.honest_loss(x)

    def honest_grad(self, x):
        return self._p.honest_grad(x)


# ------------------------------------------------------------------ plateau
def test_rounds_to_plateau_exponential_curve():
    ref, gap, C, rho = 1.0, 0.01, 2.0, 0.9
    k = np.arange(400)
    losses = ref + gap + C * rho ** k
    # plateau = median of the last 80 values ≈ ref + gap (tail terms are < 1e-14)
    assert plateau_level(losses) == pytest.approx(ref + gap, abs=1e-12)
    for eps in (0.05, 0.01):
        expected = int(math.ceil(math.log(eps * gap / C) / math.log(rho)))
        assert rounds_to_plateau(losses, ref, eps=eps) == expected
    # a faster curve takes fewer rounds
    fast = ref + gap + C * 0.5 ** k
    assert rounds_to_plateau(fast, ref) < rounds_to_plateau(losses, ref)
    # the rounds mapping (record_every > 1)
    assert rounds_to_plateau(losses[::2], ref, rounds=k[::2]) in (rounds_to_plateau(losses, ref),
                                                                   rounds_to_plateau(losses, ref) + 1)


def test_rounds_to_plateau_dip_and_sustained():
    # a curve that dips below the plateau then climbs back (as under ALIE): first crossing vs sustained
    losses = np.r_[np.linspace(2.0, 1.0, 11), np.linspace(1.0, 1.2, 10), np.full(80, 1.2)]
    assert rounds_to_plateau(losses, 0.0) == 8   # first value ≤ 1.2·1.05 = 1.26 on the way down
    assert rounds_to_plateau(losses, 0.0, sustained=True) == 8
    spiky = np.r_[np.full(5, 10.0), 1.0, np.full(5, 10.0), np.full(40, 1.0)]
    assert rounds_to_plateau(spiky, 0.0) == 5
    assert rounds_to_plateau(spiky, 0.0, sustained=True) == 11


def test_rounds_to_plateau_edge_cases():
    flat = np.full(50, 3.0)
    assert rounds_to_plateau(flat, 3.0) == 0          # zero gap: the threshold is the reference
    # f = 0 style curve (plateau = ℓ*): the absolute floor decides
    conv = 1.0 + 0.5 ** np.arange(60)
    assert rounds_to_plateau(conv, 1.0, atol=1e-3) == 10     # 0.5^10 < 1e-3 ≤ 0.5^9
    # an external (shared) plateau that the curve never reaches
    assert rounds_to_plateau(conv, 0.0, plateau=0.5) == -1
    assert rounds_to_plateau(conv, 0.0, plateau=1.01) == 5   # 1 + 0.5^5 ≤ 1.01·1.05 < 1 + 0.5^4
    # plateau below the reference (ℓ* was not the minimum): |gap| keeps the rule defined
    losses = np.r_[np.linspace(5, 0.9, 20), np.full(30, 0.9)]
    assert 0 < rounds_to_plateau(losses, 1.0) < 20
    with pytest.raises(FedAuditError, match="losses"):
        rounds_to_plateau([1.0], 0.0)
    with pytest.raises(FedAuditError, match="finite"):
        rounds_to_plateau([1.0, float("nan"), 1.0], 0.0)
    with pytest.raises(FedAuditError, match="eps"):
        rounds_to_plateau(flat, 0.0, eps=-0.1)
    with pytest.raises(FedAuditError, match="tail"):
        rounds_to_plateau(flat, 0.0, tail=0.0)
    with pytest.raises(FedAuditError, match="rounds"):
        rounds_to_plateau(flat, 0.0, rounds=[1, 2])
    with pytest.raises(FedAuditError, match="atol"):
        rounds_to_plateau(flat, 0.0, atol=-1.0)


# ------------------------------------------------------------------ federation
@pytest.fixture(scope="module")
def tiny_fed():
    from fedaudit.fl.data import load_digits_dataset
    from fedaudit.fl.federation import Federation

    ds = load_digits_dataset(rng=0)
    return Federation.build(ds, n_honest=5, f=1, beta=5.0, mu=1e-2, rng=0)


def test_federation_adapter(tiny_fed):
    with threadpool_limits(1):
        P = FederationProblem(tiny_fed)
        rng = np.random.default_rng(0)
        x = 0.01 * rng.standard_normal(P.dim)
        v = rng.standard_normal(P.dim)
        mean_hvp = np.mean([tiny_fed.client_hvp(i, x, v) for i in range(5)], axis=0)
        np.testing.assert_allclose(P.honest_hvp(x, v), mean_hvp, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(P.surrogate.grad(x), tiny_fed.client_grad(0, x), rtol=1e-12)
        g, true_g, (dev, gsq) = P.oracle_details(x, np.random.default_rng(1))
        np.testing.assert_allclose(true_g, tiny_fed.honest_grad(x), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(g, tiny_fed.oracle(x, np.random.default_rng(1)), rtol=1e-12)
        assert (dev, gsq) == pytest.approx(tiny_fed.heterogeneity(x), rel=1e-10)
        L = P.smoothness()
        assert L > P.strong_convexity() == pytest.approx(1e-2)
        # L bounds the curvature: Rayleigh quotient of ∇²L_H along random directions
        for _ in range(3):
            u = rng.standard_normal(P.dim)
            assert u @ P.honest_hvp(x, u) / (u @ u) <= L * (1 + 1e-12)
        d = estimate_delta(tiny_fed, x, iters=50, rng=0)
        assert 0 < d < L


def test_federation_runs_all_optimizers(tiny_fed):
    with threadpool_limits(1):
        P = FederationProblem(tiny_fed)
        res = {}
        for opt in (DGD(0.1), DNAG(0.1, 0.9), RobustAccelerated(), PIGS(eta=4.0)):
            tr = run(opt, P, rounds=15, rng=0)
            assert not tr.diverged
            assert len(tr.het_dev_sq) == len(tr.oracle_err_sq) == 15
            assert all(0 <= a <= 1 for a in tr.test_acc)
            assert tr.loss[-1] < tr.loss[0] == pytest.approx(math.log(10))
            json.dumps(tr.to_dict())
            res[opt.name] = tr.loss[-1]
        # after 15 rounds the similarity method is far ahead of plain D-GD
        assert res["pigs"] < res["dgd"]
        # passing the Federation directly wraps it
        tr = run(DGD(0.1), tiny_fed, rounds=2, rng=0)
        assert tr.loss[-1] == pytest.approx(run(DGD(0.1), P, rounds=2, rng=0).loss[-1], rel=1e-14)


# ------------------------------------------------------------------ PIGS: Δ̂ along the run
class _LogCoshProblem:
    """L_H(x) = ½xᵀAx − bᵀx + c·Σ_i log cosh(x_i − t_i) with b = A t (so x* = t), surrogate
    L̂ = ½xᵀAx − bᵀx: ∇²L_H − ∇²L̂ = c·diag(sech²(x − t)), so Δ(x) = c·max_i sech²(x_i − t_i)
    is small at x_0 = 0 and equals its supremum c at x*."""

    def __init__(self, c=1.0):
        self.A = np.diag([1.0, 1.5, 2.0, 2.5])
        self.t = np.array([2.0, -2.5, 3.0, 2.0])
        self.b = self.A @ self.t
        self.c = c
        self.dim = 4
        self.surrogate = QuadraticProblem(self.A, self.b).surrogate

    def true_delta(self, x):
        return float(self.c * np.max(1.0 / np.cosh(x - self.t) ** 2))

    def honest_loss(self, x):
        return float(0.5 * x @ self.A @ x - self.b @ x + self.c * np.sum(np.log(np.cosh(x - self.t))))

    def honest_grad(self, x):
        return self.A @ x - self.b + self.c * np.tanh(x - self.t)

    def honest_hvp(self, x, v):
        return self.A @ v + self.c * v / np.cosh(x - self.t) ** 2

    def oracle(self, x, rng):
        return self.honest_grad(x)


def test_pigs_delta_is_the_max_over_the_run_with_margin():
    P = _LogCoshProblem()
    d0_true = P.true_delta(np.zeros(4))
    assert d0_true == pytest.approx(1 / np.cosh(2.0) ** 2)       # 0.0707, vs sup Δ = 1
    tr = run(PIGS(gtol=1e-11), P, rounds=30, rng=0)
    info = tr.info
    assert info["delta_hat_x0"] == pytest.approx(d0_true, rel=1e-6)
    est = info["delta_estimates"]
    assert est[0] == {"round": 0, "where": "x0", "delta": info["delta_hat_x0"]}
    # probes at x0 and on the geometric schedule 0, 1, 2, 4, 8, 16 (iterate + segment point each)
    assert {e["round"] for e in est[1:]} == {0, 1, 2, 4, 8, 16}
    assert {e["where"] for e in est[1:]} == {"next iterate", "segment"}
    # power iteration is a lower estimate: never above the true sup Δ = c
    assert all(0 < e["delta"] <= P.c * (1 + 1e-9) for e in est)
    assert info["delta_hat"] == max(e["delta"] for e in est)
    assert info["delta_hat"] > 0.95 * P.c > 10 * info["delta_hat_x0"]     # the run found where Δ is large
    assert info["delta_used"] == pytest.approx(1.25 * info["delta_hat"], rel=1e-15)
    assert info["eta"] == pytest.approx(1 / (2 * 1.25 * info["delta_hat"]), rel=1e-15)
    etas = np.array(tr.extras["eta"])
    assert etas.size == 30 and np.all(np.diff(etas) <= 0) and etas[-1] == info["eta"]
    # round 0's step was already shortened once x_1 was probed (no extra communication)
    assert etas[0] < info["eta_initial"] == pytest.approx(1 / (2 * 1.25 * d0_true), rel=1e-6)
    np.testing.assert_allclose(tr.x_final, P.t, atol=1e-6)
    # and x_1 is the proximal step taken with that shortened η_0: (A + I/η)x = b − c + x_0/η, c = g_0 − ∇L̂(x_0)
    one = run(PIGS(gtol=1e-11), P, rounds=1, rng=0)
    eta0 = one.extras["eta"][0]
    assert eta0 == etas[0]
    x0 = np.zeros(4)
    c = P.honest_grad(x0) - P.surrogate.grad(x0)
    np.testing.assert_allclose(one.x_final, np.linalg.solve(P.A + np.eye(4) / eta0, P.b - c + x0 / eta0), atol=1e-9)
    # same seed, same probes; delta_every sets the schedule
    again = run(PIGS(gtol=1e-11), P, rounds=30, rng=0)
    assert again.info["delta_estimates"] == est
    every = run(PIGS(gtol=1e-11, delta_every=10), P, rounds=30, rng=0)
    assert {e["round"] for e in every.info["delta_estimates"][1:]} == {0, 10, 20}
    with pytest.raises(FedAuditError, match=r"delta_margin must be a finite real number >= 1"):
        PIGS(delta_margin=0.5)
    with pytest.raises(FedAuditError, match="delta_every"):
        PIGS(delta_every=0)


# ------------------------------------------------------------------ beyond tolerance
class _BreaksAtRound:
    """Quadratic honest gradients through a real CWTM(f=1); from oracle call ``k`` on the two
    Byzantine rows are NaN (2 > 1 tolerated), before that they are finite."""

    def __init__(self, k):
        from fedaudit.defenses.registry import make_aggregator

        self.P = QuadraticProblem(np.diag([1.0, 2.0, 3.0]), np.ones(3))
        self.dim, self.k, self.calls = 3, k, 0
        self.rule = make_aggregator("cwtm", 1)

    def honest_loss(self, x):
        return self.P.honest_loss(x)

    def honest_grad(self, x):
        return self.P.honest_grad(x)

    def oracle(self, x, rng):
        g = self.honest_grad(x)
        H = g + 0.01 * np.arange(5)[:, None]
        B = np.full((2, 3), np.nan) if self.calls >= self.k else g + np.ones((2, 3))
        self.calls += 1
        return self.rule(np.vstack([H, B]), rng=rng)


def test_run_records_breakdown_round_and_counts():
    tr = run(DGD(0.1), _BreaksAtRound(3), rounds=10, rng=0)
    assert tr.breakdown is not None and not tr.diverged
    assert {k: tr.breakdown[k] for k in ("round", "rule", "n", "nonfinite", "tolerated")} == \
        {"round": 3, "rule": "cwtm", "n": 7, "nonfinite": 2, "tolerated": 1}
    assert tr.rounds == [0, 1, 2, 3]                # three completed rounds, then the breakdown
    ok = run(DGD(0.1), _BreaksAtRound(100), rounds=3, rng=0)
    assert ok.breakdown is None and tr.loss == ok.loss
    d = tr.to_dict()
    assert d["breakdown"]["round"] == 3 and d["breakdown"]["rule"] == "cwtm"
    json.dumps(d, allow_nan=False)


@pytest.mark.parametrize("name", ["dgd", "dnag", "robust-accelerated", "pigs"])
def test_every_optimizer_records_a_real_federation_breakdown(name):
    # NonFinite attack with 3 rows against a CWTM configured for declared_f = 1
    from fedaudit.fl.data import load_digits_dataset
    from fedaudit.fl.federation import Federation

    fed = Federation.build(load_digits_dataset(rng=0), n_honest=5, f=3, beta=5.0, aggregator="cwtm",
                           attack="nonfinite", declared_f=1, rng=0)
    opt = {"dgd": DGD(0.1), "dnag": DNAG(0.1), "robust-accelerated": RobustAccelerated(), "pigs": PIGS()}[name]
    tr = run(opt, fed, rounds=5, rng=0)
    assert {k: tr.breakdown[k] for k in ("round", "rule", "n", "nonfinite", "tolerated")} == \
        {"round": 0, "rule": "cwtm", "n": 8, "nonfinite": 3, "tolerated": 1}
    assert tr.rounds == [0] and not tr.diverged
    # the same federation with the rule declared for the true f drops the rows and trains
    ok = run(opt, Federation.build(load_digits_dataset(rng=0), n_honest=5, f=3, beta=5.0, aggregator="cwtm",
                                   attack="nonfinite", rng=0), rounds=2, rng=0)
    assert ok.breakdown is None and ok.rounds == [0, 1, 2]


# ------------------------------------------------------------------ reproducible randomness
def _optimizers():
    return {"dgd": DGD(0.1), "dnag": DNAG(0.1, 0.9), "robust-accelerated": RobustAccelerated(), "pigs": PIGS()}


def test_optimizer_table_covers_the_registered_names():
    from fedaudit.fl.registry import OPTIMIZERS

    assert {"dgd", "dnag", "robust-accelerated", "pigs"} <= set(OPTIMIZERS.names())
    assert set(_optimizers()) == set(OPTIMIZERS.names())


def test_make_optimizer_is_the_one_construction_chain():
    from fedaudit.fl.optimizers import Optimizer
    from fedaudit.fl.registry import OPTIMIZERS, make_optimizer, register_optimizer

    shared = {"lr": 0.05, "momentum": 0.5, "eta": 0.3}
    built = {name: make_optimizer(name, settings=shared) for name in OPTIMIZERS.names()}
    assert built["dgd"].params() == {"lr": 0.05}
    assert built["dnag"].params() == {"lr": 0.05, "momentum": 0.5}
    assert built["robust-accelerated"].params() == {"L": None, "mu": None, "variant": "fgm"}
    assert built["pigs"].eta == 0.3
    assert make_optimizer("PIGS", settings={"eta": None}).eta is None  # None: the default (estimated) step
    assert make_optimizer("robust-accelerated", variant="nesterov").variant == "nesterov"
    assert repr(make_optimizer("dgd", lr=0.5)) == "DGD(lr=0.5)"
    with pytest.raises(FedAuditError, match=r"unknown optimizer 'dnga'; valid names: dgd, dnag.*did you mean 'dnag'"):
        make_optimizer("dnga")
    with pytest.raises(FedAuditError, match=r"takes no keyword 'lr'"):
        make_optimizer("pigs", lr=0.1)  # an explicit keyword is checked, a setting is not
    with pytest.raises(FedAuditError, match=r"needs the keyword\(s\) lr"):
        make_optimizer("dgd")
    assert isinstance(make_optimizer("fedaudit.fl.optimizers:DGD", settings=shared), DGD)

    class Frozen(Optimizer):
        """Never moves (a user optimizer)."""

        name = "frozen"

        def start(self, problem, x0, rng):
            from fedaudit.fl.optimizers import OptimizerState

            class S(OptimizerState):
                def query(self):
                    return x0

                def update(self, g):
                    pass

                def output(self):
                    return x0

            return S()

    register_optimizer("frozen-test", Frozen)
    try:
        q = QuadraticProblem(np.eye(2), np.ones(2))
        tr = run(make_optimizer("frozen-test", settings=shared), q, rounds=3)
        assert tr.loss == [0.0] * 4 and tr.optimizer == "frozen" and tr.params == {}
    finally:
        OPTIMIZERS.unregister("frozen-test")


def test_first_at_or_below_and_plateau_status():
    from fedaudit.audit.convergence import first_at_or_below, plateau_status

    assert first_at_or_below([0, 5, 10], [3.0, math.nan, 1.0], 1.0) == 10
    assert first_at_or_below([0, 5, 10], [3.0, 0.5, 1.0], 1.0) == 5
    assert first_at_or_below([0, 5], [3.0, 1.0 + 1e-16], 1.0) == 5  # lands on the level (rounding)
    assert first_at_or_below([0, 5], [3.0, 1.0 + 1e-9], 1.0) is None
    assert first_at_or_below([0, 5], [math.inf, -math.inf], 0.0) is None  # non-finite never counts
    rounds = list(range(0, 50, 5))
    falling = [2.0 ** -k for k in range(10)]
    st = plateau_status(rounds, falling, 10, 0.01)
    assert not st["reached"] and st["round"] is None and st["final_change"] == pytest.approx(-0.75)
    flat = [4.0, 2.0, 1.5, 1.0, 1.0, 1.0, 1.001, 1.0, 1.0, 1.0]
    st = plateau_status(rounds, flat, 10, 0.01)
    # Δ(k) = |L(k) − L(k − 10)|/|L(k − 10)| ≤ 0.01 from round 25 on (Δ(20) = 1/3 > τ)
    assert st == {"reached": True, "round": 25, "final_change": 0.0, "window": 10, "tol": 0.01}
    assert plateau_status(rounds, flat[:-1] + [math.nan], 10, 0.01)["final_change"] is None
    assert plateau_status([0, 3], [1.0, 1.0], 10, 0.01) == {"reached": False, "round": None, "final_change": None,
                                                             "window": 10, "tol": 0.01}
    assert plateau_status([0, 10, 20], [0.0, 0.0, 0.0], 10, 0.01)["reached"] is False  # Δ undefined at L = 0


@pytest.fixture(scope="module")
def bucket_fed():
    from fedaudit.fl.data import load_digits_dataset
    from fedaudit.fl.federation import Federation

    ds = load_digits_dataset(rng=0)
    return Federation.build(ds, n_honest=6, f=1, beta=5.0, aggregator="bucketing+cwtm", aggregator_kw={"s": 2},
                            attack="alie", optimal_attack=False, rng=0)


def _bits(tr):
    d = tr.to_dict(include_x=True)
    d.pop("wall_time")
    return d


@pytest.mark.parametrize("name", ["dgd", "dnag", "robust-accelerated", "pigs"])
def test_same_seed_same_bits_with_a_random_rule(bucket_fed, name):
    opt = _optimizers()[name]
    a = run(opt, bucket_fed, rounds=6, rng=0)
    for _ in range(3):  # advance every stream the federation or its rule might keep
        bucket_fed.oracle(np.zeros(bucket_fed.dim))
    b = run(opt, bucket_fed, rounds=6, rng=0)
    assert _bits(a) == _bits(b)
    assert np.array_equal(a.x_final, b.x_final)
    c = run(opt, bucket_fed, rounds=6, rng=1)   # bucketing's permutations (and PIGS's probes) change
    assert not np.array_equal(a.x_final, c.x_final)
    assert a.loss[0] == c.loss[0] and a.loss[1:] != c.loss[1:]


def test_seed_only_acts_through_random_components(tiny_fed):
    # deterministic rule (NNM+CWTM) and attack (line-searched ALIE): the seed changes nothing
    a = run(DGD(0.1), tiny_fed, rounds=4, rng=0)
    b = run(DGD(0.1), tiny_fed, rounds=4, rng=12345)
    assert np.array_equal(a.x_final, b.x_final)


# ------------------------------------------------------------------ serialisation of non-finite numbers
def test_trace_json_writes_non_finite_numbers_as_strings(quad):
    # a run that overflows: loss becomes +inf at the last record, which stops it as diverged
    # (the divergence threshold |L(x_0)|·1e308 + 1 overflows to inf, so only the inf check stops it)
    with np.errstate(over="ignore"):
        tr = run(DGD(3 / quad.smoothness()), quad, x0=np.ones(quad.dim), rounds=5000, rng=0,
                 divergence_factor=1e308)
    assert tr.diverged and tr.loss[-1] == math.inf
    d = tr.to_dict()
    assert d["loss"][-1] == "inf" and all(isinstance(v, float) for v in d["loss"][:-1])
    back = json.loads(json.dumps(d, allow_nan=False))
    assert back["loss"][-1] == "inf" and None not in back["loss"] and None not in back["grad_norm"]
    import dataclasses

    manual = dataclasses.replace(run(DGD(0.1), quad, rounds=1, rng=0), grad_norm=[float("nan"), 1.0],
                                 extras={"x": [float("-inf")]}, info={"d": np.float64("inf")})
    with pytest.raises(dataclasses.FrozenInstanceError):
        manual.diverged = True  # a result is frozen
    m = manual.to_dict()
    assert m["grad_norm"] == ["nan", 1.0] and m["extras"] == {"x": ["-inf"]} and m["info"] == {"d": "inf"}


def test_same_seed_same_bits_with_a_line_searched_attack_and_a_random_rule(bucket_fed):
    from fedaudit.fl.federation import Federation

    fed = Federation.build(bucket_fed.dataset, n_honest=6, f=1, beta=5.0, aggregator="bucketing+cwtm",
                           aggregator_kw={"s": 2}, attack="alie", optimal_attack=True, rng=0)
    a = run(DGD(0.1), fed, rounds=4, rng=0)
    fed.oracle(np.zeros(fed.dim))
    assert _bits(run(DGD(0.1), fed, rounds=4, rng=0)) == _bits(a)
    assert run(DGD(0.1), fed, rounds=4, rng=1).loss[1:] != a.loss[1:]
