"""fedaudit.fl: datasets, partitions, the logistic model and the federation oracle."""

import gzip
import struct

import numpy as np
import pytest

from fedaudit.attacks.byzantine import Optimal
from fedaudit.errors import FedAuditError
from fedaudit.fl import (
    Dataset,
    Federation,
    LabelFlip,
    LogisticModel,
    cnn,
    dirichlet_partition,
    extreme_partition,
    gamma_similarity_partition,
    iid_partition,
    load_dataset,
    load_digits_dataset,
    load_mnist,
    mlp,
    partition,
    synthetic_linear,
    synthetic_logistic,
)
from fedaudit.fl.data import MNIST_MEAN, MNIST_STD
from fedaudit.rng import as_generator


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset(rng=0)


@pytest.fixture(scope="module")
def small_data():
    rng = np.random.default_rng(1)
    A = rng.standard_normal((40, 6))
    y = rng.integers(0, 4, size=40)
    return A, y


def _fd_grad(fun, x, h=1e-5):
    g = np.empty_like(x)
    for j in range(x.size):
        e = np.zeros_like(x)
        e[j] = h
        g[j] = (fun(x + e) - fun(x - e)) / (2 * h)
    return g


def _rel(a, b):
    return np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300)


# ----------------------------------------------------------------------------- model


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_gradient_matches_central_differences(small_data, fit_intercept):
    A, y = small_data
    m = LogisticModel(6, 4, mu=0.03, fit_intercept=fit_intercept)
    assert m.dim == (6 + fit_intercept) * 4
    x = np.random.default_rng(2).normal(size=m.dim)
    g = m.grad(x, A, y)
    fd = _fd_grad(lambda z: m.loss(z, A, y), x)
    assert _rel(g, fd) < 1e-6
    loss, g2 = m.loss_grad(x, A, y)
    assert loss == m.loss(x, A, y) and np.array_equal(g, g2)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_hvp_matches_differences_of_gradient_and_dense_hessian(small_data, fit_intercept):
    A, y = small_data
    m = LogisticModel(6, 4, mu=0.1, fit_intercept=fit_intercept)
    rng = np.random.default_rng(3)
    x, v = rng.normal(size=m.dim), rng.normal(size=m.dim)
    h = 1e-5
    fd = (m.grad(x + h * v, A, y) - m.grad(x - h * v, A, y)) / (2 * h)
    hv = m.hvp(x, A, y, v)
    assert _rel(hv, fd) < 1e-6
    H = m.hessian(x, A, y)
    assert np.allclose(H, H.T, atol=1e-14)
    assert _rel(H @ v, hv) < 1e-12


def test_loss_at_zero_is_log_c_and_layout_matches_torch_linear(small_data):
    A, y = small_data
    m = LogisticModel(6, 4, mu=5.0)
    assert m.loss(np.zeros(m.dim), A, y) == pytest.approx(np.log(4), rel=1e-15)
    rng = np.random.default_rng(4)
    W, b = rng.normal(size=(4, 6)), rng.normal(size=4)
    x = m.pack(W, b)
    W2, b2 = m.unpack(x)
    assert np.array_equal(W2, W) and np.array_equal(b2, b)
    assert np.array_equal(m.predict(x, A), np.argmax(A @ W.T + b, axis=1))
    P = m.predict_proba(x, A)
    assert np.allclose(P.sum(axis=1), 1.0)
    # loss = mean CE + (μ/2)||x||², computed naively
    Z = A @ W.T + b
    ce = np.mean(np.log(np.exp(Z).sum(axis=1)) - Z[np.arange(len(y)), y])
    assert m.loss(x, A, y) == pytest.approx(ce + 2.5 * x @ x, rel=1e-13)
    # huge logits stay finite (log-sum-exp)
    assert np.isfinite(m.loss(1e4 * x, A, y)) and np.isfinite(m.grad(1e4 * x, A, y)).all()


