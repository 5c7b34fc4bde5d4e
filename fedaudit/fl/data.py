"""Datasets for federated simulations, all offline.

A :class:`Dataset` holds a train/test split as float64 feature matrices and int64 labels.

* :func:`load_digits_dataset` — scikit-learn's bundled 8×8 digits (1797 × 64, 10 classes), the
  offline stand-in for MNIST (nothing is downloaded).
* :func:`load_mnist` — MNIST from files the user already has (IDX, optionally gzipped, or a
  Keras-style ``.npz``); normalised as in the PIGS code: x/255, then (x − 0.1307)/0.3081.
* :func:`synthetic_logistic` / :func:`synthetic_linear` — generated data with known generating
  parameters, stored in ``Dataset.params``.

Every random choice uses a numpy Generator from :func:`fedaudit.rng.as_generator`.
"""

from __future__ import annotations

import gzip
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.fl.registry import DATASETS, lookup
from fedaudit.rng import RngLike, as_generator
from fedaudit.validation import check_int, check_probability, check_real

__all__ = [
    "Dataset",
    "MNIST_MEAN",
    "MNIST_STD",
    "load_digits_dataset",
    "load_mnist",
    "synthetic_logistic",
    "synthetic_linear",
    "load_dataset",
    "stratified_split",
]

#: Torchvision's MNIST normalisation constants (``transforms.Normalize((0.1307,), (0.3081,))``).
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081


@dataclass(frozen=True, eq=False)
class Dataset:
    """A train/test split.

    ``X_train`` (N, p) and ``X_test`` (N', p) are float64. ``y_train``/``y_test`` are int64
    class labels in {0, …, n_classes − 1}; for regression data (:func:`synthetic_linear`) they
    are float64 targets and ``n_classes = 0``. ``params`` holds the generating parameters of
    synthetic data (empty for real data); ``info`` free-form provenance (sizes, normalisation).
    """

    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    n_classes: int
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_features(self) -> int:
        return int(self.X_train.shape[1])

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.X_test.shape[0])

    def __repr__(self) -> str:
        return (f"Dataset(name={self.name!r}, n_train={self.n_train}, n_test={self.n_test}, "
                f"n_features={self.n_features}, n_classes={self.n_classes})")


# ----------------------------------------------------------------------------- helpers


