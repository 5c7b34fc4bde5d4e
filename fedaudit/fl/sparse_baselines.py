"""Baselines for federated sparse learning: Fed-HT, FedIter-HT and FedAvg followed by magnitude pruning.

Problem: min_θ Σ_i p_i f_i(θ) s.t. ‖θ‖₀ ≤ τ, with p_i = n_i / Σ_j n_j and f_i client i's mean loss
(squared error for regression, cross-entropy for classification). H_τ(v) keeps the τ entries of
largest |v_j| — over *all* parameters at once, exactly τ of them, ties broken toward the lower
index — and zeroes the rest (:func:`hard_threshold`).

Fed-HT and FedIter-HT (Tong, Liang, Zhu, Bi, "Federated Nonconvex Sparse Learning",
arXiv:2101.00052; journal version Algorithms 15(9):319, 2022). Round t, from the broadcast θ_t:

    every sampled client i: θ^i_0 = θ_t;  for k < K:  θ^i_{k+1} = θ^i_k − γ ∇f_i(θ^i_k; B_k)
                                              FedIter-HT only:  θ^i_{k+1} ← H_τ(θ^i_{k+1})
    server:  θ_{t+1} = H_τ(Σ_{i∈S_t} p_i θ^i_K / Σ_{i∈S_t} p_i)

(Distributed IHT is Fed-HT with K = 1.) The same schedule options as E-FLoPS, so that a
comparison gives every method the same tuning space: Adam local steps (``local_optimizer``), the
level warm-up (H_τ becomes H_{τ_t} with τ_t = max(τ, ⌊ρ_t·|θ|⌋), ρ_t of
:func:`fedaudit.fl.eflops.level_at`) and the top-m upload (``upload="top-m"``: a client sends
H_τ(θ^i_K)). A metric below :data:`DIVERGED_R2` (or not finite) marks a diverged run (:func:`is_diverged`). FedAvg+prune runs the same loop without any thresholding
and returns H_m(θ_T), the trained dense model pruned to its m largest-magnitude weights, without
fine-tuning (the post-hoc pruning baseline of the E-FLoPS paper).

Choices (the papers leave them open; the same in every method so the comparison is fair):
``τ = m = ⌊ρ·|θ|⌋`` (:func:`fedaudit.mechanisms.gated.m_for_density`); participation samples clients
as :func:`fedaudit.fl.eflops.train_eflops` does (Poisson with rate q, or ⌈q·n⌉ without replacement;
a round nobody joins leaves θ unchanged); the loss is ½·mean squared error or cross-entropy, as in
E-FLoPS; B_k is the client's
full local set when ``batch_size`` is None, else a fresh sample of ``batch_size`` rows without
replacement; θ_0 is the model's initial parameters (pass a zero-initialised model to start at 0 as
Tong et al. do). ``aggregator`` replaces the weighted mean by any fedaudit rule on the rows θ^i_K
(e.g. ``make_aggregator("nnm+cwtm", f)``); ``byzantine`` f extra clients send a dense attack's rows
(ALIE, IPM, … of :mod:`fedaudit.attacks.byzantine`, computed on the honest local models). Upload bytes per client per round: a dense model is
|θ|·4 bytes (float32, no header); FedIter-HT's τ-sparse local model is sent like the gated upload
without its gate column, 16 + τ·(b_i + 4) bytes with b_i = 2 (uint16 indices, |θ| ≤ 2^16) or 4,
when that is smaller than dense.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Sequence

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.fl.eflops import LOCAL_OPTIMIZERS, EFLoPS, SparseRun, level_at, train_eflops
from fedaudit.fl.registry import SPARSE_METHODS
from fedaudit.fl.gates import GatedModel
from fedaudit.fl.sparse_data import FederatedData, r2_score
from fedaudit.mechanisms.gated import HEADER_BYTES, m_for_density, top_m_indices
from fedaudit.rng import RngLike, as_seed_sequence
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real

__all__ = ["hard_threshold", "train_fed_ht", "train_fediter_ht", "train_fedavg_prune", "predict", "evaluate",
           "upload_bytes", "inference_macs", "BASELINES", "UPLOADS", "DIVERGED_R2", "is_diverged"]

#: method name -> (local thresholding, thresholding after averaging)
_VARIANTS = {"fed-ht": (False, True), "fediter-ht": (True, True), "fedavg-prune": (False, False)}
BASELINES = tuple(_VARIANTS)
#: what a baseline's client uploads: its dense local model, or its top m = ⌊ρ·|θ|⌋ coordinates by
#: magnitude (H_m(θ^i_K), sent as indices + values like FedIter-HT's packet) — the seed's top-m upload
UPLOADS = ("dense", "top-m")


def hard_threshold(v: Any, tau: int) -> np.ndarray:
    """H_τ(v): a copy of v with all but its τ largest-|v_j| entries set to 0 (exactly τ kept; ties:
    lower index first). ``v`` must be finite, 1 ≤ τ ≤ len(v)."""
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1:
        raise FedAuditError(f"v must be a vector, got shape {v.shape}")
    tau = check_int("tau", tau, low=1, high=v.size, high_name="len(v)")
    if not np.isfinite(v).all():
        raise FedAuditError("v must contain only finite values (hard thresholding of a diverged model)")
    out = np.zeros_like(v)
    keep = top_m_indices(np.abs(v), tau)
    out[keep] = v[keep]
    return out


def upload_bytes(method: str, dim: int, tau: int) -> int:
    """Bytes one client uploads per round under ``method`` (module docstring): 4·|θ| for a dense
    float32 model; for ``"fediter-ht"`` min(4·|θ|, 16 + τ·(b_i + 4))."""
    method = check_choice("method", method, BASELINES)
    dense = 4 * int(dim)
    if method != "fediter-ht":
        return dense
    b_i = 2 if dim <= 2**16 else 4
    return min(dense, HEADER_BYTES + int(tau) * (b_i + 4))


def _client_arrays(clients: Any) -> tuple[list[tuple[np.ndarray, np.ndarray]], str | None]:
    if isinstance(clients, FederatedData):
        return [(X, y) for X, y in clients.clients], clients.task
    if not isinstance(clients, Sequence) or len(clients) == 0:
        raise FedAuditError("clients must be a FederatedData or a non-empty sequence of (X, y) pairs")
    out = []
    for i, pair in enumerate(clients):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise FedAuditError(f"clients[{i}] must be an (X, y) pair")
        X, y = np.asarray(pair[0]), np.asarray(pair[1])
        if X.ndim < 2 or X.shape[0] != y.shape[0] or X.shape[0] == 0:
            raise FedAuditError(f"clients[{i}]: X must have one row per entry of y (at least 1), "
                                f"got X {X.shape} and y {y.shape}")
        out.append((X, y))
    return out, None


def _loss_fn(task: str) -> Callable[..., Any]:
    """½·mean squared error (regression) or mean cross-entropy (classification), as in E-FLoPS."""
    F = require("torch.nn.functional", "the sparse baselines (Fed-HT, FedIter-HT, FedAvg+prune)")

    if task == "regression":
        return lambda out, y: 0.5 * F.mse_loss(out.reshape(y.shape), y)
    return F.cross_entropy


def _tensors(clients: list, task: str, dtype: Any) -> list[tuple[Any, Any]]:
    torch = require("torch", "the sparse baselines (Fed-HT, FedIter-HT, FedAvg+prune)")

    out = []
    for i, (X, y) in enumerate(clients):
        if not np.isfinite(np.asarray(X, dtype=np.float64)).all():
            raise FedAuditError(f"clients[{i}]: X must contain only finite values")
        Xt = torch.as_tensor(np.asarray(X, dtype=np.float64), dtype=dtype)
        if task == "regression":
            y = np.asarray(y, dtype=np.float64)
            if not np.isfinite(y).all():
                raise FedAuditError(f"clients[{i}]: y must contain only finite values")
            yt = torch.as_tensor(y, dtype=dtype)
        else:
            if np.asarray(y).dtype.kind not in "iu":
                raise FedAuditError(f"clients[{i}]: classification labels must be integers, got {np.asarray(y).dtype}")
            yt = torch.as_tensor(np.asarray(y, dtype=np.int64))
        out.append((Xt, yt))
    return out


def _participants(q: float, sampling: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """All clients (q = 1); each independently with probability q (``"poisson"``); or a uniform
    subset of ⌈q·n⌉ clients (``"fixed"``) — the sampling of :func:`fedaudit.fl.eflops.train_eflops`."""
    if q == 1.0:
        return np.arange(n)
    if sampling == "poisson":
        return np.flatnonzero(rng.random(n) < q)
    return np.sort(rng.choice(n, size=max(1, math.ceil(q * n)), replace=False))


def _train(method: str, model: Any, clients: Any, *, rounds: int, density: float, local_steps: int, lr: float,
           batch_size: int | None, participation: float, sampling: str, task: str | None, aggregator: Any,
           byzantine: int, attack: Any, rng: RngLike, threads: int,
           progress: Callable[[int], None] | None, local_optimizer: str = "sgd", init_density: float = 0.5,
           target_warmup: float = 0.0, upload: str = "dense") -> SparseRun:
    torch = require("torch", "the sparse baselines (Fed-HT, FedIter-HT, FedAvg+prune)")

    local_ht, server_ht = _VARIANTS[method]
    rounds = check_int("rounds", rounds, low=1)
    local_steps = check_int("local_steps", local_steps, low=1)
    lr = check_positive("lr", lr)
    q = check_probability("participation", participation, open_high=False)
    sampling = check_choice("sampling", sampling, ("poisson", "fixed"))
    threads = check_int("threads", threads, low=1)
    byzantine = check_int("byzantine", byzantine, low=0)
    if byzantine and attack is None:
        raise FedAuditError(f"attack must be given when byzantine > 0, got byzantine={byzantine} and attack=None")
    local_optimizer = check_choice("local_optimizer", local_optimizer, LOCAL_OPTIMIZERS)
    init_density = check_probability("init_density", init_density)
    target_warmup = check_real("target_warmup", target_warmup, low=0.0, high=1.0, open_high=True)
    upload = check_choice("upload", upload, UPLOADS)
    if upload == "top-m" and method == "fedavg-prune":
        raise FedAuditError("upload must be 'dense' for fedavg-prune (it prunes only after training), got 'top-m'")
    pairs, data_task = _client_arrays(clients)
    if task is None:
        task = data_task or ("classification" if np.asarray(pairs[0][1]).dtype.kind in "iu" else "regression")
    task = check_choice("task", task, ("regression", "classification"))
    if batch_size is not None:
        batch_size = check_int("batch_size", batch_size, low=1)
    gm = GatedModel(model)
    p = gm.dim
    tau = m_for_density(density, p)
    data = _tensors(pairs, task, gm.dtype)
    n = np.array([X.shape[0] for X, _ in data], dtype=np.float64)
    loss_fn = _loss_fn(task)
    root = as_seed_sequence(rng, copy=True)
    sample_ss, batch_ss, agg_ss = root.spawn(3)
    pick = np.random.default_rng(sample_ss)
    batch_rng = np.random.default_rng(batch_ss)
    agg_rng = np.random.default_rng(agg_ss)
    per_client = upload_bytes("fediter-ht" if upload == "top-m" else method, p, tau)

    def threshold_t(v: Any, k: int) -> Any:
        keep = torch.as_tensor(top_m_indices(np.abs(v.detach().double().numpy()), k))
        out = torch.zeros_like(v)
        out[keep] = v[keep]
        return out

    def local(theta0: Any, X: Any, y: Any, k: int) -> Any:
        theta = theta0.clone().requires_grad_(True)
        opt = torch.optim.SGD([theta], lr=lr) if local_optimizer == "sgd" else torch.optim.Adam([theta], lr=lr)
        for _ in range(local_steps):
            if batch_size is not None and batch_size < X.shape[0]:
                idx = torch.as_tensor(batch_rng.choice(X.shape[0], size=batch_size, replace=False))
                Xb, yb = X[idx], y[idx]
            else:
                Xb, yb = X, y
            opt.zero_grad()
            loss_fn(gm.forward(theta, Xb), yb).backward()
            opt.step()
            if local_ht:
                with torch.no_grad():
                    theta.copy_(threshold_t(theta, k))
        theta = theta.detach()
        return threshold_t(theta, tau) if upload == "top-m" else theta

    def global_loss(theta: Any) -> float:
        with torch.no_grad():
            losses = [float(loss_fn(gm.forward(theta, X), y)) for X, y in data]
        return float(np.dot(n, losses) / n.sum())

    theta = torch.as_tensor(gm.initial_weights(), dtype=gm.dtype)
    hist: dict[str, list] = {k: [] for k in ("round", "loss", "density", "clients", "bytes")}
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        for t in range(rounds):
            ids = _participants(q, sampling, len(data), pick)
            k = tau if target_warmup == 0.0 else max(tau, m_for_density(level_at(t, rounds, density, init_density,
                                                                                  target_warmup), p))
            if ids.size:
                rows = torch.stack([local(theta, *data[i], k) for i in ids])
                if not torch.isfinite(rows).all():
                    raise FedAuditError(f"{method} diverged in round {t + 1} (non-finite local model); "
                                        f"lower lr={lr:g}")
                rows = rows.contiguous()
                w = np.concatenate([n[ids], np.full(byzantine, n[ids].mean())])  # a Byzantine client claims a typical n_i
                if byzantine:
                    bad = np.asarray(attack(rows.double().numpy(), byzantine, agg_rng), dtype=np.float64)
                    if bad.shape != (byzantine, p):
                        raise FedAuditError(f"attack must return ({byzantine}, {p}) rows, got shape {bad.shape}")
                    rows = torch.cat([rows, torch.as_tensor(bad, dtype=gm.dtype)])
                if aggregator is None:
                    avg = torch.as_tensor(w / w.sum(), dtype=gm.dtype) @ rows
                    if not torch.isfinite(avg).all():
                        raise FedAuditError(f"{method}: the mean of round {t + 1} is not finite (a non-finite "
                                            "Byzantine row; use a robust aggregator)")
                else:
                    out = np.asarray(aggregator(rows.double().numpy(), rng=agg_rng), dtype=np.float64)
                    if out.shape != (p,) or not np.isfinite(out).all():
                        raise FedAuditError(f"aggregator must return a finite vector of length {p}, "
                                            f"got shape {out.shape}")
                    avg = torch.as_tensor(out, dtype=gm.dtype)
                theta = threshold_t(avg, k) if server_ht else avg
            loss = global_loss(theta)
            if not math.isfinite(loss):
                raise FedAuditError(f"{method} diverged in round {t + 1} (training loss {loss}); lower lr={lr:g}")
            hist["round"].append(t + 1)
            hist["loss"].append(loss)
            hist["density"].append(float(torch.count_nonzero(theta)) / p)
            hist["clients"].append(int(ids.size))
            hist["bytes"].append(int(per_client * ids.size))
            if progress is not None:
                progress(t + 1)
    finally:
        torch.set_num_threads(old_threads)
    final = theta.double().numpy()
    mask = np.zeros(p, dtype=bool)
    mask[top_m_indices(np.abs(final), tau)] = True
    params = {"density": float(density), "rounds": rounds, "local_steps": local_steps, "lr": lr,
              "batch_size": batch_size, "participation": q, "sampling": sampling, "task": task,
              "clients": len(data), "aggregator": None if aggregator is None else repr(aggregator),
              "byzantine": byzantine, "attack": None if attack is None else repr(attack),
              "local_optimizer": local_optimizer, "init_density": init_density, "target_warmup": target_warmup,
              "upload": upload}
    return SparseRun(method=method, weights=np.where(mask, final, 0.0), mask=mask, m=tau,
                     target_density=float(density), history=hist, params=params,
                     seconds=time.perf_counter() - start, seed_entropy=root.entropy,
                     info={"bytes_per_client": per_client, "dense_bytes_per_client": 4 * p, "dim": p})


_COMMON = """``model`` is a torch ``nn.Module`` (its parameters are θ_0; it is never modified), ``clients``
    a :class:`~fedaudit.fl.sparse_data.FederatedData` or a sequence of (X_i, y_i) pairs; ``task``
    (default: the data's, else by y's dtype) picks the loss (½·MSE or cross-entropy).
    ``participation`` q ∈ (0, 1] with ``sampling`` "poisson" or "fixed" (⌈q·n⌉ clients);
    ``batch_size`` None = full local batch; ``aggregator`` any fedaudit rule on the local models;
    ``byzantine`` f extra clients send ``attack(rows, f, rng)`` (a dense attack of
    :mod:`fedaudit.attacks.byzantine` on the honest local models; weight: the mean honest n_i);
    ``rng`` seeds participation and minibatches (same rng → same bits); ``threads`` torch CPU
    threads; ``progress(t)`` after round t. ``local_optimizer`` "sgd" (θ ← θ − γ∇f_i) or "adam"
    (torch.optim.Adam at step size γ, its state reset every round, as E-FLoPS's clients);
    ``target_warmup`` w ∈ [0, 1) with ``init_density`` s₀: the level warm-up E-FLoPS's
    constraint uses (:func:`~fedaudit.fl.eflops.level_at`), here for the threshold: round t
    keeps τ_t = max(m, ⌊ρ_t·|θ|⌋) coordinates, ρ_t moving linearly from s₀ to ρ over the first
    w·rounds rounds (w = 0: τ_t = m throughout; FedAvg+prune never thresholds, so it ignores it);
    ``upload`` "dense" (the local model, |θ|·4 bytes) or "top-m" (each client sends
    H_m(θ^i_K), its m largest-magnitude coordinates, as FedIter-HT's packet; the server averages
    the sparse vectors, zeros where a client sent nothing; not for FedAvg+prune).
    Returns a :class:`~fedaudit.fl.eflops.SparseRun`
    (θ̂ with exactly m = ⌊ρ·|θ|⌋ mask entries, per-round loss, density of the global model,
    clients and bytes uploaded)."""


def _doc(text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn.__doc__ = text + "\n\n    " + _COMMON
        return fn
    return wrap


@_doc("""Fed-HT (Tong et al. 2021): K = ``local_steps`` local (S)GD steps of size ``lr`` per client,
    then θ_{t+1} = H_τ(weighted mean of the local models), τ = ⌊``density``·|θ|⌋.""")
def train_fed_ht(model: Any, clients: Any, *, rounds: int, density: float, local_steps: int = 5, lr: float = 0.01,
                 batch_size: int | None = None, participation: float = 1.0, sampling: str = "poisson",
                 task: str | None = None, aggregator: Any = None, byzantine: int = 0, attack: Any = None,
                 rng: RngLike = 0, threads: int = 1, progress: Callable[[int], None] | None = None,
                 local_optimizer: str = "sgd", init_density: float = 0.5, target_warmup: float = 0.0,
                 upload: str = "dense") -> SparseRun:
    return _train("fed-ht", model, clients, rounds=rounds, density=density, local_steps=local_steps, lr=lr,
                  batch_size=batch_size, participation=participation, sampling=sampling, task=task,
                  aggregator=aggregator, byzantine=byzantine, attack=attack, rng=rng, threads=threads,
                  progress=progress, local_optimizer=local_optimizer, init_density=init_density,
                  target_warmup=target_warmup, upload=upload)


@_doc("""FedIter-HT (Tong et al. 2021): as :func:`train_fed_ht`, and every local step is followed by
    H_τ, so each client's upload is τ-sparse (sent as indices + values).""")
def train_fediter_ht(model: Any, clients: Any, *, rounds: int, density: float, local_steps: int = 5,
                     lr: float = 0.01, batch_size: int | None = None, participation: float = 1.0,
                     sampling: str = "poisson", task: str | None = None, aggregator: Any = None, byzantine: int = 0,
                     attack: Any = None, rng: RngLike = 0, threads: int = 1,
                     progress: Callable[[int], None] | None = None, local_optimizer: str = "sgd",
                     init_density: float = 0.5, target_warmup: float = 0.0, upload: str = "dense") -> SparseRun:
    return _train("fediter-ht", model, clients, rounds=rounds, density=density, local_steps=local_steps, lr=lr,
                  batch_size=batch_size, participation=participation, sampling=sampling, task=task,
                  aggregator=aggregator, byzantine=byzantine, attack=attack, rng=rng, threads=threads,
                  progress=progress, local_optimizer=local_optimizer, init_density=init_density,
                  target_warmup=target_warmup, upload=upload)


@_doc("""FedAvg (McMahan et al. 2017) for ``rounds`` rounds, then magnitude pruning θ̂ = H_m(θ_T),
    m = ⌊``density``·|θ|⌋, without fine-tuning (the history is of the dense model).""")
def train_fedavg_prune(model: Any, clients: Any, *, rounds: int, density: float, local_steps: int = 5,
                       lr: float = 0.01, batch_size: int | None = None, participation: float = 1.0,
                       sampling: str = "poisson", task: str | None = None, aggregator: Any = None,
                       byzantine: int = 0, attack: Any = None, rng: RngLike = 0, threads: int = 1,
                       progress: Callable[[int], None] | None = None, local_optimizer: str = "sgd",
                       init_density: float = 0.5, target_warmup: float = 0.0, upload: str = "dense") -> SparseRun:
    return _train("fedavg-prune", model, clients, rounds=rounds, density=density, local_steps=local_steps, lr=lr,
                  batch_size=batch_size, participation=participation, sampling=sampling, task=task,
                  aggregator=aggregator, byzantine=byzantine, attack=attack, rng=rng, threads=threads,
                  progress=progress, local_optimizer=local_optimizer, init_density=init_density,
                  target_warmup=target_warmup, upload=upload)


def _eflops(model: Any, clients: Any, *, rounds: int, density: float, rng: RngLike = 0, upload: Any = None,
            aggregator: Any = None, byzantine: int = 0, attack: Any = None, threads: int = 1,
            progress: Callable[[int], None] | None = None, **hyper: Any) -> SparseRun:
    """E-FLoPS (:func:`fedaudit.fl.eflops.train_eflops` with ``EFLoPS(density=density, **hyper)``)."""
    pairs = clients.clients if isinstance(clients, FederatedData) else clients
    return train_eflops(model, pairs, method=EFLoPS(density=density, **hyper), rounds=rounds, rng=rng, upload=upload,
                        aggregator=aggregator, byzantine=byzantine, attack=attack, threads=threads,
                        progress=progress)


SPARSE_METHODS.register("eflops", _eflops)
SPARSE_METHODS.register("fed-ht", train_fed_ht, aliases=("fediht", "fed-iht"))
SPARSE_METHODS.register("fediter-ht", train_fediter_ht)
SPARSE_METHODS.register("fedavg-prune", train_fedavg_prune)


def predict(model: Any, theta: Any, X: Any) -> np.ndarray:
    """f_θ(X) as float64 numpy (regression: (N,); classification: logits (N, C)) for flat θ."""
    torch = require("torch", "the sparse baselines (Fed-HT, FedIter-HT, FedAvg+prune)")

    gm = GatedModel(model)
    theta = np.asarray(theta, dtype=np.float64)
    if theta.shape != (gm.dim,):
        raise FedAuditError(f"theta must have shape ({gm.dim},) (the model's parameter count), got {theta.shape}")
    with torch.no_grad():
        out = gm.forward(torch.as_tensor(theta, dtype=gm.dtype), torch.as_tensor(np.asarray(X), dtype=gm.dtype))
    out = out.double().numpy()
    return out.reshape(-1) if out.ndim == 2 and out.shape[1] == 1 else out


def evaluate(model: Any, theta: Any, X: Any, y: Any, task: str) -> float:
    """Test R² (regression, :func:`~fedaudit.fl.sparse_data.r2_score`) or accuracy (classification)
    of f_θ on (X, y)."""
    task = check_choice("task", task, ("regression", "classification"))
    out = predict(model, theta, X)
    if task == "regression":
        return r2_score(y, out)
    return float(np.mean(np.argmax(out, axis=1) == np.asarray(y)))


#: a regression score below this R² marks a run as diverged (:func:`is_diverged`)
DIVERGED_R2 = -1.0


def is_diverged(score: Any, task: str) -> bool:
    """Whether a run whose test (or validation) metric is ``score`` diverged: a non-finite score
    (or None: training stopped on non-finite weights), or for regression R² < ``DIVERGED_R2`` = −1,
    i.e. a residual sum of squares more than twice that of predicting the mean (a run that exploded
    to a finite R² of −3·10⁸ is reported as diverged, not averaged in). Accuracy is bounded, so a
    classification score is flagged only when it is not finite."""
    task = check_choice("task", task, ("regression", "classification"))
    if score is None or not math.isfinite(float(score)):
        return True
    return task == "regression" and float(score) < DIVERGED_R2


def inference_macs(model: Any, mask: Any, input_shape: tuple[int, ...]) -> tuple[int, int]:
    """(sparse, dense) multiply-accumulates of one forward pass on one input of ``input_shape``
    (without the batch axis) when only the weights in ``mask`` (|θ|, in the order of
    ``model.named_parameters()``) are non-zero.

    A weight of ``nn.Linear`` is one MAC per output position (1 for a flat input); a weight of
    ``nn.Conv1d/2d/3d`` is one MAC per output position, i.e. MACs = nnz(W)·Π(output spatial
    sizes) (padded borders count as positions, the usual convention). Biases, activations,
    pooling and normalisation are not MACs; other layers' weights are not counted. The output
    sizes are read from one forward pass of a zero input."""
    torch = require("torch", "the sparse baselines (Fed-HT, FedIter-HT, FedAvg+prune)")

    gm = GatedModel(model)
    mask = np.asarray(mask, dtype=bool).reshape(-1)
    if mask.shape != (gm.dim,):
        raise FedAuditError(f"mask must have shape ({gm.dim},) (the model's parameter count), got {mask.shape}")
    offsets = dict(zip(gm.names, np.cumsum([0] + gm.sizes[:-1]).tolist()))
    positions: dict[str, int] = {}
    hooks = []
    layers = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    for prefix, sub in model.named_modules():
        if isinstance(sub, layers):
            key = f"{prefix}.weight" if prefix else "weight"

            def hook(mod, inp, out, key=key, linear=isinstance(sub, torch.nn.Linear)):
                shape = tuple(out.shape)
                positions[key] = int(np.prod(shape[1:-1])) if linear else int(np.prod(shape[2:]))

            hooks.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(torch.zeros((1, *tuple(input_shape)), dtype=gm.dtype))
    finally:
        for h in hooks:
            h.remove()
    sparse = dense = 0
    for key, pos in positions.items():
        start, size = offsets[key], gm.sizes[gm.names.index(key)]
        sparse += int(mask[start: start + size].sum()) * pos
        dense += size * pos
    return sparse, dense