def test_smoothness_bounds_hessian(small_data):
    A, y = small_data
    m = LogisticModel(6, 4, mu=0.01)
    L = m.smoothness(A)
    rng = np.random.default_rng(5)
    for scale in (0.0, 0.3, 3.0):
        lam = np.linalg.eigvalsh(m.hessian(scale * rng.normal(size=m.dim), A, y))[-1]
        assert lam <= L + 1e-12
    At = np.hstack([A, np.ones((len(A), 1))])
    assert L == pytest.approx(0.5 * np.linalg.eigvalsh(At.T @ At / len(A))[-1] + 0.01, rel=1e-12)


def test_model_bad_inputs(small_data):
    A, y = small_data
    m = LogisticModel(6, 4, mu=0.0)
    with pytest.raises(FedAuditError, match="x must have shape"):
        m.loss(np.zeros(3), A, y)
    with pytest.raises(FedAuditError, match="labels in"):
        m.loss(np.zeros(m.dim), A, y + 4)
    with pytest.raises(FedAuditError, match="A must have shape"):
        m.grad(np.zeros(m.dim), A[:, :3], y)
    with pytest.raises(FedAuditError, match="mu"):
        LogisticModel(6, 4, mu=-1.0)
    with pytest.raises(FedAuditError, match="n_classes"):
        LogisticModel(6, 1, mu=0.0)


def test_torch_models_forward():
    torch = pytest.importorskip("torch")
    out = mlp(64, 10, hidden=16)(torch.zeros(5, 64))
    assert out.shape == (5, 10)
    net = cnn(10)
    assert net(torch.randn(3, 64)).shape == (3, 10)           # flat 8×8 digits
    assert net(torch.randn(2, 1, 28, 28)).shape == (2, 10)    # MNIST images
    assert net(torch.randn(2, 784)).shape == (2, 10)


# ----------------------------------------------------------------------------- partitions


def _assert_exact_cover(parts, n):
    allidx = np.concatenate(parts)
    assert allidx.dtype == np.int64
    assert np.array_equal(np.sort(allidx), np.arange(n))


@pytest.mark.parametrize("scheme,kw", [("iid", {}), ("dirichlet", {"beta": 0.5}), ("gamma", {"gamma": 0.3}),
                                       ("extreme", {})])
def test_every_index_exactly_once(scheme, kw):
    labels = np.random.default_rng(0).integers(0, 7, size=503)
    parts = partition(labels, 9, scheme, rng=11, **kw)
    assert len(parts) == 9
    _assert_exact_cover(parts, labels.size)
    again = partition(labels, 9, scheme, rng=11, **kw)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again))


def _byzfl_reference(labels, P):
    """Independent restatement of ByzFL's rule for the test."""
    out = [[] for _ in range(P.shape[1])]
    for k, c in enumerate(np.unique(labels)):
        idx = np.where(labels == c)[0]
        cuts = [0] + [int(v) for v in np.cumsum(P[k])[:-1] * len(idx)] + [len(idx)]
        for j in range(P.shape[1]):
            out[j].extend(idx[cuts[j]:cuts[j + 1]].tolist())
    return out


def test_dirichlet_reproduces_byzfl_cut_points():
    labels = np.random.default_rng(1).integers(0, 10, size=1000)
    parts = dirichlet_partition(labels, 20, 1.0, rng=7)
    P = as_generator(7).dirichlet(np.ones(20), size=10)
    expected = _byzfl_reference(labels, P)
    for got, want in zip(parts, expected):
        assert got.tolist() == want
    # per-class counts follow the cut points exactly
    for k in range(10):
        n_k = int(np.sum(labels == k))
        cuts = np.concatenate([[0], (np.cumsum(P[k])[:-1] * n_k).astype(int), [n_k]])
        counts = [int(np.sum(labels[p] == k)) for p in parts]
        assert counts == np.diff(cuts).tolist()


