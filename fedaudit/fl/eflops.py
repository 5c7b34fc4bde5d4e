"""E-FLoPS: federated sparse learning with entropy-regularised probabilistic gates
(Kovelakuntla Huthasana, Olama, Lundell, arXiv:2607.00275; FLoPS, arXiv:2512.23071), built on
Hard Concrete gates (:mod:`fedaudit.fl.gates`) and the controlled-sparsity Lagrangian of
Gallego-Posada et al. (NeurIPS 2022).

Parameters θ = θ̃ ⊙ z[g] with gates z ~ HardConcrete(log α) (one per parameter, or per unit).
With π_j = P(z_j ≠ 0) = σ(log α_j − β·log(−γ/ζ)), the expected density is
ρ̂(α) = Σ_j |g_j|·π_j / |θ| (|g_j| parameters share gate j). Client i minimises, with the
multiplier λ and the temperature T_t fixed during the round,

    J_i(θ̃, log α) = E_u[ℓ_i(θ̃ ⊙ z(log α, u))] + λ·Σ_j |g_j|·π_j + T_t·Σ_j |g_j|·R(π_j),

    R(π) = −H(π) = π log π + (1 − π) log(1 − π)                      (regularizer="entropy")
    R(π) = KL(Bern(π) ‖ Bern(ρ)) = π log(π/ρ) + (1 − π) log((1 − π)/(1 − ρ))   (regularizer="kl")

by ``local_steps`` SGD (or Adam) steps on (θ̃, log α) (one fresh gate sample u per step, learning
rates ``lr`` and ``lr_gates``). λ is the price, in loss units, of one expected non-zero parameter; this
is the Lagrangian E[ℓ] + λ'(ρ̂ − ρ) of Gallego-Posada et al. with λ' = λ·|θ|. T = 0 is FLoPS;
T > 0 pushes every π_j towards ½ (entropy) or towards ρ (KL), delaying the commitment to a
support. The server averages (θ̃, log α) over the participating clients with weights n_i
(FLoPS' "standard weighted averaging"), or applies ``upload``'s / ``aggregator``'s rule, then
takes one projected dual-ascent step on the constraint ρ̂ ≤ ρ at the new global gates,

    λ ← max(0, λ + η_λ·(ρ̂ − ρ_t))       (with ``dual_restarts``: λ ← 0 whenever ρ̂ ≤ ρ_t),

with the level ρ_t = ρ, or during an optional warm-up a level moving linearly from the initial
density down to ρ.

T_t is T (``anneal=None``), or decays to 0 linearly / on a half cosine over the first
``anneal_fraction``·rounds rounds and stays 0 after. At the end the hard mask keeps exactly
m = ⌊ρ·|θ|⌋ coordinates, the top m by π (ties broken by the lower index), and the returned
parameters are θ̂ = θ̃ ⊙ mask.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.fl.gated_training import ErrorFeedback, data_free_gates
from fedaudit.fl.gates import GATE_MODES, GatedModel, HardConcrete
from fedaudit.json import jsonable
from fedaudit.mechanisms.gated import ClientUpdate, GatedSparseUpload, m_for_density
from fedaudit.rng import RngLike, as_generator, as_seed_sequence
from fedaudit.validation import check_choice, check_int, check_probability, check_real

__all__ = ["HardConcrete", "GatedModel", "EFLoPS", "EFLoPSState", "SparseRun", "ClientUpdate", "local_update",
           "train_eflops", "top_m_mask", "level_at", "REGULARIZERS", "ANNEALING", "SAMPLING", "LOSSES",
           "LOCAL_OPTIMIZERS"]

REGULARIZERS = ("entropy", "kl")
ANNEALING = (None, "linear", "cosine")
SAMPLING = ("poisson", "fixed")
LOSSES = ("auto", "mse", "cross_entropy")
LOCAL_OPTIMIZERS = ("sgd", "adam")


def level_at(t: int, rounds: int, density: float, init_density: float, warmup: float) -> float:
    """The density level of round t ∈ [0, rounds) under a level warm-up: ρ when ``warmup`` = 0 or
    ``init_density`` ≤ ρ, else ρ_t = s₀ + (ρ − s₀)·t/(warmup·rounds) with s₀ = ``init_density``
    until t ≥ warmup·rounds, and ρ after. E-FLoPS's constraint level (:meth:`EFLoPS.target_at`)
    and the hard-threshold budget of Fed-HT / FedIter-HT under the same warm-up
    (:mod:`fedaudit.fl.sparse_baselines`) both follow it."""
    start = max(density, init_density)
    if warmup == 0.0 or start == density:
        return density
    s = t / (warmup * rounds)
    return density if s >= 1.0 else start + (density - start) * s


def top_m_mask(scores: Any, m: int) -> np.ndarray:
    """Boolean mask of the m largest ``scores`` (ties broken by the lower index): exactly m ones."""
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    m = check_int("m", m, low=1, high=s.size, high_name="len(scores)")
    order = np.lexsort((np.arange(s.size), -s))
    mask = np.zeros(s.size, dtype=bool)
    mask[order[:m]] = True
    return mask


@dataclass(frozen=True)
class EFLoPS:
    """The E-FLoPS hyper-parameters (module docstring for the objective and the updates).

    ``density`` ρ ∈ (0, 1); ``temperature`` T ≥ 0 (0: FLoPS); ``regularizer`` "entropy" | "kl";
    ``anneal`` None | "linear" | "cosine" over ``anneal_fraction`` ∈ (0, 1] of the rounds;
    ``local_steps`` ≥ 1 SGD steps per round with step sizes ``lr`` (θ̃) and ``lr_gates`` (log α) on
    minibatches of ``batch_size`` (None: the full local data) by ``local_optimizer`` "sgd" or "adam"
    (torch.optim.Adam with its defaults, state reset every round, as Louizos et al. train gates); ``lr_dual`` η_λ ≥ 0 (0 keeps λ at
    ``lambda_init``); ``target_warmup`` ∈ [0, 1): fraction of the rounds over which the constraint
    level moves from ``init_density`` to ρ (:meth:`target_at`; 0: the level is ρ throughout);
    ``dual_restarts`` (default on, as in Gallego-Posada et al.'s code: λ ← 0 once
    ρ̂ ≤ ρ, which stops the multiplier accumulated during the descent from pushing ρ̂ far below ρ);
    ``participation`` q ∈ (0, 1] with ``sampling`` "poisson" (each client joins
    with probability q) or "fixed" (⌈q·n⌉ clients without replacement); ``gates`` "parameter" |
    "unit"; log α starts at the value with P(z ≠ 0) = ``init_density`` plus N(0, 0.01²) jitter
    (Louizos et al. use P(z = 0) ≈ ½ with the same jitter)."""

    density: float
    temperature: float = 0.05
    regularizer: str = "entropy"
    anneal: str | None = "linear"
    anneal_fraction: float = 0.8
    local_steps: int = 5
    lr: float = 0.05
    lr_gates: float = 0.5
    lr_dual: float = 0.05
    lambda_init: float = 0.0
    dual_restarts: bool = True
    participation: float = 1.0
    sampling: str = "poisson"
    gates: str = "parameter"
    batch_size: int | None = None
    local_optimizer: str = "sgd"
    init_density: float = 0.5
    target_warmup: float = 0.0

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 (frozen dataclass)
        set_("density", check_probability("density", self.density))
        set_("temperature", check_real("temperature", self.temperature, low=0.0))
        check_choice("regularizer", self.regularizer, REGULARIZERS)
        check_choice("anneal", self.anneal, ANNEALING)
        set_("anneal_fraction", check_probability("anneal_fraction", self.anneal_fraction, open_high=False))
        set_("local_steps", check_int("local_steps", self.local_steps, low=1))
        set_("lr", check_real("lr", self.lr, low=0.0, open_low=True))
        set_("lr_gates", check_real("lr_gates", self.lr_gates, low=0.0, open_low=True))
        set_("lr_dual", check_real("lr_dual", self.lr_dual, low=0.0))
        set_("lambda_init", check_real("lambda_init", self.lambda_init, low=0.0))
        set_("dual_restarts", bool(self.dual_restarts))
        set_("participation", check_probability("participation", self.participation, open_high=False))
        check_choice("sampling", self.sampling, SAMPLING)
        check_choice("gates", self.gates, GATE_MODES)
        check_choice("local_optimizer", self.local_optimizer, LOCAL_OPTIMIZERS)
        if self.batch_size is not None:
            set_("batch_size", check_int("batch_size", self.batch_size, low=1))
        set_("init_density", check_probability("init_density", self.init_density))
        set_("target_warmup", check_real("target_warmup", self.target_warmup, low=0.0, high=1.0, open_high=True))

    @classmethod
    def for_networks(cls, density: float, **overrides: Any) -> "EFLoPS":
        """The recipe for deep networks (measured on the digits CNN, 38 282 parameters, at ρ = 0.025
        in ``benchmarks/eflops_digits.py``): Adam on θ̃ (lr 0.005) and on log α (0.05), as Louizos et
        al. train gates; gates starting at P(z ≠ 0) = 0.95 with the constraint level moving from 0.95
        to ρ over the first 60 % of the rounds; a slow dual step η_λ = 10⁻³ (Gallego-Posada et al.
        use 10⁻⁴ per step); T = 10⁻⁴. The defaults of the class suit small linear models; on a
        network their λ outgrows the per-gate loss signal, which is O(1/|θ|), and closes the gates
        uniformly. ``overrides`` replace any field."""
        recipe = {"lr": 0.005, "local_optimizer": "adam", "lr_gates": 0.05, "lr_dual": 1e-3, "init_density": 0.95,
                  "target_warmup": 0.6, "temperature": 1e-4}
        return cls(density=density, **{**recipe, **overrides})

    def params(self) -> dict[str, Any]:
        """The hyper-parameters as a dict."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def temperature_at(self, t: int, rounds: int) -> float:
        """T_t for round t ∈ [0, rounds): T·(1 − s) (linear) or T·(1 + cos πs)/2 (cosine) with
        s = t/(anneal_fraction·rounds), and 0 once s ≥ 1; T for ``anneal=None``."""
        if self.anneal is None or self.temperature == 0.0:
            return self.temperature
        s = t / (self.anneal_fraction * rounds)
        if s >= 1.0:
            return 0.0
        if self.anneal == "linear":
            return self.temperature * (1.0 - s)
        return self.temperature * 0.5 * (1.0 + math.cos(math.pi * s))

    def target_at(self, t: int, rounds: int) -> float:
        """The constraint level ρ_t of round t (:func:`level_at` with this method's ρ,
        ``init_density`` and ``target_warmup``; the weights learn before the multiplier closes
        gates; Gallego-Posada et al. also move the level towards ρ)."""
        return level_at(t, rounds, self.density, self.init_density, self.target_warmup)

    def m(self, dim: int) -> int:
        """m = ⌊ρ·|θ|⌋, the size of the final support, by
        :func:`~fedaudit.mechanisms.gated.m_for_density` (ρ read as its shortest decimal, the
        one formula every sparse method and the upload use); a FedAuditError if it is 0."""
        return m_for_density(self.density, dim)


