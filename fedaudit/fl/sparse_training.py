"""One federated sparse training run, by method name, on a built-in dataset: the library behind
``fedaudit sparse``.

:func:`train_sparse` looks the method up in :data:`fedaudit.fl.registry.SPARSE_METHODS` (E-FLoPS,
Fed-HT with its alias ``fediht``, FedIter-HT, FedAvg + magnitude pruning, or a method registered
with :func:`~fedaudit.fl.registry.register_sparse_method` or named ``"package.module:attr"``),
builds the dataset's model, calls the method's factory with the settings of
:data:`TRAINING_SETTINGS` for its canonical name (none for a method of one's own), and reports
the test metric, support recovery, realised density and bytes per client per round next to dense
FedAvg (:class:`SparseTraining`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from fedaudit.json import jsonable
from fedaudit.extras import require

__all__ = ["SparseTraining", "train_sparse", "SPARSE_DATASETS", "DEFAULT_TEMPERATURES", "TRAINING_SETTINGS"]

#: ``fedaudit sparse --dataset``: planted sparse regression (d = 1000, 50 non-zeros, 300 rows) or 8×8 digits
SPARSE_DATASETS = ("synthetic", "digits")

#: ``temperature=None`` in :func:`train_sparse`: E-FLoPS's T per dataset (synthetic: the class default;
#: digits: :meth:`~fedaudit.fl.eflops.EFLoPS.for_networks`'s)
DEFAULT_TEMPERATURES = {"synthetic": 0.05, "digits": 1e-4}


@dataclass(frozen=True)
class SparseTraining:
    """One sparse training run: test ``metric`` ("r2" for regression, "accuracy" for digits) and its
    ``score``, ``support_recovery`` |supp(θ̂) ∩ S|/|S| (planted data only, else None), the realised
    ``density`` m/|θ| against ``target_density``, and the mean bytes one client uploaded per round
    next to dense FedAvg (|θ| float32 weights). ``run`` is the method's SparseRun as a dict."""

    method: str
    dataset: str
    metric: str
    score: float
    support_recovery: float | None
    density: float
    target_density: float
    dim: int
    m: int
    bytes_per_client_round: float
    dense_bytes: int
    rounds: int
    clients: int
    seed: int
    seconds: float
    run: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return jsonable({k: getattr(self, k) for k in self.__dataclass_fields__})

    def summary(self) -> str:
        support = "" if self.support_recovery is None else f", support recovery {self.support_recovery:.3f}"
        return (f"{self.method} on {self.dataset}: test {self.metric} {self.score:.4f}{support}; density "
                f"{self.density:.4f} (target {self.target_density:g}, m = {self.m} of {self.dim}); "
                f"{self.bytes_per_client_round:.0f} B per client per round vs {self.dense_bytes} B dense FedAvg "
                f"({self.bytes_per_client_round / self.dense_bytes:.1%}); {self.rounds} rounds, {self.clients} "
                f"clients, {self.seconds:.1f} s")


def _eflops_settings(dataset: str, data: Any, model: Any, density: float, temperature: float,
                     upload: str) -> dict[str, Any]:
    """E-FLoPS on the synthetic data: the class defaults except lr = 0.1, lr_gates = 1 and 10 local
    steps (best there in ``docs/guides/eflops.md``); on digits the
    :meth:`~fedaudit.fl.eflops.EFLoPS.for_networks` recipe (the class defaults leave the MLP at
    chance). ``upload="gated"``: the top m = ⌊ρ·|θ|⌋ coordinates by gate
    (:class:`~fedaudit.mechanisms.gated.GatedSparseUpload`, votes rule, error feedback decay 0.05)."""
    from fedaudit.fl.eflops import EFLoPS
    from fedaudit.fl.gates import GatedModel
    from fedaudit.mechanisms.gated import GatedSparseUpload, m_for_density

    if dataset == "synthetic":
        hyper = {"temperature": temperature, "lr": 0.1, "lr_gates": 1.0, "local_steps": 10}
    else:
        hyper = EFLoPS.for_networks(density, temperature=temperature).params()
        hyper.pop("density")
    if upload == "gated":
        dim = GatedModel(model).dim
        hyper["upload"] = GatedSparseUpload(dim, m_for_density(density, dim), rule="votes", unsent_decay=0.05)
    return hyper


def _least_squares_step(dataset: str, data: Any, model: Any, density: float, temperature: float,
                        upload: str) -> dict[str, Any]:
    """Fed-HT, FedIter-HT and FedAvg + prune: their defaults, except the step 1/L on the synthetic
    data, L = max_i λ_max(X_iᵀX_i/n_i), the smoothness of the clients' least-squares losses (their
    default 0.01 diverges at d = 1000)."""
    import numpy as np

    if dataset != "synthetic":
        return {}
    return {"lr": 1.0 / max(np.linalg.norm(X, 2) ** 2 / len(X) for X, _ in data.clients)}


#: canonical sparse-method name -> ``settings(dataset, data, model, density, temperature, upload)``,
#: the keywords :func:`train_sparse` passes to the method's factory on top of ``rounds``,
#: ``density``, ``rng`` and ``progress``. A method without an entry gets none; add one for a
#: method of your own to tune it per dataset.
TRAINING_SETTINGS: dict[str, Callable[..., dict[str, Any]]] = {
    "eflops": _eflops_settings,
    "fed-ht": _least_squares_step,
    "fediter-ht": _least_squares_step,
    "fedavg-prune": _least_squares_step,
}


