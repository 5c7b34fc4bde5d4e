"""Data for federated sparse learning (E-FLoPS, Fed-HT, FedAvg+prune), all offline.

* :class:`FederatedData` — per-client training sets plus a validation and a test set, the task
  (regression or classification) and, for planted problems, the true coefficients and support;
* :func:`scarce_regression` — planted sparse linear regression in the scarce regime d ≫ N across
  heterogeneous clients (the E-FLoPS synthetic benchmark);
* :func:`federate` — split any :class:`~fedaudit.fl.data.Dataset` among clients with the
  :mod:`fedaudit.fl.partition` schemes (a validation part is held out of the training rows first);
* :func:`load_digits_federated` / :func:`load_mnist_federated` — the 8×8 digits
  (:func:`~fedaudit.fl.data.load_digits_dataset`) or MNIST from local files
  (:func:`~fedaudit.fl.data.load_mnist`), federated;
* :func:`load_gene_csv` — a gene-expression matrix (Golub leukemia, Khan SRBCT, …) from a CSV file
  the user supplies: one sample per row with a label column, or one gene per row (the public
  Golub files) with the labels from a second CSV or a mapping. (Not registered in
  :data:`fedaudit.fl.registry.DATASETS`: a registration made on import would make the registry's
  contents depend on whether this module was imported.)

Every random choice uses a numpy Generator from :func:`fedaudit.rng.as_generator`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from fedaudit.deprecation import module_aliases
from fedaudit.errors import FedAuditError
from fedaudit.fl.data import Dataset, load_digits_dataset, load_mnist, stratified_split
from fedaudit.fl.partition import partition
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_choice, check_int, check_probability, check_real

__all__ = ["FederatedData", "scarce_regression", "federate", "load_digits_federated", "load_mnist_federated",
           "load_gene_csv", "GENE_CSV_ORIENTATIONS", "r2_score", "support_recovery", "gram_spectrum"]


@dataclass(frozen=True, eq=False)
class FederatedData:
    """Training data held by ``len(clients)`` clients, plus held-out validation and test sets.

    ``clients`` is a tuple of (X_i, y_i) pairs: X_i float64 (n_i, p); y_i float64 targets
    (``task="regression"``) or int64 labels in {0, …, n_classes − 1} (``"classification"``).
    ``X_val``/``y_val`` (possibly 0 rows) is for tuning hyperparameters, ``X_test``/``y_test`` for
    the reported figures only. ``params`` holds the generating parameters of planted data
    (``"w"``: true coefficients, ``"support"``: the sorted true support), empty for real data.
    """

    clients: tuple[tuple[np.ndarray, np.ndarray], ...]
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    task: str
    n_classes: int
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_clients(self) -> int:
        return len(self.clients)

    @property
    def n_features(self) -> int:
        return int(self.X_test.shape[1])

    @property
    def client_sizes(self) -> tuple[int, ...]:
        return tuple(int(X.shape[0]) for X, _ in self.clients)

    @property
    def n_train(self) -> int:
        return sum(self.client_sizes)

    @property
    def support(self) -> np.ndarray | None:
        """The true support (sorted int64) of planted data, else None."""
        s = self.params.get("support")
        return None if s is None else np.asarray(s, dtype=np.int64)

    def pooled(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, y): every client's training rows stacked in client order."""
        return (np.concatenate([X for X, _ in self.clients]), np.concatenate([y for _, y in self.clients]))

    def to_dict(self) -> dict[str, Any]:
        """Sizes, task and provenance (no data arrays; the true support of planted data)."""
        out: dict[str, Any] = {"name": self.name, "task": self.task, "n_classes": self.n_classes,
                               "n_features": self.n_features, "client_sizes": list(self.client_sizes),
                               "n_val": int(self.X_val.shape[0]), "n_test": int(self.X_test.shape[0]),
                               "info": dict(self.info)}
        if self.support is not None:
            out["support"] = self.support.tolist()
        return out

    def summary(self) -> str:
        """One line: name, clients, sizes, dimension."""
        return (f"{self.name}: {self.n_clients} clients, {self.n_train} training rows "
                f"(per client {min(self.client_sizes)}..{max(self.client_sizes)}), {self.n_features} features, "
                f"{self.X_val.shape[0]} validation / {self.X_test.shape[0]} test rows, {self.task}")

    def __repr__(self) -> str:
        return (f"FederatedData(name={self.name!r}, n_clients={self.n_clients}, n_train={self.n_train}, "
                f"n_features={self.n_features}, task={self.task!r})")


