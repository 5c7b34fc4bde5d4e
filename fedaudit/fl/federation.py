"""A simulated federation: honest clients with data shards, f Byzantine clients, a robust server.

This is the inexact-gradient-oracle view of Byzantine-robust learning (Gaucher, Dieuleveut,
Hendrikx, arXiv:2602.03329, "From Inexact Gradients to Byzantine Robustness"): with honest
losses L_i (each including (μ/2)‖x‖²) and L_H = (1/|H|) Σ_{i∈H} L_i, the server receives the
honest full-batch gradients ∇L_i(x) and f Byzantine vectors and forms

    g(x) = F(∇L_1(x), …, ∇L_|H|(x), b_1, …, b_f),

an (f, κ)-robust aggregate that satisfies ‖g(x) − ∇L_H(x)‖² ≤ κζ² + κB²‖∇L_H(x)‖² when the
honest gradients are (ζ, B)-heterogeneous: (1/|H|) Σ‖∇L_i − ∇L_H‖² ≤ ζ² + B²‖∇L_H‖².

Defaults reproduce the PIGS long-run setting (20 honest clients, Dirichlet β = 5, μ = 1e-2,
NNM + CWTM with the declared f, line-searched ALIE, multinomial logistic regression), with
client 0 the server's trusted surrogate L̂ = L_0.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fedaudit.attacks.byzantine import Attack, Optimal
from fedaudit.attacks.registry import make_attack
from fedaudit.defenses.registry import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.validation import check_int, check_real
from fedaudit.fl.data import Dataset, load_dataset
from fedaudit.fl.models import LogisticModel, log_softmax
from fedaudit.fl.partition import partition
from fedaudit.rng import RngLike, as_generator, as_seed_sequence

__all__ = ["Federation", "LabelFlip", "gradient_heterogeneity"]


def gradient_heterogeneity(G: np.ndarray, mean: np.ndarray | None = None) -> tuple[float, float]:
    """((1/|H|) Σ_i ‖g_i − ḡ‖², ‖ḡ‖²) for honest gradients G (|H|, p) with ḡ = mean over rows
    (``mean`` when the caller already has it): the two sides of the (G, B) heterogeneity
    condition (1/|H|) Σ‖∇L_i − ∇L_H‖² ≤ G² + B²‖∇L_H‖²."""
    g = G.mean(axis=0) if mean is None else mean
    return float(((G - g) ** 2).sum(axis=1).mean()), float(g @ g)


class LabelFlip:
    """Data-level label flipping (not a vector attack): Byzantine client j holds a copy of honest
    client j's shard (j = 0, …, f − 1) with every label y replaced by y' = (C − 1) − y, and sends
    the full-batch gradient of the *same* regularised loss on that flipped data — it follows the
    protocol, only its data are poisoned."""

    name = "labelflip"

    def __init__(self, n_classes: int):
        self.n_classes = check_int("n_classes", n_classes, low=2)

    def params(self) -> dict[str, Any]:
        """The constructor parameters: ``n_classes``."""
        return {"n_classes": self.n_classes}

    def flip(self, y: np.ndarray) -> np.ndarray:
        """y' = (C − 1) − y."""
        return (self.n_classes - 1) - np.asarray(y, dtype=np.int64)

    def __repr__(self) -> str:
        return f"LabelFlip(n_classes={self.n_classes})"


