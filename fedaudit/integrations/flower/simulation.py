"""Real Flower simulations (``flwr.simulation.run_simulation``, Ray backend) of fedaudit strategies.

:func:`run_flower` starts one simulation of N supernodes and, inside its single ServerApp main,
runs every :class:`StrategySpec` one after the other on the same grid (Ray starts once, which is
most of the wall time), each from the zero model for R rounds:

* **data** — scikit-learn's 8×8 digits (:func:`fedaudit.fl.data.load_digits_dataset`, standardised,
  25 % held out), the train set split over the N partitions by a
  :func:`fedaudit.fl.partition.partition` scheme; partition p is client p;
* **model** — multinomial logistic regression (:class:`fedaudit.fl.models.LogisticModel`, μ = 0),
  arrays ``W`` (C, p) and ``b`` (C,), so a flattened reply is LogisticModel's x = [vec W, b];
* **client** — ``local_steps`` full-batch gradient steps x ← x − η ∇ℓ_p(x) from the global model,
  reply with ``num-examples`` and ``partition-id``. Before training the client seeds numpy's and
  Python's global RNGs with ``derive_seed(seed, "flower-client;partition=<p>;round=<r>")``, so
  client mods that draw from them (Flower's ``LocalDpMod``) are reproducible;
* **server** — :class:`~.strategy.RobustStrategy` with the spec's rule, f and attack, and central
  evaluation: the accuracy of the global model on the held-out test set after every round.

Every seed is keyed by (seed, partition id, round), never by Flower node ids (random every run),
and the server sorts replies by partition id, so the same seed gives the same attacked clients and
the same accuracies. Client-side attacks (``StrategySpec.client_attack``, :mod:`.byzantine`) hit a
fixed set of f partitions, ``choose_byzantine(N, f, seed, 0)``; server-side (omniscient) attacks
hit f partitions drawn per round.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from fedaudit.engine import private_env_removed
from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.byzantine import CLIENT_ATTACKS, LABEL_FLIP, LABEL_FLIP_KEY, byzantine_mod
from fedaudit.integrations.flower.records import flatten, unflatten
from fedaudit.integrations.flower.strategy import PARTITION_KEY, STRATEGY_KEY, RobustStrategy, choose_byzantine
from fedaudit.json import jsonable
from fedaudit.rng import derive_seed
from fedaudit.validation import check_choice, check_int, check_real

require_flwr()

from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402

__all__ = ["StrategySpec", "StrategyOutcome", "FlowerRun", "run_flower", "DATASETS", "MODELS", "PARTITIONS",
           "backend_config", "model_dim", "simulate", "client_app",
           "federated_digits", "train_config"]

DATASETS = ("digits",)
MODELS = ("logreg",)
#: :func:`fedaudit.fl.partition.partition` schemes run_flower takes (``dirichlet`` needs ``beta``)
PARTITIONS = ("iid", "dirichlet", "extreme")
_CFG = "fedaudit-"  # prefix of the train-config keys the client function reads


def model_dim(dataset: str = "digits", model: str = "logreg") -> int:
    """The number of parameters d of ``model`` on ``dataset`` (logistic regression on 8×8 digits:
    (64 + 1)·10 = 650)."""
    check_choice("dataset", dataset, DATASETS)
    check_choice("model", model, MODELS)
    return (64 + 1) * 10


def backend_config(num_cpus: int) -> dict[str, Any]:
    """Ray backend config: ``num_cpus`` CPUs and one CPU per client, so ``num_cpus`` actors train in parallel
    (Flower's default of 2 CPUs per client would run them one at a time); no dashboard, quiet actors."""
    return {"init_args": {"num_cpus": int(num_cpus), "include_dashboard": False, "logging_level": "ERROR",
                          "log_to_driver": False},
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0}}


# ----------------------------------------------------------------------------- specs


