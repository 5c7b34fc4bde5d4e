"""fedaudit.fl.sparse_data: the planted scarce regression, federating datasets, MNIST from generated
IDX (raw and gzip) and .npz files, the gene CSV loader (one sample per row, and the public Golub
layout: one gene per row, labels in a second file)."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest
from scipy import stats

from fedaudit.errors import FedAuditError
from fedaudit.fl.data import synthetic_linear
from fedaudit.fl.data import MNIST_MEAN, MNIST_STD
from fedaudit.fl.sparse_data import (FederatedData, federate, load_digits_federated, load_gene_csv,
                                     load_mnist_federated, r2_score, scarce_regression, support_recovery)


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
    ({"d": 1}, "d must be an integer >= 2"),
    ({"support": 0}, "support must be an integer in \\[1"),
    ({"support": 100, "d": 100}, "support must be an integer in \\[1, d - 1"),
    ({"clients": 0}, "clients must be"),
    ({"samples": 5, "clients": 3}, "samples must be an integer >= 2·clients"),
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
    ("g1,label\n1,A\nx,B\n3,A\n4,B\n", {}, r"line 3, column 1 \('g1'\): 'x' is not a number"),
    ("g1,label\n1,A\n\n2,B\n3,A\nx,B\n", {}, r"line 6, column 1 \('g1'\)"),  # file lines, blank lines counted
    ("g1,label\n1,A\nnan,B\n3,A\n4,B\n", {}, "not finite"),
    ("g1,label\n1,A\n2,A\n3,A\n4,A\n", {}, "at least 2 classes"),
    ("g1,label\n1,A\n2,\n3,A\n4,B\n", {}, "empty value on line 3"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"drop_columns": ("id",)}, "drop_columns"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"label_column": 5}, "label_column must be an integer in \\[0"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"labels": {"1": "A"}}, "labels= and gene_column= are for orientation='genes'"),
    ("g1,label\n1,A\n2,B\n3,A\n4,B\n", {"orientation": "rows"}, "orientation must be one of 'samples', 'genes'"),
])
def test_load_gene_csv_bad_files(tmp_path, text, kwargs, match):
    with pytest.raises(FedAuditError, match=match):
        load_gene_csv(_write(tmp_path, text), **kwargs)


def test_load_gene_csv_missing_file(tmp_path):
    with pytest.raises(FedAuditError, match="does not exist"):
        load_gene_csv(tmp_path / "nope.csv")


# ----------------------------------------------------------------------------- Golub layout: genes as rows

def _golub_files(tmp_path, renamed_calls=False):
    """A small file in the layout of Kaggle's data_set_ALL_AML_train.csv: "Gene Description" (with
    commas, quoted), "Gene Accession Number", then per sample its value column (named by the
    patient number, columns not in patient order) and a "call" column (P/A/M); the labels in an
    actual.csv (patient, cancer) that lists more patients than the file holds, in another order."""
    rng = np.random.default_rng(3)
    genes, patients = 7, [5, 1, 9, 2, 7, 3, 8, 4, 6, 10]
    cancer = {p: ("AML" if p % 3 == 0 else "ALL") for p in range(1, 13)}
    E = np.round(rng.normal(100.0, 50.0, size=(genes, len(patients))), 1)  # genes × samples
    calls = [f"call.{i}" if renamed_calls and i else "call" for i in range(len(patients))]
    header = ['"Gene Description"', '"Gene Accession Number"']
    header += [h for p, c in zip(patients, calls) for h in (f'"{p}"', f'"{c}"')]
    lines = [",".join(header)]
    for g in range(genes):
        cells = [f'"GENE{g} protein, isoform {g}"', f"AFFX-{g}_at"]
        cells += [c for j in range(len(patients)) for c in (f"{E[g, j]:.1f}", "PAM"[(g + j) % 3])]
        lines.append(",".join(cells))
    data = tmp_path / ("renamed.csv" if renamed_calls else "data_set_ALL_AML_train.csv")
    data.write_text("\n".join(lines) + "\n")
    labels = tmp_path / "actual.csv"
    labels.write_text("patient,cancer\n" + "\n".join(f"{p},{cancer[p]}" for p in sorted(cancer, reverse=True)) + "\n")
    return data, labels, E, patients, cancer


def test_load_gene_csv_golub_layout_genes_as_rows_with_labels_from_actual_csv(tmp_path):
    data, labels, E, patients, cancer = _golub_files(tmp_path)
    D = load_gene_csv(data, orientation="genes", drop_columns=("Gene Description", "call"),
                      gene_column="Gene Accession Number", labels=labels, standardize=False, rng=2)
    assert D.info["orientation"] == "genes" and D.info["classes"] == ["ALL", "AML"]
    assert D.n_features == E.shape[0] and D.info["features"] == [f"AFFX-{g}_at" for g in range(E.shape[0])]
    assert D.n_train + D.n_test == len(patients)
    # every sample row is its patient's column of the generated matrix, with its patient's label
    column = {str(p): E[:, j] for j, p in enumerate(patients)}
    for X, y, names in ((D.X_train, D.y_train, D.info["samples_train"]), (D.X_test, D.y_test, D.info["samples_test"])):
        for row, label, name in zip(X, y, names):
            np.testing.assert_array_equal(row, column[name])
            assert D.info["classes"][label] == cancer[int(name)]
    # the same matrix written one sample per row (patients in the same order) loads to the same split
    rows = ["patient,cancer," + ",".join(f"g{g}" for g in range(E.shape[0]))]
    rows += [f"{p},{cancer[p]}," + ",".join(f"{v:.1f}" for v in E[:, j]) for j, p in enumerate(patients)]
    flat = tmp_path / "flat.csv"
    flat.write_text("\n".join(rows) + "\n")
    for standardize in (False, True):
        a = load_gene_csv(data, orientation="genes", drop_columns=("Gene Description", "call"),
                          gene_column="Gene Accession Number", labels=labels, standardize=standardize, rng=2)
        b = load_gene_csv(flat, label_column="cancer", drop_columns=("patient",), standardize=standardize, rng=2)
        np.testing.assert_array_equal(a.X_train, b.X_train)
        np.testing.assert_array_equal(a.X_test, b.X_test)
        np.testing.assert_array_equal(a.y_train, b.y_train)


def test_load_gene_csv_golub_layout_pandas_renamed_calls_and_a_labels_mapping(tmp_path):
    data, labels, E, patients, cancer = _golub_files(tmp_path, renamed_calls=True)
    kwargs = dict(orientation="genes", drop_columns=("Gene *", "call*"), standardize=False, rng=2)
    D = load_gene_csv(data, labels=cancer, **kwargs)  # integer keys match the header's "1", "2", …
    assert D.info["features"] == [f"line {n}" for n in range(2, E.shape[0] + 2)]
    ref = load_gene_csv(data, labels=labels, **kwargs)
    np.testing.assert_array_equal(D.X_train, ref.X_train)
    np.testing.assert_array_equal(D.y_test, ref.y_test)


def _genes_error(tmp_path, text, match, labels="actual", **kwargs):
    path = _write(tmp_path, text, "g.csv")
    if labels == "actual":
        labels = _write(tmp_path, "patient,cancer\n1,ALL\n2,AML\n3,ALL\n4,AML\n5,ALL\n", "actual.csv")
    with pytest.raises(FedAuditError, match=match):
        load_gene_csv(path, orientation="genes", labels=labels, **kwargs)


GENES = "Gene Accession Number,1,call,2,call,3,call,4,call\nG1,1.0,P,2.0,A,3.0,P,4.0,M\nG2,5,P,6,P,7,A,8,P\n"


@pytest.mark.parametrize("text, kwargs, match", [
    (GENES, {"gene_column": "Gene Accession Number"},
     r"sample 'call' names more than one column \(columns 3, 5, 7, 9\); list non-sample columns, such as the "
     r"Golub files' 'call', in drop_columns"),
    (GENES, {"drop_columns": ("call",)}, r"column 1: sample 'Gene Accession Number' has no label in .*actual.csv"),
    (GENES.replace("2.0", "A"), {"drop_columns": ("call",), "gene_column": "Gene Accession Number"},
     r"line 2, column 4 \('2'\): 'A' is not a number"),
    (GENES, {"drop_columns": ("call",), "gene_column": "Accession"}, "gene_column='Accession' is not a column"),
    (GENES.replace(",call\n", ",call,6\n", 1).replace("M\n", "M,1\n", 1).replace("P\n", "P,1\n", 1),
     {"drop_columns": ("call",), "gene_column": "Gene Accession Number"}, r"column 10: sample '6' has no label in .*actual.csv"),
    (GENES.replace(",3,", ",,", 1), {"drop_columns": ("call",), "gene_column": "Gene Accession Number"},
     "column 6 has an empty header"),
    (GENES.replace(",3,", ",2,", 1), {"drop_columns": ("call",), "gene_column": "Gene Accession Number"},
     r"sample '2' names more than one column \(columns 4, 6\)"),
    (GENES, {"drop_columns": ("call", "4"), "gene_column": "Gene Accession Number"}, "at least 4 sample columns"),
    (GENES.splitlines()[0] + "\n", {"drop_columns": ("call",), "gene_column": "Gene Accession Number"}, "no gene rows"),
    (GENES, {"drop_columns": ("calls",), "gene_column": "Gene Accession Number"}, r"drop_columns \['calls'\] match no column"),
    (GENES.replace("G2,5,P", "G2,inf,P"), {"drop_columns": ("call",), "gene_column": "Gene Accession Number"},
     r"line 3, column 2 \('1'\): value inf is not finite"),
])
def test_load_gene_csv_genes_layout_bad_files_name_the_line_or_column(tmp_path, text, kwargs, match):
    _genes_error(tmp_path, text, match, **kwargs)


@pytest.mark.parametrize("labels_text, match", [
    (None, r"orientation='genes' needs labels="),
    ("patient,cancer,sex\n1,ALL,f\n", "must have 2 columns \\(sample, label\\), got 3"),
    ("patient,cancer\n1,ALL\n2,AML\n1,AML\n", r"line 4: sample '1' has two labels, 'ALL' and 'AML'"),
    ("patient,cancer\n1,ALL\n2,\n", r"line 3: empty sample name or label"),
    ("patient,cancer\n1,ALL\n2,AML\n3,ALL\n4,ALL\n5\n", r"line 6: 1 fields, but the header has 2"),
    ("patient,cancer\n1,ALL\n2,ALL\n3,ALL\n4,ALL\n", "at least 2 classes"),
])
def test_load_gene_csv_bad_labels_files(tmp_path, labels_text, match):
    labels = None if labels_text is None else _write(tmp_path, labels_text, "labels.csv")
    _genes_error(tmp_path, GENES, match, labels=labels, drop_columns=("call",), gene_column="Gene Accession Number")


def test_load_gene_csv_labels_must_be_a_path_or_a_mapping(tmp_path):
    _genes_error(tmp_path, GENES, "labels must be a CSV path or a mapping", labels=["ALL", "AML"],
                 drop_columns=("call",), gene_column="Gene Accession Number")
    _genes_error(tmp_path, GENES, "labels CSV .*nope.csv does not exist", labels=tmp_path / "nope.csv",
                 drop_columns=("call",), gene_column="Gene Accession Number")


# ----------------------------------------------------------------------------- MNIST from files

def _idx_bytes(arr):
    """The IDX format written by hand (LeCun's spec): magic 0x0000, type 0x08 (ubyte), ndim, then
    ndim big-endian uint32 sizes and the data."""
    return struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def _mnist_set(rng, n_train=40, n_test=10):
    return (rng.integers(0, 256, size=(n_train, 28, 28), dtype=np.uint8), np.arange(n_train, dtype=np.uint8) % 10,
            rng.integers(0, 256, size=(n_test, 28, 28), dtype=np.uint8), np.arange(n_test, dtype=np.uint8) % 10)


@pytest.mark.parametrize("layout", ["idx-gzip", "idx-raw", "npz"])
def test_load_mnist_federated_from_generated_files(tmp_path, layout):
    xtr, ytr, xte, yte = _mnist_set(np.random.default_rng(5))
    names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    if layout == "npz":
        path = tmp_path / "mnist.npz"
        np.savez(path, x_train=xtr, y_train=ytr, x_test=xte, y_test=yte)
    else:
        path = tmp_path
        for name, arr in zip(names, (xtr, ytr, xte, yte)):
            if layout == "idx-gzip":
                with gzip.open(tmp_path / (name + ".gz"), "wb") as fh:
                    fh.write(_idx_bytes(arr))
            else:
                (tmp_path / name).write_bytes(_idx_bytes(arr))
    fed = load_mnist_federated(path, clients=4, val_fraction=0.25, rng=0)
    assert fed.task == "classification" and fed.n_classes == 10 and fed.n_clients == 4 and fed.n_features == 784
    # the test split is the files' test part, pixels mapped by (x/255 − 0.1307)/0.3081
    np.testing.assert_allclose(fed.X_test, (xte.reshape(10, -1) / 255.0 - MNIST_MEAN) / MNIST_STD, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(fed.y_test, yte)
    # clients and validation together hold every training image exactly once, with its label
    X, y = fed.pooled()
    X, y = np.concatenate([X, fed.X_val]), np.concatenate([y, fed.y_val])
    pixels = np.rint((X * MNIST_STD + MNIST_MEAN) * 255).astype(np.int64)
    order = [int(np.flatnonzero((xtr.reshape(40, -1) == row).all(axis=1))[0]) for row in pixels]
    assert sorted(order) == list(range(40)) and np.array_equal(y, ytr[order])
    assert fed.X_val.shape[0] == 10  # stratified: round(0.25·4) per class


def test_load_mnist_federated_missing_files_say_what_is_missing_and_that_nothing_is_downloaded(tmp_path):
    with pytest.raises(FedAuditError, match=r"MNIST files not found in .*missing train-images-idx3-ubyte\[\.gz\].*"
                                            r"no download is attempted"):
        load_mnist_federated(tmp_path)
    with pytest.raises(FedAuditError, match=r"MNIST path .*nowhere does not exist"):
        load_mnist_federated(tmp_path / "nowhere")


def test_load_mnist_federated_a_truncated_idx_header_is_a_fedaudit_error(tmp_path):
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03")  # a header cut short
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(_idx_bytes(np.zeros(2, dtype=np.uint8)))
    with pytest.raises(FedAuditError, match="train-images-idx3-ubyte.*header needs 16 bytes, the file has 4"):
        load_mnist_federated(tmp_path)


def test_load_mnist_federated_a_cut_gzip_stream_is_a_fedaudit_error(tmp_path):
    import gzip

    whole = gzip.compress(_idx_bytes(np.zeros((3, 2, 2), dtype=np.uint8)))
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(whole[: len(whole) // 2])  # a download cut short
    for name in ("train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (tmp_path / name).write_bytes(_idx_bytes(np.zeros(3, dtype=np.uint8)))
    with pytest.raises(FedAuditError, match="train-images-idx3-ubyte.gz could not be read as gzip-compressed IDX"):
        load_mnist_federated(tmp_path)
