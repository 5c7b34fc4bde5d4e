"""DP-FedAvg with client-level differential privacy (McMahan, Ramage, Talwar, Zhang, ICLR 2018,
"Learning differentially private recurrent language models", Algorithm 1, fixed denominator).

One round at the server's model x:

1. Poisson sampling: every client of the population joins independently with probability q;
2. each sampled client i runs ``local_steps`` full-batch gradient steps of size ``local_lr`` on its
   own loss from x and sends Δ_i = x_i − x;
3. :class:`DPFedAvgAggregator`: Δ̄ = (Σ_i clip_C(Δ_i) + N(0, (zC)²·I)) / (q·N), with
   clip_C(Δ) = Δ·min(1, C/‖Δ‖₂);
4. the server optimizer steps on the pseudo-gradient g = −Δ̄ (default
   :class:`~fedaudit.fl.optimizers.DGD` with lr 1: x ← x + Δ̄, i.e. FedAvg).

Why the denominator is the *expected* number of sampled clients q·N and not the realised count:
a constant denominator is post-processing of the noisy sum, so adding or removing one client
changes the sum by at most C in L2 and each round is exactly the Poisson-subsampled Gaussian
mechanism with noise multiplier z at the client level (accounted by
:func:`fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg`); dividing by the realised count would make the
scale of the output depend on who took part. N must therefore be fixed in advance
(``population``), not counted from the clients present. The estimate is unbiased for the mean
update of the population when no update is clipped; its noise std per coordinate is zC/(qN).

Non-finite updates: a row with any NaN or ±inf entry is replaced by the zero vector (clipped to
norm 0) before summation, and counted. Dropping it would give the same sum (the denominator is
fixed), and no NaN ever reaches the model; the sensitivity bound C is unchanged.

Design: DP-FedAvg is its own training loop (:func:`train_dp_fedavg`), not an optimizer in
``fl.registry.OPTIMIZERS``: the optimizers there consume one aggregated *gradient* of the honest
losses at a query point from an inexact oracle, whereas a DP-FedAvg round samples clients, runs
local training from the broadcast model, clips *model updates* and adds noise calibrated to the
population. The loop reuses the rest of :mod:`fedaudit.fl`: any registered server optimizer
takes the pseudo-gradient step (FedAvgM = :class:`~fedaudit.fl.optimizers.DNAG`), and it returns
the same :class:`~fedaudit.fl.training.Trace` as :func:`fedaudit.fl.training.run`.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np

from fedaudit.accounting.dpsgd import check_method
from fedaudit.accounting.dp_fedavg import NEIGHBOURING, UNIT, epsilon_dp_fedavg
from fedaudit.accounting.pld import GaussianPLD
from fedaudit.deprecation import module_aliases
from fedaudit.errors import FedAuditError
from fedaudit.fl.optimizers import DGD, Optimizer
from fedaudit.fl.problems import as_problem
from fedaudit.fl.training import Trace
from fedaudit.rng import RngLike, as_generator, as_seed_sequence
from fedaudit.validation import (check_int, check_matrix, check_positive, check_probability, check_real,
                                 check_vector)

__all__ = ["clip_updates", "DPFedAvgAggregator", "train_dp_fedavg"]


def clip_updates(updates: Any, clip: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(clipped rows Δ_i·min(1, C/‖Δ_i‖₂), the norms ‖Δ_i‖₂, the non-finite mask) of ``updates``
    (n, d). A row with a non-finite entry becomes 0 (its norm is reported as inf). Norms are
    computed as s·‖Δ/s‖ with s = max|Δ_ij|, so huge finite rows clip to norm C instead of
    overflowing to 0."""
    C = check_positive("clip", clip)
    U = np.asarray(updates, dtype=np.float64)
    if U.ndim != 2:
        raise FedAuditError(f"updates must be a matrix (clients, dim), got shape {U.shape}")
    bad = ~np.isfinite(U).all(axis=1)
    U = np.where(bad[:, None], 0.0, U)
    scale = np.abs(U).max(axis=1, initial=0.0)
    V = U / np.where(scale > 0, scale, 1.0)[:, None]  # max |entry| 1: its norm cannot overflow
    n = np.linalg.norm(V, axis=1)
    with np.errstate(over="ignore"):
        norms = scale * n
    keep = norms <= C  # rows already inside the ball are returned bit for bit
    clipped = np.where(keep[:, None], U, V * np.minimum(scale, C / np.where(n > 0, n, 1.0))[:, None])
    return clipped, np.where(bad, np.inf, norms), bad