def _table(name: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise FedAuditError(f"{name} must be a mapping of keyword -> value, got {type(value).__name__}")
    return dict(value)


@dataclass(frozen=True)
class StrategySpec:
    """One strategy of a :func:`run_flower` simulation.

    ``aggregator`` (+ ``aggregator_params``) a :func:`~fedaudit.defenses.make_aggregator` spec;
    ``f`` the Byzantine clients it tolerates and the number attacked; ``attack`` (+
    ``attack_params``) an omniscient attack applied at the server — a name of
    :data:`fedaudit.attacks.ATTACKS` or ``"optimal-<name>"`` (:class:`~fedaudit.attacks.Optimal`
    line-searching that attack's scale against this spec's rule); ``client_attack`` (+
    ``client_attack_params``) a non-omniscient attack run by f clients as a mod: ``"labelflip"``
    or an attack on the client's own update (:data:`~.byzantine.CLIENT_ATTACKS`). ``label`` names
    the outcome (default ``"<aggregator>/<attack or client_attack or none>"``). ``client_mods`` are Flower client mods
    that act only while this strategy runs (e.g. an ``ldp_mod``; inside :func:`run_flower`'s
    ``client_mods``, outside the Byzantine mod), and ``decoder`` is the strategy's
    ``decoder(rows, replies) -> rows`` hook (e.g. the matching ``ldp_decoder``).
    """

    aggregator: str = "mean"
    f: int = 0
    attack: str | None = None
    attack_params: Mapping[str, Any] | None = None
    client_attack: str | None = None
    client_attack_params: Mapping[str, Any] | None = None
    aggregator_params: Mapping[str, Any] | None = None
    label: str | None = None
    client_mods: Sequence[Callable[..., Any]] = ()
    decoder: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.aggregator, str) or not self.aggregator:
            raise FedAuditError(f"aggregator must be a make_aggregator spec such as 'nnm+cwtm', "
                                f"got {self.aggregator!r}")
        object.__setattr__(self, "f", check_int("f", self.f, low=0))
        for key in ("attack_params", "client_attack_params", "aggregator_params"):
            object.__setattr__(self, key, _table(key, getattr(self, key)) or None)
        if self.attack is not None and self.client_attack is not None:
            raise FedAuditError("a StrategySpec takes attack (at the server) or client_attack (a client mod), "
                                f"not both: got attack={self.attack!r}, client_attack={self.client_attack!r}")
        for key in ("attack", "client_attack"):
            value = getattr(self, key)
            if value is not None and self.f == 0:
                raise FedAuditError(f"{key}={value!r} needs f >= 1 Byzantine clients, got f=0")
        if self.label is not None and (not isinstance(self.label, str) or not self.label):
            raise FedAuditError(f"label must be a non-empty string or None, got label={self.label!r}")
        if callable(self.client_mods) or not all(callable(m) for m in self.client_mods):
            raise FedAuditError(f"client_mods must be a list of Flower mods (callables), got {self.client_mods!r}")
        object.__setattr__(self, "client_mods", tuple(self.client_mods))
        if self.decoder is not None and not callable(self.decoder):
            raise FedAuditError(f"decoder must be None or a callable (rows, replies) -> rows, "
                                f"got {type(self.decoder).__name__}")
        self.rule()
        self.server_attack()
        self.client_mod_attack()

    @property
    def name(self) -> str:
        return self.label or f"{self.aggregator}/{self.attack or self.client_attack or 'none'}"

    def rule(self) -> Any:
        from fedaudit.defenses.registry import make_aggregator

        return make_aggregator(self.aggregator, self.f, **(self.aggregator_params or {}))

    def server_attack(self) -> Any:
        """The attack the strategy applies at the server (None without one)."""
        if self.attack is None:
            return None
        from fedaudit.attacks.byzantine import Optimal
        from fedaudit.attacks.registry import make_attack

        if not isinstance(self.attack, str):
            raise FedAuditError(f"attack must be an attack name or None, got attack={self.attack!r}")
        params = dict(self.attack_params or {})
        if self.attack.startswith("optimal-"):
            base = make_attack(self.attack[len("optimal-"):], **params)
            return Optimal(base, self.rule())
        return make_attack(self.attack, **params)

    def client_mod_attack(self) -> Any:
        """What the Byzantine clients' mod runs: ``"labelflip"``, an attack, or None."""
        if self.client_attack is None:
            return None
        if self.client_attack == LABEL_FLIP:
            if self.client_attack_params:
                raise FedAuditError(f"client_attack 'labelflip' takes no parameters, got {self.client_attack_params}")
            return LABEL_FLIP
        from fedaudit.attacks.registry import make_attack

        if self.client_attack not in CLIENT_ATTACKS:
            raise FedAuditError(f"client_attack must be one of {', '.join(CLIENT_ATTACKS)} (attacks that need no "
                                f"other client's update) or None, got client_attack={self.client_attack!r}; "
                                "omniscient attacks run at the server (attack=...)")
        return make_attack(self.client_attack, **dict(self.client_attack_params or {}))

    def client_partitions(self, clients: int, seed: int) -> tuple[int, ...]:
        """The fixed partitions running the client attack: ``choose_byzantine(clients, f, seed, 0)``."""
        if self.client_attack is None:
            return ()
        return tuple(int(p) for p in choose_byzantine(clients, self.f, seed, 0))

    def strategy(self, clients: int, seed: int) -> RobustStrategy:
        """The Flower strategy: this spec's rule and attack, every client trained every round, no client
        evaluation (the server evaluates centrally)."""
        byzantine = list(self.client_partitions(clients, seed)) if self.client_attack is not None else None
        return RobustStrategy(self.rule(), f=self.f, attack=self.server_attack(), byzantine=byzantine, seed=seed,
                              decoder=self.decoder, num_clients=clients, fraction_train=1.0, fraction_evaluate=0.0)

    def to_dict(self) -> dict[str, Any]:
        plain = {k: getattr(self, k) for k in ("aggregator", "f", "attack", "attack_params", "client_attack",
                                               "client_attack_params", "aggregator_params", "label")}
        return jsonable({**plain, "name": self.name, "client_mods": [repr(m) for m in self.client_mods],
                         "decoder": None if self.decoder is None else repr(self.decoder)})

    def summary(self) -> str:
        extra = f", attack={self.attack}" if self.attack else ""
        extra += f", client_attack={self.client_attack}" if self.client_attack else ""
        return f"StrategySpec {self.name}: {self.aggregator}, f={self.f}{extra}"