def test_dirichlet_min_size_redraws_then_errors():
    labels = np.random.default_rng(2).integers(0, 10, size=600)
    beta, n, min_size = 0.2, 10, 35
    parts = dirichlet_partition(labels, n, beta, rng=3, min_size=min_size)
    assert min(p.size for p in parts) >= min_size
    # the accepted partition is the first draw of the same Generator that satisfies the floor
    rng, draws = as_generator(3), 0
    while True:
        draws += 1
        want = _byzfl_reference(labels, rng.dirichlet(np.full(n, beta), size=10))
        if min(len(w) for w in want) >= min_size:
            break
    assert draws > 1, "the test should exercise at least one redraw"
    assert [p.tolist() for p in parts] == want
    with pytest.raises(FedAuditError, match="max_redraws=2"):
        dirichlet_partition(labels, n, 0.01, rng=3, min_size=min_size, max_redraws=2)
    with pytest.raises(FedAuditError, match="min_size"):
        dirichlet_partition(labels, n, 1.0, rng=3, min_size=61)


def test_iid_sizes_and_gamma_extremes():
    parts = iid_partition(1003, 7, rng=0)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 1003
    labels = np.random.default_rng(3).integers(0, 5, size=300)
    g0 = gamma_similarity_partition(labels, 6, 0.0, rng=4)
    ext = extreme_partition(labels, 6, rng=4)
    assert all(np.array_equal(a, b) for a, b in zip(g0, ext))
    for p in ext:  # sorted by label: each client covers a contiguous label range
        assert np.all(np.diff(labels[p]) >= 0)
    g1 = gamma_similarity_partition(labels, 6, 1.0, rng=4)
    iid = iid_partition(300, 6, rng=4)
    assert all(np.array_equal(a, b) for a, b in zip(g1, iid))


@pytest.mark.parametrize("call,match", [
    (lambda y: partition(y, 4, "dirichlet", beta=0.0), r"beta .*> 0"),
    (lambda y: partition(y, 4, "dirichlet", beta=-1.0), r"beta"),
    (lambda y: partition(y, 4, "dirichlet"), r"beta .*required"),
    (lambda y: partition(y, 4, "gamma", gamma=1.5), r"gamma .*\[0, 1\]"),
    (lambda y: partition(y, 4, "gamma", gamma=-0.1), r"gamma"),
    (lambda y: partition(y, 0, "iid"), r"n_clients .*>= 1"),
    (lambda y: partition(y, 4, "zipf"), r"unknown partition scheme .*iid, dirichlet"),
    (lambda y: partition(y, 4, "iid", min_size=50), r"min_size"),
    (lambda y: partition(y.astype(float) + 0.5, 4, "iid"), r"integer class labels"),
])
def test_partition_bad_inputs(call, match):
    y = np.arange(40) % 4
    with pytest.raises(FedAuditError, match=match):
        call(y)


# ----------------------------------------------------------------------------- data


def test_digits_dataset(digits):
    assert isinstance(digits, Dataset)
    assert digits.X_train.dtype == np.float64 and digits.y_train.dtype == np.int64
    assert digits.n_train + digits.n_test == 1797 and digits.n_features == 64 and digits.n_classes == 10
    assert digits.n_test == pytest.approx(0.25 * 1797, abs=10)
    assert np.allclose(digits.X_train.mean(axis=0), 0.0, atol=1e-12)
    # stratified: per-class test share ≈ 25 %
    tr, te = np.bincount(digits.y_train, minlength=10), np.bincount(digits.y_test, minlength=10)
    assert np.all(np.abs(te / (tr + te) - 0.25) < 0.01)
    raw = load_digits_dataset(rng=0, standardize=False)
    assert raw.X_train.min() >= 0.0 and raw.X_train.max() <= 1.0
    assert np.array_equal(raw.y_train, digits.y_train)
    other = load_digits_dataset(rng=1)
    assert not np.array_equal(other.y_train, digits.y_train)
    assert load_dataset("digits").y_test.tolist() == digits.y_test.tolist()


