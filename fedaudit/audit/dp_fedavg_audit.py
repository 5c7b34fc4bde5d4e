"""Client-level canary audit of DP-FedAvg in one training run.

Setting (the one-run audit of Steinke, Nasr, Jagielski 2023 at the client level; canary clients
with random update directions as in Andrew, Kairouz, Oh, Oprea, McMahan, Suriyakumar, ICLR 2024,
"One-shot empirical privacy estimation for federated learning"):

* ``clients`` honest clients hold iid shards of a classification dataset and train normally
  (:func:`fedaudit.fl.dp_fedavg.train_dp_fedavg`: local gradient steps, clipping to C, Gaussian
  noise zC on the sum, fixed denominator q·N, N = clients + canaries, server step of size η);
* m = ``canaries`` canary clients, each included in the population independently with
  probability ½ (seeded coins); an included canary is Poisson-sampled with rate q like every
  client and then sends the crafted update 10·C·u_i, u_i a fixed random unit direction, which
  the server clips to C·u_i (so a server that does not clip is caught as well).

High dimension without the cost: the model is the dataset's logistic regression widened by
k = ⌈b / classes⌉ input features that are zero in every example (ridge μ = 0; b the smallest
power of two ≥ m), so no honest update ever touches their weights — the situation of a
high-dimensional model, where random directions are orthogonal to the honest updates. The u_i
are the columns of a randomized Hadamard frame on b of those weights (random signs, random
columns; exactly orthonormal, every entry ±1/√b), so canaries do not interfere either, and the
score of canary i, the final model's alignment with its direction normalised by the step,

    s_i = ⟨θ_T − θ_0, u_i⟩ · qN / (η C) = K_i + N(0, T z²),   K_i ~ Bin(T, q) if included, 0 if not,

is exactly the sum of its T Poisson-subsampled Gaussian observations — the event the client-level
accountant composes (:func:`fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg`).

Bounds (:class:`fedaudit.audit.scores.ScoreAuditor`): the certified one-run lower bound
(Steinke et al.), its f-DP refinement (Mahloujifar, Melis, Chaudhuri 2024; with the (ε, δ)
curve f_{ε,δ} by default, certified for every mechanism; ``fdp_curve="gaussian"`` hypothesises
μ-GDP, which the composed subsampled Gaussian only approximates — its tail is heavier — so that
variant is reported as an estimate) and the GDP estimate (Nasr et al. 2023), next to the
accountant's ε for the *claimed* noise multiplier. ``violation``: a *certified* one-run bound
(Steinke, or f-DP on the (ε, δ) curve) above the accountant's ε — with probability ≥
``confidence`` the run is not as private as claimed. With m canaries the one-run bound is capped (1000
canaries all guessed right: ≈ 5.78 at δ = 1e-5), so claims above the cap cannot be refuted.

Not on the engine: the training run is sequential (round t starts from θ_{t−1}) and runs in this
process; the accountant's ε curve of a claim runs as engine chunks
(:func:`fedaudit.accounting.curves.epsilon_dpsgd_curve`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.linalg import hadamard

from fedaudit.accounting.dpsgd import check_method
from fedaudit.accounting.dp_fedavg import epsilon_dp_fedavg
from fedaudit.audit.canary_verdict import CanaryAudit, canary_bounds
from fedaudit.audit.one_run import FDP_CURVES, MIN_CANARIES
from fedaudit.deprecation import module_aliases
from fedaudit.errors import FedAuditError
from fedaudit.fl.data import Dataset, load_dataset
from fedaudit.fl.dp_fedavg import train_dp_fedavg
from fedaudit.fl.federation import Federation
from fedaudit.fl.optimizers import DGD
from fedaudit.json import jsonable
from fedaudit.rng import derive_generator, derive_seed
from fedaudit.validation import check_choice, check_int, check_positive, check_probability, check_real

__all__ = ["DPFedAvgAudit", "audit_dp_fedavg", "FEDAVG_AUDIT_DATASETS", "MAX_AUDIT_CANARIES", "CANARY_NORM"]

FEDAVG_AUDIT_DATASETS = ("synthetic", "digits")
#: a canary sends CANARY_NORM·C·u_i: the server must clip it to C·u_i (a server that skips
#: clipping hands the auditor a CANARY_NORM times larger signal, and shows)
CANARY_NORM = 10.0
#: most canary clients an audit accepts (the Hadamard frame of order b ≤ 4096 takes ≤ 128 MB)
MAX_AUDIT_CANARIES = 4096


@dataclass(frozen=True)
class DPFedAvgAudit(CanaryAudit):
    """Result of :func:`audit_dp_fedavg`. ``accountant`` is the client-level (ε, δ) of the *claimed*
    configuration; ``one_run`` (Steinke et al., certified for every DP mechanism) and
    ``one_run_fdp`` (f-DP, certified under its trade-off curve) are lower bounds at ``confidence``,
    ``gdp`` an estimate. ``violated_by`` names the certified bounds above the accountant's ε
    (``violation`` = any). ``scores_in`` / ``scores_out`` summarise the normalised scores (mean,
    std) of included / excluded canaries (expected qT and 0, std √(Tq(1−q) + Tz²) and √T·z);
    ``test_accuracy`` is the honest model's after training; ``seconds`` the whole audit."""

    noise_multiplier: float
    claimed_noise_multiplier: float
    clip: float
    sample_rate: float
    rounds: int
    clients: int
    dataset: str
    dim: int
    scores_in: dict[str, float]
    scores_out: dict[str, float]
    test_accuracy: float
    seed: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for k in ("accountant", "one_run", "one_run_fdp", "gdp"):
            out[k] = getattr(self, k).to_dict()
        out["violated_by"] = list(self.violated_by)
        out["epsilon_lower"] = self.epsilon_lower
        return jsonable(out)

    def summary(self) -> str:
        """One line: configuration, accountant ε next to the three audit numbers, and the verdict."""
        z = (f"z = {self.noise_multiplier:g}" if self.noise_multiplier == self.claimed_noise_multiplier
             else f"z = {self.noise_multiplier:g} trained, {self.claimed_noise_multiplier:g} claimed")
        return (f"DP-FedAvg client-level audit ({self.canaries:,} canary clients, {self.clients} honest, {z}, "
                f"q = {self.sample_rate:g}, {self.rounds} rounds): "
                f"{self.describe_bounds()}; "
                f"accuracy {self.test_accuracy:.3f}; {self.seconds:.1f} s")