class DPFedAvgAggregator:
    """The server-side Gaussian aggregator of DP-FedAvg:

        A(Δ_1, …, Δ_n; rng) = (Σ_i clip_C(Δ_i) + ξ) / m,   ξ ~ N(0, (zC)²·I_d),   m = q·N fixed,

    (McMahan et al. 2018). ``noise_multiplier`` z ≥ 0 (z = 0: plain clipped FedAvg, no privacy),
    ``clip`` C > 0, ``expected_clients`` m = q·N > 0. The noise std of each output coordinate is
    :attr:`noise_std` = zC/m. Non-finite rows count as zero updates (see the module docstring)."""

    name = "dp-fedavg"

    def __init__(self, clip: float, noise_multiplier: float, expected_clients: float):
        self.clip = check_positive("clip", clip)
        self.noise_multiplier = check_real("noise_multiplier", noise_multiplier, low=0.0)
        self.expected_clients = check_positive("expected_clients", expected_clients)

    @property
    def noise_std(self) -> float:
        """zC/(qN): the standard deviation of every coordinate of the output's noise."""
        return self.noise_multiplier * self.clip / self.expected_clients

    def params(self) -> dict[str, float]:
        """The constructor parameters."""
        return {"clip": self.clip, "noise_multiplier": self.noise_multiplier,
                "expected_clients": self.expected_clients}

    def __repr__(self) -> str:
        return (f"DPFedAvgAggregator(clip={self.clip:g}, noise_multiplier={self.noise_multiplier:g}, "
                f"expected_clients={self.expected_clients:g})")

    def aggregate(self, updates: Any, rng: RngLike) -> tuple[np.ndarray, dict[str, int]]:
        """(the noisy mean update, {"clients", "clipped", "nonfinite"}) of ``updates`` (n, d)."""
        clipped, norms, bad = clip_updates(updates, self.clip)
        total = clipped.sum(axis=0)
        if self.noise_multiplier > 0:
            total = total + as_generator(rng).normal(0.0, self.noise_multiplier * self.clip, size=total.shape)
        stats = {"clients": int(norms.size), "clipped": int(np.sum(~bad & (norms > self.clip))),
                 "nonfinite": int(bad.sum())}
        return total / self.expected_clients, stats

    def __call__(self, updates: Any, rng: RngLike = None) -> np.ndarray:
        """The noisy mean update (d,) of ``updates`` (n, d)."""
        return self.aggregate(updates, rng)[0]


def _local_updates(federation: Any, x: np.ndarray, ids: np.ndarray, steps: int, lr: float) -> np.ndarray:
    """Δ_i = x_i^(E) − x after E full-batch gradient steps x ← x − lr·∇L_i(x) from x (rows = ``ids``).
    E = 1 uses one pass over all clients (``honest_gradients``); E > 1 iterates per sampled client."""
    if ids.size == 0:
        return np.empty((0, x.size))
    if steps == 1:
        return -lr * np.asarray(federation.honest_gradients(x), dtype=np.float64)[ids]
    out = np.empty((ids.size, x.size))
    for row, i in enumerate(ids):
        xi = x.copy()
        for _ in range(steps):
            xi -= lr * np.asarray(federation.client_grad(int(i), xi), dtype=np.float64)
        out[row] = xi - x
    return out