def _as_spec(value: Any) -> StrategySpec:
    if isinstance(value, StrategySpec):
        return value
    if isinstance(value, Mapping):
        try:
            return StrategySpec(**value)
        except TypeError as err:
            raise FedAuditError(f"bad strategy {dict(value)}: {err}") from None
    raise FedAuditError(f"strategies must be StrategySpec objects or mappings of their fields, "
                        f"got {type(value).__name__}")


# ----------------------------------------------------------------------------- results


@dataclass(frozen=True, eq=False)
class StrategyOutcome:
    """One strategy's run: ``accuracy[r]`` is the test accuracy after round r (r = 0: the zero model),
    ``final_model`` the flat global model x = [vec W, b] after the last round, ``diagnostics`` the
    strategy's per-round dicts, ``errors`` the error replies over all rounds, ``client_byzantine``
    the partitions that ran the client attack."""

    name: str
    spec: StrategySpec
    accuracy: tuple[float, ...]
    final_model: np.ndarray
    diagnostics: tuple[dict[str, Any], ...]
    errors: int
    client_byzantine: tuple[int, ...]
    wall_time_s: float

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1]

    @property
    def byzantine(self) -> tuple[tuple[int, ...], ...]:
        """Byzantine partition ids per round."""
        return tuple(tuple(d.get("byzantine", ())) for d in self.diagnostics)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"name": self.name, "spec": self.spec.to_dict(), "final_accuracy": self.final_accuracy,
                         "accuracy": list(self.accuracy), "final_model": self.final_model, "errors": self.errors,
                         "client_byzantine": list(self.client_byzantine),
                         "byzantine": [list(b) for b in self.byzantine],
                         "diagnostics": list(self.diagnostics), "wall_time_s": self.wall_time_s})

    def summary(self) -> str:
        return (f"{self.name}: accuracy {self.final_accuracy:.3f} after {len(self.accuracy) - 1} rounds, "
                f"{self.errors} client errors ({self.wall_time_s:.1f} s)")


