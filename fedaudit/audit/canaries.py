"""One DP-SGD training run with m canaries, trained with Opacus, and the canaries' scores.

Every canary j = 1..m is included in the training set independently with probability ½
(seeded); the real training examples are always in. Training is Opacus's DP-SGD
(``GradSampleModule`` + ``DPOptimizer`` + ``DPDataLoader``): each step draws a Poisson batch
(every example independently with probability q), clips every per-example gradient to L2 norm
C, adds N(0, σ²C²·I) to the sum and takes an SGD step θ ← θ − η·(Σ clip(g_i) + noise),
η = ``learning_rate``/(q·(n + m/2)) (the mean over the batch expected before the coins: n real
examples, m canaries each in with probability ½; a step size read off the realised training set
would leak the number of included canaries through the noise scale η·σ·C on every weight). The model is multinomial
logistic regression (a bias-free linear layer over the features and a constant-1 feature that
plays the bias), initialised at zero, in float64.

Threat models (Nasr et al. 2021 "Adversary instantiation"; Steinke, Nasr, Jagielski 2023 §6):

* ``"white-box"`` — *Dirac gradient canaries*, and the adversary sees every iterate θ_0..θ_T.
  The input gets m extra features, zero for every real example; canary j is x_j = a·e_{d+1+j},
  a = 10·max(C, 1), with a label y_j, and its loss is the linear ℓ_j(θ) = −z_{y_j}(x_j) (the
  negative logit of its label; the real examples keep the cross-entropy). Its gradient is −a at
  the single weight W[y_j, d+1+j] and zero elsewhere, so it is clipped to C (to 1e-7 relative:
  Opacus's clip factor is C/(‖g‖ + 1e-6)) and is orthogonal to the real data's gradients and to
  every other canary's. The normalised update of that weight at step t is therefore
  o_{t,j} = (W_t − W_{t−1})[y_j, d+1+j]/(ηC) = b_{t,j} + N(0, σ²), with b_{t,j} = 1 when canary
  j is in the training set and in batch t (probability q), 0 otherwise — one Poisson-subsampled
  Gaussian mechanism per step, the worst case the accountant composes. The score is the
  log-likelihood ratio of the T observations (Neyman–Pearson for "in" against "out"):
  s_j = Σ_t log(1 − q + q·exp((o_{t,j} − ½)/σ̃²)), with σ̃ = ``score_noise_multiplier`` (the
  *claimed* noise: an auditor who trusts the configuration).
* ``"white-box-final"`` — the same canaries, but the adversary sees only the initial and the
  final parameters: s_j = (θ_T − θ_0)[y_j, d+1+j]/(ηC) = K_j + N(0, Tσ²), K_j ~ Binomial(T, q)
  for an included canary and 0 otherwise (the alignment of the parameter change with the
  canary's gradient direction). Weaker than seeing every iterate when σ is large.
* ``"black-box"`` — *input-space canaries*, and the adversary sees only the final model's
  loss: x_j ~ N(0, I_d) (the scale of the standardised features) with a uniformly random label
  y_j (mislabelled out-of-distribution points), trained with the ordinary cross-entropy; the
  score is s_j = −CE(f_{θ_T}(x_j), y_j).

Higher scores mean "included". Any score is valid for the one-run audits (the bound holds for
every test); these two are the standard strongest and weakest threat models.

Determinism: the data split, the canaries and their inclusion come from numpy generators of
:func:`fedaudit.rng.derive_seed`; Opacus's Poisson sampler and its Gaussian noise each draw
from a ``torch.Generator`` seeded the same way (``secure_mode`` off), data loading runs in the
main process, and torch uses ``threads`` threads during the run, so the same seed gives the same
inclusion, training and scores. The run is inherently sequential (step t updates θ_{t−1}), so it
is never split into engine chunks.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from fedaudit.audit.sampling import ProgressFn
from fedaudit.errors import FedAuditError
from fedaudit.extras import require
from fedaudit.fl.data import load_dataset
from fedaudit.json import jsonable
from fedaudit.rng import derive_generator, derive_seed
from fedaudit.validation import check_choice, check_int, check_positive, check_probability

__all__ = ["CanaryRun", "train_with_canaries", "subsampled_gaussian_llr", "CANARY_DATASETS", "THREATS", "MAX_CANARIES"]

CANARY_DATASETS = ("digits", "synthetic")
THREATS = ("white-box", "white-box-final", "black-box")
#: the threats that plant Dirac gradient canaries
_DIRAC = ("white-box", "white-box-final")
#: most canaries a run accepts (white-box per-example gradients grow with m)
MAX_CANARIES = 5_000
#: most training steps a run accepts
MAX_STEPS = 1_000_000
#: a white-box canary's input is CANARY_SCALE·max(C, 1) on its own feature: its gradient norm, always clipped
CANARY_SCALE = 10.0
#: memory cap on one batch's per-example gradients (expected batch × classes × features × 8 bytes)
_GRAD_BYTES = 256 * 2**20


def subsampled_gaussian_llr(o: np.ndarray, sample_rate: float, sigma: float) -> np.ndarray:
    """log(1 − q + q·exp((o − ½)/σ²)): the log-likelihood ratio of one normalised observation
    o = b + N(0, σ²) of a canary, b ~ Bernoulli(q) ("in") against b = 0 ("out") — one
    Poisson-subsampled Gaussian step. Summed over the steps it is the Neyman–Pearson score of
    the white-box threat (module docstring)."""
    log_out = math.log1p(-sample_rate) if sample_rate < 1 else -math.inf
    return np.logaddexp(log_out, math.log(sample_rate) + (np.asarray(o, dtype=np.float64) - 0.5) / sigma ** 2)


@dataclass(frozen=True)
class CanaryRun:
    """The canaries of one training run: ``scores[j]`` (higher = more likely included) and
    ``included[j]`` (the coin flip), the final model's test ``accuracy``, ``train_examples`` real
    examples, the settings, the SGD ``step_size`` η = learning_rate/(q·(n + m/2)) (fixed before the
    coins are flipped, so it reveals none of them), and the run's wall-clock ``seconds``."""

    scores: np.ndarray
    included: np.ndarray
    accuracy: float
    train_examples: int
    dataset: str
    threat: str
    noise_multiplier: float
    score_noise_multiplier: float
    max_grad_norm: float
    sample_rate: float
    steps: int
    learning_rate: float
    step_size: float
    seed: int
    seconds: float

    @property
    def scores_in(self) -> np.ndarray:
        """Scores of the included canaries."""
        return self.scores[self.included]

    @property
    def scores_out(self) -> np.ndarray:
        """Scores of the excluded canaries."""
        return self.scores[~self.included]

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "canaries": int(self.scores.size), "included": int(np.count_nonzero(self.included)),
            "accuracy": self.accuracy,
            "train_examples": self.train_examples, "dataset": self.dataset, "threat": self.threat,
            "noise_multiplier": self.noise_multiplier, "score_noise_multiplier": self.score_noise_multiplier,
            "max_grad_norm": self.max_grad_norm, "sample_rate": self.sample_rate, "steps": self.steps,
            "learning_rate": self.learning_rate, "step_size": self.step_size, "seed": self.seed, "seconds": self.seconds,
            "scores": self.scores, "included_mask": np.asarray(self.included, dtype=bool)})


