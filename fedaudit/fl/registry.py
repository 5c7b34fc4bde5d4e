"""Optimizers, partition schemes and datasets by name (:class:`fedaudit.registry.Registry`).

* :data:`OPTIMIZERS` — ``factory(**parameters) -> Optimizer`` (:mod:`fedaudit.fl.optimizers`);
  :func:`make_optimizer` is the one place optimizers are built by name.
* :data:`PARTITIONS` — ``factory(labels, n_clients, *, rng, beta, gamma, min_size, max_redraws)
  -> list of index arrays`` (:mod:`fedaudit.fl.partition`, dispatched by
  :func:`fedaudit.fl.partition.partition`).
* :data:`DATASETS` — ``factory(*, path, rng, **keywords) -> Dataset`` (:mod:`fedaudit.fl.data`,
  dispatched by :func:`fedaudit.fl.data.load_dataset`).
* :data:`SPARSE_METHODS` — federated sparse training, ``factory(model, clients, *, rounds,
  density, rng, **hyper) -> SparseRun`` (eflops, fed-ht, fediter-ht, fedavg-prune;
  :mod:`fedaudit.fl.sparse_baselines`).

This module sits below the modules whose built-ins it lists: each of them registers its own
entries when it is imported (``fedaudit.fl`` imports all three), so nothing here imports upward.
``"package.module:attr"`` is accepted wherever a name is.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.registry import Registry, did_you_mean

__all__ = ["OPTIMIZERS", "PARTITIONS", "DATASETS", "SPARSE_METHODS", "register_optimizer", "register_partition",
           "register_dataset", "register_sparse_method", "make_optimizer", "lookup"]

#: Server optimizers by name: dgd, dnag, robust-accelerated, pigs.
OPTIMIZERS: Registry[Any] = Registry("optimizer")
#: Client partition schemes by name: iid, dirichlet, gamma, extreme.
PARTITIONS: Registry[Any] = Registry("partition scheme", skip=("labels", "n_clients"))
#: Datasets by name: digits, mnist, synthetic.
DATASETS: Registry[Any] = Registry("dataset")
#: Federated sparse-training methods by name: eflops, fed-ht, fediter-ht, fedavg-prune.
SPARSE_METHODS: Registry[Any] = Registry("sparse method", skip=("model", "clients"))


def register_optimizer(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                       replace: bool = False, aliases: tuple[str, ...] = ()) -> Any:
    """Register an optimizer class or factory (returning a :class:`~fedaudit.fl.optimizers.Optimizer`)."""
    return OPTIMIZERS.register(name, factory, summary=summary, replace=replace, aliases=aliases)


def register_partition(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                       replace: bool = False, aliases: tuple[str, ...] = ()) -> Any:
    """Register a partition scheme ``factory(labels, n_clients, *, rng, beta, gamma, min_size,
    max_redraws) -> list[np.ndarray]`` (one int64 index array per client)."""
    return PARTITIONS.register(name, factory, summary=summary, replace=replace, aliases=aliases)


def register_dataset(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                     replace: bool = False, aliases: tuple[str, ...] = ()) -> Any:
    """Register a dataset loader ``factory(*, path, rng, **keywords) -> Dataset``."""
    return DATASETS.register(name, factory, summary=summary, replace=replace, aliases=aliases)


def register_sparse_method(name: str, factory: Callable[..., Any] | None = None, *, summary: str | None = None,
                           replace: bool = False, aliases: tuple[str, ...] = ()) -> Any:
    """Register a federated sparse-training method ``factory(model, clients, *, rounds, density,
    rng, **hyper) -> SparseRun``."""
    return SPARSE_METHODS.register(name, factory, summary=summary, replace=replace, aliases=aliases)


def lookup(registry: Registry, name: Any, what: str | None = None) -> Callable[..., Any]:
    """The factory of ``name`` in ``registry``; an unknown name raises ``"unknown <what> 'x';
    valid names: …"`` with the nearest name suggested."""
    if not isinstance(name, str) or name not in registry:
        hint = did_you_mean(name, registry.names()) if isinstance(name, str) else ""
        raise FedAuditError(f"unknown {what or registry.kind} {name!r}; valid names: {', '.join(registry.names())} "
                            f"(or 'package.module:attr'){hint}")
    return registry.factory(name)


def make_optimizer(name: str, *, settings: Mapping[str, Any] | None = None, **keywords: Any) -> Any:
    """Build the optimizer ``name`` (registered or ``"package.module:attr"``).

    ``keywords`` are its parameters and are checked against its signature (a keyword it does
    not take is an error). ``settings`` are run-wide values that only some optimizers take
    (``lr`` for dgd/dnag, ``momentum`` for dnag, ``eta`` for pigs): each is passed when the
    optimizer accepts it and dropped otherwise, so one call site serves every optimizer.
    """
    factory = lookup(OPTIMIZERS, name)
    accepted = OPTIMIZERS.accepted(name)
    given = {**{k: v for k, v in (settings or {}).items() if accepted is None or k in accepted}, **keywords}
    OPTIMIZERS.check_keywords(name, given)
    return factory(**given)