def train_dp_fedavg(federation: Any, *, rounds: int, sample_rate: float, noise_multiplier: float,
                   clip: float = 1.0, local_steps: int = 1, local_lr: float = 0.1, server: Optimizer | None = None,
                   delta: float | None = 1e-5, accountant: str = "pld", fixed_updates: Any = None,
                   population: int | None = None, ledger: Any = None,
                   x0: Any = None, rng: RngLike = 0, record_every: int = 1,
                   progress: Callable[[int], None] | None = None) -> Trace:
    """Train ``federation`` (a :class:`~fedaudit.fl.federation.Federation` with f = 0, or any object
    with ``n_honest``, ``dim``, ``honest_gradients(x)``, ``client_grad(i, x)`` and the logging
    methods of :class:`~fedaudit.fl.problems.FederationProblem`) with DP-FedAvg for ``rounds``
    rounds (see the module docstring for one round).

    Population: the ``n_honest`` clients plus one client per row of ``fixed_updates`` (m, d), a
    client that sends that same row whenever sampled (a crafted canary update), clipped like
    every other update. ``population`` is the N of the fixed denominator q·N (default n_honest + m); it
    must not depend on which clients are present for the client-level guarantee to hold.

    Randomness: ``rng`` (int, SeedSequence — not advanced — or Generator) spawns independent
    streams for client sampling, the noise and the server optimizer, one child per round, so runs
    with different z sample the same clients round by round.

    Accounting: with ``delta`` given and z > 0, ``Trace.extras["epsilon"]`` holds
    :func:`~fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg` (method ``accountant``) after each
    recorded round (≈ 0.1–1 s per value by PLD; record less often or pass ``delta=None`` to skip);
    with z = 0 the values are ``inf`` (no privacy). ``ledger`` (a
    :class:`~fedaudit.accounting.Ledger`) is charged, for every sampled client (id = its index;
    fixed-update clients are ``"fixed-j"``) and round, that round's Gaussian mechanism given its
    participation, ``GaussianPLD(sigma=z, sensitivity=1)`` under the ``"add-remove"`` relation
    (the sum moves by ≤ C when one client is added or removed, the noise is zC):
    ``ledger.spent(i, method="pld", delta=...)`` is then the exact ε of the rounds client i took
    part in, N(0, 1) vs N(√k/z, 1) after k rounds — its spend given the (data-independent)
    sampling, without the amplification the accountant credits. A ledger that also holds
    replace-one (local DP) entries of that client refuses to add them up unless asked for
    ``relation="replace-one"``, which counts each round at sensitivity 2
    (:mod:`fedaudit.accounting.ledger`).

    Returns a :class:`~fedaudit.fl.training.Trace` (optimizer ``"dp-fedavg"``) whose ``extras``
    hold per round ``sampled_clients`` (the sampled honest client ids), ``sampled_fixed`` (the
    sampled fixed-update rows), ``clipped`` and ``nonfinite`` counts, and ``epsilon`` at the
    recorded rounds (``epsilon_rounds``); ``info`` states the unit, neighbouring relation and
    accountant. ``progress(k)`` is called after round k.
    """
    if getattr(federation, "f", 0):
        raise FedAuditError(f"DP-FedAvg trains honest clients only; build the Federation with f=0 "
                            f"(got f={federation.f})")
    for name in ("n_honest", "dim", "honest_gradients", "client_grad"):
        if not hasattr(federation, name):
            raise FedAuditError(f"federation must provide {name!r} (a fedaudit.fl.Federation), "
                                f"got {type(federation).__name__}")
    rounds = check_int("rounds", rounds, low=1)
    q = check_probability("sample_rate", sample_rate, open_high=False)
    z = check_real("noise_multiplier", noise_multiplier, low=0.0)
    C = check_positive("clip", clip)
    local_steps = check_int("local_steps", local_steps, low=1)
    local_lr = check_positive("local_lr", local_lr)
    record_every = check_int("record_every", record_every, low=1)
    if delta is not None:
        delta = check_probability("delta", delta)
    accountant = check_method(accountant, "accountant")
    server = DGD(1.0) if server is None else server
    if not isinstance(server, Optimizer):
        raise FedAuditError(f"server must be a fedaudit Optimizer (e.g. DGD(1.0)), got {type(server).__name__}")
    n_honest = check_int("n_honest", federation.n_honest, low=0)
    dim = int(federation.dim)
    if fixed_updates is None:
        F = np.empty((0, dim))
    else:
        F = check_matrix("fixed_updates", fixed_updates, cols=dim)
    n_pop = n_honest + F.shape[0]
    if n_pop < 1:
        raise FedAuditError("the population must hold at least 1 client (n_honest + rows of fixed_updates), got 0")
    problem = as_problem(federation)
    population = n_pop if population is None else check_int("population", population, low=n_pop,
                                                            low_name="clients present")
    if ledger is not None:
        if z == 0:
            raise FedAuditError("a ledger can only be charged when noise_multiplier > 0 (z = 0 has no finite ε)")
        charge = GaussianPLD(sigma=z, sensitivity=1.0)
    aggregator = DPFedAvgAggregator(C, z, q * population)

    root = as_seed_sequence(rng, copy=True)
    sample_ss, noise_ss, opt_ss = root.spawn(3)
    sample_seeds, noise_seeds = sample_ss.spawn(rounds), noise_ss.spawn(rounds)
    x0 = np.zeros(dim) if x0 is None else check_vector("x0", x0, dim=dim)
    state = server.start(problem, x0, np.random.default_rng(opt_ss))
    has_acc = hasattr(problem, "test_accuracy")
    log: dict[str, list] = {"rounds": [], "loss": [], "grad_norm": [], "test_acc": [], "wall_time": []}
    extras: dict[str, list] = {"sampled_clients": [], "sampled_fixed": [], "clipped": [], "nonfinite": [],
                               "epsilon_rounds": [], "epsilon": []}
    diverged = False

    def record(k: int, x: np.ndarray, elapsed: float) -> None:
        log["rounds"].append(k)
        log["loss"].append(float(problem.honest_loss(x)))
        log["grad_norm"].append(float(np.linalg.norm(problem.honest_grad(x))))
        log["test_acc"].append(float(problem.test_accuracy(x)) if has_acc else None)
        log["wall_time"].append(elapsed)
        if k > 0 and delta is not None:
            eps = epsilon_dp_fedavg(z, q, k, delta, accountant).epsilon if z > 0 else math.inf
            extras["epsilon_rounds"].append(k)
            extras["epsilon"].append(eps)

    record(0, np.asarray(state.output(), dtype=np.float64), 0.0)
    elapsed = 0.0
    for k in range(rounds):
        t0 = time.perf_counter()
        x = np.array(state.query(), dtype=np.float64, copy=True)
        joined = np.random.default_rng(sample_seeds[k]).random(n_pop) < q
        ids, fixed = np.flatnonzero(joined[:n_honest]), np.flatnonzero(joined[n_honest:])
        updates = _local_updates(federation, x, ids, local_steps, local_lr)
        if fixed.size:
            updates = np.vstack([updates, F[fixed]])
        mean_update, stats = aggregator.aggregate(updates, np.random.default_rng(noise_seeds[k]))
        state.update(-mean_update)
        elapsed += time.perf_counter() - t0
        extras["sampled_clients"].append(ids.tolist())
        extras["sampled_fixed"].append(fixed.tolist())
        extras["clipped"].append(stats["clipped"])
        extras["nonfinite"].append(stats["nonfinite"])
        if ledger is not None:
            for i in ids:
                ledger.record(int(i), charge, round=k, relation="add-remove")
            for j in fixed:
                ledger.record(f"fixed-{int(j)}", charge, round=k, relation="add-remove")
        out = np.asarray(state.output(), dtype=np.float64)
        if not np.isfinite(out).all():
            diverged = True
            break
        if (k + 1) % record_every == 0 or k == rounds - 1:
            record(k + 1, out, elapsed)
        if progress is not None:
            progress(k + 1)
    params = {"sample_rate": q, "noise_multiplier": z, "clip": C, "local_steps": local_steps, "local_lr": local_lr,
              "population": population, "fixed_updates": int(F.shape[0]), "server": server.name,
              "server_params": server.params(), "noise_std": aggregator.noise_std}
    info = {"unit": UNIT, "neighbouring": NEIGHBOURING, "accountant": accountant, "delta": delta,
            "denominator": q * population}
    return Trace(optimizer="dp-fedavg", params=params, **log, info=info, extras=extras, diverged=diverged,
                 seed_entropy=root.entropy, x_final=np.array(state.output(), dtype=np.float64, copy=True))


#: the spelling this had before issue #24 (deprecated; a read warns with the new name)
__getattr__ = module_aliases(__name__, {"train_dpfedavg": ("train_dp_fedavg", lambda: train_dp_fedavg)})