def train_sparse(method: str, dataset: str, *, density: float = 0.05, temperature: float | None = None,
                 rounds: int = 100, clients: int = 10, seed: int = 0, upload: str = "dense",
                 progress: Callable[[int], None] | None = None) -> SparseTraining:
    """Train ``method`` (a name of :data:`~fedaudit.fl.registry.SPARSE_METHODS`) on ``dataset``
    (:data:`SPARSE_DATASETS`) at target density ρ = ``density`` for ``rounds`` rounds over
    ``clients`` clients.

    synthetic: :func:`~fedaudit.fl.sparse_data.scarce_regression` (d = 1000, 50 true non-zeros,
    300 training rows), a zero-initialised linear model (Tong et al. start at 0), test R²;
    digits: :func:`~fedaudit.fl.sparse_data.load_digits_federated`, a one-hidden-layer MLP
    (:func:`~fedaudit.fl.models.mlp`, torch-seeded init), test accuracy. The method's factory gets
    the settings of :data:`TRAINING_SETTINGS` for its canonical name: E-FLoPS (the others ignore
    ``temperature`` and ``upload``) on the synthetic data is :class:`~fedaudit.fl.eflops.EFLoPS`
    with its defaults, except lr = 0.1, lr_gates = 1 and 10 local steps (best there in
    ``docs/guides/eflops.md``); on digits it is :meth:`EFLoPS.for_networks
    <fedaudit.fl.eflops.EFLoPS.for_networks>` (Adam, gates from P(z ≠ 0) = 0.95 with a level
    warm-up, η_λ = 10⁻³), since the class defaults leave the MLP at chance (accuracy 0.076 at
    ρ = 0.05). ``temperature`` T: None is the dataset's default (:data:`DEFAULT_TEMPERATURES`:
    synthetic 0.05, digits 10⁻⁴), a number overrides it. ``upload="dense"`` sends (θ̃, log α) in
    full (2·|θ| float32), ``"gated"`` through :class:`~fedaudit.mechanisms.gated.GatedSparseUpload`
    (top m = ⌊ρ·|θ|⌋ coordinates by gate). Fed-HT, FedIter-HT and FedAvg + prune use their
    defaults, except the step 1/L on the synthetic data, L = max_i λ_max(X_iᵀX_i/n_i) (the
    smoothness of the clients' least-squares losses). Data, initialisation and training seeds
    derive from ``seed`` (:func:`fedaudit.rng.derive_seed`; training from the method name as
    given). ``progress(k)``: k more rounds done.

    One run is a sequential chain of rounds (each starts from the previous round's global model),
    so, like DP-SGD training, it stays in this process and takes no engine keywords; ``fedaudit
    sparse`` trains one such run per call, so it has no independent parts to spread.
    """
    torch = require("torch", "sparse training (fedaudit sparse, the sparse-upload kind)")

    from fedaudit.errors import FedAuditError
    from fedaudit.fl.models import mlp
    from fedaudit.fl.registry import SPARSE_METHODS, lookup
    from fedaudit.fl.sparse_baselines import evaluate
    from fedaudit.fl.sparse_data import load_digits_federated, scarce_regression, support_recovery
    from fedaudit.progress import increments_from_totals
    from fedaudit.rng import derive_seed
    from fedaudit.validation import check_choice, check_int, check_probability, check_real

    lookup(SPARSE_METHODS, method, "sparse method")  # an unknown name: the valid ones, the nearest suggested
    settings = TRAINING_SETTINGS.get(SPARSE_METHODS.canonical(method))
    dataset = check_choice("dataset", dataset, SPARSE_DATASETS)
    density = check_probability("density", density)
    temperature = (DEFAULT_TEMPERATURES[dataset] if temperature is None
                   else check_real("temperature", temperature, low=0.0))
    rounds = check_int("rounds", rounds, low=1, high=100_000)
    clients = check_int("clients", clients, low=1, high=1000)
    seed = check_int("seed", seed, low=0)
    upload = check_choice("upload", upload, ("gated", "dense"))
    if dataset == "synthetic":
        if clients > 150:
            raise FedAuditError(f"clients must be at most 150 for the synthetic data (300 rows, 2 per client), "
                                f"got clients={clients}")
        data = scarce_regression(clients=clients, rng=derive_seed(seed, "data"))
        model = torch.nn.Linear(data.n_features, 1, bias=False).double()
        torch.nn.init.zeros_(model.weight)
    else:
        data = load_digits_federated(clients, rng=derive_seed(seed, "data"))
        with torch.random.fork_rng():
            torch.manual_seed(derive_seed(seed, "model"))
            model = mlp(data.n_features, data.n_classes).double()
    step = None if progress is None else increments_from_totals(progress)
    keywords = {} if settings is None else settings(dataset, data, model, density, temperature, upload)
    # the registry checks the keywords against the factory's signature (one line naming any it lacks)
    run = SPARSE_METHODS.build(method, model, data, rounds=rounds, density=density,
                               rng=derive_seed(seed, f"train={method}"), progress=step, **keywords)
    score = evaluate(model, run.weights, data.X_test, data.y_test, data.task)
    recovery = None if data.support is None else support_recovery(run.mask.astype(float), data.support)
    hist = run.history
    per_client = sum(hist["bytes"]) / max(1, sum(hist["clients"]))
    return SparseTraining(method=method, dataset=dataset, metric="r2" if data.task == "regression" else "accuracy",
                          score=score, support_recovery=recovery, density=run.density, target_density=density,
                          dim=run.dim, m=run.m, bytes_per_client_round=per_client, dense_bytes=4 * run.dim,
                          rounds=rounds, clients=clients, seed=seed, seconds=run.seconds, run=run.to_dict())