# ----------------------------------------------------------------------------- metrics


def r2_score(y_true: Any, y_pred: Any) -> float:
    """Coefficient of determination R² = 1 − Σ(y − ŷ)² / Σ(y − ȳ)² (can be negative).
    A constant ``y_true`` is a FedAuditError (R² undefined)."""
    y = np.asarray(y_true, dtype=np.float64).ravel()
    p = np.asarray(y_pred, dtype=np.float64).ravel()
    if y.size != p.size or y.size < 2:
        raise FedAuditError(f"y_true and y_pred must have the same length >= 2, got {y.size} and {p.size}")
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    if ss_tot == 0.0:
        raise FedAuditError("R² is undefined for a constant y_true (total sum of squares 0)")
    if not np.isfinite(p).all():
        raise FedAuditError("y_pred must contain only finite values (the model diverged)")
    return 1.0 - float(np.sum((y - p) ** 2)) / ss_tot


def support_recovery(theta: Any, support: Any) -> float:
    """|supp(θ̂) ∩ S| / |S|: the fraction of the true support S found among the nonzeros of θ̂."""
    theta = np.asarray(theta, dtype=np.float64).ravel()
    S = np.asarray(support, dtype=np.int64).ravel()
    if S.size == 0:
        raise FedAuditError("support must be non-empty")
    if S.min() < 0 or S.max() >= theta.size:
        raise FedAuditError(f"support indices must lie in [0, {theta.size - 1}] (the length of theta)")
    return float(np.count_nonzero(theta[S])) / S.size


def gram_spectrum(clients: Any) -> np.ndarray:
    """λ_max(X_iᵀX_i/n_i) for every client i (float64, one per client): the smoothness constant of
    client i's ½·mean-squared-error loss, so local gradient descent on it is stable only for step
    sizes γ < 2/λ_max. ``clients`` is a :class:`FederatedData` or a sequence of (X_i, y_i) pairs.
    With covariate shift μ_i the rank-one term μ_iμ_iᵀ dominates: for :func:`scarce_regression`'s
    defaults (d = 1000, h = 0.5, n_i = 30) λ_max ≈ ‖μ_i‖² + (√(d/n_i) + 1)² ≈ 250 + 46."""
    pairs = clients.clients if isinstance(clients, FederatedData) else clients
    out = []
    for i, pair in enumerate(pairs):
        X = np.asarray(pair[0], dtype=np.float64)
        if X.ndim != 2 or X.shape[0] < 1:
            raise FedAuditError(f"clients[{i}]: X must be a matrix with at least 1 row, got shape {X.shape}")
        out.append(float(np.linalg.norm(X, 2) ** 2 / X.shape[0]))
    if not out:
        raise FedAuditError("clients must hold at least 1 (X, y) pair, got 0")
    return np.array(out)


# ----------------------------------------------------------------------------- planted regression