@dataclass(frozen=True, eq=False)
class EFLoPSState:
    """What the server broadcasts in one round: the method, the gated model and loss, the global
    weights θ̃ (|θ|,), the per-gate log α (n_gates,), the multiplier λ and the round's T_t."""

    method: EFLoPS
    model: GatedModel
    loss: str
    weights: np.ndarray
    log_alpha: np.ndarray
    lam: float
    temperature: float

    @property
    def expected_density(self) -> float:
        """ρ̂ = Σ_j |g_j|·π_j / |θ|."""
        pi = HardConcrete.prob_nonzero(self.log_alpha)
        return float(np.dot(self.model.group_sizes, pi) / self.model.dim)


@dataclass(frozen=True, eq=False)
class SparseRun:
    """The result of a federated sparse-training run.

    ``weights`` θ̂ (|θ|,) has its support inside ``mask`` (exactly ``m`` True entries);
    ``density`` = m/|θ| is the realised density of the mask and ``target_density`` ρ.
    ``history`` holds one entry per round for "round", "loss" (n-weighted training loss of the
    global model at the end of the round), "density" (E-FLoPS: the expected density ρ̂ of the
    global gates), "clients" (participants) and "bytes" (uploaded that round, all clients), and
    method-specific keys (E-FLoPS: "lambda", "temperature", "entropy" — the mean Bernoulli
    entropy of the gates in nats). ``gates`` ẑ and ``log_alpha`` (per coordinate) are None for
    methods without gates. ``params`` records the configuration, ``seconds`` the wall time."""

    method: str
    weights: np.ndarray
    mask: np.ndarray
    m: int
    target_density: float
    history: dict[str, list]
    params: dict[str, Any]
    seconds: float
    gates: np.ndarray | None = None
    log_alpha: np.ndarray | None = None
    seed_entropy: Any = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.weights.size)

    @property
    def density(self) -> float:
        """Realised density of the hard mask, m/|θ|."""
        return float(self.mask.sum() / self.mask.size)

    @property
    def support(self) -> np.ndarray:
        """Indices of the mask, ascending."""
        return np.flatnonzero(self.mask)

    @property
    def bytes_uploaded(self) -> int:
        """Total bytes uploaded by all clients over all rounds."""
        return int(sum(self.history.get("bytes", ())))

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"method": self.method, "weights": self.weights, "mask": self.mask.astype(bool),
                         "m": self.m, "dim": self.dim, "density": self.density,
                         "target_density": self.target_density, "history": self.history, "params": self.params,
                         "seconds": self.seconds, "gates": self.gates, "log_alpha": self.log_alpha,
                         "bytes_uploaded": self.bytes_uploaded, "seed_entropy": self.seed_entropy,
                         "info": self.info})

    def summary(self) -> str:
        losses = self.history.get("loss") or [float("nan")]
        return (f"{self.method}: m={self.m} of {self.dim} (density {self.density:.4f}, target "
                f"{self.target_density:.4f}), final loss {losses[-1]:.4g}, {self.bytes_uploaded} bytes uploaded "
                f"in {len(self.history.get('round', ()))} rounds, {self.seconds:.1f} s")