def test_synthetic_generators():
    d = synthetic_logistic(400, 5, n_classes=3, rng=2, noise=0.0)
    W, b = d.params["W"], d.params["b"]
    assert np.array_equal(d.y_train, np.argmax(d.X_train @ W.T + b, axis=1))
    assert d.n_train + d.n_test == 400 and d.n_classes == 3
    d2 = synthetic_logistic(400, 5, n_classes=3, rng=2, noise=0.0)
    assert np.array_equal(d.X_train, d2.X_train)
    lin = synthetic_linear(30, 200, rng=1, noise=0.0, sparsity=5)
    w = lin.params["w"]
    assert lin.n_classes == 0 and lin.y_train.dtype == np.float64
    assert np.count_nonzero(w) == 5 and np.array_equal(np.flatnonzero(w), lin.params["support"])
    assert np.allclose(lin.y_train, lin.X_train @ w)
    assert load_dataset("synthetic", n_samples=100, dim=4).n_classes == 10
    with pytest.raises(FedAuditError, match="unknown dataset"):
        load_dataset("cifar")
    with pytest.raises(FedAuditError, match="path"):
        load_dataset("mnist")


def test_load_mnist_missing_path_says_no_download(tmp_path):
    with pytest.raises(FedAuditError, match="no download") as err:
        load_mnist(tmp_path)
    assert "train-images-idx3-ubyte" in str(err.value) and "t10k-labels-idx1-ubyte" in str(err.value)
    with pytest.raises(FedAuditError, match="no download"):
        load_mnist(tmp_path / "nowhere")
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"")
    with pytest.raises(FedAuditError) as err:
        load_mnist(tmp_path)
    assert "train-labels-idx1-ubyte" in str(err.value) and "missing train-images" not in str(err.value)


def _fake_mnist(rng, n_train=30, n_test=12):
    return (rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_train).astype(np.uint8),
            rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8), rng.integers(0, 10, n_test).astype(np.uint8))


def test_load_mnist_npz_round_trip(tmp_path):
    xtr, ytr, xte, yte = _fake_mnist(np.random.default_rng(0))
    xtr[0, 0, 0], xtr[0, 0, 1] = 255, 0
    path = tmp_path / "mnist.npz"
    np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    d = load_mnist(path)
    assert d.X_train.shape == (30, 784) and d.X_test.shape == (12, 784) and d.n_classes == 10
    assert d.X_train[0, 0] == pytest.approx((1.0 - MNIST_MEAN) / MNIST_STD)
    assert d.X_train[0, 1] == pytest.approx(-MNIST_MEAN / MNIST_STD)
    assert np.array_equal(d.y_train, ytr.astype(np.int64))
    assert np.allclose(d.X_test, (xte.reshape(12, -1) / 255 - MNIST_MEAN) / MNIST_STD)
    assert np.array_equal(load_mnist(tmp_path).X_train, d.X_train)  # a directory with mnist.npz
    sub = load_mnist(path, train_fraction=0.5, rng=1)
    assert sub.n_train == 15 and np.array_equal(sub.X_test, d.X_test)
    resplit = load_mnist(path, test_fraction=0.5, rng=1)
    assert resplit.n_train + resplit.n_test == 42
    np.savez(tmp_path / "bad.npz", x_train=xtr)
    with pytest.raises(FedAuditError, match="y_train"):
        load_mnist(tmp_path / "bad.npz")


def _write_idx(path, arr):
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)


def test_load_mnist_idx_files(tmp_path):
    xtr, ytr, xte, yte = _fake_mnist(np.random.default_rng(1))
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", xtr)
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", ytr)
    _write_idx(tmp_path / "t10k-images-idx3-ubyte", xte)
    _write_idx(tmp_path / "t10k-labels-idx1-ubyte", yte)
    d = load_mnist(tmp_path)
    assert np.allclose(d.X_train, (xtr.reshape(30, -1) / 255 - MNIST_MEAN) / MNIST_STD)
    assert np.array_equal(d.y_test, yte.astype(np.int64))
    assert load_dataset("mnist", path=tmp_path).n_train == 30