def stratified_split(labels: np.ndarray, test_fraction: float, rng: RngLike = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified split: (train indices, test indices), each in random order.

    For every class k with n_k samples, round(test_fraction·n_k) randomly chosen samples go to the
    test set (at least one sample stays in train when n_k ≥ 1). Both index arrays are then
    shuffled, so "dataset order" after the split is random, as after ``torch.random_split``.
    """
    test_fraction = check_probability("test_fraction", test_fraction)
    rng = as_generator(rng)
    labels = np.asarray(labels)
    train, test = [], []
    for k in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == k))
        n_test = min(int(round(test_fraction * idx.size)), idx.size - 1)
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    tr = rng.permutation(np.concatenate(train))
    te = rng.permutation(np.concatenate(test))
    return tr.astype(np.int64), te.astype(np.int64)


def _standardize(X_train: np.ndarray, X_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(X − m)/s with the train mean m and std s per feature; constant features get s = 1."""
    m = X_train.mean(axis=0)
    s = X_train.std(axis=0)
    s = np.where(s > 0, s, 1.0)
    return (X_train - m) / s, (X_test - m) / s


# ----------------------------------------------------------------------------- digits


def load_digits_dataset(test_fraction: float = 0.25, rng: RngLike = 0, standardize: bool = True) -> Dataset:
    """scikit-learn's bundled handwritten digits (1797 images of 8×8 pixels in 0..16, 10 classes).

    Features are x/16 ∈ [0, 1]; with ``standardize`` they are then standardised per pixel with
    the *train* mean and std (constant pixels are only centred). The split is
    :func:`stratified_split` with ``test_fraction`` and ``rng``. Offline (shipped with sklearn).
    """
    from sklearn.datasets import load_digits

    bunch = load_digits()
    X = np.asarray(bunch.data, dtype=np.float64) / 16.0
    y = np.asarray(bunch.target, dtype=np.int64)
    tr, te = stratified_split(y, test_fraction, rng)
    X_train, X_test = X[tr], X[te]
    if standardize:
        X_train, X_test = _standardize(X_train, X_test)
    return Dataset(X_train=np.ascontiguousarray(X_train), y_train=y[tr], X_test=np.ascontiguousarray(X_test),
                   y_test=y[te], n_classes=10, name="digits",
                   info={"source": "sklearn.datasets.load_digits", "image_shape": (8, 8),
                         "test_fraction": float(test_fraction), "standardize": bool(standardize)})


# ----------------------------------------------------------------------------- MNIST

_MNIST_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def _find_idx(directory: Path, stem: str) -> Path | None:
    """``stem`` or ``stem.gz``, also the ``…-idx3.ubyte`` spelling some mirrors use."""
    alt = stem[::-1].replace("-", ".", 1)[::-1]  # train-images-idx3-ubyte -> train-images-idx3.ubyte
    for name in (stem, stem + ".gz", alt, alt + ".gz"):
        p = directory / name
        if p.is_file():
            return p
    return None


def _read_idx(path: Path) -> np.ndarray:
    """Parse an IDX file (big-endian header: 0, 0, dtype code, ndim; then ndim uint32 sizes)."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError; a cut .gz stream is an EOFError
        raise FedAuditError(f"{path} could not be read as {'gzip-compressed ' if opener is gzip.open else ''}IDX: "
                            f"{err}") from None
    if len(raw) < 4:
        raise FedAuditError(f"{path} is not an IDX file (too short)")
    zero, code, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or code != 0x08:
        raise FedAuditError(f"{path} is not an unsigned-byte IDX file (magic {raw[:4].hex()})")
    if len(raw) < 4 + 4 * ndim:
        raise FedAuditError(f"{path} is not an IDX file: its header needs {4 + 4 * ndim} bytes, the file has {len(raw)}")
    shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != math.prod(shape):
        raise FedAuditError(f"{path}: header says shape {shape} but the file holds {data.size} values")
    return data.reshape(shape)


def _mnist_arrays(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str]:
    if path.is_dir():
        found = {k: _find_idx(path, v) for k, v in _MNIST_FILES.items()}
        missing = [_MNIST_FILES[k] + "[.gz]" for k, p in found.items() if p is None]
        if missing and (path / "mnist.npz").is_file():
            return _mnist_arrays(path / "mnist.npz")
        if missing:
            raise FedAuditError(f"MNIST files not found in {path}: missing {', '.join(missing)} "
                                "(or an mnist.npz); no download is attempted — place the four IDX files "
                                "there or pass an .npz with x_train, y_train, x_test, y_test")
        arrays = [_read_idx(found[k]) for k in ("train_images", "train_labels", "test_images", "test_labels")]
        return (*arrays, "idx")
    if path.suffix == ".npz" and path.is_file():
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("x_train", "y_train", "x_test", "y_test") if k not in npz.files]
            if missing:
                raise FedAuditError(f"{path} lacks the array(s) {', '.join(missing)} "
                                    f"(found {', '.join(npz.files) or 'none'})")
            return npz["x_train"], npz["y_train"], npz["x_test"], npz["y_test"], "npz"
    raise FedAuditError(f"MNIST path {path} does not exist or is neither a directory with the IDX files "
                        f"({', '.join(v + '[.gz]' for v in _MNIST_FILES.values())}) nor an .npz file; "
                        "no download is attempted")


def _mnist_features(X: np.ndarray, name: str) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim < 2:
        raise FedAuditError(f"MNIST {name} must have one image per row, got shape {X.shape}")
    X = X.reshape(X.shape[0], -1).astype(np.float64)
    return (X / 255.0 - MNIST_MEAN) / MNIST_STD


def load_mnist(path: str | Path, test_fraction: float | None = None, *, train_fraction: float = 1.0,
               rng: RngLike = 0) -> Dataset:
    """MNIST from local files; no download is ever attempted.

    ``path`` is a directory holding ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``; a
    directory holding ``mnist.npz`` also works), or an ``.npz`` with arrays ``x_train``,
    ``y_train``, ``x_test``, ``y_test`` (Keras layout). Pixels become x/255, then
    (x − 0.1307)/0.3081, flattened to 784 float64 features.

    ``test_fraction=None`` keeps the official 60k/10k split; a fraction pools both parts and
    re-splits them with :func:`stratified_split` (``rng``). ``train_fraction < 1`` keeps a seeded
    random subset of the training rows, in random order — 0.8 reproduces the 48k training images
    that the PIGS code distributes to clients (its other 20 % is a validation set).
    """
    path = Path(path)
    Xtr, ytr, Xte, yte, fmt = _mnist_arrays(path)
    X_train, X_test = _mnist_features(Xtr, "x_train"), _mnist_features(Xte, "x_test")
    y_train = np.asarray(ytr).reshape(-1).astype(np.int64)
    y_test = np.asarray(yte).reshape(-1).astype(np.int64)
    if y_train.size != X_train.shape[0] or y_test.size != X_test.shape[0]:
        raise FedAuditError(f"MNIST images and labels disagree: {X_train.shape[0]} train images vs "
                            f"{y_train.size} labels, {X_test.shape[0]} test images vs {y_test.size} labels")
    rng = as_generator(rng)
    if test_fraction is not None:
        X = np.concatenate([X_train, X_test])
        y = np.concatenate([y_train, y_test])
        tr, te = stratified_split(y, test_fraction, rng)
        X_train, y_train, X_test, y_test = X[tr], y[tr], X[te], y[te]
    train_fraction = check_real("train_fraction", train_fraction, low=0.0, high=1.0, open_low=True)
    if train_fraction < 1.0:
        keep = rng.permutation(y_train.size)[: max(1, int(train_fraction * y_train.size))]
        X_train, y_train = X_train[keep], y_train[keep]
    n_classes = int(max(y_train.max(initial=0), y_test.max(initial=0))) + 1
    side = int(round(math.sqrt(X_train.shape[1])))
    return Dataset(X_train=np.ascontiguousarray(X_train), y_train=y_train, X_test=np.ascontiguousarray(X_test),
                   y_test=y_test, n_classes=max(n_classes, 10), name="mnist",
                   info={"source": str(path), "format": fmt, "image_shape": (side, side),
                         "normalisation": (MNIST_MEAN, MNIST_STD), "test_fraction": test_fraction,
                         "train_fraction": train_fraction})


# ----------------------------------------------------------------------------- synthetic


def _split_rows(n: int, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n_test = int(round(check_probability("test_fraction", test_fraction) * n))
    n_test = min(max(n_test, 1), n - 1)
    perm = rng.permutation(n)
    return perm[n_test:], perm[:n_test]


def synthetic_logistic(n_samples: int, dim: int, n_classes: int = 2, rng: RngLike = 0, noise: float = 1.0, *,
                       scale: float = 3.0, test_fraction: float = 0.25) -> Dataset:
    """Multinomial-logistic data with known parameters.

    a ~ N(0, I_dim);  W* ∈ R^{C×dim} with i.i.d. N(0, scale²/dim) entries, b* ~ N(0, I_C);
    y = argmax_c (W* a + b*)_c + noise·G_c with G_c i.i.d. standard Gumbel — i.e.
    y ~ softmax((W* a + b*)/noise) for noise > 0 (noise = 1 is exactly the logistic model) and
    the Bayes label argmax (noiseless, separable) for noise = 0.
    ``n_samples`` rows in total, a random ``test_fraction`` of them held out.
    ``Dataset.params`` = {"W": W*, "b": b*, "noise", "scale"}.
    """
    n_samples = check_int("n_samples", n_samples, low=2)
    dim = check_int("dim", dim, low=1)
    n_classes = check_int("n_classes", n_classes, low=2)
    noise = check_real("noise", noise, low=0.0)
    scale = check_real("scale", scale, low=0.0)
    rng = as_generator(rng)
    W = rng.normal(0.0, scale / math.sqrt(dim), size=(n_classes, dim))
    b = rng.normal(0.0, 1.0, size=n_classes)
    A = rng.standard_normal((n_samples, dim))
    logits = A @ W.T + b
    if noise > 0:
        logits = logits + noise * rng.gumbel(size=logits.shape)
    y = np.argmax(logits, axis=1).astype(np.int64)
    tr, te = _split_rows(n_samples, test_fraction, rng)
    return Dataset(X_train=A[tr], y_train=y[tr], X_test=A[te], y_test=y[te], n_classes=n_classes,
                   name="synthetic-logistic", params={"W": W, "b": b, "noise": noise, "scale": scale},
                   info={"test_fraction": float(test_fraction)})


def synthetic_linear(n_samples: int, dim: int, rng: RngLike = 0, noise: float = 0.1, *,
                     sparsity: int | None = None, test_fraction: float = 0.25) -> Dataset:
    """Linear-regression data with known parameters (for sparse/IHT methods use ``sparsity``).

    a ~ N(0, I_dim); w* has i.i.d. N(0, 1) entries on a support S (all coordinates, or
    ``sparsity`` random ones) and 0 elsewhere; y = ⟨w*, a⟩ + noise·ε, ε ~ N(0, 1). Works for
    dim ≫ n_samples. ``y`` is float64 and ``n_classes = 0``.
    ``Dataset.params`` = {"w": w*, "support": sorted S, "noise"}.
    """
    n_samples = check_int("n_samples", n_samples, low=2)
    dim = check_int("dim", dim, low=1)
    noise = check_real("noise", noise, low=0.0)
    k = dim if sparsity is None else check_int("sparsity", sparsity, low=1, high=dim, high_name="dim")
    rng = as_generator(rng)
    support = np.sort(rng.choice(dim, size=k, replace=False)) if k < dim else np.arange(dim)
    w = np.zeros(dim)
    w[support] = rng.standard_normal(k)
    A = rng.standard_normal((n_samples, dim))
    y = A @ w + noise * rng.standard_normal(n_samples)
    tr, te = _split_rows(n_samples, test_fraction, rng)
    return Dataset(X_train=A[tr], y_train=y[tr], X_test=A[te], y_test=y[te], n_classes=0,
                   name="synthetic-linear", params={"w": w, "support": support, "noise": noise},
                   info={"test_fraction": float(test_fraction)})


# ----------------------------------------------------------------------------- by name


def _digits(*, path: Any = None, rng: RngLike = 0, **kwargs: Any) -> Dataset:
    """scikit-learn's bundled 8×8 digits (:func:`load_digits_dataset`; ``path`` is not used)."""
    return load_digits_dataset(rng=rng, **kwargs)


