"""Models for federated simulations.

:class:`LogisticModel` is the convex workhorse (the PIGS paper's ``logreg_mnist``): exact,
vectorised float64 loss, gradient and Hessian-vector product in numpy on a flat parameter
vector. :func:`mlp` and :func:`cnn` build small torch networks for later non-convex experiments
(torch is imported only when they are called).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.validation import check_int, check_real

__all__ = ["LogisticModel", "log_softmax", "mlp", "cnn"]


def log_softmax(Z: np.ndarray) -> np.ndarray:
    """Row-wise log softmax, stable: z − max − log Σ exp(z − max)."""
    m = Z.max(axis=1, keepdims=True)
    S = Z - m
    return S - np.log(np.exp(S).sum(axis=1, keepdims=True))


class LogisticModel:
    """Multinomial logistic regression with ridge penalty (softmax cross-entropy).

    Parameters are one flat float64 vector ``x`` laid out as torch's ``nn.Linear(p, C)``
    flattened in ``parameters()`` order: ``x = [W.ravel(), b]`` with W of shape (C, p) row-major
    (row c = weights of class c) and b of shape (C,); so ``dim = (p + 1)·C`` (``p·C`` without
    intercept). For data A (N, p), labels y ∈ {0..C−1}, logits z_n = W a_n + b:

        loss(x) = (1/N) Σ_n [log Σ_c exp z_nc − z_{n,y_n}] + (μ/2)‖x‖²      (bias penalised too)
        grad(x) = [ (1/N) Rᵀ A ,  (1/N) Σ_n R_n ] + μ x,     R = softmax(Z) − onehot(y)
        ∇²(x)·v = [ (1/N) Qᵀ A ,  (1/N) Σ_n Q_n ] + μ v,     Q_n = (diag(p_n) − p_n p_nᵀ) u_n,
                                                              u_n = V a_n + v_b (v = [V, v_b])

    ``smoothness(A)`` = ½·λ_max(ÃᵀÃ/N) + μ with Ã = [A, 1] (the intercept column): the Hessian is
    (1/N) Σ_n (diag(p_n) − p_n p_nᵀ) ⊗ ã_n ã_nᵀ + μI and λ_max(diag(p) − ppᵀ) ≤ ½, so this is an
    upper bound on the smoothness constant valid for every x.
    """

    def __init__(self, n_features: int, n_classes: int, mu: float, fit_intercept: bool = True):
        self.n_features = check_int("n_features", n_features, low=1)
        self.n_classes = check_int("n_classes", n_classes, low=2)
        self.mu = check_real("mu", mu, low=0.0)
        self.fit_intercept = bool(fit_intercept)
        self.dim = (self.n_features + int(self.fit_intercept)) * self.n_classes

    def __repr__(self) -> str:
        return (f"LogisticModel(n_features={self.n_features}, n_classes={self.n_classes}, mu={self.mu:g}, "
                f"fit_intercept={self.fit_intercept})")

    # ------------------------------------------------------------------ layout

    def init(self) -> np.ndarray:
        """x_0 = 0 (where loss = log C exactly)."""
        return np.zeros(self.dim)

    def unpack(self, x: Any) -> tuple[np.ndarray, np.ndarray | None]:
        """Views (W (C, p), b (C,) or None) into the flat vector x."""
        x = self.check_x(x)
        C, p = self.n_classes, self.n_features
        W = x[: C * p].reshape(C, p)
        return W, (x[C * p:] if self.fit_intercept else None)

    def pack(self, W: Any, b: Any = None) -> np.ndarray:
        """Inverse of :meth:`unpack`."""
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (self.n_classes, self.n_features):
            raise FedAuditError(f"W must have shape ({self.n_classes}, {self.n_features}), got {W.shape}")
        if not self.fit_intercept:
            return W.ravel().copy()
        b = np.zeros(self.n_classes) if b is None else np.asarray(b, dtype=np.float64).reshape(-1)
        if b.shape != (self.n_classes,):
            raise FedAuditError(f"b must have shape ({self.n_classes},), got {b.shape}")
        return np.concatenate([W.ravel(), b])

    # ------------------------------------------------------------------ validation

    def check_x(self, x: Any, name: str = "x") -> np.ndarray:
        """``x`` as a float64 parameter vector of shape (dim,), else FedAuditError naming ``name``."""
        x = np.asarray(x, dtype=np.float64)
        if x.shape != (self.dim,):
            raise FedAuditError(f"{name} must have shape ({self.dim},) (dim of {self!r}), got {x.shape}")
        return x

    def _A(self, A: Any) -> np.ndarray:
        A = np.asarray(A, dtype=np.float64)
        if A.ndim != 2 or A.shape[1] != self.n_features or A.shape[0] < 1:
            raise FedAuditError(f"A must have shape (N >= 1, {self.n_features}), got {A.shape}")
        return A

    def _Ay(self, A: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
        A = self._A(A)
        y = np.asarray(y)
        if y.shape != (A.shape[0],):
            raise FedAuditError(f"y must have shape ({A.shape[0]},) to match A, got {y.shape}")
        if y.dtype.kind not in "iu":
            if y.dtype.kind == "f" and np.all(y == np.round(y)):
                y = y.astype(np.int64)
            else:
                raise FedAuditError(f"y must hold integer class labels, got dtype {y.dtype}")
        if y.size and (y.min() < 0 or y.max() >= self.n_classes):
            raise FedAuditError(f"y must hold labels in [0, {self.n_classes - 1}], got range [{y.min()}, {y.max()}]")
        return A, y

    # ------------------------------------------------------------------ core (no validation)
    # Inputs already validated (float64 x of shape (dim,), A (N, p), integer y): the federation's
    # per-round loops call these directly.

    def logits_core(self, x: np.ndarray, A: np.ndarray) -> np.ndarray:
        """Z = A Wᵀ + b, (N, C)."""
        C, p = self.n_classes, self.n_features
        Z = A @ x[: C * p].reshape(C, p).T
        if self.fit_intercept:
            Z += x[C * p:]
        return Z

    def backprop_core(self, R: np.ndarray, A: np.ndarray) -> np.ndarray:
        """[Rᵀ A, Σ_n R_n] flattened in the parameter layout (no 1/N, no μ term)."""
        gW = (A.T @ R).T.ravel()  # (p × N)(N × C) is the faster BLAS layout
        return np.concatenate([gW, R.sum(axis=0)]) if self.fit_intercept else gW

    def loss_grad_core(self, x: np.ndarray, A: np.ndarray, y: np.ndarray, want_grad: bool = True):
        """(mean cross-entropy + (μ/2)‖x‖², its gradient or None)."""
        N = A.shape[0]
        logP = log_softmax(self.logits_core(x, A))
        rows = np.arange(N)
        loss = -logP[rows, y].mean() + 0.5 * self.mu * float(x @ x)
        if not want_grad:
            return float(loss), None
        R = np.exp(logP)
        R[rows, y] -= 1.0
        return float(loss), self.backprop_core(R, A) / N + self.mu * x

    # ------------------------------------------------------------------ public

    def loss(self, x: Any, A: Any, y: Any) -> float:
        """Mean cross-entropy + (μ/2)‖x‖²."""
        A, y = self._Ay(A, y)
        return self.loss_grad_core(self.check_x(x), A, y, want_grad=False)[0]

    def grad(self, x: Any, A: Any, y: Any) -> np.ndarray:
        """∇loss(x), shape (dim,)."""
        A, y = self._Ay(A, y)
        return self.loss_grad_core(self.check_x(x), A, y)[1]

    def loss_grad(self, x: Any, A: Any, y: Any) -> tuple[float, np.ndarray]:
        """(loss, grad) sharing one forward pass (what L-BFGS closures want)."""
        A, y = self._Ay(A, y)
        return self.loss_grad_core(self.check_x(x), A, y)

    def hvp(self, x: Any, A: Any, y: Any, v: Any) -> np.ndarray:
        """Exact Hessian-vector product ∇²loss(x)·v (independent of y; y is validated only)."""
        A, y = self._Ay(A, y)
        x, v = self.check_x(x), self.check_x(v, "v")
        P = np.exp(log_softmax(self.logits_core(x, A)))
        U = self.logits_core(v, A)  # u_n = V a_n + v_b: the directional derivative of the logits
        Q = P * U - P * (P * U).sum(axis=1, keepdims=True)
        return self.backprop_core(Q, A) / A.shape[0] + self.mu * v

    def hessian(self, x: Any, A: Any, y: Any) -> np.ndarray:
        """Dense Hessian (dim, dim) — O(C²·(p+1)²·N) work; for small models and tests."""
        A, y = self._Ay(A, y)
        x = self.check_x(x)
        N, C, p = A.shape[0], self.n_classes, self.n_features
        P = np.exp(log_softmax(self.logits_core(x, A)))
        At = np.hstack([A, np.ones((N, 1))]) if self.fit_intercept else A
        q = At.shape[1]
        H4 = np.empty((C, q, C, q))  # [c, j, c', j'] over augmented features
        for c in range(C):
            for d in range(c, C):
                s = P[:, c] * ((c == d) - P[:, d])
                block = (At * s[:, None]).T @ At / N
                H4[c, :, d, :] = block
                H4[d, :, c, :] = block.T
        # reorder (class, augmented feature) -> flat layout [W.ravel(), b]
        order = np.concatenate([(np.arange(C)[:, None] * q + np.arange(p)[None, :]).ravel(),
                                np.arange(C) * q + p if self.fit_intercept else np.empty(0, dtype=int)])
        H = H4.reshape(C * q, C * q)[np.ix_(order, order)]
        return H + self.mu * np.eye(self.dim)

    def predict(self, x: Any, A: Any) -> np.ndarray:
        """argmax_c of the logits, int64 (N,)."""
        return np.argmax(self.logits_core(self.check_x(x), self._A(A)), axis=1).astype(np.int64)

    def predict_proba(self, x: Any, A: Any) -> np.ndarray:
        """softmax(W a + b), (N, C)."""
        return np.exp(log_softmax(self.logits_core(self.check_x(x), self._A(A))))

    def accuracy(self, x: Any, A: Any, y: Any) -> float:
        """Fraction of rows with predict == y."""
        A, y = self._Ay(A, y)
        return float(np.mean(self.predict(x, A) == y))

    def smoothness(self, A: Any) -> float:
        """L = ½·λ_max(ÃᵀÃ/N) + μ, Ã = [A, 1] (without the ones column if no intercept).
        An upper bound on λ_max(∇²loss(x)) for all x and all labels."""
        A = self._A(A)
        N = A.shape[0]
        G = A.T @ A
        if self.fit_intercept:  # Gram matrix of [A, 1] without materialising the augmented copy
            s = A.sum(axis=0)
            G = np.block([[G, s[:, None]], [s[None, :], np.array([[float(N)]])]])
        lam = float(np.linalg.eigvalsh(G / N)[-1])
        return 0.5 * lam + self.mu


# ----------------------------------------------------------------------------- torch models


def mlp(n_features: int, n_classes: int, hidden: int = 64) -> Any:
    """Linear(p, hidden) → ReLU → Linear(hidden, C), returning logits (a ``torch.nn.Module``)."""
    nn = require("torch.nn", "the torch models of fedaudit.fl.models")

    n_features = check_int("n_features", n_features, low=1)
    n_classes = check_int("n_classes", n_classes, low=2)
    hidden = check_int("hidden", hidden, low=1)
    return nn.Sequential(nn.Flatten(), nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))


def cnn(n_classes: int, in_channels: int = 1) -> Any:
    """Small CNN for square single-channel images (8×8 digits or 28×28 MNIST); returns logits.

    Conv(3×3, 16) → ReLU → MaxPool 2 → Conv(3×3, 32) → ReLU → AdaptiveAvgPool 4×4 → Linear(512, 64)
    → ReLU → Linear(64, C). Accepts (N, c, s, s) images or flat (N, c·s²) rows (reshaped).
    """
    nn = require("torch.nn", "the torch models of fedaudit.fl.models")

    n_classes = check_int("n_classes", n_classes, low=2)
    in_channels = check_int("in_channels", in_channels, low=1)

    class _ToImage(nn.Module):
        def __init__(self, channels: int):
            super().__init__()
            self.channels = channels

        def forward(self, X):
            if X.dim() == 4:
                return X
            side = int(round((X.shape[-1] / self.channels) ** 0.5))
            if self.channels * side * side != X.shape[-1]:
                raise FedAuditError(f"cnn expects square images, got {X.shape[-1]} features "
                                    f"for {self.channels} channel(s)")
            return X.reshape(X.shape[0], self.channels, side, side)

    return nn.Sequential(
        _ToImage(in_channels),
        nn.Conv2d(in_channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
        nn.Flatten(), nn.Linear(32 * 16, 64), nn.ReLU(), nn.Linear(64, n_classes),
    )