def scarce_regression(d: int = 1000, support: int = 50, samples: int = 300, clients: int = 10,
                      heterogeneity: float = 0.5, noise: float = 1.0, *, coefficient_shift: float = 0.0,
                      val_samples: int = 200, test_samples: int = 1000, rng: RngLike = 0) -> FederatedData:
    """Planted sparse linear regression in the scarce regime (d ≫ N), split over heterogeneous clients.

    True coefficients: a support S of ``support`` = k coordinates drawn uniformly without
    replacement; w*_j = s_j·u_j on S with random signs s_j and magnitudes u_j ~ U[0.5, 1.5]
    (bounded away from 0, so every true coordinate is identifiable at moderate noise), 0 elsewhere.

    Client i (``samples`` rows split as evenly as possible, sizes differing by at most 1) draws
    x = μ_i + g, g ~ N(0, I_d), with its own covariate mean μ_i ~ N(0, h²·I_d) (h =
    ``heterogeneity``: covariate shift, as in Fed-HT's Simulation I, Tong et al. 2021) and targets
    y = ⟨w_i, x⟩ + σ·ε, ε ~ N(0, 1), σ = ``noise``; w_i = w* + c·ξ_i ⊙ 1_S with ξ_i ~ N(0, I) and
    c = ``coefficient_shift`` (client-specific coefficients on the common support S; c = 0: all
    clients share w*). Validation and test rows are drawn from the mixture of the clients'
    covariate laws (each row from a uniformly chosen client) with y = ⟨w*, x⟩ + σ·ε.

    The defaults (d = 1000, k = 50, N = 300, 10 clients) are the issue's scarce regime:
    N ≈ 2k·ln(d/k), near the sample size where support recovery starts to be possible.
    ``params`` = {"w": w*, "support": S, "client_means": (clients, d), "client_w": (clients, d)}.
    """
    d = check_int("d", d, low=2)
    k = check_int("support", support, low=1, high=d - 1, high_name="d - 1")
    clients = check_int("clients", clients, low=1)
    samples = check_int("samples", samples, low=2 * clients, low_name="2·clients")
    h = check_real("heterogeneity", heterogeneity, low=0.0)
    sigma = check_real("noise", noise, low=0.0)
    c = check_real("coefficient_shift", coefficient_shift, low=0.0)
    val_samples = check_int("val_samples", val_samples, low=0)
    test_samples = check_int("test_samples", test_samples, low=2)
    if d * (samples + val_samples + test_samples) > 50_000_000:
        raise FedAuditError(f"d·(samples + val_samples + test_samples) must be at most 5e7 (400 MB of float64), "
                            f"got d={d} × {samples + val_samples + test_samples} rows")
    rng = as_generator(rng)
    S = np.sort(rng.choice(d, size=k, replace=False)).astype(np.int64)
    w = np.zeros(d)
    w[S] = rng.choice([-1.0, 1.0], size=k) * rng.uniform(0.5, 1.5, size=k)
    means = h * rng.standard_normal((clients, d))
    W = np.tile(w, (clients, 1))
    if c > 0:
        W[:, S] += c * rng.standard_normal((clients, k))
    sizes = [len(part) for part in np.array_split(np.arange(samples), clients)]
    parts = []
    for i, n_i in enumerate(sizes):
        X = means[i] + rng.standard_normal((n_i, d))
        parts.append((X, X @ W[i] + sigma * rng.standard_normal(n_i)))

    def held_out(n: int) -> tuple[np.ndarray, np.ndarray]:
        who = rng.integers(clients, size=n)
        X = means[who] + rng.standard_normal((n, d))
        return X, X @ w + sigma * rng.standard_normal(n)

    X_val, y_val = held_out(val_samples)
    X_test, y_test = held_out(test_samples)
    return FederatedData(clients=tuple(parts), X_val=X_val, y_val=y_val, X_test=X_test, y_test=y_test,
                         task="regression", n_classes=0, name="scarce-regression",
                         params={"w": w, "support": S, "client_means": means, "client_w": W},
                         info={"d": d, "support": k, "samples": samples, "clients": clients, "heterogeneity": h,
                               "noise": sigma, "coefficient_shift": c})


# ----------------------------------------------------------------------------- federating a Dataset


def federate(dataset: Dataset, clients: int, *, scheme: str = "iid", beta: float | None = None,
             gamma: float | None = None, val_fraction: float = 0.0, min_size: int = 1,
             rng: RngLike = 0) -> FederatedData:
    """Split ``dataset``'s training rows among ``clients`` clients.

    First a ``val_fraction`` of the training rows is held out as the validation set (stratified by
    label for classification, :func:`~fedaudit.fl.data.stratified_split`; uniformly for
    regression); the rest is split with :func:`fedaudit.fl.partition.partition` (``scheme`` =
    iid / dirichlet (``beta``) / gamma (``gamma``) / extreme; label-based schemes need class
    labels). The dataset's test split stays the test set.
    """
    if not isinstance(dataset, Dataset):
        raise FedAuditError(f"dataset must be a fedaudit.fl.Dataset, got {type(dataset).__name__}")
    clients = check_int("clients", clients, low=1)
    val_fraction = check_real("val_fraction", val_fraction, low=0.0, high=1.0, open_high=True)
    rng = as_generator(rng)
    task = "classification" if dataset.n_classes > 0 else "regression"
    X, y = dataset.X_train, dataset.y_train
    if val_fraction > 0:
        if task == "classification":
            tr, va = stratified_split(y, val_fraction, rng)
        else:
            perm = rng.permutation(y.size)
            n_val = min(max(int(round(val_fraction * y.size)), 1), y.size - 1)
            tr, va = perm[n_val:], perm[:n_val]
    else:
        tr, va = np.arange(y.size), np.arange(0)
    Xtr, ytr = X[tr], y[tr]
    if task == "regression" and scheme != "iid":
        raise FedAuditError(f"scheme must be 'iid' for regression data (the other schemes split by class label), "
                            f"got scheme={scheme!r}")
    labels = ytr if task == "classification" else np.zeros(ytr.size, dtype=np.int64)
    parts = partition(labels, clients, scheme, beta=beta, gamma=gamma, rng=rng, min_size=min_size)
    return FederatedData(clients=tuple((Xtr[p], ytr[p]) for p in parts), X_val=X[va], y_val=y[va],
                         X_test=dataset.X_test, y_test=dataset.y_test, task=task, n_classes=dataset.n_classes,
                         name=dataset.name, params=dict(dataset.params),
                         info={**dataset.info, "scheme": scheme, "beta": beta, "gamma": gamma,
                               "val_fraction": val_fraction})