# ----------------------------------------------------------------------------- local training


def _loss_fn(loss: str):
    F = require("torch.nn.functional", "E-FLoPS training")

    if loss == "mse":
        return lambda out, y: 0.5 * F.mse_loss(out.reshape(y.shape), y)
    return lambda out, y: F.cross_entropy(out, y)


def _tensors(model: GatedModel, client_data: Any, loss: str, name: str):
    torch = require("torch", "E-FLoPS training")

    try:
        X, y = client_data
    except (TypeError, ValueError):
        raise FedAuditError(f"{name} must be a pair (X, y), got {type(client_data).__name__}") from None
    X = torch.as_tensor(np.asarray(X, dtype=np.float64) if not torch.is_tensor(X) else X).to(model.dtype)
    y = torch.as_tensor(np.asarray(y) if not torch.is_tensor(y) else y)
    if X.shape[0] < 1 or y.shape != (X.shape[0],):
        raise FedAuditError(f"{name}: X must have n ≥ 1 rows and y shape (n,), got X {tuple(X.shape)}, "
                            f"y {tuple(y.shape)}")
    if not torch.isfinite(X).all():
        raise FedAuditError(f"{name}: X must contain only finite values")
    if loss == "mse":
        y = y.to(model.dtype)
        if not torch.isfinite(y).all():
            raise FedAuditError(f"{name}: y must contain only finite values")
    else:
        if y.is_floating_point():
            if not torch.equal(y, torch.round(y)):
                raise FedAuditError(f"{name}: y must hold integer class labels for loss='cross_entropy'")
        y = y.to(torch.int64)
    return X, y