@dataclass(frozen=True)
class FlowerRun:
    """The result of :func:`run_flower`: one :class:`StrategyOutcome` per strategy, in order."""

    clients: int
    rounds: int
    seed: int
    dataset: str
    model: str
    local_steps: int
    lr: float
    partition: str
    num_cpus: int
    outcomes: tuple[StrategyOutcome, ...]
    wall_time_s: float
    info: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> StrategyOutcome:
        for outcome in self.outcomes:
            if outcome.name == name:
                return outcome
        raise KeyError(f"no strategy named {name!r}; strategies: {', '.join(o.name for o in self.outcomes)}")

    def to_dict(self) -> dict[str, Any]:
        return jsonable({"clients": self.clients, "rounds": self.rounds, "seed": self.seed, "dataset": self.dataset,
                         "model": self.model, "local_steps": self.local_steps, "lr": self.lr,
                         "partition": self.partition, "num_cpus": self.num_cpus,
                         "outcomes": [o.to_dict() for o in self.outcomes], "wall_time_s": self.wall_time_s,
                         "info": self.info})

    def summary(self) -> str:
        accs = ", ".join(f"{o.name} {o.final_accuracy:.3f}" for o in self.outcomes)
        return (f"Flower run ({self.clients} clients, {self.rounds} rounds, {self.dataset}/{self.model}, "
                f"seed {self.seed}): {accs} ({self.wall_time_s:.1f} s)")


# ----------------------------------------------------------------------------- client side


@functools.lru_cache(maxsize=4)
def federated_digits(seed: int, clients: int, scheme: str, beta: float | None):
    """(train parts [(A_p, y_p)], (A_test, y_test)) — cached per process (each Ray actor loads it once)."""
    from fedaudit.fl.data import load_digits_dataset
    from fedaudit.fl.partition import partition

    data = load_digits_dataset(rng=derive_seed(seed, "flower-data"))
    parts = partition(data.y_train, clients, scheme, beta=beta, rng=derive_seed(seed, "flower-partition"),
                      min_size=1)
    return [(data.X_train[idx], data.y_train[idx]) for idx in parts], (data.X_test, data.y_test)


def _model(n_features: int, n_classes: int):
    from fedaudit.fl.models import LogisticModel

    return LogisticModel(n_features, n_classes, mu=0.0)


def _train(msg: Message, context: Context) -> Message:
    """The ClientApp train function: local gradient steps on the client's partition (module docstring)."""
    pid = int(context.node_config["partition-id"])
    cfg = msg.content["config"]
    seed, server_round = int(cfg[_CFG + "seed"]), int(cfg["server-round"])
    beta = float(cfg[_CFG + "beta"]) if _CFG + "beta" in cfg else None
    parts, _ = federated_digits(seed, int(cfg[_CFG + "clients"]), str(cfg[_CFG + "partition"]), beta)
    A, y = parts[pid]
    model = _model(A.shape[1], 10)
    if bool(cfg.get(LABEL_FLIP_KEY, False)):
        y = model.n_classes - 1 - y
    client_seed = derive_seed(seed, f"flower-client;partition={pid};round={server_round}")
    np.random.seed(client_seed % 2**32)  # for client mods on the global RNG (LocalDpMod)
    random.seed(client_seed)
    x, layout = flatten(msg.content["arrays"])
    lr = float(cfg[_CFG + "lr"])
    for _ in range(int(cfg[_CFG + "local-steps"])):
        x = x - lr * model.grad(x, A, y)
    content = RecordDict({"arrays": unflatten(x, layout),
                          "metrics": MetricRecord({"num-examples": int(y.size), PARTITION_KEY: pid})})
    return Message(content=content, reply_to=msg)