def load_digits_federated(clients: int = 10, *, scheme: str = "iid", beta: float | None = None,
                          test_fraction: float = 0.25, val_fraction: float = 0.1, rng: RngLike = 0) -> FederatedData:
    """scikit-learn's 8×8 digits (:func:`~fedaudit.fl.data.load_digits_dataset`, standardised),
    federated with :func:`federate` (the offline stand-in for MNIST)."""
    rng = as_generator(rng)
    data = load_digits_dataset(test_fraction=test_fraction, rng=rng)
    return federate(data, clients, scheme=scheme, beta=beta, val_fraction=val_fraction, rng=rng)


def load_mnist_federated(path: str | Path, clients: int = 10, *, scheme: str = "iid", beta: float | None = None,
                         train_fraction: float = 1.0, val_fraction: float = 0.1, rng: RngLike = 0) -> FederatedData:
    """MNIST from local files (:func:`~fedaudit.fl.data.load_mnist`, nothing is downloaded),
    federated with :func:`federate`."""
    rng = as_generator(rng)
    data = load_mnist(path, train_fraction=train_fraction, rng=rng)
    return federate(data, clients, scheme=scheme, beta=beta, val_fraction=val_fraction, rng=rng)


# ----------------------------------------------------------------------------- gene expression CSV

#: ``load_gene_csv(orientation=...)``: one sample per row, or one gene per row (samples as columns)
GENE_CSV_ORIENTATIONS = ("samples", "genes")


def _read_csv(path: Path, delimiter: str | None, what: str) -> tuple[list[list[str]], list[int]]:
    """The non-blank rows of the CSV file ``path`` (``delimiter`` None sniffs comma/semicolon/tab on
    the first line), every row with as many fields as the first (the header), and the file line
    each row ends on."""
    if not path.is_file():
        raise FedAuditError(f"{what} {path} does not exist or is not a file")
    with open(path, newline="", encoding="utf-8-sig") as fh:
        text = fh.read()
    if not text.strip():
        raise FedAuditError(f"{path} is empty")
    if delimiter is None:
        try:
            delimiter = csv.Sniffer().sniff(text.lstrip().splitlines()[0], delimiters=",;\t").delimiter
        except csv.Error:
            delimiter = ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows, lines = [], []
    for row in reader:
        if row and any(c.strip() for c in row):
            rows.append(row)
            lines.append(reader.line_num)
    for n, row in zip(lines[1:], rows[1:]):
        if len(row) != len(rows[0]):
            raise FedAuditError(f"{path} line {n}: {len(row)} fields, but the header has {len(rows[0])}")
    return rows, lines


def _columns(path: Path, header: list[str], patterns: tuple[str, ...], what: str) -> set[int]:
    """Positions of the columns whose header matches one of the shell-style ``patterns``
    (:func:`fnmatch.fnmatchcase`: "call*" drops every "call", "call.1", …); a pattern that
    matches no column is a FedAuditError."""
    hit = {j for j, h in enumerate(header) for pat in patterns if fnmatchcase(h, pat)}
    missing = [pat for pat in patterns if not any(fnmatchcase(h, pat) for h in header)]
    if missing:
        raise FedAuditError(f"{what} {missing} match no column of {path} "
                            f"(columns: {', '.join(header[:8])}{', …' if len(header) > 8 else ''})")
    return hit