def _infer_loss(loss: str, clients: Sequence[Any]) -> str:
    loss = check_choice("loss", loss, LOSSES)
    if loss != "auto":
        return loss
    y = clients[0][1]
    kind = "f" if (hasattr(y, "is_floating_point") and y.is_floating_point()) else np.asarray(y).dtype.kind
    return "mse" if kind == "f" else "cross_entropy"


def _regularizer(method: EFLoPS, la):
    """Σ_j-summable R(π_j) per gate (module docstring), from log-sigmoids."""
    torch = require("torch", "E-FLoPS training")

    log_p, log_q = HardConcrete.log_prob_nonzero(la)
    p = torch.exp(log_p)
    neg_h = p * log_p + (1.0 - p) * log_q
    if method.regularizer == "entropy":
        return neg_h
    rho = method.density
    return neg_h - p * math.log(rho) - (1.0 - p) * math.log1p(-rho)


def _local(state: EFLoPSState, X, y, rng: np.random.Generator) -> ClientUpdate:
    torch = require("torch", "E-FLoPS training")

    method, model = state.method, state.model
    theta = torch.tensor(state.weights, dtype=model.dtype, requires_grad=True)
    la = torch.tensor(state.log_alpha, dtype=model.dtype, requires_grad=True)
    sizes = torch.as_tensor(model.group_sizes, dtype=model.dtype)
    fn = _loss_fn(state.loss)
    n = X.shape[0]
    groups = [{"params": [theta], "lr": method.lr}, {"params": [la], "lr": method.lr_gates}]
    opt = torch.optim.SGD(groups) if method.local_optimizer == "sgd" else torch.optim.Adam(groups)
    for _ in range(method.local_steps):
        if method.batch_size is not None and method.batch_size < n:
            idx = torch.as_tensor(rng.choice(n, size=method.batch_size, replace=False))
            Xb, yb = X[idx], y[idx]
        else:
            Xb, yb = X, y
        z = HardConcrete.sample(la, u=HardConcrete.uniform(model.n_gates, rng))
        obj = fn(model.forward(theta * model.expand(z), Xb), yb)
        obj = obj + state.lam * torch.dot(sizes, HardConcrete.prob_nonzero(la))
        if state.temperature > 0:
            obj = obj + state.temperature * torch.dot(sizes, _regularizer(method, la))
        opt.zero_grad()
        obj.backward()
        opt.step()
    w = theta.detach().double().numpy()
    a = model.expand(la.detach().double().numpy())
    if not (np.isfinite(w).all() and np.isfinite(a).all()):
        raise FedAuditError(f"local training diverged (non-finite weights or gates): lower lr={method.lr:g} "
                            f"or lr_gates={method.lr_gates:g}")
    return ClientUpdate(weights=w, log_alpha=np.array(a, dtype=np.float64))