class Federation:
    """n_honest honest clients (Dirichlet/iid/… shards of the training set), f Byzantine clients,
    a robust aggregator and a :class:`~fedaudit.fl.models.LogisticModel`.

    Build with :meth:`build`. Attributes: ``dataset``, ``model``, ``n_honest``, ``f``, ``n``
    (= n_honest + f), ``dim``, ``clients`` (list of (A_i, y_i), views into one contiguous honest
    data matrix), ``client_indices`` (rows of ``dataset.X_train`` per client), ``sizes``,
    ``aggregator`` (an :class:`~fedaudit.defenses.base.Aggregator`), ``attack`` (an
    :class:`~fedaudit.attacks.byzantine.Attack`, ``Optimal``-wrapped when requested, a
    :class:`LabelFlip`, or None when f = 0 without attack), ``label_flip``; :meth:`params` the build parameters.

    All gradients are full-batch and exact (float64). ``rng=None`` in the random methods uses
    the federation's own stream, spawned from the build ``rng`` (reproducible per instance).
    """

    def __init__(self, dataset: Dataset | str, *, n_honest: int = 20, f: int = 1, scheme: str = "dirichlet",
                 beta: float | None = 5.0, gamma: float | None = None, mu: float = 1e-2,
                 aggregator: str | Callable[[Any], Any] = "nnm+cwtm", attack: str | Attack | None = "alie",
                 optimal_attack: bool = True, rng: RngLike = 0, min_size: int = 1, label_flip: bool = False,
                 aggregator_kw: dict[str, Any] | None = None, attack_kw: dict[str, Any] | None = None,
                 declared_f: int | None = None):
        # spawn from a copy: the caller's SeedSequence is not advanced, so the same SeedSequence
        # twice builds the same federation (children 0, 1, 2: partition, attack stream, dataset)
        part_ss, attack_ss, data_ss = as_seed_sequence(rng, copy=True).spawn(3)
        if isinstance(dataset, str):
            dataset = load_dataset(dataset, rng=data_ss)
        if not isinstance(dataset, Dataset):
            raise FedAuditError("dataset must be a fedaudit.fl.Dataset or a dataset name, "
                                f"got {type(dataset).__name__}")
        if dataset.n_classes < 2:
            raise FedAuditError(f"Federation needs a classification dataset (n_classes >= 2), "
                                f"got {dataset.name!r} with n_classes={dataset.n_classes}")
        self.dataset = dataset
        self.n_honest = check_int("n_honest", n_honest, low=1)
        self.f = check_int("f", f, low=0, high=self.n_honest - 1, high_name="n_honest-1")
        self.n = self.n_honest + self.f
        self.declared_f = self.f if declared_f is None else check_int("declared_f", declared_f, low=0)
        mu = check_real("mu", mu, low=0.0)
        if isinstance(attack, str) and attack.strip().lower() in ("labelflip", "label_flip", "lf"):
            label_flip, attack = True, None
        self.label_flip = bool(label_flip)

        # --- data: one contiguous honest matrix, clients are views into it
        parts = partition(dataset.y_train, self.n_honest, scheme, beta=beta, gamma=gamma, rng=part_ss,
                          min_size=min_size)
        sizes = np.array([p.size for p in parts], dtype=np.int64)
        if sizes.min() < 1:
            raise FedAuditError(f"client {int(np.argmin(sizes))} received no data (scheme={scheme!r}); "
                                "use min_size >= 1 (the default) so every client has a shard")
        self.client_indices = parts
        self.sizes = sizes
        order = np.concatenate(parts)
        self._A = np.ascontiguousarray(dataset.X_train[order], dtype=np.float64)
        self._y = np.asarray(dataset.y_train[order], dtype=np.int64)
        self._offsets = np.concatenate([[0], np.cumsum(sizes)])
        self._rows = np.arange(self._y.size)
        self._weight = np.repeat(1.0 / sizes, sizes)  # 1/N_i for every row of client i
        self.clients = [(self._A[s:e], self._y[s:e]) for s, e in zip(self._offsets[:-1], self._offsets[1:])]

        self.model = LogisticModel(dataset.n_features, dataset.n_classes, mu)
        self.dim = self.model.dim
        self.mu = mu

        # --- server rule
        if isinstance(aggregator, str):
            self.aggregator = make_aggregator(aggregator, self.declared_f, **(aggregator_kw or {}))
        elif callable(aggregator):
            if aggregator_kw:
                raise FedAuditError("aggregator_kw applies only when aggregator is a spec string")
            self.aggregator = aggregator
        else:
            raise FedAuditError("aggregator must be a spec string such as 'nnm+cwtm' or a callable, "
                                f"got {aggregator!r}")
        min_n = getattr(self.aggregator, "min_n", None)
        if callable(min_n):
            rule_f = getattr(self.aggregator, "f", self.declared_f)
            need = min_n(rule_f)
            if self.n < need:
                raise FedAuditError(f"aggregator {getattr(self.aggregator, 'name', aggregator)!r} needs n >= {need} "
                                    f"inputs for f={rule_f}, but n = n_honest + f = {self.n}")

        # --- adversary
        self._byz_clients: list[tuple[np.ndarray, np.ndarray]] = []
        if self.label_flip:
            self.attack: Any = LabelFlip(dataset.n_classes)
            self._byz_clients = [(A, self.attack.flip(y)) for A, y in self.clients[: self.f]]
        elif attack is None:
            if self.f > 0:
                raise FedAuditError(f"attack=None needs f=0 (got f={self.f}); name an attack or set label_flip=True")
            self.attack = None
        else:
            if isinstance(attack, str):
                attack = make_attack(attack.strip().lower(), **(attack_kw or {}))
            elif not isinstance(attack, Attack):
                raise FedAuditError(f"attack must be an attack name, a fedaudit Attack or None, got {attack!r}")
            elif attack_kw:
                raise FedAuditError("attack_kw applies only when attack is a name")
            if optimal_attack and not isinstance(attack, Optimal) and getattr(attack, "has_scale", False):
                attack = Optimal(attack, self.aggregator)
            self.attack = attack
        self._rng = as_generator(attack_ss)
        self._params = {
            "dataset": dataset.name, "n_honest": self.n_honest, "f": self.f, "scheme": scheme, "beta": beta,
            "gamma": gamma, "mu": mu, "aggregator": getattr(self.aggregator, "name", repr(self.aggregator)),
            "attack": getattr(self.attack, "name", None), "optimal_attack": bool(optimal_attack),
            "label_flip": self.label_flip, "min_size": min_size, "dim": self.dim, "declared_f": self.declared_f,
            "client_sizes": sizes.tolist(),
        }

    @classmethod
    def build(cls, dataset: Dataset | str, *, n_honest: int = 20, f: int = 1, scheme: str = "dirichlet",
              beta: float | None = 5.0, gamma: float | None = None, mu: float = 1e-2,
              aggregator: str | Callable[[Any], Any] = "nnm+cwtm", attack: str | Attack | None = "alie",
              optimal_attack: bool = True, rng: RngLike = 0, min_size: int = 1, label_flip: bool = False,
              aggregator_kw: dict[str, Any] | None = None, attack_kw: dict[str, Any] | None = None,
              declared_f: int | None = None) -> "Federation":
        """Partition ``dataset`` (a :class:`Dataset` or a name for :func:`load_dataset`) among
        ``n_honest`` clients with ``scheme`` (β/γ as in :func:`~fedaudit.fl.partition.partition`,
        every client ≥ ``min_size`` samples), build ``make_aggregator(aggregator, f)`` and
        ``make_attack(attack)`` — wrapped in ``Optimal(attack, aggregator)`` if ``optimal_attack``
        and the attack has a scale — or the data-level :class:`LabelFlip` (``label_flip=True`` or
        ``attack="labelflip"``). ``attack=None`` is allowed for f = 0. ``rng`` (an int, a
        SeedSequence — not advanced — or a Generator) drives the dataset draw, the partition and
        the attack stream (independent SeedSequence children).
        ``declared_f`` (default ``f``) is the Byzantine count the server's rule is configured for
        when ``aggregator`` is a spec string: ``declared_f < f`` models a server that
        underestimates the adversary (past the rule's tolerance the oracle raises
        :class:`~fedaudit.errors.AggregatorBreakdown`). Requires 0 ≤ f < n_honest.
        """
        return cls(dataset, n_honest=n_honest, f=f, scheme=scheme, beta=beta, gamma=gamma, mu=mu,
                   aggregator=aggregator, attack=attack, optimal_attack=optimal_attack, rng=rng,
                   min_size=min_size, label_flip=label_flip, aggregator_kw=aggregator_kw, attack_kw=attack_kw,
                   declared_f=declared_f)

    def __repr__(self) -> str:
        return (f"Federation(dataset={self.dataset.name!r}, n_honest={self.n_honest}, f={self.f}, dim={self.dim}, "
                f"aggregator={self._params['aggregator']!r}, attack={self._params['attack']!r})")

    def params(self) -> dict[str, Any]:
        """The build parameters (dataset name, n_honest, f, scheme, β, γ, μ, rule and attack names,
        optimal_attack, label_flip, min_size, declared_f) plus ``dim`` and the ``client_sizes``."""
        return dict(self._params)

    # ------------------------------------------------------------------ helpers

    def _x(self, x: Any, name: str = "x") -> np.ndarray:
        return self.model.check_x(x, name)

    def _client(self, i: Any) -> tuple[np.ndarray, np.ndarray]:
        i = check_int("i", i, low=0, high=self.n_honest - 1, high_name="n_honest-1")
        return self.clients[i]

    def _log_probs(self, x: np.ndarray) -> np.ndarray:
        return log_softmax(self.model.logits_core(x, self._A))

    def _per_client_sum(self, values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values, self._offsets[:-1], axis=0)

    # ------------------------------------------------------------------ honest side

    def client_losses(self, x: Any) -> np.ndarray:
        """(n_honest,) local losses L_i(x) (each with the μ term), one forward pass for all."""
        x = self._x(x)
        nll = -self._log_probs(x)[self._rows, self._y]
        return self._per_client_sum(nll) / self.sizes + 0.5 * self.mu * float(x @ x)

    def honest_loss(self, x: Any) -> float:
        """L_H(x) = (1/|H|) Σ_i L_i(x): the paper's logged train loss."""
        return float(self.client_losses(x).mean())

    def honest_gradients(self, x: Any) -> np.ndarray:
        """(n_honest, dim) full-batch gradients ∇L_i(x): one forward pass over all honest data,
        then one (C × N_i)·(N_i × p) product per client."""
        x = self._x(x)
        R = np.exp(self._log_probs(x))
        R[self._rows, self._y] -= 1.0
        R *= self._weight[:, None]
        G = np.empty((self.n_honest, self.dim))
        for i, (s, e) in enumerate(zip(self._offsets[:-1], self._offsets[1:])):
            G[i] = self.model.backprop_core(R[s:e], self._A[s:e])
        G += self.mu * x
        return G

    def honest_grad(self, x: Any) -> np.ndarray:
        """∇L_H(x) = (1/|H|) Σ_i ∇L_i(x) (one backward product over all honest rows)."""
        x = self._x(x)
        R = np.exp(self._log_probs(x))
        R[self._rows, self._y] -= 1.0
        R *= (self._weight / self.n_honest)[:, None]
        return self.model.backprop_core(R, self._A) + self.mu * x

    def honest_hvp(self, x: Any, v: Any) -> np.ndarray:
        """∇²L_H(x)·v = (1/|H|) Σ_i ∇²L_i(x)·v.

        The softmax probabilities at x are kept for the next call at the same x (power
        iteration applies the Hessian at one point many times): a pure cache, the result
        depends only on (x, v)."""
        x, v = self._x(x), self._x(v, "v")
        cached = getattr(self, "_hvp_probs", None)
        if cached is not None and np.array_equal(cached[0], x):
            P = cached[1]
        else:
            P = np.exp(self._log_probs(x))
            self._hvp_probs = (x.copy(), P)
        U = self.model.logits_core(v, self._A)
        Q = P * U - P * (P * U).sum(axis=1, keepdims=True)
        Q *= (self._weight / self.n_honest)[:, None]
        return self.model.backprop_core(Q, self._A) + self.mu * v

    def client_loss(self, i: int, x: Any) -> float:
        """L_i(x) for honest client i (client 0 is PIGS's trusted surrogate L̂)."""
        A, y = self._client(i)
        return self.model.loss_grad_core(self._x(x), A, y, want_grad=False)[0]

    def client_grad(self, i: int, x: Any) -> np.ndarray:
        """∇L_i(x)."""
        A, y = self._client(i)
        return self.model.loss_grad_core(self._x(x), A, y)[1]

    def client_hvp(self, i: int, x: Any, v: Any) -> np.ndarray:
        """∇²L_i(x)·v (exact)."""
        A, y = self._client(i)
        return self.model.hvp(x, A, y, v)

    # ------------------------------------------------------------------ Byzantine side

    def byzantine_vectors(self, x: Any, honest_grads: Any, rng: RngLike = None) -> np.ndarray:
        """(f, dim) Byzantine inputs at x.

        Vector attacks see all honest gradients (omniscient): ``attack(honest_grads, f, rng)``;
        an ``Optimal`` attack line-searches its scale against this federation's aggregator.
        With label flipping, row j is the gradient of the regularised loss on client j's shard
        with labels (C − 1) − y (``honest_grads`` is then only shape-checked).
        """
        x = self._x(x)
        H = np.asarray(honest_grads, dtype=np.float64)
        if H.shape != (self.n_honest, self.dim):
            raise FedAuditError(f"honest_grads must have shape ({self.n_honest}, {self.dim}), got {H.shape}")
        if self.f == 0:
            return np.empty((0, self.dim))
        if self.label_flip:
            return np.stack([self.model.loss_grad_core(x, A, y)[1] for A, y in self._byz_clients])
        rows = np.asarray(self.attack(H, self.f, self._rng if rng is None else as_generator(rng)), dtype=np.float64)
        return rows.reshape(self.f, self.dim)

    def oracle(self, x: Any, rng: RngLike = None, *, honest_grads: Any = None) -> np.ndarray:
        """The robust inexact gradient g(x) = F(honest ∪ Byzantine; rng) (honest rows first).

        One generator serves the call: the attack draws from it first, then the rule
        (``aggregator(X, rng=gen)``, e.g. bucketing's permutation), so g is a function of
        (x, the generator's state) alone — a stateful rule cannot make two runs with the same seed
        differ. ``rng=None`` uses the federation's own stream (reproducible per instance only).
        Pass ``honest_grads`` (= :meth:`honest_gradients` at x) to reuse them. More non-finite
        rows than the rule tolerates raise :class:`~fedaudit.errors.AggregatorBreakdown`."""
        x = self._x(x)
        H = self.honest_gradients(x) if honest_grads is None else np.asarray(honest_grads, dtype=np.float64)
        gen = self._rng if rng is None else as_generator(rng)
        B = self.byzantine_vectors(x, H, gen)
        out = self.aggregator(np.vstack([H, B]) if B.shape[0] else H, rng=gen)
        return np.asarray(out, dtype=np.float64).reshape(self.dim)

    # ------------------------------------------------------------------ diagnostics

    def test_accuracy(self, x: Any) -> float:
        """Accuracy of argmax predictions on ``dataset.X_test``."""
        return self.model.accuracy(x, self.dataset.X_test, self.dataset.y_test)

    def train_accuracy(self, x: Any) -> float:
        """Accuracy on the pooled honest training data."""
        return float(np.mean(np.argmax(self._log_probs(self._x(x)), axis=1) == self._y))

    def heterogeneity(self, x: Any) -> tuple[float, float]:
        """((1/|H|) Σ_i ‖∇L_i(x) − ∇L_H(x)‖², ‖∇L_H(x)‖²): the two sides of the (G, B)
        heterogeneity condition at x (:func:`gradient_heterogeneity`)."""
        return gradient_heterogeneity(self.honest_gradients(x))

    def smoothness(self) -> float:
        """Upper bound on the smoothness of L_H: ½·λ_max of the mean over clients of
        Ã_iᵀÃ_i/N_i, plus μ (same GLM argument as :meth:`LogisticModel.smoothness`)."""
        A = self._A * np.sqrt(self._weight / self.n_honest)[:, None]
        G = A.T @ A
        if self.model.fit_intercept:
            w = np.sqrt(self._weight / self.n_honest)
            s = A.T @ w
            G = np.block([[G, s[:, None]], [s[None, :], np.array([[float(w @ w)]])]])
        return 0.5 * float(np.linalg.eigvalsh(G)[-1]) + self.mu