def _mnist(*, path: Any = None, rng: RngLike = 0, **kwargs: Any) -> Dataset:
    """MNIST from local files (:func:`load_mnist`; ``path`` required, nothing is downloaded)."""
    if path is None:
        raise FedAuditError("dataset 'mnist' needs path= (a directory with the IDX files or an .npz); "
                            "no download is attempted")
    return load_mnist(path, rng=rng, **kwargs)


def _synthetic(*, path: Any = None, rng: RngLike = 0, **kwargs: Any) -> Dataset:
    """:func:`synthetic_logistic` with n_samples=2000, dim=20, n_classes=10 unless given."""
    return synthetic_logistic(rng=rng, **{"n_samples": 2000, "dim": 20, "n_classes": 10, **kwargs})


for _name, _fn in (("digits", _digits), ("mnist", _mnist), ("synthetic", _synthetic)):
    DATASETS.register(_name, _fn)
del _name, _fn


def load_dataset(name: str, *, path: str | Path | None = None, rng: RngLike = 0, **kwargs: Any) -> Dataset:
    """Load a dataset of :data:`fedaudit.fl.registry.DATASETS` by name (or ``"package.module:attr"``).

    * ``"digits"`` — :func:`load_digits_dataset` (keywords ``test_fraction``, ``standardize``);
    * ``"mnist"`` — :func:`load_mnist` from ``path`` (required; keywords ``test_fraction``,
      ``train_fraction``);
    * ``"synthetic"`` — :func:`synthetic_logistic` with defaults n_samples=2000, dim=20,
      n_classes=10 (all overridable by keyword).
    """
    factory = lookup(DATASETS, name)
    try:
        return factory(path=path, rng=rng, **kwargs)
    except TypeError as err:
        raise FedAuditError(f"bad keyword for dataset {name!r}: {err}") from None