def local_update(state: EFLoPSState, client_data: Any, *, rng: RngLike) -> ClientUpdate:
    """One client's local training from the broadcast ``state`` on ``client_data`` = (X, y):
    ``local_steps`` SGD steps on J_i (module docstring) with λ and T_t fixed. Returns the
    :class:`ClientUpdate` (θ̃_i, log α_i), both flat float64 of length |θ| (per-unit log α is
    repeated over its unit). A pure function of (state, data, rng): the black-box sampler the
    upload's privacy audit runs on neighbouring datasets."""
    X, y = _tensors(state.model, client_data, state.loss, "client_data")
    return _local(state, X, y, as_generator(rng))


# ----------------------------------------------------------------------------- training loop


def _check_clients(clients: Any) -> list:
    try:
        clients = list(clients)
    except TypeError:
        raise FedAuditError(f"clients must be a sequence of (X, y) pairs, got {type(clients).__name__}") from None
    if not clients:
        raise FedAuditError("clients must hold at least 1 (X, y) pair, got 0")
    return clients


def _participants(method: EFLoPS, n: int, rng: np.random.Generator) -> np.ndarray:
    if method.participation == 1.0:
        return np.arange(n)
    if method.sampling == "poisson":
        return np.flatnonzero(rng.random(n) < method.participation)
    k = max(1, math.ceil(method.participation * n))
    return np.sort(rng.choice(n, size=k, replace=False))


def _mean_entropy(log_alpha: np.ndarray, sizes: np.ndarray) -> float:
    log_p, log_q = HardConcrete.log_prob_nonzero(log_alpha)
    h = -(np.exp(log_p) * log_p + np.exp(log_q) * log_q)
    return float(np.dot(sizes, h) / sizes.sum())