# ----------------------------------------------------------------------------- federation


@pytest.fixture(scope="module")
def fed(digits):
    return Federation.build(digits, n_honest=8, f=2, beta=1.0, mu=0.05, rng=3)


def test_federation_structure(fed, digits):
    assert fed.dim == 650 and fed.n == 10 and len(fed.clients) == 8
    assert isinstance(fed.attack, Optimal) and fed.aggregator.name == "nnm+cwtm"
    _assert_exact_cover(fed.client_indices, digits.n_train)
    for (A, y), idx in zip(fed.clients, fed.client_indices):
        assert np.array_equal(A, digits.X_train[idx]) and np.array_equal(y, digits.y_train[idx])


def test_honest_loss_grad_hvp_are_client_means(fed):
    rng = np.random.default_rng(0)
    x, v = 0.1 * rng.normal(size=fed.dim), rng.normal(size=fed.dim)
    losses = [fed.client_loss(i, x) for i in range(fed.n_honest)]
    grads = np.stack([fed.client_grad(i, x) for i in range(fed.n_honest)])
    assert fed.honest_loss(x) == pytest.approx(np.mean(losses), rel=1e-13)
    assert np.allclose(fed.client_losses(x), losses, rtol=1e-13)
    G = fed.honest_gradients(x)
    assert G.shape == (8, 650) and np.allclose(G, grads, rtol=1e-12, atol=1e-15)
    assert np.allclose(fed.honest_grad(x), grads.mean(axis=0), rtol=1e-12, atol=1e-15)
    hv = np.mean([fed.client_hvp(i, x, v) for i in range(fed.n_honest)], axis=0)
    assert np.allclose(fed.honest_hvp(x, v), hv, rtol=1e-12, atol=1e-15)
    # the per-x cache of honest_hvp follows x (another point, then the first one again)
    x2 = x + 0.5 * rng.normal(size=fed.dim)
    hv2 = np.mean([fed.client_hvp(i, x2, v) for i in range(fed.n_honest)], axis=0)
    assert np.allclose(fed.honest_hvp(x2, v), hv2, rtol=1e-12, atol=1e-15) and not np.allclose(hv2, hv)
    assert np.allclose(fed.honest_hvp(x, v), hv, rtol=1e-12, atol=1e-15)
    A0, y0 = fed.clients[0]
    assert fed.client_loss(0, x) == fed.model.loss(x, A0, y0)
    assert fed.honest_loss(np.zeros(fed.dim)) == pytest.approx(np.log(10), rel=1e-15)
    ms, gn = fed.heterogeneity(x)
    assert ms == pytest.approx(np.mean(np.sum((grads - grads.mean(0)) ** 2, axis=1)), rel=1e-10)
    assert gn == pytest.approx(float(grads.mean(0) @ grads.mean(0)), rel=1e-10)
    with pytest.raises(FedAuditError, match=r"i must be an integer in \[0, n_honest-1=7\]"):
        fed.client_grad(8, x)


def test_honest_gradient_matches_finite_differences(digits):
    small = Federation.build(digits, n_honest=3, f=0, attack=None, scheme="iid", mu=0.1, rng=0)
    x = 0.05 * np.random.default_rng(1).normal(size=small.dim)
    coords = np.random.default_rng(2).choice(small.dim, size=25, replace=False)
    g = small.honest_grad(x)
    h = 1e-5
    for j in coords:
        e = np.zeros(small.dim)
        e[j] = h
        fd = (small.honest_loss(x + e) - small.honest_loss(x - e)) / (2 * h)
        assert fd == pytest.approx(g[j], rel=1e-6, abs=1e-9)


