"""fedaudit.fl.sparse_baselines: H_τ, Fed-HT, FedIter-HT and FedAvg+prune on planted problems,
checked against independent numpy recursions (IHT, gradient descent) and the planted support."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedaudit.defenses import Mean  # noqa: E402
from fedaudit.errors import FedAuditError  # noqa: E402
from fedaudit.fl.eflops import SparseRun  # noqa: E402
from fedaudit.fl.sparse_baselines import (evaluate, hard_threshold, inference_macs, predict, train_fed_ht,  # noqa: E402
                                          train_fedavg_prune, train_fediter_ht, upload_bytes)
from fedaudit.fl.sparse_data import load_digits_federated, scarce_regression, support_recovery  # noqa: E402
from tests.helpers import REPO


def zero_linear(d: int, out: int = 1, dtype=torch.float64):
    m = torch.nn.Linear(d, out, bias=False).to(dtype)
    torch.nn.init.zeros_(m.weight)
    return m


@pytest.fixture(scope="module")
def easy():
    """Well-conditioned planted regression: N = 400 ≫ k log d, identical client laws, low noise."""
    return scarce_regression(d=100, support=5, samples=400, clients=4, heterogeneity=0.0, noise=0.1,
                             val_samples=0, test_samples=500, rng=7)


def test_hard_threshold_keeps_exactly_tau_largest_with_index_ties():
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = rng.integers(-3, 4, size=30).astype(float)  # many ties
        tau = int(rng.integers(1, 31))
        out = hard_threshold(v, tau)
        kept = np.flatnonzero(out != 0) if np.count_nonzero(v) >= tau else None
        # brute force: sort by (-|v|, index) and keep the first tau
        order = sorted(range(30), key=lambda j: (-abs(v[j]), j))[:tau]
        expected = np.zeros(30)
        expected[order] = v[order]
        np.testing.assert_array_equal(out, expected)
        if kept is not None:
            assert kept.size == tau
    assert np.array_equal(hard_threshold(np.array([1.0, -1.0, 1.0, 0.5]), 2), [1.0, -1.0, 0, 0])
    with pytest.raises(FedAuditError, match="tau must be an integer in \\[1, len\\(v\\)=3\\]"):
        hard_threshold(np.ones(3), 4)
    with pytest.raises(FedAuditError, match="finite"):
        hard_threshold(np.array([1.0, np.nan]), 1)


def test_fed_ht_with_one_local_step_is_iht_on_the_pooled_loss(easy):
    # independent numpy recursion: θ ← H_τ(θ − γ Σ_i p_i ∇f_i(θ)), f_i = ½·mean (y − Xθ)²
    gamma, T, tau = 0.05, 30, 5
    run = train_fed_ht(zero_linear(100), easy, rounds=T, density=0.05, local_steps=1, lr=gamma, rng=0)
    theta = np.zeros(100)
    n = np.array(easy.client_sizes, float)
    p = n / n.sum()
    for _ in range(T):
        g = sum(pi * X.T @ (X @ theta - y) / X.shape[0] for pi, (X, y) in zip(p, easy.clients))
        theta = hard_threshold(theta - gamma * g, tau)
    np.testing.assert_allclose(run.weights, theta, rtol=1e-9, atol=1e-12)
    assert isinstance(run, SparseRun) and run.method == "fed-ht" and run.m == tau and run.mask.sum() == tau


def test_fed_ht_recovers_the_planted_support(easy):
    run = train_fed_ht(zero_linear(100), easy, rounds=60, density=0.05, local_steps=5, lr=0.05, rng=0)
    assert support_recovery(run.weights, easy.support) == 1.0
    assert np.array_equal(run.support, easy.support)
    assert evaluate(zero_linear(100), run.weights, easy.X_test, easy.y_test, "regression") > 0.99
    # the training loss reaches the noise floor ½σ² = 0.005 within its sampling error
    assert run.history["loss"][-1] < 0.0075
    assert run.history["density"][-1] <= 0.05 and run.density == 0.05


def test_fediter_ht_local_models_are_sparse_and_recover_the_support(easy):
    run = train_fediter_ht(zero_linear(100), easy, rounds=60, density=0.05, local_steps=5, lr=0.05, rng=0)
    assert support_recovery(run.weights, easy.support) == 1.0
    # a τ-sparse upload: 16-byte header + τ·(uint16 index + float32 value) < 400 dense bytes
    assert upload_bytes("fediter-ht", 100, 5) == 16 + 5 * 6
    assert run.history["bytes"] == [4 * (16 + 30)] * 60
    fed_ht = train_fed_ht(zero_linear(100), easy, rounds=1, density=0.05, rng=0)
    assert fed_ht.history["bytes"] == [4 * 400]


def test_fedavg_prune_is_gradient_descent_then_top_m(easy):
    gamma, T, K = 0.05, 8, 3
    X, y = easy.clients[0]
    run = train_fedavg_prune(zero_linear(100), [(X, y)], rounds=T, density=0.1, local_steps=K, lr=gamma, rng=0)
    theta = np.zeros(100)
    for _ in range(T * K):
        theta -= gamma * X.T @ (X @ theta - y) / X.shape[0]
    keep = np.argsort(-np.abs(theta), kind="stable")[:10]
    expected = np.zeros(100)
    expected[keep] = theta[keep]
    np.testing.assert_allclose(run.weights, expected, rtol=1e-9, atol=1e-12)
    # the history is of the dense model: density 1 (every weight moved off 0)
    assert run.history["density"][-1] == 1.0 and run.density == 0.1


def test_partial_participation_determinism_and_aggregator(easy):
    kw = dict(rounds=20, density=0.05, local_steps=2, lr=0.05)
    a = train_fed_ht(zero_linear(100), easy, participation=0.5, rng=3, **kw)
    b = train_fed_ht(zero_linear(100), easy, participation=0.5, rng=3, **kw)
    assert np.array_equal(a.weights, b.weights) and a.history == b.history
    counts = np.array(a.history["clients"])
    assert counts.min() >= 0 and counts.max() <= 4 and len(set(counts.tolist())) > 1  # Poisson counts vary
    f = train_fed_ht(zero_linear(100), easy, participation=0.5, sampling="fixed", rng=3, **kw)
    assert f.history["clients"] == [2] * 20
    # equal client sizes: the unweighted Mean rule equals the n_i-weighted default
    m = train_fed_ht(zero_linear(100), easy, aggregator=Mean(), rng=0, **kw)
    d = train_fed_ht(zero_linear(100), easy, rng=0, **kw)
    np.testing.assert_allclose(m.weights, d.weights, rtol=1e-12, atol=1e-14)
    assert "Mean" in m.params["aggregator"]
    assert m.to_dict()["m"] == 5


def test_classification_on_digits_with_minibatches():
    data = load_digits_federated(clients=4, rng=0)
    model = torch.nn.Linear(64, 10)
    torch.manual_seed(0)
    run = train_fedavg_prune(model, data, rounds=15, density=0.5, local_steps=5, lr=0.1, batch_size=32, rng=0)
    acc = evaluate(model, run.weights, data.X_test, data.y_test, "classification")
    assert acc > 0.85
    assert predict(model, run.weights, data.X_test[:3]).shape == (3, 10)


@pytest.mark.parametrize("kwargs, match", [
    ({"density": 0.0}, "density must be a finite real number in \\(0, 1\\)"),
    ({"density": 1.0}, "density must be a finite real number in \\(0, 1\\)"),
    ({"density": 0.001}, "density must be in \\[1/dim, 1\\)"),
    ({"rounds": 0}, "rounds must be an integer >= 1"),
    ({"lr": 0.0}, "lr must be"),
    ({"local_steps": 0}, "local_steps must be"),
    ({"participation": 1.5}, "participation must be"),
    ({"participation": 0.0}, "participation must be"),
    ({"sampling": "uniform"}, "sampling must be one of"),
    ({"task": "ranking"}, "task must be one of"),
    ({"batch_size": 0}, "batch_size must be"),
])
def test_bad_input(easy, kwargs, match):
    base = dict(rounds=2, density=0.05, lr=0.01)
    with pytest.raises(FedAuditError, match=match):
        train_fed_ht(zero_linear(100), easy, **{**base, **kwargs})


def test_bad_model_data_and_divergence(easy):
    with pytest.raises(FedAuditError, match="torch.nn.Module"):
        train_fediter_ht("linear", easy, rounds=1, density=0.05)
    with pytest.raises(FedAuditError, match="FederatedData or a non-empty sequence"):
        train_fedavg_prune(zero_linear(100), [], rounds=1, density=0.05)
    with pytest.raises(FedAuditError, match="y must contain only finite"):
        train_fedavg_prune(zero_linear(3), [(np.ones((4, 3)), np.array([1, np.inf, 0, 0]))], rounds=1, density=0.5)
    with pytest.raises(FedAuditError, match="one row per entry of y"):
        train_fedavg_prune(zero_linear(3), [(np.ones((4, 3)), np.ones(3))], rounds=1, density=0.5)
    with pytest.raises(FedAuditError, match="diverged in round"):
        train_fedavg_prune(zero_linear(100), easy, rounds=50, density=0.05, lr=5.0)
    with pytest.raises(FedAuditError, match="theta must have shape \\(100,\\)"):
        predict(zero_linear(100), np.zeros(3), easy.X_test)


def test_inference_macs_of_the_digits_cnn_by_hand():
    from fedaudit.fl.models import cnn

    model = cnn(10)
    names = [n for n, _ in model.named_parameters()]
    sizes = [p.numel() for _, p in model.named_parameters()]
    offsets = dict(zip(names, np.cumsum([0] + sizes[:-1])))
    # 8×8 input: conv1 (16·1·3·3 weights) at 8·8 positions, conv2 (32·16·3·3) at 4·4 after pooling,
    # Linear(512, 64) and Linear(64, 10) once each
    dense = 144 * 64 + 4608 * 16 + 512 * 64 + 64 * 10
    sparse, total = inference_macs(model, np.ones(sum(sizes), bool), (64,))
    assert sparse == total == dense
    mask = np.zeros(sum(sizes), bool)
    conv1, conv2, last = names[0], names[2], names[-2]
    mask[offsets[conv1] + 5] = True       # one conv1 weight: 64 MACs
    mask[offsets[conv2]: offsets[conv2] + 3] = True  # three conv2 weights: 3·16
    mask[offsets[last] + 7] = True        # one weight of the last Linear: 1
    mask[offsets[names[1]]] = True        # a bias: no MAC
    assert inference_macs(model, mask, (1, 8, 8)) == (64 + 48 + 1, dense)
    with pytest.raises(FedAuditError, match="mask must have shape"):
        inference_macs(model, np.ones(3, bool), (64,))


def test_sparse_methods_registry_builds_every_method(easy):
    from fedaudit.fl.registry import SPARSE_METHODS

    assert set(SPARSE_METHODS.names()) >= {"eflops", "fed-ht", "fediter-ht", "fedavg-prune"}
    assert SPARSE_METHODS.canonical("fediht") == "fed-ht"
    for name in ("eflops", "fed-ht"):
        run = SPARSE_METHODS.factory(name)(zero_linear(100), easy, rounds=2, density=0.05, rng=0, lr=0.01)
        assert isinstance(run, SparseRun) and run.m == 5
    direct = train_fed_ht(zero_linear(100), easy, rounds=2, density=0.05, rng=0, lr=0.01)
    via = SPARSE_METHODS.factory("fediht")(zero_linear(100), easy, rounds=2, density=0.05, rng=0, lr=0.01)
    assert np.array_equal(direct.weights, via.weights)


def test_synthetic_benchmark_writes_exactly_the_agreed_keys(tmp_path):
    import importlib.util
    import json

    path = REPO / "benchmarks" / "eflops_synthetic.py"
    spec = importlib.util.spec_from_file_location("eflops_synthetic_bench", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out_file = tmp_path / "out.json"
    bench.main(["--seeds", "2", "--tune-seeds", "0", "--robust-seeds", "1", "--f", "1", "--rounds", "3",
                "--d", "60", "--support", "3", "--samples", "40", "--clients", "3", "--json", str(out_file)])
    from fedaudit.json import loads

    out = loads(out_file.read_text())
    assert set(out) == {"eflops", "fediht", "fedavg_prune", "density", "target_density"}
    assert out["target_density"] == pytest.approx(0.05) and out["density"] == pytest.approx(3 / 60)
    for key in ("eflops", "fediht", "fedavg_prune"):
        assert {"r2", "support_recovery", "r2_ci95"} <= set(out[key])
        assert len(out[key]["r2_per_seed"]) == 2
    assert out["fediht"]["variant"] == "Fed-HT" and "fediter_ht" in out["fediht"]
    rows = out["eflops"]["robustness"]["rows"]
    assert {(r["attack"], r["aggregator"]) for r in rows} == {(a, g) for a in ("none", "sparse-alie", "sparse-ipm")
                                                              for g in ("fedavg", "nnm+cwtm")}
    json.dumps(out, allow_nan=False)


def test_byzantine_clients_break_the_mean_but_not_nnm_cwtm(easy):
    from fedaudit.attacks.byzantine import IPM
    from fedaudit.defenses.registry import make_aggregator

    kw = dict(rounds=40, density=0.05, local_steps=5, lr=0.05, rng=0)
    clean = train_fed_ht(zero_linear(100), easy, **kw)
    # IPM(3) with f = 1 next to 4 honest clients: the mean of the models is (4 − 3)/5 of the honest mean,
    # so every round shrinks the model toward 0; NNM+CWTM discards the outlier
    attacked = train_fed_ht(zero_linear(100), easy, byzantine=1, attack=IPM(3.0), **kw)
    robust = train_fed_ht(zero_linear(100), easy, byzantine=1, attack=IPM(3.0),
                          aggregator=make_aggregator("nnm+cwtm", 1), **kw)
    r2 = {k: evaluate(zero_linear(100), r.weights, easy.X_test, easy.y_test, "regression")
          for k, r in (("clean", clean), ("attacked", attacked), ("robust", robust))}
    assert r2["robust"] > 0.98 and r2["clean"] > 0.99
    assert r2["attacked"] < r2["robust"] - 0.05
    assert attacked.params["byzantine"] == 1 and "IPM" in attacked.params["attack"]
    with pytest.raises(FedAuditError, match="attack must be given when byzantine > 0"):
        train_fed_ht(zero_linear(100), easy, byzantine=1, **kw)


# ----------------------------------------------------------------------------- issue #22


def _unequal_clients():
    """Three clients of 1, 2 and 5 rows (d = 6): their n_i-weighted mean differs from the plain mean."""
    r = np.random.default_rng(3)
    sizes = (1, 2, 5)
    return [(r.standard_normal((n, 6)), r.standard_normal(n)) for n in sizes]


def test_fed_ht_weights_clients_by_n_i_on_unequal_sizes():
    """One round of Fed-HT by hand: θ_i = θ_0 − γ∇f_i(θ_0) − γ∇f_i(θ_i^1) (K = 2 steps of
    f_i = ½·mean(Xθ − y)²), then H_τ(Σ_i n_i θ_i / Σ n_i) with n = (1, 2, 5), τ = ⌊0.5·6⌋ = 3."""
    clients = _unequal_clients()
    gamma, K = 0.1, 2
    run = train_fed_ht(zero_linear(6), clients, rounds=1, density=0.5, local_steps=K, lr=gamma, rng=0)
    locals_ = []
    for X, y in clients:
        theta = np.zeros(6)
        for _ in range(K):
            theta = theta - gamma * X.T @ (X @ theta - y) / len(y)
        locals_.append(theta)
    n = np.array([1.0, 2.0, 5.0])
    expected = hard_threshold((n / n.sum()) @ np.array(locals_), 3)
    np.testing.assert_allclose(run.weights, expected, rtol=1e-12, atol=1e-14)
    unweighted = hard_threshold(np.mean(locals_, axis=0), 3)
    assert not np.allclose(run.weights, unweighted, atol=1e-3)  # the sizes matter here
    fedavg = train_fedavg_prune(zero_linear(6), clients, rounds=1, density=0.5, local_steps=K, lr=gamma, rng=0)
    np.testing.assert_allclose(fedavg.weights, expected, rtol=1e-12, atol=1e-14)


def test_level_warmup_adam_and_top_m_upload_for_the_baselines():
    """The schedule options E-FLoPS has, given to Fed-HT (issue #22): the threshold keeps
    τ_t = max(m, ⌊ρ_t·|θ|⌋) with ρ_t E-FLoPS's warm-up level; Adam local steps; the top-m upload."""
    from fedaudit.fl.eflops import level_at
    from fedaudit.mechanisms.gated import m_for_density

    clients = _unequal_clients()
    X = np.random.default_rng(1).standard_normal((40, 100))
    big = [(X[:20], X[:20, :5].sum(1)), (X[20:], X[20:, :5].sum(1))]
    run = train_fed_ht(zero_linear(100), big, rounds=10, density=0.05, lr=0.01, init_density=0.95,
                       target_warmup=0.6)
    levels = [level_at(t, 10, 0.05, 0.95, 0.6) for t in range(10)]
    expected = [max(5, m_for_density(v, 100)) / 100 for v in levels]
    assert run.history["density"] == pytest.approx(expected)          # 0.95, 0.80, … down to 0.05 from round 7
    assert expected[0] == 0.95 and expected[6:] == [0.05] * 4 and run.mask.sum() == 5
    cold = train_fed_ht(zero_linear(100), big, rounds=10, density=0.05, lr=0.01)
    assert cold.history["density"] == [0.05] * 10
    # Adam: one local step from θ_0 = 0 moves every coordinate with a non-zero gradient by exactly lr
    adam = train_fedavg_prune(zero_linear(6), clients[:1], rounds=1, density=0.5, local_steps=1, lr=0.1,
                              local_optimizer="adam")
    Xc, yc = clients[0]
    g = Xc.T @ (Xc @ np.zeros(6) - yc) / len(yc)
    np.testing.assert_allclose(np.sort(np.abs(adam.weights))[3:], 0.1, rtol=1e-6)
    np.testing.assert_array_equal(np.sign(adam.weights[adam.mask]), -np.sign(g[adam.mask]))
    # top-m upload: each client sends H_m(θ_i) (min(4·|θ|, 16 + m·(2 + 4)) bytes, FedIter-HT's packet), the
    # server averages the sparse vectors
    top = train_fed_ht(zero_linear(6), clients, rounds=1, density=0.5, local_steps=1, lr=0.1, upload="top-m")
    locals_ = [hard_threshold(-0.1 * Xi.T @ (-yi) / len(yi), 3) for Xi, yi in clients]
    n = np.array([1.0, 2.0, 5.0])
    np.testing.assert_allclose(top.weights, hard_threshold((n / n.sum()) @ np.array(locals_), 3), rtol=1e-12)
    assert top.history["bytes"] == [3 * min(4 * 6, 16 + 3 * 6)] and top.params["upload"] == "top-m"
    assert upload_bytes("fediter-ht", 100, 5) == 16 + 5 * 6 < 4 * 100
    with pytest.raises(FedAuditError, match="upload must be 'dense' for fedavg-prune"):
        train_fedavg_prune(zero_linear(6), clients, rounds=1, density=0.5, upload="top-m")
    with pytest.raises(FedAuditError, match="local_optimizer"):
        train_fed_ht(zero_linear(6), clients, rounds=1, density=0.5, local_optimizer="rmsprop")
    with pytest.raises(FedAuditError, match="target_warmup"):
        train_fed_ht(zero_linear(6), clients, rounds=1, density=0.5, target_warmup=1.0)


def test_an_exploding_run_is_flagged_diverged_not_averaged():
    """issue #22: Fed-HT above its stable step explodes to a finite R² of order −10⁸; it is flagged."""
    from fedaudit.fl.sparse_baselines import DIVERGED_R2, is_diverged
    from fedaudit.fl.sparse_data import gram_spectrum

    data = scarce_regression(d=200, support=10, samples=60, clients=3, val_samples=0, test_samples=200, rng=0)
    L = gram_spectrum(data).max()
    run = train_fed_ht(zero_linear(200), data, rounds=4, density=0.05, local_steps=5, lr=4.0 / L, rng=0)
    r2 = evaluate(zero_linear(200), run.weights, data.X_test, data.y_test, "regression")
    assert np.isfinite(r2) and r2 < -1e3 and is_diverged(r2, "regression")
    stable = train_fed_ht(zero_linear(200), data, rounds=4, density=0.05, local_steps=5, lr=0.5 / L, rng=0)
    ok = evaluate(zero_linear(200), stable.weights, data.X_test, data.y_test, "regression")
    assert ok > DIVERGED_R2 and not is_diverged(ok, "regression")
    assert is_diverged(None, "classification") and is_diverged(float("nan"), "regression")
    assert not is_diverged(0.1, "classification") and DIVERGED_R2 == -1.0


def test_gram_spectrum_of_the_benchmark_clients_is_about_300_not_46():
    """The smoothness the benchmark's step sizes must respect: λ_max(X_iᵀX_i/n_i), equal to the
    largest eigenvalue by eigvalsh, is 250–330 on the default scarce regression (the covariate shift
    ‖μ_i‖² ≈ 250 dominates), so SGD on a dense model is stable only below 2/λ_max ≈ 0.0063."""
    from fedaudit.fl.sparse_data import gram_spectrum

    for seed in range(3):
        data = scarce_regression(rng=seed)
        spec = gram_spectrum(data)
        exact = [np.linalg.eigvalsh(X @ X.T / len(X)).max() for X, _ in data.clients]  # XXᵀ: same non-zero spectrum
        np.testing.assert_allclose(spec, exact, rtol=1e-9)
        assert spec.shape == (10,) and 250 < spec.min() and spec.max() < 330
    with pytest.raises(FedAuditError, match="at least 1"):
        gram_spectrum([])


def test_synthetic_benchmark_fair_protocol_pairs_seeds_with_t_intervals(tmp_path):
    """``--fair``: every arm tuned over the same 8-configuration grid (optimizer × lr × warm-up) on
    the validation rows, the comparisons paired by seed with the Student-t interval of scipy."""
    import importlib.util
    import json

    from scipy import stats

    path = REPO / "benchmarks" / "eflops_synthetic.py"
    spec = importlib.util.spec_from_file_location("eflops_synthetic_fair", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    d = bench.paired([0.5, 0.7, None, 0.4], [0.1, 0.2, 0.3, 0.6])
    diffs = np.array([0.4, 0.5, -0.2])
    half = stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / np.sqrt(3)
    assert d["n"] == 3 and d["mean"] == pytest.approx(diffs.mean())
    assert d["ci95"] == pytest.approx([diffs.mean() - half, diffs.mean() + half]) and not d["significant"]
    assert len(bench.fair_grid(bench.FAIR_LRS["fed_ht"])) == len(bench.fair_grid(bench.FAIR_LRS["eflops"])) == 8
    out_file = tmp_path / "fair.json"
    bench.main(["--fair", "--arms", "eflops/top-m,fed_ht/top-m", "--seeds", "2", "--tune-seeds", "1", "--rounds", "2",
                "--d", "60", "--support", "3", "--samples", "40", "--clients", "3", "--sweep", "40",
                "--sweep-seeds", "2", "--json", str(out_file)])
    out = json.loads(out_file.read_text())
    assert set(out["arms"]) == {"eflops/top-m", "fed_ht/top-m"}
    for arm in out["arms"].values():
        assert len(arm["tuning"]) == 8 and len(arm["r2_per_seed"]) == 2
        assert {row["config"]["optimizer"] for row in arm["tuning"]} == {"sgd", "adam"}
        assert {row["config"]["warmup"] for row in arm["tuning"]} == {False, True}
    assert out["arms"]["fed_ht/top-m"]["bytes_per_client_round"] == 16 + 3 * 6    # FedIter-HT's packet of m = 3
    (cmp,) = out["comparisons"]
    assert (cmp["a"], cmp["b"]) == ("eflops/top-m", "fed_ht/top-m") and cmp["r2"]["n"] <= 2
    assert out["sweep"][0]["ratio"] == pytest.approx(40 / 60) and "difference" in out["sweep"][0]
    assert out["setup"]["gram_lambda_max"]["max"] > 0 and out["setup"]["diverged_r2"] == -1.0
