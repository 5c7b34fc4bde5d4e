"""Non-omniscient Byzantine clients as Flower client mods.

A mod ``mod(msg, context, call_next) -> Message`` wraps a ClientApp's train function. The one
:func:`byzantine_mod` builds acts only on the clients whose ``node_config["partition-id"]`` is
in ``partitions`` (a seeded, fixed set — never Flower node ids, which are random every run):

* ``"labelflip"`` — data poisoning: before training it sets the train config flag
  :data:`LABEL_FLIP_KEY`, and a train function that honours it (the one of
  :func:`~.simulation.run_flower` does) trains on labels y ↦ C − 1 − y;
* any fedaudit attack (``"signflip"``, ``"nonfinite"``, ``"ipm"``, ``"gaussian"``, an
  :class:`~fedaudit.attacks.Attack`) — model poisoning of the client's *own* update: with
  x_sent the arrays the server sent and x the trained ones, u = x − x_sent becomes
  u′ = attack([u], 1, rng)[0], and the reply carries x_sent + u′. The attack sees this client's
  update only (it is called with one honest row), unlike the omniscient attacks that
  :class:`~.strategy.RobustStrategy` applies at the server. An omniscient attack (ALIE, MinMax, …,
  ``Optimal``) is refused here: on one row it degenerates (ALIE's μ ± zσ is the client's own update).

Mod order: Flower wraps ``mods[0]`` outermost, so a Byzantine mod meant to act *before* a
privacy mod (e.g. ``LocalDpMod``) must come *after* it in the list.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.integrations.flower._flwr import require_flwr
from fedaudit.integrations.flower.records import flatten, unflatten
from fedaudit.integrations.flower.strategy import STRATEGY_KEY
from fedaudit.rng import derive_generator
from fedaudit.validation import check_int

require_flwr()

from flwr.app import Context, Message  # noqa: E402

__all__ = ["byzantine_mod", "LABEL_FLIP", "LABEL_FLIP_KEY", "CLIENT_ATTACKS"]

#: The data-poisoning attack of :func:`byzantine_mod` (not in the row-attack registry).
LABEL_FLIP = "labelflip"
#: Registered attacks that need no other client's update (the rest — ALIE, MinMax, … — are omniscient:
#: on a single row they degenerate, ALIE's μ ± zσ to the client's own update).
CLIENT_ATTACKS = (LABEL_FLIP, "signflip", "ipm", "gaussian", "nonfinite")
#: Train-config flag a label-flipping client's train function reads (bool).
LABEL_FLIP_KEY = "fedaudit-label-flip"


def _refuse_omniscient(name: str) -> None:
    """A FedAuditError for an attack that is not in :data:`CLIENT_ATTACKS` (it needs the other clients' updates)."""
    if name not in CLIENT_ATTACKS:
        raise FedAuditError(f"attack {name!r} is omniscient (it needs the other clients' updates of the round) and "
                            f"cannot run in a client mod, which sees only its own update; client attacks: "
                            f"{', '.join(CLIENT_ATTACKS)}; run omniscient attacks at the server "
                            "(RobustStrategy(attack=...), StrategySpec(attack=...))")


def byzantine_mod(attack: Any, partitions: Iterable[int], *, seed: int = 0, when: str | None = None,
                  arrays_key: str = "arrays", config_key: str = "config") -> Callable[..., Any]:
    """A client mod that makes the clients of ``partitions`` Byzantine (see the module docstring).

    ``attack``: ``"labelflip"``, the name or instance of an attack of :data:`CLIENT_ATTACKS`, or a
    callable of your own ``attack(honest (1, d), 1, rng) -> (1, d)``. An omniscient attack (any other
    fedaudit attack: ALIE, MinMax, Mimic, Fang, ``Optimal(...)``, …, by name or as an instance) is a
    FedAuditError: it needs every honest update of the round, which a client never sees. The attack's
    generator is ``derive_generator(seed, "flower-client-attack;partition=<p>;round=<r>")`` with r the train
    config's ``"server-round"``. With ``when``, the mod acts only in runs whose train config has
    ``STRATEGY_KEY == when`` (several strategies can then share one ClientApp).
    """
    from fedaudit.attacks.byzantine import Attack

    if isinstance(attack, str) and attack != LABEL_FLIP:
        from fedaudit.attacks.registry import make_attack

        built = make_attack(attack)  # an unknown name is reported as such first
        _refuse_omniscient(built.name if isinstance(built, Attack) else attack)
        attack = built
    elif isinstance(attack, Attack):
        _refuse_omniscient(attack.name)
    if not (attack == LABEL_FLIP or callable(attack)):
        raise FedAuditError(f"attack must be 'labelflip', an attack name or a callable attack(honest, f, rng), "
                            f"got {type(attack).__name__}")
    try:
        chosen = frozenset(check_int("partitions", p, low=0) for p in partitions)
    except TypeError:
        raise FedAuditError(f"partitions must be an iterable of partition ids (integers >= 0), "
                            f"got {partitions!r}") from None
    seed = check_int("seed", seed, low=0)
    if when is not None and not isinstance(when, str):
        raise FedAuditError(f"when must be None or a string tag, got when={when!r}")

    def mod(msg: Message, context: Context, call_next: Callable[[Message, Context], Message]) -> Message:
        pid = int(context.node_config.get("partition-id", -1))
        config = msg.content.get(config_key)
        active = pid in chosen and (when is None or (config is not None and config.get(STRATEGY_KEY) == when))
        if not active:
            return call_next(msg, context)
        if attack == LABEL_FLIP:
            if config is None:
                raise FedAuditError(f"a label-flipping client needs a train config record {config_key!r}")
            config[LABEL_FLIP_KEY] = True
            return call_next(msg, context)
        sent, layout = flatten(msg.content[arrays_key])
        reply = call_next(msg, context)
        if reply.has_error():
            return reply
        x, lay = flatten(reply.content[arrays_key])
        if lay != layout:
            raise FedAuditError(f"partition {pid}: the trained arrays {lay.summary()} do not match the sent ones "
                                f"{layout.summary()}")
        server_round = int(config.get("server-round", 0)) if config is not None else 0
        rng = derive_generator(seed, f"flower-client-attack;partition={pid};round={server_round}")
        u = np.asarray(attack((x - sent)[None, :], 1, rng), dtype=np.float64).reshape(-1)
        reply.content[arrays_key] = unflatten(sent + u, layout)
        return reply

    mod.__name__ = f"byzantine_mod_{attack if isinstance(attack, str) else getattr(attack, 'name', 'attack')}"
    mod.__qualname__ = mod.__name__
    return mod