def _label_map(labels: Any) -> tuple[dict[str, str], str]:
    """Sample name → label from a mapping, or from a CSV file with a header row and two columns
    (sample, label), e.g. Golub's ``actual.csv`` (patient, cancer). Returns (map, its source)."""
    if isinstance(labels, (str, Path)):
        path = Path(labels)
        rows, lines = _read_csv(path, None, "labels CSV")
        if len(rows[0]) != 2:
            raise FedAuditError(f"labels CSV {path} must have 2 columns (sample, label), got {len(rows[0])}: "
                                f"{', '.join(rows[0])}")
        out: dict[str, str] = {}
        for n, (name, label) in zip(lines[1:], rows[1:]):
            name, label = name.strip(), label.strip()
            if not name or not label:
                raise FedAuditError(f"labels CSV {path} line {n}: empty sample name or label ({name!r}, {label!r})")
            if out.get(name, label) != label:
                raise FedAuditError(f"labels CSV {path} line {n}: sample {name!r} has two labels, "
                                    f"{out[name]!r} and {label!r}")
            out[name] = label
        return out, str(path)
    if isinstance(labels, Mapping):
        return {str(k).strip(): str(v).strip() for k, v in labels.items()}, "the labels mapping"
    raise FedAuditError(f"labels must be a CSV path or a mapping sample → label, got {type(labels).__name__}")


def _numbers(path: Path, rows: list[list[str]], header: list[str], cols: list[int], lines: list[int]) -> np.ndarray:
    """rows × cols as float64; a non-number or a non-finite value is a FedAuditError naming its file
    line (``lines[r]`` is that of ``rows[r]``) and column."""
    out = np.empty((len(rows), len(cols)))
    for r, row in enumerate(rows):
        for c, j in enumerate(cols):
            try:
                out[r, c] = float(row[j])
            except ValueError:
                raise FedAuditError(f"{path} line {lines[r]}, column {j + 1} ({header[j]!r}): {row[j]!r} is "
                                    "not a number (list non-feature columns in drop_columns)") from None
    if not np.isfinite(out).all():
        r, c = np.argwhere(~np.isfinite(out))[0]
        raise FedAuditError(f"{path} line {lines[r]}, column {cols[c] + 1} ({header[cols[c]]!r}): value "
                            f"{out[r, c]} is not finite (impute missing values first)")
    return out


