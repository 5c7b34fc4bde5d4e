"""Claim kind ``convergence``: optimizers compared on one federation by rounds to a target loss.

Rounds to a target loss L* (stated with its basis), speedups over the baseline (ratios of those
rounds), whether each run reached a plateau (:func:`~fedaudit.audit.convergence.plateau_status`),
final loss and accuracy against the optional thresholds; a diverged run meets none.

The optimizers' training runs are independent (the same federation and oracle streams, each
its own run) and run as engine chunks, one per optimizer (:func:`fedaudit.engine.run_chunks`,
plan keys ``backend`` and ``workers``); a run itself is sequential (round k needs round k − 1)
and stays one chunk. Each chunk uses one BLAS thread, as every engine worker does, so the
traces are bit-identical on every backend.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping

import numpy as np

from fedaudit.reports.explain import Explanation, Field, display_number

from fedaudit.experiments.components import (
    check_aggregator,
    check_attacks,
    dataset_names,
    flat_params,
    normalise_spec,
    optimizer_names,
)
from fedaudit.experiments.kind import ClaimKind, Decision, Evidence, Progress, fmt_number, mapping, number
from fedaudit.experiments.keys import Key, engine_keys, key_error, require_bound
from fedaudit.json import finite_or_none

__all__ = ["Convergence"]


def _train_chunk(task: tuple) -> dict[str, Any]:
    """One optimizer's run on the federation (an engine chunk): its recorded rounds, losses and
    test accuracies, whether it diverged, its optimizer time and info."""
    from fedaudit.fl.registry import make_optimizer
    from fedaudit.fl.training import run

    fed, name, settings, rounds, seed = task
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        t = run(make_optimizer(name, settings=settings), fed, None, rounds, rng=seed)
    return {"rounds": [int(r) for r in t.rounds], "loss": list(t.loss), "test_acc": list(t.test_acc),
            "diverged": bool(t.diverged), "runtime_s": float(t.wall_time[-1]) if t.wall_time else None,
            "info": t.info}


#: a convergence claim's thresholds: (plan key, the per-optimizer field it bounds); a ``max_`` key
#: bounds the field from above, a ``min_`` key from below; a table names optimizers, a number bounds every one
THRESHOLDS = (("max_rounds", "rounds_to_target"), ("min_speedup", "speedup"), ("max_final_loss", "final_loss"),
              ("min_final_accuracy", "final_accuracy"))


def _bounds(thresholds: Mapping[str, Any], optimizers: list[str]) -> Iterator[tuple[str, str, str, Mapping, str]]:
    """The checks of ``thresholds`` (every key of :data:`THRESHOLDS`, null when unset), in order:
    ``(key, field, optimizer, table, name)`` with the bound at ``table[name]`` (the optimizer's
    entry of a per-optimizer table, or the key itself of a bound on every optimizer)."""
    for key, field in THRESHOLDS:
        table = thresholds[key]
        if table is None:
            continue
        if isinstance(table, Mapping):
            for optimizer in table:
                yield key, field, optimizer, table, optimizer
        else:
            for optimizer in optimizers:
                yield key, field, optimizer, thresholds, key


def _meets(key: str, value: float | None, bound: float) -> bool:
    """A check of :data:`THRESHOLDS`: a value (None: not reached, or diverged) meets ``max_…`` when
    it is at most the bound, ``min_…`` when it is at least the bound; None meets neither."""
    return value is not None and (value <= bound if key.startswith("max_") else value >= bound)


def _sentence(per: dict[str, dict[str, Any]], base: str, target: float | None, basis: str,
              p: Mapping[str, Any]) -> str:
    """"target loss L* = … (basis); rounds to L*: …; speedups with their basis; plateau per optimizer"."""
    if target is None:
        head = f"no target loss ({basis})"
    else:
        rb = per[base]["rounds_to_target"]
        reached = (f"reached in {rb} rounds" if rb is not None
                   else ("diverged" if per[base]["diverged"] else f"not reached in {p['rounds']} rounds"))
        head = f"target loss L* = {target:.4g} ({basis}); baseline {base} {reached}"
    bits = [head]
    for n, r in per.items():
        if n == base:
            continue
        ro = r["rounds_to_target"]
        if r["diverged"]:
            bits.append(f"{n} diverged")
        elif ro is None:
            bits.append(f"{n} never reached L* → speedup 0")
        elif r["speedup_is_lower_bound"]:
            bits.append(f"{n} reached L* in {ro} rounds, {base} not in {p['rounds']} → speedup > "
                        f"{fmt_number(r['speedup'], '.3g')}×")
        else:
            bits.append(f"{n} reached L* in {ro} rounds vs {base} {rb} → speedup {fmt_number(r['speedup'], '.3g')}×")
    w, tol = p["plateau_window"], p["plateau_tol"]
    states = []
    for n, r in per.items():
        st = r["plateau"]
        if r["diverged"]:
            states.append(f"{n} diverged")
        elif st["reached"]:
            states.append(f"{n} from round {st['round']}")
        elif st["final_change"] is None:
            states.append(f"{n} undetermined (fewer than {w} rounds)")
        else:
            states.append(f"{n} not reached ({st['final_change']:+.1%} over its last {w} rounds)")
    bits.append(f"plateau (|ΔL|/L ≤ {tol:g} over {w} rounds): " + ", ".join(states))
    bits.append("final loss " + ", ".join(f"{n} {fmt_number(r['final_loss'])}" for n, r in per.items()))
    return "; ".join(bits)


class Convergence(ClaimKind):
    """Run each optimizer on the same federation and oracle randomness; compare rounds to a target loss.

    ℓ_best is the lowest honest loss any run reached. The target loss L* is ``target_loss`` if
    the plan gives one, else the baseline's final level ℓ_B (:func:`~fedaudit.audit.convergence.plateau_level`:
    the median of its last 20% of rounds) plus ``target_eps`` of its gap to the best loss,
    L* = ℓ_B + target_eps·|ℓ_B − ℓ_best| — the loss the baseline itself reaches by the end of
    the run. Each optimizer's rounds to target R_o is the first round with L ≤ L* (None when
    it never gets there or diverged); its speedup over the baseline is R_base / R_o (∞ when it
    starts at or below L* and the baseline does not, 0 when it never gets there; when the
    baseline never reaches an explicit target, rounds / R_o is reported as a lower bound).
    Whether each reached a plateau is :func:`~fedaudit.audit.convergence.plateau_status` (window
    ``plateau_window``, tolerance ``plateau_tol``) — reported next to, never mixed into, the
    rounds to target.
    """

    name = "convergence"
    evidence_fields = {
        "checks": Field("thresholds checked"),
        "per_optimizer": Field("each optimizer's run"),
        "target_loss": Field("target loss L*"),
        "target_basis": Field("how L* was set"),
        "best_loss": Field("best loss any optimizer reached"),
        "baseline": Field("baseline optimizer", "", "configuration"),
        "thresholds": Field("thresholds declared by the plan", "", "configuration"),
        "federation": Field("federation", "", "configuration"),
        "plateau_rule": Field("plateau rule", "", "configuration"),
        "seeds": Field("seeds", "", "diagnostics"),
    }
    guarantee = "utility"
    unit = "rounds"
    figures = ("curves",)

    def keys(self) -> dict[str, Key]:
        optimizers, datasets = optimizer_names(), dataset_names()
        return {
            "optimizers": Key("list[str]", choices=optimizers, help="optimizers to compare"),
            "baseline": Key("str", None, choices=optimizers, help="reference for speedups (default: the first)"),
            "dataset": Key("str", "digits", choices=datasets),
            "data_path": Key("str", None),
            "n_honest": Key("int", 20, low=2),
            "f": Key("int", 1, low=0),
            "beta": Key("float", 5.0, low=0, open_low=True),
            "aggregator": Key("str", "nnm+cwtm", help="registry spec; a stage may be 'package.module:attr'"),
            "aggregator_params": Key("params", None, help="keywords of make_aggregator(aggregator, f, **params) "
                                                          "(bucketing's s, say)", examples=({"s": 2},)),
            "attack": Key("str", "alie"),
            "optimal_attack": Key("bool", True),
            "mu": Key("float", 1e-2, low=0),
            "rounds": Key("int", 100, low=2),
            "lr": Key("float", 0.1, low=0, open_low=True, help="step size of dgd and dnag"),
            "momentum": Key("float", 0.9, low=0, high=1, open_high=True, help="dnag momentum"),
            "eta": Key("float", None, low=0, open_low=True, help="PIGS step (default 1/(2Δ̂))"),
            "target_loss": Key("float", None, low=0, open_low=True,
                               help="the target honest loss L* (default: the baseline's final level plus "
                                    "target_eps of its gap to the best loss reached)"),
            "target_eps": Key("float", 0.05, low=0, help="relative tolerance of the default target loss"),
            "plateau_window": Key("int", None, low=1, help="w: rounds over which a plateau's relative change is "
                                                        "taken (default min(10, rounds - 1))"),
            "plateau_tol": Key("float", 0.01, low=0, high=1, open_low=True,
                               help="τ: a plateau changes the loss by at most τ (relative) over w rounds"),
            "max_rounds": Key("table[int]", None, low=0, help="per optimizer, the most rounds to reach the target loss",
                              examples=({"dnag": 40},)),
            "min_speedup": Key("table[float]", None, low=0, open_low=True,
                               help="per optimizer, the least speedup over the baseline (ratio of rounds to the target "
                                    "loss)", examples=({"dnag": 1.5},)),
            "max_final_loss": Key("float", None, low=0, open_low=True, help="every optimizer's final honest loss"),
            "min_final_accuracy": Key("float", None, low=0, high=1, help="every optimizer's final test accuracy"),
            **engine_keys("the optimizers' training runs (one chunk each)"),
        }

    def cross_check(self, where: str, p: dict[str, Any], expect: str) -> None:
        opts = p["optimizers"]
        if p["baseline"] is None:
            p["baseline"] = opts[0]
        elif p["baseline"] not in opts:
            raise key_error(where, "baseline", f"must be one of the compared optimizers ({', '.join(opts)}), "
                                               f"got {p['baseline']!r}")
        for key in ("max_rounds", "min_speedup"):
            table = p[key]
            if table is None:
                continue
            bad = [name for name in table if name not in opts]
            if bad:
                raise key_error(where, key, f"names optimizer {bad[0]!r}, which is not compared; use one of "
                                            f"{', '.join(opts)}")
            if key == "max_rounds":
                over = [name for name, v in table.items() if v > p["rounds"]]
                if over:
                    raise key_error(where, key, f"gives {over[0]} = {table[over[0]]}, more than rounds = {p['rounds']}")
        if p["min_speedup"] is not None and p["baseline"] in p["min_speedup"]:
            raise key_error(where, "min_speedup", f"cannot constrain the baseline {p['baseline']!r} against itself")
        if p["f"] >= p["n_honest"]:
            raise key_error(where, "f", f"must be an integer in [0, n_honest - 1 = {p['n_honest'] - 1}], got {p['f']}")
        p["attack"] = p["attack"].lower()
        p["aggregator"] = normalise_spec(p["aggregator"])
        check_attacks(where, "attack", [p["attack"]], allow_all=False, allow_labelflip=True)
        flat_params(where, p)
        check_aggregator(where, "aggregator", p["aggregator"], p["f"], p["n_honest"] + p["f"], "n_honest",
                         p["aggregator_params"])
        if p["plateau_window"] is None:
            p["plateau_window"] = min(10, p["rounds"] - 1)
        if p["plateau_window"] >= p["rounds"]:
            raise key_error(where, "plateau_window", f"must be an integer in [1, rounds - 1 = {p['rounds'] - 1}], "
                                                     f"got {p['plateau_window']}")
        if p["dataset"] == "mnist" and p["data_path"] is None:
            raise key_error(where, "data_path", "is required for dataset 'mnist' (local IDX directory or .npz)")
        require_bound(where, p, expect, ("max_rounds", "min_speedup", "max_final_loss", "min_final_accuracy"))

    def default_title(self, p: Mapping[str, Any], expect: str) -> str:
        return (f"{' vs '.join(o.upper() for o in p['optimizers'])} on {p['dataset']} "
                f"({p['aggregator']}, {p['attack']}, f={p['f']})")

    def work_units(self, p: Mapping[str, Any]) -> int:
        return p["rounds"] * len(p["optimizers"])

    def estimate(self, p: Mapping[str, Any]) -> "Cost":
        """Every optimizer trains ``rounds`` rounds of n_honest + f clients, each client round at
        :data:`~fedaudit.experiments.kind.CLIENT_ROUND_SECONDS`."""
        from fedaudit.experiments.kind import BASE_MEMORY, CLIENT_ROUND_SECONDS, Cost

        steps = self.work_units(p) * (p["n_honest"] + p["f"])
        return Cost(memory=BASE_MEMORY, seconds=steps * CLIENT_ROUND_SECONDS,
                    basis=f"rounds × len(optimizers) × (n_honest + f) = {steps:.3g} client rounds")

    def run(self, spec, rng, progress: Progress, *, workdir=None) -> Evidence:
        from fedaudit.audit.convergence import first_at_or_below, plateau_level, plateau_status
        from fedaudit.engine import run_chunks
        from fedaudit.fl.data import load_dataset
        from fedaudit.fl.federation import Federation
        from fedaudit.rng import derive_seed

        p = spec.params
        agg_kw = dict(p["aggregator_params"] or {})
        data = load_dataset(p["dataset"], path=p["data_path"], rng=derive_seed(spec.seed, "data"))
        fed = Federation.build(data, n_honest=p["n_honest"], f=p["f"], scheme="dirichlet", beta=p["beta"],
                               mu=p["mu"], aggregator=p["aggregator"], attack=p["attack"] if p["f"] > 0 else None,
                               optimal_attack=p["optimal_attack"], rng=derive_seed(spec.seed, "federation"),
                               aggregator_kw=agg_kw or None)
        run_seed = derive_seed(spec.seed, "optimizer")  # the same oracle streams for every optimizer
        settings = {"lr": p["lr"], "momentum": p["momentum"], "eta": p["eta"]}
        names = p["optimizers"]
        runs = run_chunks(_train_chunk, [(fed, name, settings, p["rounds"], run_seed) for name in names],
                          backend=p["backend"], workers=p["workers"], progress=progress,
                          units=[p["rounds"]] * len(names))
        traces = dict(zip(names, runs))
        finite = [v for t in traces.values() if not t["diverged"] for v in t["loss"] if math.isfinite(v)]
        best = min(finite) if finite else math.nan
        base = p["baseline"]
        per: dict[str, dict[str, Any]] = {}
        for name, t in traces.items():
            ok = not t["diverged"] and all(math.isfinite(v) for v in t["loss"])
            per[name] = {
                "diverged": not ok,
                "final_loss": finite_or_none(t["loss"][-1]) if ok else None,
                "final_accuracy": finite_or_none(t["test_acc"][-1]) if ok and t["test_acc"][-1] is not None else None,
                "final_level": plateau_level(t["loss"]) if ok else None,
                "plateau": plateau_status(list(t["rounds"]), list(t["loss"]), p["plateau_window"], p["plateau_tol"]),
                "runtime_s": t["runtime_s"],
                "info": t["info"],
            }
        level_b = per[base]["final_level"]
        if p["target_loss"] is not None:
            target, basis = p["target_loss"], "target_loss set in the plan"
        elif level_b is not None:
            target = level_b + p["target_eps"] * abs(level_b - best)
            basis = (f"{base}'s final level {level_b:.4g} + {p['target_eps']:g} × its gap to the best loss "
                     f"reached {best:.4g}")
        else:
            target, basis = None, f"undefined: the baseline {base} diverged"
        for name, t in traces.items():
            per[name]["rounds_to_target"] = (None if target is None or per[name]["diverged"]
                                             else first_at_or_below(list(t["rounds"]), list(t["loss"]), target))
        r_base = per[base]["rounds_to_target"]
        for name in traces:
            r = per[name]["rounds_to_target"]
            lower_bound = False
            if name == base:
                speed = 1.0 if r is not None else None
            elif r is None:
                speed = 0.0 if target is not None else None
            elif r_base is None:  # an explicit target the baseline never reached: R_base > rounds
                speed, lower_bound = (math.inf if r == 0 else p["rounds"] / r), True
            elif r == 0:
                speed = 1.0 if r_base == 0 else math.inf
            else:
                speed = r_base / r
            per[name]["speedup"] = speed
            per[name]["speedup_is_lower_bound"] = lower_bound
        thresholds = {key: p[key] for key, _ in THRESHOLDS}
        checks = [{"check": f"{key}[{name}]", "bound": table[bound], "value": per[name][field],
                   "holds": _meets(key, per[name][field], table[bound])}
                  for key, field, name, table, bound in _bounds(thresholds, names)]
        decision = self.decide({"per_optimizer": per, "thresholds": thresholds}, spec.expect)
        parts = [_sentence(per, base, target, basis, p)]
        failed = [c["check"] for c in checks if not c["holds"]]
        if checks:
            parts.append("all thresholds met" if not failed else "NOT met: " + ", ".join(failed))
        else:
            parts.append("no threshold declared (measurement only)")
        evidence = {
            "checks": checks, "thresholds": thresholds, "baseline": base, "target_loss": target, "target_basis": basis,
            "best_loss": best,
            "plateau_rule": {"window": p["plateau_window"], "tol": p["plateau_tol"],
                             "definition": "on a plateau at round k when |L(k) − L(k−w)| / |L(k−w)| ≤ τ; reached "
                                           "when on one at the last round, from the first round it stays on one"},
            "per_optimizer": per,
            "federation": {"dataset": p["dataset"], "n_honest": p["n_honest"], "f": p["f"], "beta": p["beta"],
                           "aggregator": p["aggregator"], "aggregator_params": agg_kw or None,
                           "attack": p["attack"], "dim": fed.dim},
            "seeds": {"data": derive_seed(spec.seed, "data"), "federation": derive_seed(spec.seed, "federation"),
                      "optimizer": run_seed},
        }
        series = {n: {"x": [int(r) for r in t["rounds"]], "y": [finite_or_none(v) for v in t["loss"]]}
                  for n, t in traces.items()}
        markers = {n: {"x": r["rounds_to_target"], "y": target} for n, r in per.items()
                   if r["rounds_to_target"] is not None and target is not None}
        hlines = {"target loss L*": target, "best loss reached": best if math.isfinite(best) else None}
        plots = ({"type": "curves",
                  "title": f"honest loss L_H(x_k) — {p['aggregator']} under {p['attack']}, f={p['f']}",
                  "x_label": "round", "y_label": "honest loss", "log_y": True, "series": series,
                  "hlines": hlines, "markers": markers, "markers_label": "first round at or below L*"},)
        return Evidence(holds=decision.holds, violated=decision.violated, evidence=evidence, summary="; ".join(parts),
                        plots=plots)

    def explain(self, params: Mapping[str, Any], ev: Mapping[str, Any], verdict: str,
                expect: str = "pass") -> Explanation:
        """The comparison in words: the thresholds (rounds to L*, speedups over the baseline, final
        loss or accuracy), one seeded run per optimizer on the same attacked federation, the
        checks met or missed, and what one run cannot show."""
        num = display_number
        fed = ev.get("federation") or {}
        per = ev.get("per_optimizer") or {}
        base = ev.get("baseline")
        checks = [c for c in ev.get("checks") or [] if isinstance(c, Mapping)]
        said = "; ".join(f"{c.get('check')} {'≤' if str(c.get('check')).startswith('max_') else '≥'} "
                         f"{num(c.get('bound'))}" for c in checks) or "no threshold (measurement only)"
        claimed = (f"On {fed.get('dataset')} with {fed.get('f')} Byzantine client(s) running {fed.get('attack')} "
                   f"against {fed.get('aggregator')}, the optimizers {', '.join(per)} meet: {said}."
                   + (" The plan expects a threshold to be missed." if expect == "violation" else ""))
        target = ev.get("target_loss")
        tested = (f"One seeded training run per optimizer on the same federation ({fed.get('n_honest')} honest clients, "
                  f"Dirichlet β = {num(fed.get('beta'))}, model dimension {num(fed.get('dim'))}); rounds to the "
                  f"target loss L* = {num(target)} ({ev.get('target_basis')}), speedups as ratios of those rounds "
                  f"against {base}. A diverged run meets no threshold.")
        parts = []
        for c in checks:
            parts.append(f"{c.get('check')}: {num(c.get('value'), 3)} against {num(c.get('bound'))}, "
                         + ("met" if c.get("holds") else "NOT met"))
        runs = []
        for name, r in per.items():
            if not isinstance(r, Mapping):
                continue
            if r.get("diverged"):
                runs.append(f"{name} diverged")
            else:
                runs.append(f"{name} reached L* in {num(r.get('rounds_to_target'))} round(s), final loss "
                            f"{num(r.get('final_loss'), 3)}")
        means = ("; ".join(parts) + ". " if parts else "") + ("; ".join(runs) + "." if runs else "")
        lower = [n for n, r in per.items() if isinstance(r, Mapping) and r.get("speedup_is_lower_bound")]
        if lower:
            means += f" The speedup of {', '.join(lower)} is a lower bound: {base} never reached L*."
        not_shown = ["the spread over seeds: each optimizer ran once, so a speedup has no confidence interval",
                     "other attacks, aggregators, step sizes or data than this federation's",
                     "privacy or robustness guarantees: this compares training speed under one attack"]
        steps = []
        if verdict != "PASS" and expect == "pass":
            steps.append("tune the missing optimizer's step size or momentum, or run more rounds; check that "
                         "the target L* is reachable by the baseline")
        elif expect == "pass":
            steps.append("repeat with other plan seeds to see whether the speedup is stable")
        return Explanation(claimed=claimed, tested=tested, means=means.strip() or "No run produced a result.",
                           does_not_show=tuple(not_shown), next_steps=tuple(steps))

    def decide(self, evidence: Mapping[str, Any], expect: str) -> Decision:
        """The claim holds when every threshold of ``thresholds`` is met by ``per_optimizer``: the
        rounds to the target loss R_o ≤ ``max_rounds[o]``, the speedup over the baseline ≥
        ``min_speedup[o]``, every final loss ≤ ``max_final_loss`` and every final accuracy ≥
        ``min_final_accuracy`` — a run that never reached the target or diverged (null) meets none.
        Otherwise it is violated (no thresholds: a measurement, which holds). The stored ``checks``
        rows are not read: they are recomputed from the per-optimizer numbers."""
        per, thresholds = mapping(evidence, "per_optimizer"), mapping(evidence, "thresholds")
        holds = True
        for key, field, name, table, bound in _bounds(thresholds, list(per)):
            value = number(mapping(per, name), field, nullable=True)
            holds = _meets(key, value, number(table, bound)) and holds
        return Decision(holds=holds, violated=not holds)