def test_oracle_f0_mean_is_honest_grad(digits):
    f0 = Federation.build(digits, n_honest=5, f=0, aggregator="mean", attack=None, rng=1)
    x = 0.1 * np.random.default_rng(2).normal(size=f0.dim)
    assert f0.byzantine_vectors(x, f0.honest_gradients(x), 0).shape == (0, f0.dim)
    assert np.allclose(f0.oracle(x, 0), f0.honest_grad(x), rtol=1e-12, atol=1e-15)


def test_oracle_is_robust_and_deterministic(fed, digits):
    x = np.zeros(fed.dim)
    g = fed.oracle(x, 0)
    G = fed.honest_gradients(x)
    B = fed.byzantine_vectors(x, G, 0)
    assert B.shape == (2, fed.dim) and np.array_equal(fed.oracle(x, 0, honest_grads=G), g)
    assert np.array_equal(g, np.asarray(fed.aggregator(np.vstack([G, B]))))
    # the attack moves the aggregate away from the honest mean, by a bounded amount
    err = np.linalg.norm(g - G.mean(axis=0))
    assert 0 < err < np.linalg.norm(G.mean(axis=0))
    other = Federation.build(digits, n_honest=8, f=2, beta=1.0, mu=0.05, rng=3)
    assert all(np.array_equal(a, b) for a, b in zip(fed.client_indices, other.client_indices))
    assert np.array_equal(other.oracle(x, 0), g)
    diff = Federation.build(digits, n_honest=8, f=2, beta=1.0, mu=0.05, rng=4)
    assert any(not np.array_equal(a, b) for a, b in zip(fed.client_indices, diff.client_indices))


def test_attack_wrapping(digits):
    plain = Federation.build(digits, n_honest=6, f=1, attack="ipm", optimal_attack=False, rng=0)
    assert plain.attack.name == "ipm"
    x = np.zeros(plain.dim)
    G = plain.honest_gradients(x)
    assert np.allclose(plain.byzantine_vectors(x, G), -0.1 * G.mean(axis=0))
    mimic = Federation.build(digits, n_honest=6, f=1, attack="mimic", rng=0)
    assert mimic.attack.name == "mimic"  # no scale: not wrapped
    assert Federation.build(digits, n_honest=6, f=1, attack="alie", rng=0).attack.name == "optimal-alie"


def test_label_flip_vectors(digits):
    lf = Federation.build(digits, n_honest=6, f=2, label_flip=True, rng=0)
    assert isinstance(lf.attack, LabelFlip) and lf.attack.params() == {"n_classes": digits.n_classes}
    x = 0.1 * np.random.default_rng(0).normal(size=lf.dim)
    G = lf.honest_gradients(x)
    B = lf.byzantine_vectors(x, G)
    assert B.shape == (2, lf.dim)
    assert not np.allclose(B, G[:2])
    for j in range(2):
        A, y = lf.clients[j]
        assert np.allclose(B[j], lf.model.grad(x, A, 9 - y))
    assert lf.oracle(x).shape == (lf.dim,)
    assert Federation.build(digits, n_honest=6, f=2, attack="labelflip", rng=0).label_flip


@pytest.mark.parametrize("kw,match", [
    ({"f": 5, "n_honest": 5}, r"f must be an integer in \[0, n_honest-1=4\]"),
    ({"f": 7, "n_honest": 5}, r"f must be"),
    ({"aggregator": "median"}, r"unknown aggregator 'median'.*valid names are.*cwtm"),
    ({"attack": "boom"}, r"unknown attack 'boom'; valid names: alie"),
    ({"beta": 0.0}, r"beta"),
    ({"beta": -2.0, "scheme": "iid"}, r"beta"),
    ({"scheme": "gamma"}, r"gamma"),
    ({"attack": None}, r"attack=None needs f=0"),
    ({"mu": -0.1}, r"mu"),
    ({"aggregator": "krum", "f": 2, "n_honest": 3}, r"needs n >= 7"),
])
def test_federation_bad_inputs(digits, kw, match):
    opts = {"n_honest": 5, "f": 1, **kw}
    with pytest.raises(FedAuditError, match=match):
        Federation.build(digits, **opts)