def _check_run(noise_multiplier, score_noise_multiplier, max_grad_norm, sample_rate, steps, canaries, dataset,
               threat, learning_rate, seed, threads):
    sigma = check_positive("noise_multiplier", noise_multiplier)
    score_sigma = sigma if score_noise_multiplier is None else check_positive("score_noise_multiplier",
                                                                              score_noise_multiplier)
    return dict(
        noise_multiplier=sigma, score_noise_multiplier=score_sigma,
        max_grad_norm=check_positive("max_grad_norm", max_grad_norm),
        sample_rate=check_probability("sample_rate", sample_rate, open_high=False),
        steps=check_int("steps", steps, low=1, high=MAX_STEPS),
        canaries=check_int("canaries", canaries, low=10, high=MAX_CANARIES),
        dataset=check_choice("dataset", dataset, CANARY_DATASETS),
        threat=check_choice("threat", threat, THREATS),
        learning_rate=check_positive("learning_rate", learning_rate),
        seed=check_int("seed", seed, low=0),
        threads=check_int("threads", threads, low=1, high=256))


def _design(p: dict, rng_canary: np.random.Generator, data_seed: int):
    """Feature matrices of the training set (real rows, then the included canaries) and the test
    set, the black-box canaries' inputs (None for Dirac canaries), the canary labels and coin
    flips; ``linear`` marks the rows trained with the linear canary loss."""
    ds = load_dataset(p["dataset"], rng=data_seed)
    m, C = p["canaries"], p["max_grad_norm"]
    n, d, k = ds.n_train, ds.n_features, ds.n_classes
    included = rng_canary.random(m) < 0.5
    labels = rng_canary.integers(0, k, size=m)
    one = np.ones((n, 1))
    if p["threat"] in _DIRAC:
        extra, idx, canary_x = m, np.flatnonzero(included), None
        train_canaries = np.zeros((idx.size, d + 1 + m))  # the included canaries only
        train_canaries[np.arange(idx.size), d + 1 + idx] = CANARY_SCALE * max(C, 1.0)
    else:
        extra = 0
        canary_x = np.hstack([rng_canary.standard_normal((m, d)), np.ones((m, 1))])
        train_canaries = canary_x[included]
    X = np.vstack([np.hstack([ds.X_train, one, np.zeros((n, extra))]), train_canaries])
    y = np.concatenate([ds.y_train, labels[included]])
    linear = np.concatenate([np.zeros(n, bool), np.full(int(included.sum()), p["threat"] in _DIRAC)])
    X_test = np.hstack([ds.X_test, np.ones((ds.n_test, 1)), np.zeros((ds.n_test, extra))])
    return X, y, linear, X_test, ds.y_test, canary_x, labels, included, k, d


