"""The simulated federated system: offline datasets, client partitions, models, the federation
that turns honest gradients, Byzantine vectors and a robust aggregator into an inexact oracle,
the server optimizers and the training loop, and the gossip simulator.

* :mod:`fedaudit.fl.data` — :class:`Dataset`, :func:`load_digits_dataset`, :func:`load_mnist`
  (local files only), :func:`synthetic_logistic`, :func:`synthetic_linear`, :func:`load_dataset`;
* :mod:`fedaudit.fl.partition` — ByzFL's iid / Dirichlet / γ-similarity / extreme splits;
* :mod:`fedaudit.fl.models` — :class:`LogisticModel` (exact numpy loss/grad/HVP), torch
  :func:`mlp` and :func:`cnn`;
* :mod:`fedaudit.fl.federation` — :class:`Federation` (``Federation.build(...)``);
* :mod:`fedaudit.fl.problems` — the inexact-oracle problem protocol and its adapters;
* :mod:`fedaudit.fl.optimizers` — D-GD, D-NAG, robust accelerated, PIGS;
* :mod:`fedaudit.fl.training` — :func:`run` and its :class:`Trace`;
* :mod:`fedaudit.fl.dp_fedavg` — client-level DP-FedAvg: :class:`DPFedAvgAggregator` (clip, sum,
  Gaussian noise, fixed denominator qN) and :func:`train_dp_fedavg`;
* :mod:`fedaudit.fl.gates` / :mod:`fedaudit.fl.eflops` — Hard Concrete gates and E-FLoPS
  (:func:`train_eflops`: density-constrained, entropy-regularised federated sparse learning);
* :mod:`fedaudit.fl.sparse_data` / :mod:`fedaudit.fl.sparse_baselines` — scarce sparse regression,
  federated digits/MNIST and gene-expression CSVs; Fed-HT, FedIter-HT and FedAvg + pruning;
* :mod:`fedaudit.fl.sparse_training` — :func:`train_sparse`: one run of a registered sparse method
  on a built-in dataset (``fedaudit sparse``), :class:`SparseTraining`;
* :mod:`fedaudit.fl.gossip` — :func:`simulate_gossip` (decentralised robust gossip);
* :mod:`fedaudit.fl.registry` — optimizers, partitions, datasets and sparse methods by name.
"""

from fedaudit.deprecation import module_aliases
from fedaudit.fl.data import (
    Dataset,
    load_dataset,
    load_digits_dataset,
    load_mnist,
    stratified_split,
    synthetic_linear,
    synthetic_logistic,
)
from fedaudit.fl.dp_fedavg import DPFedAvgAggregator, clip_updates, train_dp_fedavg
from fedaudit.fl.eflops import EFLoPS, EFLoPSState, SparseRun, local_update, top_m_mask, train_eflops
from fedaudit.fl.federation import Federation, LabelFlip
from fedaudit.fl.gated_training import ErrorFeedback, data_free_gates
from fedaudit.fl.gates import GatedModel, HardConcrete
from fedaudit.fl.gossip import GossipTrace, simulate_gossip
from fedaudit.fl.models import LogisticModel, cnn, mlp
from fedaudit.fl.optimizers import DGD, DNAG, PIGS, Optimizer, RobustAccelerated, estimate_delta, nesterov_schedule
from fedaudit.fl.partition import (
    dirichlet_cuts,
    dirichlet_partition,
    extreme_partition,
    gamma_similarity_partition,
    iid_partition,
    partition,
)
from fedaudit.fl.problems import FederationProblem, Problem, QuadraticProblem, as_problem
from fedaudit.fl.registry import (
    DATASETS,
    OPTIMIZERS,
    PARTITIONS,
    make_optimizer,
    register_dataset,
    register_optimizer,
    register_partition,
)
from fedaudit.fl.sparse_baselines import train_fed_ht, train_fedavg_prune, train_fediter_ht
from fedaudit.fl.sparse_data import (GENE_CSV_ORIENTATIONS, FederatedData, load_gene_csv, r2_score, scarce_regression,
                                     support_recovery)
from fedaudit.fl.sparse_training import SparseTraining, train_sparse
from fedaudit.fl.training import Trace, run

__all__ = [
    "Dataset", "load_digits_dataset", "load_mnist", "synthetic_logistic", "synthetic_linear",
    "load_dataset", "stratified_split",
    "iid_partition", "dirichlet_partition", "dirichlet_cuts", "gamma_similarity_partition",
    "extreme_partition", "partition",
    "LogisticModel", "mlp", "cnn",
    "Federation", "LabelFlip",
    "Problem", "QuadraticProblem", "FederationProblem", "as_problem",
    "Optimizer", "DGD", "DNAG", "RobustAccelerated", "PIGS", "nesterov_schedule", "estimate_delta",
    "Trace", "run", "DPFedAvgAggregator", "clip_updates", "train_dp_fedavg",
    "EFLoPS", "EFLoPSState", "SparseRun", "local_update", "top_m_mask", "train_eflops", "GatedModel", "HardConcrete",
    "ErrorFeedback", "data_free_gates",
    "train_fed_ht", "train_fediter_ht", "train_fedavg_prune", "FederatedData", "scarce_regression", "load_gene_csv", "GENE_CSV_ORIENTATIONS",
    "r2_score", "support_recovery", "SparseTraining", "train_sparse", "GossipTrace", "simulate_gossip",
    "OPTIMIZERS", "PARTITIONS", "DATASETS", "register_optimizer", "register_partition", "register_dataset",
    "make_optimizer",
]


#: the names these had before issue #24 (deprecated; each read warns once with the new name)
__getattr__ = module_aliases(__name__, {"ORIENTATIONS": ("GENE_CSV_ORIENTATIONS", lambda: GENE_CSV_ORIENTATIONS),
                                        "train_dpfedavg": ("train_dp_fedavg", lambda: train_dp_fedavg)})