def test_federation_rejects_regression_data():
    with pytest.raises(FedAuditError, match="classification"):
        Federation.build(synthetic_linear(50, 3), n_honest=2, f=0, attack=None)


def test_gd_on_robust_oracle_learns(digits):
    fed = Federation.build(digits, n_honest=10, f=1, beta=5.0, mu=1e-2, rng=0)
    x = fed.model.init()
    step = 1.0 / fed.smoothness()
    loss0 = fed.honest_loss(x)
    for _ in range(40):
        x = x - step * fed.oracle(x)
    assert fed.honest_loss(x) < 0.5 * loss0
    assert fed.test_accuracy(x) > 0.85


def test_test_accuracy_is_on_the_test_split(digits):
    # iid split with few clients and a short run: train and test accuracy differ; both are checked
    # against predictions computed here from the packed weights (W, b) = unpack(x)
    from fedaudit.fl.optimizers import DGD
    from fedaudit.fl.problems import FederationProblem
    from fedaudit.fl.training import run

    fed = Federation.build(digits, n_honest=3, f=0, attack=None, aggregator="mean", scheme="iid", rng=0)
    tr = run(DGD(0.5), fed, rounds=3, rng=0)
    x = tr.x_final
    W, b = fed.model.unpack(x)

    def acc(X, y):
        return float(np.mean(np.argmax(X @ W.T + b, axis=1) == y))

    test = acc(digits.X_test, digits.y_test)
    train = acc(np.vstack([A for A, _ in fed.clients]), np.concatenate([y for _, y in fed.clients]))
    assert abs(train - test) > 1e-3
    assert fed.test_accuracy(x) == pytest.approx(test, abs=1e-15)
    assert fed.train_accuracy(x) == pytest.approx(train, abs=1e-15)
    assert FederationProblem(fed).test_accuracy(x) == pytest.approx(test, abs=1e-15)
    assert tr.test_acc[-1] == pytest.approx(test, abs=1e-15)


def test_declared_f_configures_the_rule_not_the_adversary(digits):
    under = Federation.build(digits, n_honest=5, f=3, aggregator="cwtm", attack="nonfinite", declared_f=1, rng=0)
    assert under.f == 3 and under.n == 8 and under.aggregator.f == 1 and under.params()["declared_f"] == 1
    assert Federation.build(digits, n_honest=5, f=2, rng=0).declared_f == 2
    from fedaudit.errors import AggregatorBreakdown

    with pytest.raises(AggregatorBreakdown) as info:
        under.oracle(np.zeros(under.dim), 0)
    assert (info.value.n, info.value.nonfinite, info.value.tolerated) == (8, 3, 1)
    with pytest.raises(FedAuditError, match=r"declared_f must be an integer >= 0"):
        Federation.build(digits, n_honest=5, f=1, declared_f=-1)


def test_oracle_hands_its_generator_to_the_rule(digits):
    # bucketing draws its permutation from the oracle's rng: same seed, same aggregate, whatever
    # the rule or the federation did before; another seed, another permutation
    fed = Federation.build(digits, n_honest=6, f=1, aggregator="bucketing+cwtm", aggregator_kw={"s": 2},
                           attack="alie", optimal_attack=False, rng=0)
    x = np.zeros(fed.dim)
    g = fed.oracle(x, 5)
    fed.oracle(x)
    fed.aggregator(np.ones((7, fed.dim)))
    assert np.array_equal(fed.oracle(x, 5), g)
    assert np.array_equal(fed.oracle(x, np.random.default_rng(5)), g)
    assert any(not np.array_equal(fed.oracle(x, s), g) for s in (6, 7, 8))


# ----------------------------------------------------------------------------- registries


