"""Claim kind ``flower``: a robust rule keeps its accuracy in a real Flower simulation under a Byzantine attack.

Runs :func:`fedaudit.integrations.flower.run_flower` — one ``flwr.simulation.run_simulation``
(Ray backend, ``num_cpus`` CPUs) of ``clients`` digits clients for ``rounds`` rounds — with, one
after the other on the same grid: the rule without attack (the reference), the rule under the
attack on f clients, and, when ``compare_fedavg`` and the rule is not already the mean, FedAvg
(the unweighted mean) under the same attack. An ``attack`` of :data:`fedaudit.attacks.ATTACKS`
or ``"optimal-<name>"`` is omniscient and applied at the server to f clients drawn per round
(attack-in-the-loop, see :mod:`fedaudit.integrations.flower.strategy`); ``"labelflip"``, or an
attack of :data:`~fedaudit.integrations.flower.byzantine.CLIENT_ATTACKS` with
``attack_at = "clients"``, runs as a client mod on a fixed seeded set of f clients.
The claim holds when the attacked accuracy A_att (test accuracy of the final global model) is
≥ ``min_accuracy`` and the drop A_clean − A_att is ≤ ``max_accuracy_drop`` (each when set), and
no client replied with an error. Needs ``pip install 'fedaudit[flower]'``.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.experiments.components import check_aggregator, check_attacks, flat_params, normalise_spec
from fedaudit.experiments.kind import ClaimKind, Evidence, Progress, fmt_number
from fedaudit.errors import FedAuditError
from fedaudit.experiments.keys import Key, key_error

__all__ = ["Flower"]

_CLIENT_ONLY = ("labelflip",)


def _client_attacks() -> tuple[str, ...]:
    from fedaudit.integrations.flower.byzantine import CLIENT_ATTACKS

    return CLIENT_ATTACKS


def _attack_at(p: Mapping[str, Any]) -> str:
    return p["attack_at"] or ("clients" if p["attack"] in _CLIENT_ONLY else "server")


class Flower(ClaimKind):
    """A rule's accuracy in a real Flower simulation under attack, next to its attack-free run and FedAvg's."""

    name = "flower"
    unit = "rounds"
    figures = ("curves",)

    def keys(self) -> dict[str, Key]:
        return {
            "clients": Key("int", 10, low=2, high=1000, help="Flower supernodes (one digits partition each)"),
            "rounds": Key("int", 5, low=1, high=1000),
            "aggregator": Key("str", "nnm+cwtm", help="make_aggregator spec of the strategy under test"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params)"),
            "attack": Key("str", "alie", help="attack name, 'optimal-<name>', 'labelflip' or 'none'"),
            "attack_params": Key("params", None, help="keywords of the attack, e.g. { z = 30 } for alie"),
            "attack_at": Key("str", None, choices=("server", "clients"),
                             help="'server' (omniscient, attack-in-the-loop; default) or 'clients' (a client "
                                  "mod on the client's own update; the only choice for labelflip)"),
            "f": Key("int", 2, low=1, help="Byzantine clients (the rule is built with this f)"),
            "dataset": Key("str", "digits", choices=("digits",)),
            "partition": Key("str", "iid", choices=("iid", "dirichlet", "extreme"),
                             help="fedaudit.fl.partition scheme of the train set over the clients"),
            "beta": Key("float", None, low=0, open_low=True, help="Dirichlet concentration for partition = dirichlet"),
            "local_steps": Key("int", 20, low=1, high=100_000),
            "lr": Key("float", 0.5, low=0, open_low=True),
            "num_cpus": Key("int", 2, low=1, high=256, help="Ray CPUs (one client per CPU at a time)"),
            "compare_fedavg": Key("bool", True, help="also run FedAvg under the same attack"),
            "min_accuracy": Key("float", None, low=0, high=1, help="least test accuracy under attack"),
            "max_accuracy_drop": Key("float", None, low=0, high=1,
                                     help="largest drop from the rule's attack-free accuracy"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        from fedaudit.integrations.flower._flwr import require_flwr

        require_flwr()
        if p["min_accuracy"] is None and p["max_accuracy_drop"] is None:
            raise key_error(where, "min_accuracy", "or 'max_accuracy_drop' must be set: a flower claim needs a bound")
        if p["clients"] <= 2 * p["f"]:
            raise key_error(where, "f", f"must satisfy clients > 2f (clients={p['clients']}), got f={p['f']}")
        if p["partition"] == "dirichlet" and p["beta"] is None:
            raise key_error(where, "beta", "must be set for partition = 'dirichlet'")
        flat_params(where, p)
        check_aggregator(where, "aggregator", p["aggregator"], p["f"], p["clients"], "clients", p["aggregator_params"])
        p["aggregator"] = normalise_spec(p["aggregator"])
        attack = p["attack"].strip().lower()
        p["attack"] = attack
        base = attack[len("optimal-"):] if attack.startswith("optimal-") else attack
        if attack != "none":
            check_attacks(where, "attack", [base], allow_all=False, allow_labelflip=base == attack)
        if attack == "none" and p["max_accuracy_drop"] is not None:
            raise key_error(where, "max_accuracy_drop", "needs an attack (attack = 'none' has nothing to drop from)")
        if attack in _CLIENT_ONLY and p["attack_at"] == "server":
            raise key_error(where, "attack_at", f"must be 'clients' for {attack!r} (it poisons the client's data)")
        if attack.startswith("optimal-") and p["attack_at"] == "clients":
            raise key_error(where, "attack_at", f"must be 'server' for {attack!r}: it line-searches against the "
                                                "rule, which needs every honest update")
        if p["attack_params"] and attack in _CLIENT_ONLY + ("none",):
            raise key_error(where, "attack_params", f"must be empty for attack {attack!r}, got {p['attack_params']}")
        if _attack_at(p) == "clients" and attack not in _client_attacks():
            raise key_error(where, "attack", f"{attack!r} needs the other clients' updates, so it runs at the server "
                                             f"only; at the clients: {', '.join(_client_attacks())}")
        try:
            self._specs(p)
        except FedAuditError as exc:  # a keyword the attack does not take, a bad value
            raise key_error(where, "attack_params", f"is rejected: {exc}") from None

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        bounds = []
        if p["min_accuracy"] is not None:
            bounds.append(f"accuracy ≥ {p['min_accuracy']:g}")
        if p["max_accuracy_drop"] is not None:
            bounds.append(f"a drop ≤ {p['max_accuracy_drop']:g}")
        attack = "no attack" if p["attack"] == "none" else f"{p['attack'].upper()} on f={p['f']} clients"
        return (f"{p['aggregator'].upper()} keeps {' and '.join(bounds)} in a Flower simulation of {p['clients']} "
                f"clients under {attack}")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["rounds"] * len(self._specs(p))

    def _specs(self, p: Mapping[str, Any]) -> list[Any]:
        from fedaudit.integrations.flower.simulation import StrategySpec

        agg = {"aggregator_params": p["aggregator_params"]}
        specs = [StrategySpec(p["aggregator"], f=p["f"], label="clean", **agg)]
        if p["attack"] == "none":
            return specs
        at_clients = _attack_at(p) == "clients"
        attack = {"client_attack" if at_clients else "attack": p["attack"],
                  "client_attack_params" if at_clients else "attack_params": p["attack_params"]}
        specs.append(StrategySpec(p["aggregator"], f=p["f"], label="attacked", **agg, **attack))
        if p["compare_fedavg"] and p["aggregator"] != "mean":
            specs.append(StrategySpec("mean", f=p["f"], label="fedavg-attacked", **attack))
        return specs

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.integrations.flower.simulation import run_flower

        p = spec.params
        res = run_flower(clients=p["clients"], rounds=p["rounds"], strategies=self._specs(p), dataset=p["dataset"],
                         seed=spec.seed, num_cpus=p["num_cpus"], local_steps=p["local_steps"], lr=p["lr"],
                         partition=p["partition"], beta=p["beta"], progress=progress)
        clean = res["clean"]
        attacked = res["attacked"] if p["attack"] != "none" else clean
        fedavg = res["fedavg-attacked"] if any(o.name == "fedavg-attacked" for o in res.outcomes) else None
        errors = sum(o.errors for o in res.outcomes)
        acc, drop = attacked.final_accuracy, clean.final_accuracy - attacked.final_accuracy
        ok_min = p["min_accuracy"] is None or acc >= p["min_accuracy"]
        ok_drop = p["max_accuracy_drop"] is None or drop <= p["max_accuracy_drop"]
        holds = ok_min and ok_drop and errors == 0
        where = _attack_at(p) if p["attack"] != "none" else None
        parts = [f"{p['aggregator']} accuracy {acc:.3f}" + ("" if p["attack"] == "none" else
                                                             f" under {p['attack']} (f={p['f']}, at the {where})"),
                 f"attack-free {clean.final_accuracy:.3f} (drop {drop:+.3f})"]
        if fedavg is not None:
            parts.append(f"FedAvg under the same attack {fedavg.final_accuracy:.3f}")
        if p["min_accuracy"] is not None:
            parts.append(f"min_accuracy {p['min_accuracy']:g} " + ("met" if ok_min else "NOT MET"))
        if p["max_accuracy_drop"] is not None:
            parts.append(f"max_accuracy_drop {p['max_accuracy_drop']:g} " + ("met" if ok_drop else "EXCEEDED"))
        if errors:
            parts.append(f"{errors} client error replies")
        parts.append(f"{p['clients']} clients × {p['rounds']} rounds in one Flower simulation, "
                     f"{fmt_number(res.wall_time_s, '.1f')} s")

        def per_round(o: Any) -> dict[str, Any]:
            return {"accuracy": list(o.accuracy), "byzantine": [list(b) for b in o.byzantine],
                    "client_byzantine": list(o.client_byzantine),
                    "nonfinite_rows": [d["nonfinite_rows"] for d in o.diagnostics],
                    "dist_to_honest_mean": [d["dist_to_honest_mean"] for d in o.diagnostics], "errors": o.errors,
                    "wall_time_s": o.wall_time_s}

        evidence = {
            "accuracy_attacked": acc, "accuracy_clean": clean.final_accuracy, "accuracy_drop": drop,
            "accuracy_fedavg_attacked": None if fedavg is None else fedavg.final_accuracy,
            "attack_at": where, "client_errors": errors, "wall_time_s": res.wall_time_s,
            "runs": {o.name: per_round(o) for o in res.outcomes},
            "simulation": {k: v for k, v in res.to_dict().items() if k not in ("outcomes",)},
        }
        series = {o.name: {"x": list(range(len(o.accuracy))), "y": list(o.accuracy)} for o in res.outcomes}
        plots = ({"type": "curves", "title": f"test accuracy per round — {p['aggregator']} under {p['attack']}, "
                                             f"f={p['f']} of {p['clients']} Flower clients",
                  "x_label": "round", "y_label": "test accuracy", "log_y": False, "series": series,
                  "hlines": {"min_accuracy": p["min_accuracy"]}},)
        return Evidence(holds=holds, violated=not holds, evidence=evidence, summary="; ".join(parts), plots=plots)
