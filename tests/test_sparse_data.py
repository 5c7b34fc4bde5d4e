"""fedaudit.fl.sparse_data: the planted scarce regression, federating datasets, the gene CSV loader."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fedaudit.errors import FedAuditError
from fedaudit.fl.data import synthetic_linear
from fedaudit.fl.sparse_data import (FederatedData, federate, load_digits_federated, load_gene_csv, r2_score,
                                     scarce_regression, support_recovery)


def test_scarce_regression_shapes_support_and_determinism():
    D = scarce_regression(d=200, support=10, samples=53, clients=5, rng=3)
    assert D.client_sizes == (11, 11, 11, 10, 10)
    assert D.n_features == 200 and D.task == "regression" and D.n_classes == 0
    S = D.support
    assert S.size == 10 and np.all(np.diff(S) > 0)
    w = D.params["w"]
    assert np.count_nonzero(w) == 10 and set(np.flatnonzero(w)) == set(S.tolist())
    assert np.all((np.abs(w[S]) >= 0.5) & (np.abs(w[S]) <= 1.5))
    E = scarce_regression(d=200, support=10, samples=53, clients=5, rng=3)
    assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(D.clients, E.clients))
    assert not np.array_equal(scarce_regression(d=200, support=10, samples=53, clients=5, rng=4).support, S)


def test_scarce_regression_noise_and_covariate_shift_match_their_laws():
    # residual y - <w, x> is N(0, sigma^2): check the variance with a chi-square interval
    sigma, h = 0.7, 2.0
    D = scarce_regression(d=50, support=5, samples=4000, clients=4, heterogeneity=h, noise=sigma,
                          val_samples=0, test_samples=4000, rng=0)
    X, y = D.pooled()
    r = y - X @ D.params["w"]
    n = r.size
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], n) / n
    assert lo * sigma**2 <= np.mean(r**2) <= hi * sigma**2
    # client i's feature mean is mu_i (within 4 standard errors per coordinate, 1/sqrt(n_i))
    for (Xi, _), mu in zip(D.clients, D.params["client_means"]):
        assert np.max(np.abs(Xi.mean(axis=0) - mu)) < 4.5 / np.sqrt(Xi.shape[0])
    # the client means have spread h: the pooled variance of the 4·50 draws is near h^2
    M = D.params["client_means"]
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], M.size) / M.size
    assert lo * h**2 <= np.mean(M**2) <= hi * h**2
    # the test rows follow the mixture: their residuals use the global w
    rt = D.y_test - D.X_test @ D.params["w"]
    assert abs(np.std(rt) - sigma) < 0.05


def test_coefficient_shift_stays_on_the_support():
    D = scarce_regression(d=100, support=7, samples=40, clients=4, coefficient_shift=0.3, rng=1)
    W = D.params["client_w"]
    off = np.setdiff1d(np.arange(100), D.support)
    assert np.all(W[:, off] == 0)
    assert np.all(np.abs(W[:, D.support] - D.params["w"][D.support]) > 0)
    X0, y0 = D.clients[0]
    assert np.std(y0 - X0 @ W[0]) < 2.0  # the client's own coefficients explain its targets


def test_scarce_regression_r2_of_the_truth_is_the_signal_fraction():
    D = scarce_regression(d=100, support=10, samples=40, clients=4, noise=1.0, test_samples=20000, rng=2)
    w = D.params["w"]
    # population R² of the true model: Var<w,x> / (Var<w,x> + sigma²), Var<w,x> = |w|² + Var over client means
    signal = np.var(D.X_test @ w)
    expected = signal / (signal + 1.0)
    assert abs(r2_score(D.y_test, D.X_test @ w) - expected) < 0.01
    assert r2_score(D.y_test, np.full(D.y_test.size, D.y_test.mean())) == pytest.approx(0.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"d": 1}, "d must be an integer in \\[2"),
    ({"support": 0}, "support must be an integer in \\[1"),
    ({"support": 100, "d": 100}, "support must be an integer in \\[1, d - 1"),
    ({"clients": 0}, "clients must be"),
    ({"samples": 5, "clients": 3}, "samples must be an integer in \\[2·clients"),
    ({"noise": -1.0}, "noise must be"),
    ({"heterogeneity": float("nan")}, "heterogeneity must be"),
    ({"d": 10**6, "samples": 300}, "at most 5e7"),
])
def test_scarce_regression_bad_input(kwargs, match):
    base = {"d": 100, "support": 5, "samples": 30, "clients": 3}
    with pytest.raises(FedAuditError, match=match):
        scarce_regression(**{**base, **kwargs})


def test_metrics_against_hand_values():
    assert r2_score([1.0, 2.0, 3.0], [1.0, 2.0, 4.0]) == pytest.approx(1 - 1 / 2)
    assert support_recovery(np.array([0, 1.0, 0, -2.0, 0]), [1, 2, 3, 4]) == 0.5
    with pytest.raises(FedAuditError, match="constant"):
        r2_score([1.0, 1.0], [1.0, 2.0])
    with pytest.raises(FedAuditError, match="finite"):
        r2_score([1.0, 2.0], [np.nan, 2.0])
    with pytest.raises(FedAuditError, match="support indices"):
        support_recovery(np.ones(3), [5])


def test_federate_covers_every_training_row_once_and_keeps_the_test_split():
    F = load_digits_federated(clients=7, scheme="dirichlet", beta=0.5, val_fraction=0.1, rng=0)
    assert isinstance(F, FederatedData) and F.task == "classification" and F.n_classes == 10
    X, y = F.pooled()
    allX = np.concatenate([X, F.X_val])
    assert allX.shape[0] == 1797 - F.X_test.shape[0]
    # every class is represented in validation (stratified)
    assert set(np.unique(F.y_val)) == set(range(10))
    assert min(F.client_sizes) >= 1
    json_ready = F.to_dict()
    assert json_ready["client_sizes"] == list(F.client_sizes) and "support" not in json_ready


def test_federate_regression_iid_only():
    data = synthetic_linear(100, 20, sparsity=3, rng=0)
    F = federate(data, 4, val_fraction=0.2, rng=1)
    assert F.task == "regression" and F.n_train + F.X_val.shape[0] == data.n_train
    assert np.array_equal(F.support, data.params["support"])
    with pytest.raises(FedAuditError, match="scheme must be 'iid' for regression"):
        federate(data, 4, scheme="dirichlet", beta=1.0)


def _write(tmp_path, text, name="genes.csv"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_load_gene_csv_reads_labels_features_and_standardises(tmp_path):
    rng = np.random.default_rng(0)
    n, g = 40, 6
    X = rng.normal(size=(n, g)) * np.arange(1, g + 1)
    labels = np.where(np.arange(n) < 25, "ALL", "AML")
    lines = ["id,label," + ",".join(f"g{j}" for j in range(g))]
    lines += [f"s{i},{labels[i]}," + ",".join(f"{v:.6f}" for v in X[i]) for i in range(n)]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    D = load_gene_csv(path, drop_columns=("id",), test_fraction=0.25, rng=1)
    assert D.n_classes == 2 and D.info["classes"] == ["ALL", "AML"]
    assert D.n_features == g and D.info["features"] == [f"g{j}" for j in range(g)]
    assert D.n_train + D.n_test == n and D.n_test == 10  # round(0.25·25) + round(0.25·15) = 6 + 4
    np.testing.assert_allclose(D.X_train.mean(axis=0), 0, atol=1e-12)
    np.testing.assert_allclose(D.X_train.std(axis=0), 1, atol=1e-12)
    # the raw values come back after undoing the train standardisation (independent check of parsing)
    raw = load_gene_csv(path, drop_columns=("id",), standardize=False, rng=1)
    rows = {tuple(np.round(r, 6)) for r in np.round(X, 6)}
    assert all(tuple(np.round(r, 6)) in rows for r in raw.X_train)
    assert np.sum(raw.y_train == 0) + np.sum(raw.y_test == 0) == 25


def test_load_gene_csv_semicolon_and_integer_labels(tmp_path):
    text = "a;b;y\n" + "\n".join(f"{i};{i * 2};{i % 3}" for i in range(12)) + "\n"
    D = load_gene_csv(_write(tmp_path, text), label_column="y", standardize=False)
    assert D.n_classes == 3 and D.info["classes"] == [0, 1, 2] and D.n_features == 2


@pytest.mark.parametrize("text, kwargs, match", [
    ("", {}, "is empty"),
    ("g1,label\n1,A\n2,B\n", {}, "at least 4 sample rows"),
    ("g1,label\n1,A\n2,B\n3,A\n4\n", {}, "line 5: 1 fields"),
    ("g1,cls\n1,A\n2,B\n3,A\n4,B\n", {}, "label_column='label' is not a column"),
    ("g1,label\n1,A\nx,B\n3,A\n4,B\n", {}, "line 3, column 'g1': 'x' is not a number"),
    ("g1,label\n1,A\nnan,B\n3,A\n4,B\n", {}, "not finite"),
    ("g1,label\n1,A\n2,A\n3,A\n4,A\n", {}, "at least 2 classes"),
    ("g1,label\n1,A\n2,\n3,A\n4,B\n", {}, "empty value on line 3"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"drop_columns": ("id",)}, "drop_columns"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"label_column": 5}, "label_column must be an integer in \\[0"),
])
def test_load_gene_csv_bad_files(tmp_path, text, kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        load_gene_csv(_write(tmp_path, text), **kwargs)


def test_load_gene_csv_missing_file(tmp_path):
    with pytest.raises(FedAuditError, match="does not exist"):
        load_gene_csv(tmp_path / "nope.csv")