def test_partition_and_dataset_registries_take_users_entries():
    from fedaudit.fl.registry import DATASETS, PARTITIONS, register_dataset, register_partition

    assert {"iid", "dirichlet", "gamma", "extreme"} <= set(PARTITIONS.names())
    assert {"digits", "mnist", "synthetic"} <= set(DATASETS.names())
    y = np.arange(40) % 4
    with pytest.raises(FedAuditError, match=r"unknown partition scheme 'dirichlte'.*did you mean 'dirichlet'"):
        partition(y, 4, "dirichlte", beta=1.0)
    with pytest.raises(FedAuditError, match=r"unknown dataset 'digit'.*did you mean 'digits'"):
        load_dataset("digit")
    assert [p.tolist() for p in partition(y, 2, "gamma_similarity", gamma=1.0, rng=3)] == \
        [p.tolist() for p in partition(y, 2, "gamma", gamma=1.0, rng=3)]  # the documented alias
    assert PARTITIONS.aliases("gamma") == ("gamma_similarity", "gamma-similarity")
    assert PARTITIONS.aliases("dirichlet") == ("niid",) and {"iid", "dirichlet", "gamma", "extreme"} <= set(PARTITIONS.names())
    assert [p.tolist() for p in partition(y, 2, "NIID", beta=1.0, rng=3)] == \
        [p.tolist() for p in partition(y, 2, "dirichlet", beta=1.0, rng=3)]

    def halves(labels, n_clients, *, rng, beta=None, gamma=None, min_size=0, max_redraws=1000):
        """First half, second half."""
        return np.array_split(np.arange(labels.size), n_clients)

    def overlapping(labels, n_clients, *, rng, **kw):
        return [np.arange(labels.size)] * n_clients

    register_partition("halves-test", halves, aliases=("halves-alias",))
    register_partition("overlap-test", overlapping)
    register_dataset("tiny-test", lambda *, path=None, rng=0, **kw: synthetic_logistic(60, 3, rng=rng, **kw))
    try:
        assert [p.tolist() for p in partition(y, 2, "halves-test")] == [list(range(20)), list(range(20, 40))]
        assert [p.tolist() for p in partition(y, 2, "Halves-Alias")] == [list(range(20)), list(range(20, 40))]
        with pytest.raises(FedAuditError, match="exactly one client"):
            partition(y, 2, "overlap-test")
        assert load_dataset("tiny-test", rng=1).n_train + load_dataset("tiny-test", rng=1).n_test == 60
        fed = Federation.build(load_dataset("tiny-test", rng=1), n_honest=2, f=0, scheme="halves-test",
                               aggregator="mean", attack=None, rng=0)
        assert fed.params()["client_sizes"] == [len(p) for p in np.array_split(np.arange(fed.dataset.n_train), 2)]
    finally:
        PARTITIONS.unregister("halves-test")
        assert "halves-alias" not in PARTITIONS
        PARTITIONS.unregister("overlap-test")
        DATASETS.unregister("tiny-test")


def test_federation_from_a_seed_sequence_leaves_it_untouched():
    ss = np.random.SeedSequence(11)
    a = Federation("synthetic", n_honest=4, f=1, rng=ss)
    assert ss.n_children_spawned == 0
    b = Federation("synthetic", n_honest=4, f=1, rng=ss)
    assert a.params()["client_sizes"] == b.params()["client_sizes"]
    np.testing.assert_array_equal(a.dataset.X_train, b.dataset.X_train)
    x = np.zeros(a.dim)
    np.testing.assert_array_equal(a.oracle(x), b.oracle(x))
    # the same numbers as the integer seed of that SeedSequence
    c = Federation("synthetic", n_honest=4, f=1, rng=11)
    assert c.params()["client_sizes"] == a.params()["client_sizes"]


def test_gradient_heterogeneity_is_the_two_sides_of_the_condition():
    from fedaudit.fl.federation import gradient_heterogeneity

    G = np.array([[1.0, 0.0], [3.0, 2.0]])  # mean (2, 1): deviations (-1, -1), (1, 1)
    assert gradient_heterogeneity(G) == (2.0, 5.0)
    assert gradient_heterogeneity(G, G.mean(axis=0)) == (2.0, 5.0)