def train_eflops(model: Any, clients: Sequence[Any], *, method: EFLoPS, rounds: int, rng: RngLike = 0,
                 upload: Any = None, aggregator: Any = None, byzantine: int = 0, attack: Any = None,
                 loss: str = "auto", threads: int = 1, progress: Callable[[int], None] | None = None,
                 ledger: Any = None) -> SparseRun:
    """Train the torch ``model`` (its parameters are θ̃₀; it is never modified) with E-FLoPS on
    ``clients`` — a sequence of (X_i, y_i) local datasets — for ``rounds`` rounds.

    One round (module docstring): sample participants; each runs :func:`local_update` from the
    broadcast state; the server aggregates and takes the dual step. Aggregation:

    * default: weighted mean of (θ̃_i, log α_i) with weights n_i; bytes per client 2·|θ|·4
      (float32 weights and gates);
    * ``upload`` (e.g. :class:`~fedaudit.mechanisms.gated.GatedSparseUpload`): every update is
      encoded to bytes (their length is what is logged), decoded, and ``upload.aggregate(packets,
      previous, weights)`` gives the new global update; with ``upload.error_feedback`` each client
      selects from θ̃_i + e_i and keeps the unsent residual e_i
      (:class:`~fedaudit.fl.gated_training.ErrorFeedback`); under rule "votes" a non-sender's gate is
      the data-free local step of the broadcast gates
      (:func:`~fedaudit.fl.gated_training.data_free_gates`); the first ``upload.dense_rounds``
      rounds use the dense upload;
    * ``upload`` a :class:`~fedaudit.mechanisms.gated.GatedPrivateUpload` (ε-LDP): the rows
      [θ̃_i, log α_i] go through its ``encode`` (noisy top-m indices, Laplace values and gates),
      each report becomes a packet (``to_packet``) and a ``GatedSparseUpload(|θ|, m,
      value_dtype="float64")`` aggregates them; bytes per client ⌈bits_per_report/8⌉. Every report
      is charged to ``ledger`` (a :class:`~fedaudit.accounting.Ledger`; a fresh one when None):
      ``ledger.record(i, upload, round=t)`` for each participating client i in round t, so after
      R rounds client i has spent R_i·ε (basic composition of pure ε-LDP, R_i its rounds), not the
      ε of one report; ``info["epsilon_spent"]`` is max_i of that composed ε and
      ``info["ledger"]`` the ledger;
    * ``aggregator`` (any fedaudit rule, (k, 2|θ|) → (2|θ|,)): applied to the rows
      [θ̃_i, log α_i] (unweighted); with ``upload``, to the rows ``upload.reconstruct(packet,
      previous)``.

    ``byzantine`` f ≥ 0 extra clients join every round with the updates of ``attack``: without an
    upload a dense attack (``attack(rows, f, rng)`` → (f, 2|θ|), :mod:`fedaudit.attacks.byzantine`)
    on the honest rows; with one a sparse attack (``attack(packets, f, rng, upload=, previous=)``,
    :mod:`fedaudit.attacks.sparse`) that picks its support too. Malformed packets are dropped
    (``upload.receive``); a Byzantine client claims the mean honest n_i as its weight. The logged
    bytes are the honest clients' uploads.

    ``loss``: "mse" (½·mean squared error, float targets), "cross_entropy" (integer labels) or
    "auto" (by the dtype of the first client's y). ``rng`` seeds everything (initial jitter,
    participation, gate noise and minibatches, one independent stream per client and round): the
    same rng and model give the same bits. Torch runs on CPU with ``threads`` threads (restored
    afterwards). ``progress(k)`` is called after round k. Returns a :class:`SparseRun`.
    """
    torch = require("torch", "E-FLoPS training")

    if not isinstance(method, EFLoPS):
        raise FedAuditError(f"method must be an EFLoPS(...) configuration, got {type(method).__name__}")
    rounds = check_int("rounds", rounds, low=1)
    threads = check_int("threads", threads, low=1)
    clients = _check_clients(clients)
    gm = GatedModel(model, method.gates)
    m = method.m(gm.dim)
    if upload is not None:
        up_dim = upload.params_dim if hasattr(upload, "to_packet") else getattr(upload, "dim", gm.dim)
        if up_dim != gm.dim:
            raise FedAuditError(f"upload must be built for |θ|={gm.dim} parameters, got {up_dim}")
    byzantine = check_int("byzantine", byzantine, low=0)
    if byzantine and attack is None:
        raise FedAuditError(f"attack must be given when byzantine > 0, got byzantine={byzantine} and attack=None")
    private = upload is not None and hasattr(upload, "to_packet")
    if ledger is not None and not private:
        raise FedAuditError("ledger must be None unless upload is an ε-LDP GatedPrivateUpload (only its reports "
                            f"spend privacy), got upload={upload!r}")
    if private:
        from fedaudit.accounting.ledger import Ledger

        if ledger is None:
            ledger = Ledger()
        elif not isinstance(ledger, Ledger):
            raise FedAuditError(f"ledger must be None or a fedaudit.accounting.Ledger, got {type(ledger).__name__}")
    memory = None
    if isinstance(upload, GatedSparseUpload):
        if byzantine and upload.dense_rounds:
            raise FedAuditError(f"upload.dense_rounds must be 0 with byzantine > 0 (a sparse attack has no dense "
                                f"rounds), got dense_rounds={upload.dense_rounds}")
        memory = ErrorFeedback(len(clients), gm.dim) if upload.error_feedback else None
    loss = _infer_loss(loss, clients)
    data = [_tensors(gm, c, loss, f"clients[{i}]") for i, c in enumerate(clients)]
    sizes = np.array([X.shape[0] for X, _ in data], dtype=np.float64)
    root = as_seed_sequence(rng, copy=True)
    init_ss, sample_ss, local_ss, agg_ss = root.spawn(4)
    round_ss, agg_ss = local_ss.spawn(rounds), agg_ss.spawn(rounds)
    sample_rng = np.random.default_rng(sample_ss)
    la0 = HardConcrete.log_alpha_for(method.init_density)
    state = EFLoPSState(method, gm, loss, gm.initial_weights(),
                        la0 + 0.01 * np.random.default_rng(init_ss).standard_normal(gm.n_gates),
                        method.lambda_init, method.temperature_at(0, rounds))
    fn = _loss_fn(loss)
    hist: dict[str, list] = {k: [] for k in ("round", "loss", "density", "clients", "bytes", "lambda",
                                             "temperature", "entropy")}
    dense_bytes = 2 * gm.dim * 4
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        for t in range(rounds):
            state = EFLoPSState(method, gm, loss, state.weights, state.log_alpha, state.lam,
                                method.temperature_at(t, rounds))
            ids = _participants(method, len(data), sample_rng)
            streams = round_ss[t].spawn(len(data))
            updates = [_local(state, *data[i], np.random.default_rng(streams[i])) for i in ids]
            if private:  # one ε-LDP report per participating client and round
                for i in ids:
                    ledger.record(int(i), upload, round=t)
            if updates:
                weights, log_alpha, sent = _aggregate(state, updates, sizes[ids], upload, aggregator, attack,
                                                      byzantine, np.random.default_rng(agg_ss[t]), ids=ids,
                                                      memory=memory, dense=upload is None or t < getattr(upload, "dense_rounds", 0))
            else:
                weights, log_alpha, sent = state.weights, state.log_alpha, 0
            new = EFLoPSState(method, gm, loss, weights, log_alpha, state.lam, state.temperature)
            rho_hat = new.expected_density
            level = method.target_at(t, rounds)
            lam = max(0.0, state.lam + method.lr_dual * (rho_hat - level))
            if method.dual_restarts and rho_hat <= level:
                lam = 0.0
            state = EFLoPSState(method, gm, loss, weights, log_alpha, lam, state.temperature)
            hist["round"].append(t + 1)
            hist["loss"].append(_global_loss(gm, fn, data, sizes, weights, log_alpha))
            hist["density"].append(rho_hat)
            hist["clients"].append(int(len(ids)))
            hist["bytes"].append(int(sent))
            hist["lambda"].append(lam)
            hist["temperature"].append(state.temperature)
            hist["entropy"].append(_mean_entropy(log_alpha, gm.group_sizes))
            if progress is not None:
                progress(t + 1)
    finally:
        torch.set_num_threads(old_threads)
    pi = gm.expand(HardConcrete.prob_nonzero(state.log_alpha))
    mask = top_m_mask(pi, m)
    return SparseRun(method="eflops", weights=np.where(mask, state.weights, 0.0), mask=mask, m=m,
                     target_density=method.density, history=hist,
                     params={**method.params(), "rounds": rounds, "loss": loss, "clients": len(data),
                             "upload": None if upload is None else repr(upload),
                             "aggregator": None if aggregator is None else repr(aggregator),
                             "byzantine": byzantine, "attack": None if attack is None else repr(attack)},
                     seconds=time.perf_counter() - start,
                     gates=gm.expand(HardConcrete.deterministic(state.log_alpha)),
                     log_alpha=gm.expand(np.array(state.log_alpha, dtype=np.float64)),
                     seed_entropy=root.entropy,
                     info={"expected_density": hist["density"][-1], "dense_bytes_per_client": dense_bytes,
                           "dim": gm.dim, "n_gates": gm.n_gates,
                           **({} if not private else {
                               "ledger": ledger,
                               "epsilon_spent": max((ledger.spent(c).epsilon for c in ledger.clients()),
                                                    default=0.0)})})