def load_gene_csv(path: str | Path, *, label_column: str | int = "label", drop_columns: tuple[str, ...] = (),
                  test_fraction: float = 0.25, standardize: bool = True, delimiter: str | None = None,
                  orientation: str = "samples", labels: Any = None, gene_column: str | None = None,
                  rng: RngLike = 0) -> Dataset:
    """A gene-expression classification set (e.g. Golub leukemia 72 × 7129, ALL vs AML; Khan SRBCT)
    from a CSV file with a header row. Nothing is downloaded; a malformed file raises a
    FedAuditError naming the line or column.

    ``orientation="samples"``: **one sample per row**; ``label_column`` names the label column (a
    header name, or its 0-based position) and every other column not in ``drop_columns`` (sample
    ids) is a numeric gene.

    ``orientation="genes"``: **one gene per row, one sample per column** (the layout of the public
    Golub files ``data_set_ALL_AML_train.csv`` / ``…_independent.csv``: "Gene Description",
    "Gene Accession Number", then per sample a column named by the sample and a "call" column).
    The header cells name the samples; ``drop_columns`` lists the non-sample columns as
    shell-style patterns (every matching column is dropped, so ``("Gene Description", "call*")``
    removes all the P/A/M call columns); ``gene_column`` (e.g. "Gene Accession Number") names the
    genes in ``info["features"]`` and is not a sample. ``labels`` gives each sample's label by
    its name: a CSV path with a header row and two columns (sample, label), such as Golub's
    ``actual.csv`` (patient, cancer), or a mapping; labels of samples not in the file are ignored,
    a sample without a label is an error. The matrix is transposed to samples × genes.

    Labels may be strings ("ALL"/"AML") or integers and are encoded as 0..C−1 in sorted order
    (``info["classes"]`` keeps the originals). ``delimiter`` None sniffs comma/semicolon/tab.
    The split is :func:`~fedaudit.fl.data.stratified_split` (``test_fraction``, ``rng``); with
    ``standardize`` each gene is centred and scaled with the *train* mean and std (constant genes
    are only centred).
    """
    path = Path(path)
    orientation = check_choice("orientation", orientation, GENE_CSV_ORIENTATIONS)
    test_fraction = check_probability("test_fraction", test_fraction)
    rows, lines = _read_csv(path, delimiter, "gene-expression CSV")
    header = [h.strip() for h in rows[0]]
    body, lines = rows[1:], lines[1:]
    drop = _columns(path, header, tuple(drop_columns), "drop_columns")
    if orientation == "samples":
        if labels is not None or gene_column is not None:
            raise FedAuditError("labels= and gene_column= are for orientation='genes' (one gene per row); with one "
                                "sample per row the header names the genes and label_column the labels")
        if len(body) < 4:
            raise FedAuditError(f"{path} must hold a header and at least 4 sample rows, got {len(body)} row(s)")
        if isinstance(label_column, str):
            if label_column not in header:
                raise FedAuditError(f"label_column={label_column!r} is not a column of {path} "
                                    f"(columns: {', '.join(header[:8])}{', …' if len(header) > 8 else ''})")
            li = header.index(label_column)
        else:
            li = check_int("label_column", label_column, low=0, high=len(header) - 1, high_name="columns − 1")
        keep = [j for j in range(len(header)) if j not in drop | {li}]
        if not keep:
            raise FedAuditError(f"{path} has no feature column besides the label")
        X = _numbers(path, body, header, keep, lines)
        raw = [row[li].strip() for row in body]
        if "" in raw:
            raise FedAuditError(f"{path}: the label column {header[li]!r} has an empty value on line "
                                f"{lines[raw.index('')]}")
        features = [header[j] for j in keep]
        samples = None
    else:
        if labels is None:
            raise FedAuditError("orientation='genes' needs labels= (a CSV path with columns sample, label, such as "
                                "Golub's actual.csv, or a mapping sample name → label)")
        if gene_column is not None and gene_column not in header:
            raise FedAuditError(f"gene_column={gene_column!r} is not a column of {path} "
                                f"(columns: {', '.join(header[:8])}{', …' if len(header) > 8 else ''})")
        gi = None if gene_column is None else header.index(gene_column)
        keep = [j for j in range(len(header)) if j not in drop and j != gi]
        if len(keep) < 4:
            raise FedAuditError(f"{path} must hold at least 4 sample columns besides drop_columns and gene_column, "
                                f"got {len(keep)}")
        if not body:
            raise FedAuditError(f"{path} has a header but no gene rows")
        samples = [header[j] for j in keep]
        for j in keep:
            if not header[j]:
                raise FedAuditError(f"{path} column {j + 1} has an empty header: a sample column is named by its "
                                    "sample (list non-sample columns in drop_columns)")
            if samples.count(header[j]) > 1:
                raise FedAuditError(f"{path}: sample {header[j]!r} names more than one column (columns "
                                    f"{', '.join(str(i + 1) for i in keep if header[i] == header[j])}); list "
                                    "non-sample columns, such as the Golub files' 'call', in drop_columns")
        mapping, source = _label_map(labels)
        unlabelled = [(j, header[j]) for j in keep if header[j] not in mapping]
        if unlabelled:
            j, name = unlabelled[0]
            raise FedAuditError(f"{path} column {j + 1}: sample {name!r} has no label in {source} "
                                f"({len(unlabelled)} unlabelled sample column(s); list non-sample columns in "
                                "drop_columns)")
        X = _numbers(path, body, header, keep, lines).T
        raw = [mapping[name] for name in samples]
        features = ([row[gi].strip() for row in body] if gi is not None
                    else [f"line {n}" for n in lines])
    try:
        values: list[Any] = [int(v) for v in raw]
    except ValueError:
        values = raw
    classes = sorted(set(values))
    if len(classes) < 2:
        raise FedAuditError(f"{path}: the labels must hold at least 2 classes, got {classes}")
    y = np.array([classes.index(v) for v in values], dtype=np.int64)
    tr, te = stratified_split(y, test_fraction, rng)
    X_train, X_test = X[tr], X[te]
    if standardize:
        m, s = X_train.mean(axis=0), X_train.std(axis=0)
        s = np.where(s > 0, s, 1.0)
        X_train, X_test = (X_train - m) / s, (X_test - m) / s
    info = {"source": str(path), "orientation": orientation, "classes": classes, "features": features,
            "test_fraction": test_fraction, "standardize": bool(standardize)}
    if samples is not None:
        info["samples_train"] = [samples[i] for i in tr]
        info["samples_test"] = [samples[i] for i in te]
    return Dataset(X_train=np.ascontiguousarray(X_train), y_train=y[tr], X_test=np.ascontiguousarray(X_test),
                   y_test=y[te], n_classes=len(classes), name=path.stem, info=info)


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"ORIENTATIONS": ("GENE_CSV_ORIENTATIONS", lambda: GENE_CSV_ORIENTATIONS)})
