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
no client failed.

With ``mechanism`` (and its ``epsilon`` per report), every run is local-DP
(:mod:`fedaudit.integrations.flower.ldp`): each client sends the mechanism's report of its update,
the server decodes it, and with ``budget`` each client is refused (a Flower error reply, not a
failure) once one more report would take its basic composition past (``budget``,
``budget_delta``). The server's ledger records every report; the claim then also needs every
client's spent ε ≤ ``budget``, and the evidence gives the ε spent per client, the refused rounds and
the bits sent. A claim is a simulation: its ``ldp_mod`` opts in to ``simulation_seed`` = the claim's
seed, so the reports (and the report) repeat bit for bit; a deployed ``ldp_mod`` never takes a seed.
Needs ``pip install 'fedaudit[flower]'``.
"""

from __future__ import annotations

from typing import Any, Mapping

from fedaudit.experiments.components import (check_aggregator, check_attacks, check_mechanism_key, flat_params,
                                             normalise_spec)
from fedaudit.reports.diff import Tracked
from fedaudit.guarantees import Bound
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, fmt_number, mapping, number
from fedaudit.errors import FedAuditError
from fedaudit.experiments.keys import Key, key_error, mechanism_params_key
from fedaudit.reports.explain import Explanation, Field, display_number

__all__ = ["Flower"]

_CLIENT_ONLY = ("labelflip",)


def _client_attacks() -> tuple[str, ...]:
    from fedaudit.integrations.flower.byzantine import CLIENT_ATTACKS

    return CLIENT_ATTACKS


def _attack_at(p: Mapping[str, Any]) -> str:
    return p["attack_at"] or ("clients" if p["attack"] in _CLIENT_ONLY else "server")


#: core-seconds of Flower's overhead per client and round of a simulation, and of one local step
#: of the built-in models (orders of magnitude: Ray actors, messages, a small MLP)
FLOWER_CLIENT_ROUND_SECONDS = 0.05
STEP_SECONDS = 1e-3


class Flower(ClaimKind):
    """A rule's accuracy in a real Flower simulation under attack, next to its attack-free run and FedAvg's."""

    name = "flower"
    guarantee = "robustness"
    unit = "rounds"
    figures = ("curves",)
    tracked = (Tracked("accuracy_attacked", "accuracy under attack", worse="lower"),
               Tracked("ldp.spent_max", "spent ε (largest of the runs)", bound=Bound.UPPER, guarantee="privacy"))
    runs_alone = True  # it starts its own Ray simulation: never inside a parallel claim worker
    evidence_fields = {
        "accuracy_attacked": Field("test accuracy under attack"),
        "accuracy_clean": Field("test accuracy without attack"),
        "accuracy_drop": Field("accuracy drop (clean − attacked)"),
        "min_accuracy": Field("required accuracy"),
        "max_accuracy_drop": Field("largest drop allowed"),
        "client_errors": Field("client errors"),
        "accuracy_fedavg_attacked": Field("FedAvg's accuracy under the same attack (reference)"),
        "refused": Field("reports refused by the LDP budget"),
        "ldp": Field("local DP of the clients' reports"),
        "attack_at": Field("where the attack runs", "", "configuration"),
        "runs": Field("per-round records of each run", "", "diagnostics"),
        "simulation": Field("Flower simulation record", "", "diagnostics"),
    }

    def keys(self) -> dict[str, Key]:
        return {
            "clients": Key("int", 10, low=2, high=1000, help="Flower supernodes (one digits partition each)"),
            "rounds": Key("int", 5, low=1, high=1000),
            "aggregator": Key("str", "nnm+cwtm", help="make_aggregator spec of the strategy under test"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params)"),
            "attack": Key("str", "alie", help="attack name, 'optimal-<name>', 'labelflip' or 'none'"),
            "attack_params": Key("params", None, help="keywords of the attack (alie's z, say)", examples=({"z": 30},)),
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
            "mechanism": Key("str", None, help="LDP mechanism every client reports its update with (sstq, privunitg, "
                                               "vqsgd, laplace, gaussian, ...)"),
            "epsilon": Key("float", None, low=0, open_low=True, help="ε of one report (with mechanism)"),
            "delta": Key("float", 1e-5, low=0, high=1, open_high=True,
                         help="δ of one report (approximate mechanisms)"),
            "clip": Key("float", 1.0, low=0, open_low=True, help="L2 radius the mechanism clips the update to"),
            "mechanism_params": mechanism_params_key(),
            "budget": Key("float", None, low=0, open_low=True,
                          help="each client's total ε (basic composition); refused past it"),
            "budget_delta": Key("float", None, low=0, high=1, open_high=True,
                                help="the budget's δ (default min(rounds·delta, 0.5): the δ part never refuses)"),
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
        self._check_ldp(where, p)
        if p["attack_params"] and attack in _CLIENT_ONLY + ("none",):
            raise key_error(where, "attack_params", f"must be empty for attack {attack!r}, got {p['attack_params']}")
        if _attack_at(p) == "clients" and attack not in _client_attacks():
            raise key_error(where, "attack", f"{attack!r} needs the other clients' updates, so it runs at the server "
                                             f"only; at the clients: {', '.join(_client_attacks())}")
        try:
            self._specs(p)
        except FedAuditError as exc:  # a keyword the attack does not take, a bad value
            raise key_error(where, "attack_params", f"is rejected: {exc}") from None

    def _check_ldp(self, where: str, p: dict[str, Any]) -> None:
        if p["mechanism"] is None:
            for key in ("epsilon", "budget", "budget_delta", "mechanism_params"):
                if p[key] is not None:
                    raise key_error(where, key, "needs a mechanism (set mechanism = 'sstq', 'gaussian', ...)")
            return
        check_mechanism_key(where, p)
        if p["epsilon"] is None:
            raise key_error(where, "epsilon", f"must be set for mechanism {p['mechanism']!r} (ε of one report)")
        try:
            self._mechanism(p)
        except FedAuditError as exc:
            raise key_error(where, "mechanism", f"cannot be built: {exc}") from None
        if p["budget"] is not None and p["budget"] < p["epsilon"]:
            raise key_error(where, "budget", f"must be at least one report's epsilon={p['epsilon']:g}, "
                                             f"got {p['budget']:g} (every client would be refused)")

    def _mechanism(self, p: Mapping[str, Any]) -> Any:
        from fedaudit.integrations.flower.simulation import model_dim
        from fedaudit.mechanisms.registry import make_mechanism

        return make_mechanism(p["mechanism"], model_dim(p["dataset"]), p["epsilon"], clip=p["clip"], delta=p["delta"],
                              params=p["mechanism_params"])

    def _budget_delta(self, p: Mapping[str, Any], mechanism: Any) -> float:
        return p["budget_delta"] if p["budget_delta"] is not None else min(p["rounds"] * mechanism.delta, 0.5)

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        bounds = []
        if p["min_accuracy"] is not None:
            bounds.append(f"accuracy ≥ {p['min_accuracy']:g}")
        if p["max_accuracy_drop"] is not None:
            bounds.append(f"a drop ≤ {p['max_accuracy_drop']:g}")
        attack = "no attack" if p["attack"] == "none" else f"{p['attack'].upper()} on f={p['f']} clients"
        ldp = ""
        if p["mechanism"] is not None:
            ldp = f", clients sending {p['mechanism']} reports at ε = {p['epsilon']:g}"
            ldp += "" if p["budget"] is None else f" within a budget ε ≤ {p['budget']:g}"
        return (f"{p['aggregator'].upper()} keeps {' and '.join(bounds)} in a Flower simulation of {p['clients']} "
                f"clients under {attack}{ldp}")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["rounds"] * len(self._runs(p))

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every run's round (:meth:`work_units`) trains every client for ``local_steps`` steps:
        :data:`FLOWER_CLIENT_ROUND_SECONDS` of Flower's overhead plus :data:`STEP_SECONDS` a step."""
        from fedaudit.experiments.kind import BASE_MEMORY, Cost

        rounds = self.work_units(p) * p["clients"]
        return Cost(memory=BASE_MEMORY, seconds=rounds * (FLOWER_CLIENT_ROUND_SECONDS + p["local_steps"] * STEP_SECONDS),
                    basis=f"runs × rounds × clients = {rounds} client rounds of {p['local_steps']} local steps")

    @staticmethod
    def _runs(p: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        """``(label, rule, keywords)`` of the runs: the rule clean, the rule attacked, FedAvg attacked."""
        runs = [("clean", p["aggregator"], {"aggregator_params": p["aggregator_params"]})]
        if p["attack"] != "none":
            at_clients = _attack_at(p) == "clients"
            attack = {"client_attack" if at_clients else "attack": p["attack"],
                      "client_attack_params" if at_clients else "attack_params": p["attack_params"]}
            runs.append(("attacked", p["aggregator"], {"aggregator_params": p["aggregator_params"], **attack}))
            if p["compare_fedavg"] and p["aggregator"] != "mean":
                runs.append(("fedavg-attacked", "mean", attack))
        return runs

    def _specs(self, p: Mapping[str, Any], seed: int = 0) -> list[Any]:
        """The runs (:meth:`_runs`) as StrategySpecs; with a mechanism each gets its own ldp_mod
        (account scoped to the run) and ldp_decoder with a fresh Ledger."""
        from fedaudit.integrations.flower.simulation import StrategySpec

        return [StrategySpec(rule, f=p["f"], label=label, **kw, **self._ldp(p, seed))
                for label, rule, kw in self._runs(p)]

    def _ldp(self, p: Mapping[str, Any], seed: int) -> dict[str, Any]:
        if p["mechanism"] is None:
            return {}
        from fedaudit.accounting.ledger import Ledger
        from fedaudit.integrations.flower.ldp import ldp_decoder, ldp_mod
        from fedaudit.integrations.flower.strategy import STRATEGY_KEY

        mech = self._mechanism(p)
        budget = {"budget": p["budget"], "budget_delta": self._budget_delta(p, mech)} if p["budget"] else {}
        return {"client_mods": (ldp_mod(mech, scope=STRATEGY_KEY, simulation_seed=seed, **budget),),
                "decoder": ldp_decoder(mech, ledger=Ledger(), **budget)}

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.integrations.flower.simulation import run_flower

        p = spec.params
        specs = self._specs(p, spec.seed)
        res = run_flower(clients=p["clients"], rounds=p["rounds"], strategies=specs, dataset=p["dataset"],
                         seed=spec.seed, num_cpus=p["num_cpus"], local_steps=p["local_steps"], lr=p["lr"],
                         partition=p["partition"], beta=p["beta"], progress=progress)
        clean = res["clean"]
        attacked = res["attacked"] if p["attack"] != "none" else clean
        fedavg = res["fedavg-attacked"] if any(o.name == "fedavg-attacked" for o in res.outcomes) else None
        from fedaudit.integrations.flower.ldp import REFUSED_CODE

        refused = {o.name: sum(c == REFUSED_CODE for d in o.diagnostics for c in d.get("error_codes", ()))
                   for o in res.outcomes}
        errors = sum(o.errors for o in res.outcomes) - sum(refused.values())
        acc, drop = attacked.final_accuracy, clean.final_accuracy - attacked.final_accuracy
        ldp = self._ldp_evidence(p, specs, refused) if p["mechanism"] is not None else None
        decision = self.decide({"accuracy_attacked": acc, "accuracy_clean": clean.final_accuracy,
                                "min_accuracy": p["min_accuracy"], "max_accuracy_drop": p["max_accuracy_drop"],
                                "client_errors": errors, "ldp": ldp}, spec.expect)
        ok_min = p["min_accuracy"] is None or acc >= p["min_accuracy"]  # the summary's words
        ok_drop = p["max_accuracy_drop"] is None or drop <= p["max_accuracy_drop"]
        ok_budget = ldp is None or p["budget"] is None or ldp["spent_max"] <= p["budget"]
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
        if ldp is not None:
            parts.append(f"{p['mechanism']} reports at ε = {p['epsilon']:g}, {ldp['bits_per_report']} bits each; "
                         f"ε spent per client ≤ {fmt_number(ldp['spent_max'])}"
                         + ("" if p["budget"] is None else f" (budget {p['budget']:g} "
                            + ("met" if ok_budget else "EXCEEDED") + f", {sum(refused.values())} refused reports)"))
        if errors:
            parts.append(f"{errors} client failures")
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
            "min_accuracy": p["min_accuracy"], "max_accuracy_drop": p["max_accuracy_drop"],
            "attack_at": where, "client_errors": errors, "refused": refused, "ldp": ldp,
            "wall_time_s": res.wall_time_s,
            "runs": {o.name: per_round(o) for o in res.outcomes},
            "simulation": {k: v for k, v in res.to_dict().items() if k not in ("outcomes",)},
        }
        series = {o.name: {"x": list(range(len(o.accuracy))), "y": list(o.accuracy)} for o in res.outcomes}
        plots = ({"type": "curves", "title": f"test accuracy per round — {p['aggregator']} under {p['attack']}, "
                                             f"f={p['f']} of {p['clients']} Flower clients",
                  "x_label": "round", "y_label": "test accuracy", "log_y": False, "series": series,
                  "hlines": {"min_accuracy": p["min_accuracy"]}},)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary="; ".join(parts),
                        plots=plots)

    def _ldp_evidence(self, p: Mapping[str, Any], specs: list[Any], refused: dict[str, int]) -> dict[str, Any]:
        """Per run: every client's ε spent by the server's ledger (basic composition), its reports, refusals, bits."""
        runs = {}
        for spec in specs:
            decoder = spec.decoder
            mech = decoder.mechanism
            delta = self._budget_delta(p, mech)
            spent = [decoder.ledger.spent(c, method="basic", delta=delta) for c in range(p["clients"])]
            runs[spec.name] = {"spent_epsilon": [s.epsilon for s in spent], "spent_delta": [s.delta for s in spent],
                               "reports": [s.count for s in spent], "refused": refused[spec.name],
                               "total_bits": sum(r.total_bits for r in decoder.rounds)}
        mech = specs[0].decoder.mechanism
        return {"mechanism": p["mechanism"], "epsilon": mech.epsilon, "delta": mech.delta,
                "bits_per_report": mech.bits_per_report, "budget": p["budget"],
                "budget_delta": self._budget_delta(p, mech), "composition": "basic",
                "spent_max": max(max(r["spent_epsilon"]) for r in runs.values()), "runs": runs}

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The Flower claim in words: the rule keeps its accuracy in a real Flower simulation under
        the attack, one seeded simulation per run, the accuracies against the requirement, and
        what one simulation on the digits partitions cannot show."""
        num = display_number
        p = {**dict(params or {}), **dict(ev.get("parameters") or {})}
        want = ([f"test accuracy ≥ {num(ev.get('min_accuracy'))}"] if ev.get("min_accuracy") is not None else []) + (
            [f"an accuracy drop ≤ {num(ev.get('max_accuracy_drop'))}"] if ev.get("max_accuracy_drop") is not None else [])
        attack, f = p.get("attack", "?"), p.get("f")
        claimed = (f"In a real Flower simulation of {num(p.get('clients'))} clients over {num(p.get('rounds'))} rounds, "
                   f"the rule {p.get('aggregator')} keeps " + (" and ".join(want) or "its accuracy")
                   + (f" while {num(f)} client(s) run the {attack} attack" if attack != "none" else " (no attack)")
                   + " with no client failing." + (" The plan expects this to fail." if expect == "violation" else ""))
        tested = (f"flwr.simulation.run_simulation with the strategy under test: a clean run, the run under attack"
                  + (f" ({ev.get('attack_at')})" if ev.get("attack_at") else "")
                  + (", and FedAvg under the same attack for reference" if ev.get("accuracy_fedavg_attacked") is not None
                     else "") + f"; the final global model's test accuracy. Omniscient attackers"
                  f" at the server see every honest update; one seeded simulation per run.")
        acc, clean, drop = ev.get("accuracy_attacked"), ev.get("accuracy_clean"), ev.get("accuracy_drop")
        means = (f"Under attack the model reaches {num(acc, 3)} test accuracy against {num(clean, 3)} without "
                 f"(drop {num(drop, 3)})")
        if ev.get("accuracy_fedavg_attacked") is not None:
            means += f"; plain FedAvg under the same attack reaches {num(ev.get('accuracy_fedavg_attacked'), 3)}"
        means += ". " + ("The requirement is met." if verdict == "PASS" and expect == "pass" else
                         "The requirement is NOT met." if verdict == "FAIL" and expect == "pass" else
                         "The plan expected a failure: " + ("it happened." if verdict == "PASS" else "it did NOT."))
        errors = ev.get("client_errors") or []
        if errors:
            means += f" {len(errors)} client error(s) were recorded."
        not_shown = ["the spread over seeds or partitions: one simulation per run",
                     "other attacks, more Byzantine clients or other data than this simulation's",
                     "privacy: accuracy under attack says nothing of what the updates reveal"
                     + ("" if ev.get("ldp") else " (no local DP was configured)")]
        steps = []
        if verdict != "PASS" and expect == "pass":
            steps.append("a rule with pre-aggregation (nnm+…) or fewer Byzantine clients; compare with the robustness "
                         "kind's ν̂ for the same rule")
        elif expect == "pass":
            steps.append("rerun with other seeds, a stronger attack (optimal-<name>) or more rounds")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The claim holds when the attacked accuracy A_att (``accuracy_attacked``) is at least
        ``min_accuracy``, the drop ``accuracy_clean`` − A_att is at most ``max_accuracy_drop`` (each
        when set, null when not), no client failed (``client_errors`` = 0; refused LDP reports are
        not failures) and, with a budget (``ldp.budget``), the most ε any client spent
        (``ldp.spent_max``, the ledger's basic composition) is within it; otherwise it is violated.
        The per-client spent ε lists are not read: a report trims them beyond 512 clients."""
        acc = number(evidence, "accuracy_attacked")
        least, most_drop = number(evidence, "min_accuracy", nullable=True), number(evidence, "max_accuracy_drop",
                                                                                   nullable=True)
        holds = ((least is None or acc >= least)
                 and (most_drop is None or number(evidence, "accuracy_clean") - acc <= most_drop)
                 and number(evidence, "client_errors") == 0)
        ldp = mapping(evidence, "ldp", nullable=True)
        budget = None if ldp is None else number(ldp, "budget", nullable=True)
        if budget is not None:
            holds = holds and number(ldp, "spent_max") <= budget
        return Decision(holds=bool(holds), violated=not holds)
