"""Robust rules under Byzantine attacks in real Flower simulations (``flwr.simulation.run_simulation``, Ray).

One ``run_flower`` simulation per seed: 10 digits clients, 5 rounds of 20 local gradient steps of
logistic regression, f = 2, and on the same grid one after another:

* FedAvg (the unweighted mean) without attack — the reference;
* every rule of ``--rules`` under every attack of the grid:
  * ALIE (z = 30), IPM (τ = 10), MinMax and Optimal(ALIE) (ALIE's z line-searched against the rule being
    attacked), omniscient, at the server (attack-in-the-loop, 2 clients drawn per round);
  * sign flip (scale 4) and label flip, run by 2 fixed clients as client mods.

Prints the final test accuracy per configuration as mean ± standard deviation over the seeds, with the
wall time of each simulation. Usage:
``python benchmarks/flower_robust.py [--seeds 0 1 2] [--rules mean cwtm nnm+cwtm krum] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

os.environ.setdefault("FLWR_LOG_LEVEL", "ERROR")
os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")

from fedaudit.integrations.flower import StrategySpec, run_flower  # noqa: E402
from fedaudit.json import jsonable  # noqa: E402

ATTACKS = {
    "alie(z=30)": {"attack": "alie", "attack_params": {"z": 30}},
    "ipm(tau=10)": {"attack": "ipm", "attack_params": {"tau": 10.0}},
    "minmax": {"attack": "minmax"},
    "optimal-alie": {"attack": "optimal-alie"},
    "signflip(4) at clients": {"client_attack": "signflip", "client_attack_params": {"scale": 4.0}},
    "labelflip at clients": {"client_attack": "labelflip"},
}


def specs(rules: list[str], f: int) -> list[StrategySpec]:
    out = [StrategySpec("mean", label="mean / none")]
    for rule in rules:
        for name, attack in ATTACKS.items():
            out.append(StrategySpec(rule, f=f, label=f"{rule} / {name}", **attack))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--rules", nargs="+", default=["mean", "cwtm", "nnm+cwtm", "krum"])
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--f", type=int, default=2)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    grid = specs(args.rules, args.f)
    acc: dict[str, list[float]] = {s.name: [] for s in grid}
    walls = []
    for seed in args.seeds:
        t0 = time.perf_counter()
        run = run_flower(clients=args.clients, rounds=args.rounds, strategies=grid, seed=seed)
        walls.append(time.perf_counter() - t0)
        for o in run.outcomes:
            if o.errors:
                raise SystemExit(f"seed {seed}, {o.name}: {o.errors} client errors")
            acc[o.name].append(o.final_accuracy)
        print(f"seed {seed}: {len(grid)} strategies in one simulation, {walls[-1]:.1f} s", flush=True)
    width = max(len(n) for n in acc)
    print(f"\n{'configuration':<{width}}  accuracy (mean ± sd over {len(args.seeds)} seeds)")
    for name, values in acc.items():
        print(f"{name:<{width}}  {np.mean(values):.3f} ± {np.std(values, ddof=1) if len(values) > 1 else 0:.3f}")
    print(f"\nwall time per simulation: {np.mean(walls):.1f} s (mean of {len(walls)})")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(jsonable({"accuracy": acc, "wall_time_s": walls, "seeds": args.seeds, "clients": args.clients,
                                "rounds": args.rounds, "f": args.f}), fh, indent=2)


if __name__ == "__main__":
    main()