def _widen(X: np.ndarray, k: int) -> np.ndarray:
    return np.hstack([X, np.zeros((X.shape[0], k))])


def _stats(s: np.ndarray) -> dict[str, float]:
    return {"mean": float(s.mean()), "std": float(s.std(ddof=1)) if s.size > 1 else 0.0}


def _frame_size(m: int) -> int:
    """b = the smallest power of two ≥ m (the order of the Hadamard frame)."""
    return 1 << (m - 1).bit_length()


def _canary_directions(b: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """(b, m) orthonormal columns u_i = D·h_{π(i)}/√b: a randomized Hadamard frame (Sylvester
    Hadamard matrix H of order b, D a diagonal of random signs, π a random choice of m distinct
    columns). Every u_i is spread evenly over the b coordinates (entries ±1/√b) and
    u_iᵀu_j = δ_ij exactly, at O(b·m) cost instead of a QR factorisation."""
    H = hadamard(b).astype(np.float64)
    cols = rng.permutation(b)[:m]
    signs = rng.choice(np.array([-1.0, 1.0]), size=b)
    return H[:, cols] * (signs / math.sqrt(b))[:, None]


def _audit_dataset(name: str, canaries: int, clients: int, seed: int) -> tuple[Dataset, int]:
    """The dataset widened by k = ⌈b/classes⌉ all-zero features, b = :func:`_frame_size` (returned with k)."""
    rng = derive_generator(seed, "fedavg-audit/dataset")
    if name == "synthetic":
        base = load_dataset("synthetic", rng=rng, n_samples=40 * clients, dim=20, n_classes=2)
    else:
        base = load_dataset(name, rng=rng)
    k = -(-_frame_size(canaries) // base.n_classes)
    return Dataset(X_train=_widen(base.X_train, k), y_train=base.y_train, X_test=_widen(base.X_test, k),
                   y_test=base.y_test, n_classes=base.n_classes, name=f"{base.name}+{k}-zero-features",
                   params=base.params, info={**base.info, "canary_features": k}), k


def _canary_block(fed: Federation, k: int) -> np.ndarray:
    """Flat indices of the weights W[c, p−k+j] of the last k (all-zero) input features."""
    p, classes = fed.model.n_features, fed.model.n_classes
    return (np.arange(classes)[:, None] * p + np.arange(p - k, p)[None, :]).ravel()


def audit_dp_fedavg(*, noise_multiplier: float, clip: float = 1.0, sample_rate: float, rounds: int,
                   delta: float = 1e-5, canaries: int = 1000, clients: int = 50,
                   claimed_noise_multiplier: float | None = None, dataset: str = "synthetic",
                   local_lr: float = 0.5, local_steps: int = 1, server_lr: float = 1.0,
                   confidence: float = 0.95, accountant: str = "pld", fdp_curve: str = "dp",
                   seed: int = 0, progress: Callable[[int], None] | None = None) -> DPFedAvgAudit:
    """Train DP-FedAvg once with ``canaries`` canary clients (see the module docstring) and audit it.

    ``noise_multiplier`` z ≥ 0 is the noise actually added; ``claimed_noise_multiplier`` (default z)
    is what the accountant is told — z = claimed/10 is the under-calibrated run the audit must
    flag. ``sample_rate`` q ∈ (0, 1], ``rounds`` T ≥ 1, ``clip`` C > 0, ``clients`` honest clients
    ≥ 1, ``canaries`` in [10, 4096], ``dataset`` "synthetic" (40 samples per client, 20
    features, 2 classes) or "digits". ``seed`` drives the data, the canary directions and coins and
    the training (independent :func:`~fedaudit.rng.derive_seed` streams). ``accountant`` is the
    method of :func:`~fedaudit.accounting.dp_fedavg.epsilon_dp_fedavg` ("pld", "rdp", "prv");
    ``fdp_curve`` the trade-off curve the f-DP bound assumes ("dp", the default: the (ε, δ) curve
    itself, certified for every mechanism and counted in ``violation``; "gaussian": μ-GDP, reported
    as an estimate and not counted). ``progress(k)`` is called after training round k.
    """
    t0 = time.perf_counter()
    z = check_real("noise_multiplier", noise_multiplier, low=0.0)
    claimed = z if claimed_noise_multiplier is None else check_positive("claimed_noise_multiplier",
                                                                        claimed_noise_multiplier)
    if claimed == 0:
        raise FedAuditError("noise_multiplier=0 needs claimed_noise_multiplier > 0 (the accountant's z)")
    C = check_positive("clip", clip)
    q = check_probability("sample_rate", sample_rate, open_high=False)
    rounds = check_int("rounds", rounds, low=1)
    delta = check_probability("delta", delta)
    m = check_int("canaries", canaries, low=MIN_CANARIES, high=MAX_AUDIT_CANARIES)
    clients = check_int("clients", clients, low=1)
    dataset = check_choice("dataset", dataset, FEDAVG_AUDIT_DATASETS)
    confidence = check_probability("confidence", confidence)
    server_lr = check_positive("server_lr", server_lr)
    seed = check_int("seed", seed, low=0)
    method = check_method(accountant, "accountant")
    curve = check_choice("fdp_curve", fdp_curve, FDP_CURVES)
    account = epsilon_dp_fedavg(claimed, q, rounds, delta, method)

    data, k = _audit_dataset(dataset, m, clients, seed)
    fed = Federation.build(data, n_honest=clients, f=0, scheme="iid", mu=0.0, aggregator="mean", attack=None,
                           rng=derive_seed(seed, "fedavg-audit/partition"))
    block = _canary_block(fed, k)[: _frame_size(m)]
    Q = _canary_directions(block.size, m, derive_generator(seed, "fedavg-audit/directions"))
    included = derive_generator(seed, "fedavg-audit/inclusion").random(m) < 0.5
    crafted = np.zeros((int(included.sum()), fed.dim))
    crafted[:, block] = CANARY_NORM * C * Q[:, included].T
    theta0 = np.zeros(fed.dim)
    trace = train_dp_fedavg(fed, rounds=rounds, sample_rate=q, noise_multiplier=z, clip=C, local_steps=local_steps,
                           local_lr=local_lr, server=DGD(server_lr), delta=None, x0=theta0, fixed_updates=crafted,
                           population=clients + m, record_every=rounds,
                           rng=derive_seed(seed, "fedavg-audit/training"), progress=progress)
    del crafted
    if trace.diverged:
        raise FedAuditError("the audited training run diverged (non-finite model); lower local_lr or server_lr")
    scores = Q.T @ (trace.x_final - theta0)[block] * (q * (clients + m) / (server_lr * C))
    s_in, s_out = scores[included], scores[~included]
    b = canary_bounds(s_in, s_out, account.epsilon, delta=delta, confidence=confidence, curve=curve)
    return DPFedAvgAudit(
        accountant=account, one_run=b.one_run, one_run_fdp=b.one_run_fdp, gdp=b.gdp, violation=bool(b.violated_by),
        violated_by=b.violated_by, noise_multiplier=z, claimed_noise_multiplier=claimed, clip=C, sample_rate=q,
        rounds=rounds, delta=delta, confidence=confidence, canaries=m, canaries_in=int(included.sum()),
        clients=clients, dataset=data.name, dim=int(fed.dim), scores_in=_stats(s_in), scores_out=_stats(s_out),
        test_accuracy=float(trace.test_acc[-1]), seed=seed, seconds=time.perf_counter() - t0)


#: the spelling this had before issue #24 (deprecated; a read warns with the new name)
__getattr__ = module_aliases(__name__, {"audit_dpfedavg": ("audit_dp_fedavg", lambda: audit_dp_fedavg)})
