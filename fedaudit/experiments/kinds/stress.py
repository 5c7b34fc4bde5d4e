"""Claim kind ``stress``: a federated training grid under attack, every cell against a requirement.

Every cell (aggregator × attack × f × β) must reach ``min_accuracy`` and stay at or below
``max_loss``; a diverged cell meets neither.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from typing import Any, Mapping

from fedaudit.errors import FedAuditError
from fedaudit.experiments.components import (
    check_aggregator,
    check_attacks,
    dataset_names,
    normalise_spec,
    optimizer_names,
    params_per_spec,
)
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, mapping, number, rows
from fedaudit.experiments.keys import Key, key_error
from fedaudit.reports.explain import Explanation, Field, display_number

__all__ = ["Stress", "stress_config_keywords", "stress_plots"]


def stress_config_keywords(p: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The :class:`~fedaudit.audit.stress.StressConfig` keywords of a stress claim's parameters."""
    return dict(aggregators=tuple(p["aggregators"]), attacks=tuple(p["attacks"]), fs=tuple(p["fs"]),
                betas=tuple(p["betas"]), dataset=p["dataset"], data_path=p["data_path"], optimizer=p["optimizer"],
                rounds=p["rounds"], lr=p["lr"], n_honest=p["n_honest"], mu=p["mu"], seed=seed,
                optimal_attack=p["optimal_attack"], aggregator_params=p.get("aggregator_params"),
                declared_f=p.get("declared_f"))


def _cell_ok(rec: Mapping[str, Any], requirement: Mapping[str, Any]) -> tuple[bool, list[str]]:
    """Whether one cell meets the requirement, and why not: its final test accuracy reaches
    ``min_accuracy`` and its final honest loss is at most ``max_loss`` (each when set, null when
    not); a diverged cell (null accuracy or loss) meets neither. Reads a recorded row as well as
    the run's (:func:`~fedaudit.experiments.kind.number`)."""
    why = []
    least, most = number(requirement, "min_accuracy", nullable=True), number(requirement, "max_loss", nullable=True)
    if least is not None:
        acc = number(rec, "final_accuracy", nullable=True)
        if acc is None or acc < least:
            why.append("diverged" if acc is None else f"accuracy {acc:.3f} < {least:g}")
    if most is not None:
        loss = number(rec, "final_loss", nullable=True)
        if loss is None or loss > most:
            why.append("loss diverged" if loss is None else f"loss {loss:.4g} > {most:g}")
    return not why, why


def stress_plots(config: Any, res: Any, p: Mapping[str, Any]) -> list[dict]:
    """One heatmap per (f, β) and metric, all panels of a metric on one colour scale — accuracy
    on [0, 1], loss on [0, largest finite loss of the grid] — so equal colours mean equal values
    across panels (as ``fedaudit stress`` draws them); and the accuracy curves of small grids."""
    from fedaudit.audit.stress import Cell

    recs = res.records
    plots = []
    metrics = []
    if p["min_accuracy"] is not None or p["max_loss"] is None:
        metrics.append(("final_accuracy", "final test accuracy"))
    if p["max_loss"] is not None:
        metrics.append(("final_loss", "final honest loss"))
    pairs = [(f, b) for f in config.fs for b in config.betas][:6]
    losses = [v for rec in recs.values() if isinstance(v := rec.get("final_loss"), (int, float)) and math.isfinite(v)]
    scale = {"final_accuracy": (0.0, 1.0), "final_loss": (0.0, max(losses) if losses and max(losses) > 0 else 1.0)}
    for f, b in pairs:
        for field_, label in metrics:
            values = [[(recs.get(Cell(a, t, f, b).key) or {}).get(field_) for t in config.attacks]
                      for a in config.aggregators]
            vmin, vmax = scale[field_]
            plots.append({"type": "heatmap", "title": f"{label} at f={f}, β={b:g} (null = diverged)",
                          "x_label": "attack", "y_label": "aggregator", "x": list(config.attacks),
                          "y": list(config.aggregators), "values": values, "value_label": label,
                          "vmin": vmin, "vmax": vmax})
    if len(recs) <= 12:
        series = {}
        for key, rec in recs.items():
            tr = rec.get("trace") or {}
            if tr.get("round"):
                series[f"{rec['aggregator']} / {rec['attack']} f={rec['f']} β={rec['beta']:g}"] = {
                    "x": tr["round"], "y": tr.get("accuracy", [])}
        if series:
            hl = {"min_accuracy": p["min_accuracy"]} if p["min_accuracy"] is not None else {}
            plots.append({"type": "curves", "title": f"test accuracy during training ({config.optimizer})",
                          "x_label": "round", "y_label": "test accuracy", "log_y": False, "series": series,
                          "hlines": hl})
    return plots