def train_with_canaries(*, noise_multiplier: float, max_grad_norm: float = 1.0, sample_rate: float, steps: int,
                        canaries: int = 1000, dataset: str = "digits", threat: str = "white-box",
                        score_noise_multiplier: float | None = None, learning_rate: float = 0.5, seed: int = 0,
                        threads: int = 1, progress: ProgressFn | None = None) -> CanaryRun:
    """Train with Opacus DP-SGD (noise σ = ``noise_multiplier``, clip C = ``max_grad_norm``, Poisson
    rate q = ``sample_rate``, ``steps`` steps) on ``dataset`` plus the included canaries of
    ``threat``, and score all ``canaries`` (module docstring). ``score_noise_multiplier`` is the σ̃
    of the white-box likelihood ratio (default: σ). ``progress`` is called with the number of
    steps done after every step."""
    p = _check_run(noise_multiplier, score_noise_multiplier, max_grad_norm, sample_rate, steps, canaries, dataset,
                   threat, learning_rate, seed, threads)
    start = time.perf_counter()
    torch = require("torch", "the DP-SGD canary audit")

    X, y, linear, X_test, y_test, canary_x, labels, included, k, d = _design(
        p, derive_generator(p["seed"], "canaries"), derive_seed(p["seed"], "data"))
    n_total, features = X.shape
    q, C, sigma, m = p["sample_rate"], p["max_grad_norm"], p["noise_multiplier"], p["canaries"]
    if q * n_total * k * features * 8 > _GRAD_BYTES:
        raise FedAuditError(f"per-example gradients of one batch would take "
                            f"{q * n_total * k * features * 8 / 2**20:.0f} MB (> {_GRAD_BYTES // 2**20} MB): "
                            f"lower sample_rate={q:g} or canaries={m}")
    old_threads = torch.get_num_threads()
    torch.set_num_threads(p["threads"])
    try:
        # the step size must not depend on the coins: η = lr/(q·(n + m/2)), the expected batch size
        # over the coins, fixed before they are flipped (η·σ·C is the noise on every weight)
        n_ref = n_total - int(included.sum()) + m / 2
        scores, accuracy, eta = _train(torch, p, X, y, linear, X_test, y_test, canary_x, labels, k, d, n_ref, progress)
    finally:
        torch.set_num_threads(old_threads)
    return CanaryRun(scores=scores, included=included, accuracy=accuracy, train_examples=int(n_total - included.sum()),
                     dataset=p["dataset"], threat=p["threat"], noise_multiplier=sigma,
                     score_noise_multiplier=p["score_noise_multiplier"], max_grad_norm=C, sample_rate=q,
                     steps=p["steps"], learning_rate=p["learning_rate"], step_size=eta, seed=p["seed"],
                     seconds=time.perf_counter() - start)