def _for_strategy(mod: Callable[..., Any], name: str) -> Callable[..., Any]:
    """``mod`` active only on train messages whose config names strategy ``name`` (:data:`STRATEGY_KEY`)."""

    def gated(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        config = msg.content.get("config")
        if config is not None and config.get(STRATEGY_KEY) == name:
            return mod(msg, context, call_next)
        return call_next(msg, context)

    gated.__name__ = gated.__qualname__ = f"{getattr(mod, '__name__', type(mod).__name__)}_for_{name}"
    return gated


def train_config(*, seed: int, clients: int, partition: str, lr: float, local_steps: int,
                 beta: float | None = None) -> dict[str, Any]:
    """The train-config entries the client function reads (seed, partitioning, local steps and rate)."""
    config: dict[str, Any] = {_CFG + "seed": seed, _CFG + "clients": clients, _CFG + "partition": partition,
                              _CFG + "lr": float(lr), _CFG + "local-steps": int(local_steps)}
    if beta is not None:
        config[_CFG + "beta"] = beta
    return config


def client_app(mods: Sequence[Callable[..., Any]]) -> Any:
    """A ClientApp whose train function is the digits client of the module docstring, under ``mods``
    (outermost first)."""
    app = ClientApp()
    app.train(mods=list(mods))(_train)
    return app


# ----------------------------------------------------------------------------- run


class DeprecationNoise(logging.Filter):
    """Drops Flower's ``DEPRECATED FEATURE`` log records (``run_simulation`` announces its own deprecation
    on every call) while :func:`run_flower` runs; ``dropped`` counts them. Every other record passes."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).lstrip().startswith("DEPRECATED FEATURE"):
            self.dropped += 1
            return False
        return True



def simulate(server_app: Any, client_app: Any, clients: int, num_cpus: int) -> float:
    """Run ``flwr.simulation.run_simulation`` of ``server_app`` and ``client_app`` on ``clients`` supernodes
    (Ray, :func:`backend_config`), quietly, and return its wall time in seconds.

    Flower's INFO logs are held at WARNING and its deprecation notice of ``run_simulation`` dropped
    (:class:`DeprecationNoise`); the Ray processes never see the report key (``private_env_removed``);
    the ``PYTHONPATH`` that Flower's Ray backend writes into ``os.environ`` is restored afterwards.
    """
    from flwr.simulation import run_simulation

    flwr_logger = logging.getLogger("flwr")
    level, pythonpath = flwr_logger.level, os.environ.get("PYTHONPATH")
    quiet = DeprecationNoise()
    t0 = time.perf_counter()
    try:
        flwr_logger.setLevel(max(level, logging.WARNING))
        flwr_logger.addFilter(quiet)
        with private_env_removed():  # the simulation's Ray processes never see the report key
            run_simulation(server_app=server_app, client_app=client_app, num_supernodes=clients,
                           backend_config=backend_config(num_cpus))
    finally:
        flwr_logger.removeFilter(quiet)
        flwr_logger.setLevel(level)
        if pythonpath is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = pythonpath
    return time.perf_counter() - t0


def run_flower(*, clients: int = 10, rounds: int = 5, strategies: Iterable[StrategySpec | Mapping[str, Any]],
               dataset: str = "digits", model: str = "logreg", seed: int = 0, num_cpus: int = 2,
               local_steps: int = 20, lr: float = 0.5, partition: str = "iid", beta: float | None = None,
               client_mods: Sequence[Callable[..., Any]] = (),
               progress: Callable[[int], None] | None = None) -> FlowerRun:
    """Run every strategy of ``strategies`` for ``rounds`` rounds in one real Flower simulation (module docstring).

    ``client_mods`` are Flower client mods for the train function of every strategy (outermost
    first); each spec's own ``client_mods`` come inside them and the Byzantine mods of client
    attacks innermost (so a Byzantine client poisons its update before a privacy mod encodes it).
    ``progress(1)`` is called after every round of every strategy. Flower's INFO logs are held at
    WARNING during the run and its deprecation notice of ``run_simulation`` is dropped
    (:class:`DeprecationNoise`): Flower 1.42 deprecates ``run_simulation`` in favour of ``flwr run``,
    which runs a packaged app in other processes and cannot hand this call its results, so there is
    no in-process successor to move to (the deployed path is ``examples/flower_app``, docs/guides/flower.md).
    The ``PYTHONPATH`` that Flower's Ray backend writes into
    ``os.environ`` is restored afterwards.
    """
    clients = check_int("clients", clients, low=2, high=1000)
    rounds = check_int("rounds", rounds, low=1, high=10_000)
    dataset = check_choice("dataset", dataset, DATASETS)
    model = check_choice("model", model, MODELS)
    seed = check_int("seed", seed, low=0)
    num_cpus = check_int("num_cpus", num_cpus, low=1, high=256)
    local_steps = check_int("local_steps", local_steps, low=1, high=100_000)
    lr = check_real("lr", lr, low=0.0, open_low=True)
    partition = check_choice("partition", partition, PARTITIONS)
    if beta is not None:
        beta = check_real("beta", beta, low=0.0, open_low=True)
    if partition == "dirichlet" and beta is None:
        raise FedAuditError("partition='dirichlet' needs beta > 0 (the Dirichlet concentration), got beta=None")
    if isinstance(strategies, (StrategySpec, Mapping, str)):
        raise FedAuditError("strategies must be a list of StrategySpec, got a single one: wrap it in a list")
    specs = [_as_spec(s) for s in strategies]
    if not specs:
        raise FedAuditError("strategies must name at least one StrategySpec, got none")
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise FedAuditError(f"strategies must have distinct names, got {dup!r} twice (set label=...)")
    for spec in specs:
        rule = spec.rule()
        need = rule.min_n(rule.f) if hasattr(rule, "min_n") else 2 * spec.f + 1
        if clients < max(need, spec.f + 1):
            raise FedAuditError(f"clients must be at least {max(need, spec.f + 1)} for strategy {spec.name!r} "
                                f"({spec.aggregator} with f={spec.f}), got clients={clients}")
    mods = list(client_mods)
    bad = [m for m in mods if not callable(m)]
    if bad:
        raise FedAuditError(f"client_mods must be Flower mods (callables), got {type(bad[0]).__name__}")
    if progress is not None and not callable(progress):
        raise FedAuditError(f"progress must be None or a callable, got {type(progress).__name__}")
    parts, (A_test, y_test) = federated_digits(seed, clients, partition, beta)
    n_features = A_test.shape[1]
    evaluator = _model(n_features, 10)
    spec_mods = [_for_strategy(m, spec.name) for spec in specs for m in spec.client_mods]
    byz_mods = [byzantine_mod(spec.client_mod_attack(), spec.client_partitions(clients, seed), seed=seed,
                              when=spec.name) for spec in specs if spec.client_attack is not None]
    base_config = train_config(seed=seed, clients=clients, partition=partition, lr=lr, local_steps=local_steps,
                               beta=beta)
    results: dict[str, StrategyOutcome] = {}

    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        for spec in specs:
            strategy = spec.strategy(clients, seed)
            initial = ArrayRecord({"W": Array(np.zeros((10, n_features))), "b": Array(np.zeros(10))})
            accuracy: dict[int, float] = {}
            final: dict[str, np.ndarray] = {}

            def central(server_round: int, arrays: ArrayRecord) -> MetricRecord:
                x, _ = flatten(arrays)
                final["x"] = x
                accuracy[server_round] = evaluator.accuracy(x, A_test, y_test)
                if server_round > 0 and progress is not None:
                    progress(1)
                return MetricRecord({"accuracy": accuracy[server_round]})

            t0 = time.perf_counter()
            strategy.start(grid=grid, initial_arrays=initial, num_rounds=rounds,
                           train_config=ConfigRecord({**base_config, STRATEGY_KEY: spec.name}),
                           evaluate_fn=central)
            if sorted(accuracy) != list(range(rounds + 1)):
                raise FedAuditError(f"strategy {spec.name!r} was evaluated after rounds {sorted(accuracy)}, "
                                    f"expected 0..{rounds}: a round aggregated no reply")
            results[spec.name] = StrategyOutcome(
                name=spec.name, spec=spec, accuracy=tuple(accuracy[r] for r in range(rounds + 1)),
                final_model=final["x"],
                diagnostics=tuple(strategy.diagnostics), errors=sum(d["errors"] for d in strategy.diagnostics),
                client_byzantine=spec.client_partitions(clients, seed), wall_time_s=time.perf_counter() - t0)

    wall = simulate(server_app, client_app(mods + spec_mods + byz_mods), clients, num_cpus)
    missing = [n for n in names if n not in results]
    if missing:
        raise FedAuditError(f"the Flower simulation ended without running strategies {missing}")
    import flwr

    return FlowerRun(clients=clients, rounds=rounds, seed=seed, dataset=dataset, model=model,
                     local_steps=local_steps, lr=lr, partition=partition, num_cpus=num_cpus,
                     outcomes=tuple(results[n] for n in names), wall_time_s=wall,
                     info={"flwr": flwr.__version__, "n_train": int(sum(p[1].size for p in parts)),
                           "n_test": int(y_test.size), "backend": "ray"})