class Stress(ClaimKind):
    """Train every cell of the grid and check the worst case over attacks in every cell.

    ``workdir`` holds the grid's ``cells.jsonl`` (a rerun into it skips finished cells; the caller
    removes it); by default a temporary directory removed when the claim ends."""

    name = "stress"
    evidence_fields = {
        "cells_meeting": Field("cells meeting the requirement"),
        "cells": Field("cells trained"),
        "failing": Field("failing cells"),
        "worst_accuracy": Field("worst final test accuracy"),
        "worst_loss": Field("worst final honest loss"),
        "requirement": Field("requirement every cell must meet"),
        "per_cell": Field("every cell"),
        "worst_case": Field("worst case per aggregator (over attacks)"),
        "cells_in_grid": Field("cells in the grid", "", "configuration"),
        "config": Field("training configuration", "", "configuration"),
        "breakdown_rule": Field("when a cell counts as diverged", "", "configuration"),
        "seed_rule": Field("seed rule", "", "diagnostics"),
        "runtime_s": Field("run time", "s", "diagnostics"),
    }
    guarantee = "robustness"
    unit = "cells"
    figures = ("heatmap", "curves")

    def keys(self) -> dict[str, Key]:
        from fedaudit.engine import MAX_WORKERS

        return {
            "aggregators": Key("list[str]", ["cwtm", "nnm+cwtm", "krum", "gm"],
                               help="registry specs (`fedaudit list aggregators`; a stage may be 'package.module:attr')"),
            "aggregator_params": Key("params", None,
                                     help="make_aggregator keywords for every aggregator, or per aggregator spec",
                                     examples=({"s": 2}, {"bucketing+cwtm": {"s": 2}})),
            "attacks": Key("list[str]", ["alie", "ipm", "signflip", "minmax"], help="attack names (or labelflip)"),
            "fs": Key("list[int]", [1], low=0, help="Byzantine counts, each < n_honest"),
            "declared_f": Key("int", None, low=0,
                              help="the f every rule is configured for (default: each cell's f); below f the rule "
                                   "may break down"),
            "betas": Key("list[float]", [1.0], low=0, open_low=True, help="Dirichlet concentrations of the partition"),
            "dataset": Key("str", "digits", choices=dataset_names()),
            "data_path": Key("str", None, help="MNIST files (IDX directory or .npz; dataset 'mnist')"),
            "optimizer": Key("str", "dgd", choices=optimizer_names()),
            "rounds": Key("int", 100, low=1, help="training rounds per cell"),
            "lr": Key("float", 0.1, low=0, open_low=True,
                      help="step size of dgd and dnag (robust-accelerated and pigs set their own)"),
            "n_honest": Key("int", 20, low=2, help="honest clients"),
            "mu": Key("float", 1e-2, low=0, help="ℓ2 regularisation"),
            "optimal_attack": Key("bool", True, help="scale each attack by a line search against the aggregator "
                                                     "(off: the attacks' default scale)"),
            "workers": Key("int", None, low=1, high=MAX_WORKERS,
                           help="worker processes of backend 'process' (at most the machine's cores unless the run "
                                "allows large claims)"),
            "backend": Key("str", None, choices=("process", "serial", "ray"),
                           help="where cells run (default: the plan's [engine] backend, else process)"),
            "min_accuracy": Key("float", None, low=0, high=1,
                                help="every cell's final test accuracy must reach it"),
            "max_loss": Key("float", None, low=0, open_low=True,
                            help="every cell's final honest loss must stay below it"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        from fedaudit.audit.stress import StressConfig

        p["aggregators"] = [normalise_spec(a) for a in p["aggregators"]]
        p["attacks"] = [a.lower() for a in p["attacks"]]
        check_attacks(where, "attacks", p["attacks"], allow_all=False, allow_labelflip=True)
        big = [f for f in p["fs"] if f >= p["n_honest"]]
        if big:
            raise key_error(where, "fs", f"must list integers in [0, n_honest - 1 = {p['n_honest'] - 1}], got {big[0]}")
        p["aggregator_params"] = params_per_spec(where, p["aggregators"], p["aggregator_params"])
        for spec in p["aggregators"]:
            for f in p["fs"]:
                check_aggregator(where, "aggregators", spec, f, p["n_honest"] + f, "n_honest",
                                 (p["aggregator_params"] or {}).get(spec))
        if p["min_accuracy"] is None and p["max_loss"] is None:
            raise FedAuditError(f"{where}: set 'min_accuracy' or 'max_loss' (the requirement every cell must meet)")
        if p["dataset"] == "mnist" and p["data_path"] is None:
            raise key_error(where, "data_path", "is required for dataset 'mnist' (local IDX directory or .npz)")
        try:
            StressConfig(**stress_config_keywords(p, seed=0))
        except FedAuditError as exc:
            raise FedAuditError(f"{where}: {exc}") from None

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        req = []
        if p["min_accuracy"] is not None:
            req.append(f"accuracy ≥ {p['min_accuracy']:g}")
        if p["max_loss"] is not None:
            req.append(f"loss ≤ {p['max_loss']:g}")
        verb = "keeps" if len(p["aggregators"]) == 1 else "keep"
        return (f"{', '.join(a.upper() for a in p['aggregators'])} {verb} {' and '.join(req)} "
                f"under {', '.join(p['attacks'])} on {p['dataset']}")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return len(p["aggregators"]) * len(p["attacks"]) * len(p["fs"]) * len(p["betas"])

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every cell (:meth:`work_units`) trains ``rounds`` rounds of n_honest + f clients at
        :data:`~fedaudit.experiments.kind.CLIENT_ROUND_SECONDS` each (measured on the digits
        dataset); cells are independent and hold one federation at a time."""
        from fedaudit.experiments.kind import BASE_MEMORY, CLIENT_ROUND_SECONDS, Cost

        cells, clients = self.work_units(p), p["n_honest"] + max(p["fs"])
        steps = cells * p["rounds"] * clients
        return Cost(memory=BASE_MEMORY, seconds=steps * CLIENT_ROUND_SECONDS,
                    basis=f"{cells} cells (aggregators × attacks × fs × betas) × rounds × (n_honest + f) = "
                          f"{steps:.3g} client rounds")

    def run(self, spec, rng, progress: Progress, *, workdir: str | None = None) -> Evidence:
        from fedaudit.audit.stress import StressConfig, run_stress

        p = spec.params
        config = StressConfig(**stress_config_keywords(p, seed=spec.seed))
        with contextlib.nullcontext(workdir) if workdir is not None else \
                tempfile.TemporaryDirectory(prefix="fedaudit-stress-") as tmp:
            res = run_stress(config, tmp, workers=p["workers"], backend=p["backend"], progress=progress)
        s = res.summary
        requirement = {"min_accuracy": p["min_accuracy"], "max_loss": p["max_loss"]}
        cells, failing = [], []
        for row in s["cells"]:
            ok, why = _cell_ok(row, requirement)
            cells.append({**row, "meets": ok, "why": why})
            if not ok:
                failing.append({"key": row["key"], "why": why})
        accs = [c["final_accuracy"] for c in cells]
        losses = [c["final_loss"] for c in cells]
        worst_acc = None if any(a is None for a in accs) else min(accs, default=None)
        worst_loss = None if any(v is None for v in losses) else max(losses, default=None)
        req = []
        if p["min_accuracy"] is not None:
            req.append(f"accuracy ≥ {p['min_accuracy']:g}")
        if p["max_loss"] is not None:
            req.append(f"loss ≤ {p['max_loss']:g}")
        summary = (f"{len(cells) - len(failing)}/{len(cells)} cells meet {' and '.join(req)}; worst accuracy "
                   f"{'diverged' if worst_acc is None else f'{worst_acc:.3f}'}, worst loss "
                   f"{'diverged' if worst_loss is None else f'{worst_loss:.4g}'}"
                   + (f"; failing: {', '.join(f['key'] for f in failing[:3])}" + (" …" if len(failing) > 3 else "")
                      if failing else ""))
        evidence = {
            "requirement": requirement,
            "cells_meeting": len(cells) - len(failing), "cells": len(cells), "cells_in_grid": s["n_cells"],
            "worst_accuracy": worst_acc, "worst_loss": worst_loss,
            "failing": failing,
            "per_cell": [{k: c[k] for k in ("key", "final_accuracy", "final_loss", "breakdown", "breakdown_reasons",
                                            "meets", "why", "seed", "runtime_s") if k in c} for c in cells],
            "breakdown_rule": s["breakdown_rule"], "seed_rule": s["seed_rule"],
            "worst_case": s["aggregators"],
            "config": s["config"], "runtime_s": res.runtime_s,
        }
        decision = self.decide(evidence, spec.expect)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary=summary,
                        plots=tuple(stress_plots(config, res, p)))

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The grid claim in words: every cell (aggregator × attack × f × β) must keep the
        requirement; one seeded training run per cell; how many cells met it, the worst ones, and
        what one run per cell cannot show (the spread over seeds, other attacks)."""
        num = display_number
        cfg = {**dict(ev.get("config") or {}), **dict(ev.get("parameters") or {})}
        req = ev.get("requirement") or {}
        want = ([f"final test accuracy ≥ {num(req['min_accuracy'])}"] if req.get("min_accuracy") is not None else []) \
            + ([f"final honest loss ≤ {num(req['max_loss'])}"] if req.get("max_loss") is not None else [])
        aggs, attacks = ", ".join(map(str, cfg.get("aggregators", []))), ", ".join(map(str, cfg.get("attacks", [])))
        claimed = (f"Federated training on {cfg.get('dataset', '?')} with each of the rules {aggs} keeps "
                   f"{' and '.join(want)} under each of the attacks {attacks}, for f in {cfg.get('fs')} Byzantine "
                   f"clients among {cfg.get('n_honest')} honest ones and Dirichlet β in {cfg.get('betas')}."
                   + (" The plan expects some cell to fail." if expect == "violation" else ""))
        cells, meeting = int(number(ev, "cells")), int(number(ev, "cells_meeting"))
        tested = (f"{num(cells)} training runs, one per cell (rule × attack × f × β), {cfg.get('rounds')} rounds of "
                  f"{cfg.get('optimizer', 'dgd')} each; omniscient attackers"
                  + (" whose attack is scaled by a line search against the rule" if cfg.get("optimal_attack", True)
                     else "") + ". A cell that diverges meets no requirement. One seeded run per cell, no repeats.")
        worst_acc, worst_loss = ev.get("worst_accuracy"), ev.get("worst_loss")
        means = (f"{meeting} of {cells} cells meet the requirement; the worst final accuracy is "
                 + ("a diverged run" if worst_acc is None else num(worst_acc, 3))
                 + ", the worst final loss " + ("a diverged run" if worst_loss is None else num(worst_loss, 3)) + ".")
        failing = [r for r in ev.get("failing") or [] if isinstance(r, Mapping)]
        if failing:
            means += " Failing: " + "; ".join(f"{r.get('key')} ({r.get('why')})" for r in failing[:4]) \
                + (f" and {len(failing) - 4} more" if len(failing) > 4 else "") + "."
        not_shown = ["the spread over seeds: each cell is one seeded run, with no confidence interval",
                     "other attacks, Byzantine counts, data partitions or longer training than the grid's",
                     "privacy: the grid measures accuracy and loss only"]
        steps = []
        if failing and expect == "pass":
            steps.append("for the failing cells, a rule with pre-aggregation (nnm+…, bucketing+…), fewer Byzantine "
                         "clients or more honest ones; then rerun the grid")
        elif not failing and expect == "pass":
            lacking = [a for a in ("minmax", "signflip", "labelflip") if a not in cfg.get("attacks", [])]
            steps.append("rerun with another plan seed to see the spread"
                         + (f", and add attacks the grid lacks ({', '.join(lacking)})" if lacking else ""))
        elif failing:
            steps.append("nothing to fix: keep the claim as a regression case")
        return Explanation(claimed=claimed, tested=tested, means=means, does_not_show=tuple(not_shown),
                           next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """Re-derived from the recorded ``per_cell`` rows: a violation is a cell that misses the
        ``requirement`` (final accuracy below ``min_accuracy`` or final loss above ``max_loss``; a
        diverged cell misses both, :func:`_cell_ok`); the claim holds when no cell misses it and
        the grid is complete, one row for each of the ``cells_in_grid`` cells (an incomplete grid
        with no failing cell is neither: FAIL under either ``expect``). The stored ``meets``,
        ``failing`` and ``cells_meeting`` are not read."""
        requirement, cells = mapping(evidence, "requirement"), rows(evidence, "per_cell")
        violated = not all([_cell_ok(row, requirement)[0] for row in cells])
        complete = len(cells) == number(evidence, "cells_in_grid")
        return Decision(holds=complete and not violated, violated=violated)