def _combine(rows: np.ndarray, n: np.ndarray, aggregator: Any, dim: int,
             rng: np.random.Generator) -> np.ndarray:
    """The n-weighted mean of the rows [θ̃_i, log α_i], or ``aggregator``'s output on them."""
    if aggregator is None:
        return (n / n.sum()) @ rows
    out = np.asarray(aggregator(rows, rng=rng), dtype=np.float64)
    if out.shape != (2 * dim,) or not np.isfinite(out).all():
        raise FedAuditError(f"aggregator must return a finite vector of length 2·|θ| = {2 * dim}, got "
                            f"shape {out.shape}" + ("" if out.shape != (2 * dim,) else " with non-finite entries"))
    return out


def _aggregate(state: EFLoPSState, updates: list[ClientUpdate], n: np.ndarray, upload: Any, aggregator: Any,
               attack: Any, byzantine: int, rng: np.random.Generator, *, ids: np.ndarray,
               memory: ErrorFeedback | None, dense: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """(global θ̃, per-gate log α, honest bytes uploaded) from the round's client updates (the rules
    of :func:`train_eflops`; ``dense``: the dense upload, also in an upload's ``dense_rounds``;
    ``memory``: the clients' error feedback, ``ids`` their indices)."""
    gm = state.model
    d = gm.dim
    previous = ClientUpdate(state.weights, gm.expand(state.log_alpha))
    weights = np.concatenate([n, np.full(byzantine, n.mean())])  # a Byzantine client claims a typical n_i
    if dense:
        rows = np.stack([np.concatenate([u.weights, u.log_alpha]) for u in updates])
        if byzantine:
            rows = np.vstack([rows, np.asarray(attack(rows, byzantine, rng), dtype=np.float64)])
        out = _combine(rows, weights, aggregator, d, rng)
        return out[:d], gm.reduce(out[d:]), 2 * d * 4 * len(updates)
    if hasattr(upload, "to_packet"):  # a GatedPrivateUpload mechanism: ε-LDP reports, float64 values
        reports = upload.encode(np.stack([np.concatenate([u.weights, u.log_alpha]) for u in updates]), rng)
        honest = [upload.to_packet(r) for r in reports]
        sent = len(updates) * math.ceil(upload.bits_per_report / 8)
        server = GatedSparseUpload(d, upload.m, value_dtype="float64")
    else:
        if memory is not None:  # error feedback: select from θ̃_i + e_i, keep what was not sent
            updates = [memory.compensate(i, u) for i, u in zip(ids, updates)]
        selected = [upload.select(u) for u in updates]
        if memory is not None:
            for i, u, p in zip(ids, updates, selected):
                memory.keep(i, u, p, previous)
        honest = [upload.encode(p) for p in selected]
        sent = sum(len(b) for b in honest)
        server = upload
    method = state.method
    unsent = None if server.rule != "votes" else gm.expand(data_free_gates(
        state.log_alpha, lam=state.lam, temperature=state.temperature, lr_gates=method.lr_gates,
        steps=method.local_steps, optimizer=method.local_optimizer, regularizer=method.regularizer,
        density=method.density, group_sizes=gm.group_sizes))
    blobs = honest + (list(attack(honest, byzantine, rng, upload=server, previous=previous)) if byzantine else [])
    packets, dropped = server.receive(blobs)
    weights = np.delete(weights, dropped)
    if not packets:
        return state.weights, state.log_alpha, sent
    if aggregator is None:
        new = server.aggregate(packets, previous, weights, unsent_log_alpha=unsent)
        return new.weights, gm.reduce(new.log_alpha), sent
    rec = [server.reconstruct(p, previous, unsent_log_alpha=unsent) for p in packets]
    out = _combine(np.stack([np.concatenate([r.weights, r.log_alpha]) for r in rec]), weights, aggregator, d, rng)
    return out[:d], gm.reduce(out[d:]), sent


def _global_loss(gm: GatedModel, fn, data, sizes, weights, log_alpha) -> float:
    """Σ_i n_i ℓ_i(θ̃ ⊙ ẑ) / Σ_i n_i at the deterministic gates."""
    torch = require("torch", "E-FLoPS training")

    with torch.no_grad():
        theta = torch.tensor(weights * gm.expand(HardConcrete.deterministic(log_alpha)), dtype=gm.dtype)
        total = sum(float(fn(gm.forward(theta, X), y)) * s for (X, y), s in zip(data, sizes))
    return total / float(sizes.sum())