def _train(torch, p, X, y, linear, X_test, y_test, canary_x, labels, k, d, n_ref, progress):
    GradSampleModule = require("opacus", "the DP-SGD canary audit").GradSampleModule
    DPDataLoader = require("opacus.data_loader", "the DP-SGD canary audit").DPDataLoader
    DPOptimizer = require("opacus.optimizers", "the DP-SGD canary audit").DPOptimizer
    from torch.nn import functional as F
    from torch.utils.data import TensorDataset

    q, C, T, m = p["sample_rate"], p["max_grad_norm"], p["steps"], p["canaries"]
    dirac = p["threat"] in _DIRAC
    iterates = p["threat"] == "white-box"
    features = X.shape[1]
    eta = p["learning_rate"] / (q * n_ref)
    model = torch.nn.Linear(features, k, bias=False, dtype=torch.float64)
    torch.nn.init.zeros_(model.weight)
    gsm = GradSampleModule(model, loss_reduction="sum")  # the loss below is a sum, as DPOptimizer is told
    sampler = torch.Generator().manual_seed(derive_seed(p["seed"], "poisson"))
    noise = torch.Generator().manual_seed(derive_seed(p["seed"], "noise"))
    optimizer = DPOptimizer(torch.optim.SGD(gsm.parameters(), lr=eta), noise_multiplier=p["noise_multiplier"],
                            max_grad_norm=C, expected_batch_size=None, loss_reduction="sum", generator=noise,
                            secure_mode=False)
    loader = DPDataLoader(TensorDataset(torch.from_numpy(X), torch.from_numpy(y), torch.from_numpy(linear)),
                          sample_rate=q, generator=sampler)
    weight = model.weight
    cols = torch.from_numpy(d + 1 + np.arange(m)) if dirac else None
    rows = torch.from_numpy(labels)
    first = prev = weight.detach()[rows, cols].clone() if dirac else None
    score_sigma = p["score_noise_multiplier"]
    scores = np.zeros(m)
    step = 0
    with warnings.catch_warnings():
        # Opacus's hooks on a model whose inputs need no gradient; harmless here
        warnings.filterwarnings("ignore", message="Full backward hook is firing")
        while step < T:
            for xb, yb, lb in loader:
                optimizer.zero_grad(set_to_none=True)
                z = gsm(xb)
                loss = F.cross_entropy(z, yb, reduction="none")
                if dirac:
                    loss = torch.where(lb, -z.gather(1, yb[:, None]).squeeze(1), loss)
                loss.sum().backward()
                optimizer.step()
                if iterates:
                    cur = weight.detach()[rows, cols]
                    o = ((cur - prev) / (eta * C)).numpy()
                    scores += subsampled_gaussian_llr(o, q, score_sigma)
                    prev = cur
                step += 1
                if progress is not None:
                    progress(step)
                if step == T:
                    break
    with torch.no_grad():
        accuracy = float((model(torch.from_numpy(X_test)).argmax(1).numpy() == y_test).mean())
        if dirac and not iterates:
            scores = ((weight.detach()[rows, cols] - first) / (eta * C)).numpy()
        elif not dirac:
            z = model(torch.from_numpy(canary_x))
            scores = -F.cross_entropy(z, torch.from_numpy(labels), reduction="none").numpy()
    if not np.isfinite(scores).all():
        raise FedAuditError("canary scores are not finite (training diverged): lower learning_rate="
                            f"{p['learning_rate']:g}")
    return scores.astype(np.float64), accuracy, eta
