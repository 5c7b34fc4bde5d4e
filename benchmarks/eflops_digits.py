"""E-FLoPS against Fed-HT, FedIter-HT and FedAvg+prune with a small CNN at 97.5 % sparsity on digits.

``python benchmarks/eflops_digits.py [--seeds 3] [--rounds 100] [--clients 10] [--density 0.025] [--methods eflops,...]
[--scheme iid|dirichlet --beta 1.0] [--upload gated|dense] [--mnist PATH] [--no-tune] [--json FILE]``;
``--fair`` runs the fair protocol of issue #22 instead (the figures of docs/results.md): E-FLoPS and Fed-HT,
each through the top-m upload (E-FLoPS: the gated upload; Fed-HT: each client sends H_m of its
local model) and dense, each tuned over the same grid — optimizer {SGD (lr 0.05), Adam (lr
0.005)} × level warm-up {none, E-FLoPS's 0.95 → ρ over 60 % of the rounds} (one step size per
optimizer, the same for both methods) — by validation accuracy on one tuning split, then test
accuracy over ``--seeds`` seeds with paired 95 % intervals for every comparison
(:data:`FAIR_COMPARISONS`), MACs and bytes per client per round. E-FLoPS keeps
:meth:`~fedaudit.fl.eflops.EFLoPS.for_networks`'s gates from 0.95, η_λ and T = 10⁻⁴.

Data: scikit-learn's 8×8 digits (:func:`fedaudit.fl.sparse_data.load_digits_federated`, the offline
stand-in for MNIST; ``--mnist PATH`` uses MNIST from local files instead), 25 % test, 10 % of the
training rows held out for validation, the rest over ``--clients`` clients. Model:
:func:`fedaudit.fl.models.cnn` (Conv 16 → Conv 32 → Linear 512→64 → Linear 64→10; 38 282
parameters), the same seeded initialisation for every method on a given seed; all methods get the
same rounds (100), local steps (5), minibatch (32) and budget m = ⌊ρ·|θ|⌋ (ρ = 0.025: 957 weights).

E-FLoPS trains the CNN with :meth:`~fedaudit.fl.eflops.EFLoPS.for_networks`: Adam (lr 0.005 on θ̃, 0.05 on log α; Adam state reset every round), gates
starting at P(z ≠ 0) = 0.95, the constraint level moving linearly from 0.95 to ρ over the first 60 %
of the rounds (``target_warmup``) and a slow dual step η_λ = 10⁻³: with the SGD defaults of
:class:`~fedaudit.fl.eflops.EFLoPS` (tuned on the synthetic regression) the multiplier outgrows the
per-gate loss signal of a 38k-parameter network and closes the gates uniformly (accuracy at chance).

Reported per method (mean and 95 % Student-t interval over seeds): test accuracy of θ̂ (exactly m
non-zero coordinates), realised density, MACs of one inference counted from the mask
(:func:`fedaudit.fl.sparse_baselines.inference_macs`) next to the dense model's, and bytes
uploaded per client per round (E-FLoPS with ``--upload gated``: the exact gated-upload packets of
:class:`fedaudit.mechanisms.gated.GatedSparseUpload`; dense E-FLoPS 2·|θ|·4; Fed-HT and FedAvg
|θ|·4; FedIter-HT its τ-sparse packet). Tuning, by validation accuracy on one tuning seed disjoint from the evaluation seeds: the
baselines' lr ∈ {0.02, 0.05, 0.2}, E-FLoPS' temperature T ∈ {0, 10⁻⁴, 10⁻³} (T = 0 is FLoPS)
(``--no-tune``: lr 0.1 for the baselines, T = 10⁻⁴).
``final_density_history`` is the last round's density in the run's history (E-FLoPS: the expected
density ρ̂ of the gates before the hard top-m mask; the baselines: the non-zero fraction of the
global model).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np

from fedaudit.errors import FedAuditError
from fedaudit.fl.eflops import EFLoPS, train_eflops
from fedaudit.fl.models import cnn
from fedaudit.fl.sparse_baselines import (evaluate, inference_macs, is_diverged, train_fed_ht, train_fedavg_prune,
                                          train_fediter_ht)
from fedaudit.fl.sparse_data import load_digits_federated, load_mnist_federated
from fedaudit.json import jsonable
from fedaudit.mechanisms.gated import GatedSparseUpload, m_for_density
from fedaudit.rng import derive_seed

# the same 95 % Student-t interval, paired differences, grid and summaries (this script's directory is on sys.path)
from eflops_synthetic import WARMUP, _fmt, fair_grid, mean_ci, paired

METHODS = ("eflops", "fed_ht", "fediter_ht", "fedavg_prune")
TRAIN = {"fed_ht": train_fed_ht, "fediter_ht": train_fediter_ht, "fedavg_prune": train_fedavg_prune}
LRS = (0.02, 0.05, 0.2)
TEMPERATURES = (0.0, 1e-4, 1e-3)


def model_for(seed: int) -> Any:
    """The CNN with torch's default initialisation drawn under ``seed``."""
    import torch

    torch.manual_seed(seed)
    return cnn(10)


def train(name: str, value: float, data: Any, args: argparse.Namespace, seed: int) -> tuple[Any, Any]:
    """Train ``name`` with its tuned value (the baselines' lr, E-FLoPS' temperature) on ``data``."""
    model = model_for(derive_seed(seed, "init"))
    common = {"local_steps": 5, "batch_size": 32}
    if name == "eflops":
        dim = sum(p.numel() for p in model.parameters())
        upload = GatedSparseUpload(dim, m_for_density(args.density, dim)) if args.upload == "gated" else None
        method = EFLoPS.for_networks(args.density, temperature=value, **common)
        run = train_eflops(model, data.clients, method=method, rounds=args.rounds, rng=seed, upload=upload)
    else:
        run = TRAIN[name](model, data, rounds=args.rounds, density=args.density, rng=seed, lr=value, **common)
    return model, run


#: the fair protocol's arms on the CNN: (method, upload); one step size per optimizer, the same for both methods
FAIR_ARMS = {"eflops/top-m": ("eflops", "top-m"), "eflops/dense": ("eflops", "dense"),
             "fed_ht/top-m": ("fed_ht", "top-m"), "fed_ht/dense": ("fed_ht", "dense")}
FAIR_LRS = {"sgd": (0.05,), "adam": (0.005,)}
FAIR_COMPARISONS = (("eflops/top-m", "fed_ht/top-m"), ("eflops/dense", "fed_ht/dense"),
                    ("eflops/top-m", "eflops/dense"), ("fed_ht/top-m", "fed_ht/dense"))


def fair_run(arm: str, config: dict, data: Any, args: argparse.Namespace, seed: int,
             split: str) -> dict[str, Any]:
    """One run of ``arm`` under ``config`` (optimizer, lr, warm-up): accuracy on ``split``, MACs,
    bytes per client per round; a run stopped on non-finite weights is diverged (scores None)."""
    method, upload = FAIR_ARMS[arm]
    model = model_for(derive_seed(seed, "init"))
    sched = WARMUP if config["warmup"] else {"target_warmup": 0.0}
    common = {"local_steps": 5, "batch_size": 32, "local_optimizer": config["optimizer"], "lr": config["lr"], **sched}
    try:
        if method == "eflops":
            dim = sum(p.numel() for p in model.parameters())
            up = GatedSparseUpload(dim, m_for_density(args.density, dim)) if upload == "top-m" else None
            run = train_eflops(model, data.clients, rng=seed, upload=up, rounds=args.rounds, method=EFLoPS.for_networks(
                args.density, temperature=1e-4, lr_gates=10 * config["lr"], **common))
        else:
            run = train_fed_ht(model, data, rounds=args.rounds, density=args.density, rng=seed, upload=upload, **common)
        X, y = (data.X_val, data.y_val) if split == "val" else (data.X_test, data.y_test)
        acc = evaluate(model, run.weights, X, y, "classification")
    except FedAuditError:
        return {"accuracy": None, "diverged": True, "macs": None, "bytes_per_client_round": None}
    image = (1, int(round(math.sqrt(data.n_features))), int(round(math.sqrt(data.n_features))))
    sparse, dense = inference_macs(model, run.weights != 0, image)
    return {"accuracy": acc, "diverged": is_diverged(acc, "classification"), "macs": sparse, "dense_macs": dense,
            "bytes_per_client_round": run.bytes_uploaded / max(1, sum(run.history["clients"]))}


def fair(args: argparse.Namespace) -> dict[str, Any]:
    """The fair protocol on the CNN: each arm tuned over optimizer {SGD, Adam} × warm-up {none,
    E-FLoPS's} by validation accuracy on the tuning split, test accuracy paired by seed."""
    start = time.perf_counter()
    tune_data = load(args, "tune")
    evals = [load(args, f"eval-{j}") for j in range(args.seeds)]
    arms: dict[str, Any] = {}
    for arm in FAIR_ARMS:
        table = []
        for config in fair_grid(FAIR_LRS):
            r = fair_run(arm, config, tune_data, args, derive_seed(args.seed, "tune/train"), "val")
            table.append({"config": config, "val_accuracy": -math.inf if r["diverged"] else r["accuracy"]})
            print(f"  tune {arm} {config}: validation accuracy {table[-1]['val_accuracy']:.4f}", file=sys.stderr)
        best = max(table, key=lambda row: row["val_accuracy"])["config"]
        rows = [fair_run(arm, best, data, args, derive_seed(args.seed, f"eval-{j}/train"), "test")
                for j, data in enumerate(evals)]
        accs = [r["accuracy"] for r in rows]
        finite = [a for a in accs if a is not None]
        acc, ci = mean_ci(finite) if finite else (None, [None, None])
        ok = [r for r in rows if not r["diverged"]]
        arms[arm] = {"config": best, "tuning": table, "accuracy": acc, "accuracy_ci95": ci, "accuracy_per_seed": accs,
                     "diverged": len(rows) - len(ok),
                     "macs": float(np.mean([r["macs"] for r in ok])) if ok else None,
                     "dense_macs": ok[0]["dense_macs"] if ok else None,
                     "bytes_per_client_round": float(np.mean([r["bytes_per_client_round"] for r in ok])) if ok else None}
        print(f"  {arm}: accuracy {acc} {ci} config {best}", file=sys.stderr)
    comparisons = [{"a": a, "b": b, "accuracy": paired(arms[a]["accuracy_per_seed"], arms[b]["accuracy_per_seed"])}
                   for a, b in FAIR_COMPARISONS]
    dim = sum(p.numel() for p in model_for(0).parameters())
    setup = {"dataset": "mnist" if args.mnist else "digits", "clients": args.clients, "rounds": args.rounds,
             "density": args.density, "m": m_for_density(args.density, dim), "dim": dim, "seeds": args.seeds,
             "lrs": FAIR_LRS, "warmup": WARMUP, "temperature": 1e-4, "local_steps": 5, "batch_size": 32,
             "dense_fedavg_bytes_per_client_round": 4 * dim, "seconds_total": time.perf_counter() - start}
    for arm, r in arms.items():
        print(f"{arm:14s} accuracy {_fmt(r['accuracy'])} [{_fmt(r['accuracy_ci95'][0])}, {_fmt(r['accuracy_ci95'][1])}]"
              f"  {r['bytes_per_client_round']} B/client/round  MACs {r['macs']}  config {r['config']}")
    for c in comparisons:
        d = c["accuracy"]
        print(f"{c['a']} − {c['b']}: {_fmt(d['mean'])} [{_fmt(d['ci95'][0])}, {_fmt(d['ci95'][1])}] (n={d['n']})")
    return {"protocol": "fair", "setup": setup, "arms": arms, "comparisons": comparisons}


def load(args: argparse.Namespace, key: str) -> Any:
    rng = derive_seed(args.seed, key)
    if args.mnist:
        return load_mnist_federated(args.mnist, args.clients, scheme=args.scheme, beta=args.beta,
                                    train_fraction=args.train_fraction, rng=rng)
    return load_digits_federated(args.clients, scheme=args.scheme, beta=args.beta, rng=rng)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--density", type=float, default=0.025)
    ap.add_argument("--scheme", default="iid")
    ap.add_argument("--beta", type=float, default=None)
    ap.add_argument("--upload", choices=("gated", "dense"), default="gated")
    ap.add_argument("--mnist", default=None, help="MNIST directory or .npz (local files only)")
    ap.add_argument("--train-fraction", type=float, default=0.1, help="MNIST training rows kept")
    ap.add_argument("--methods", default=",".join(METHODS),
                    help="comma-separated subset of " + ", ".join(METHODS) + " (default: all)")
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--fair", action="store_true", help="the fair protocol (issue #22): E-FLoPS and Fed-HT, top-m "
                    "and dense uploads, each tuned over optimizer × level warm-up, paired 95 %% intervals")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.fair:
        out = fair(args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(jsonable(out), fh, indent=2, allow_nan=False)
        return out
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or not methods:
        ap.error(f"--methods must name some of {', '.join(METHODS)}, got {args.methods!r}")
    start = time.perf_counter()
    tune_data = None if args.no_tune else load(args, "tune")
    evals = [load(args, f"eval-{j}") for j in range(args.seeds)]
    image = (1, int(round(math.sqrt(evals[0].n_features))), int(round(math.sqrt(evals[0].n_features))))
    out: dict[str, Any] = {}
    for name in methods:
        t0 = time.perf_counter()
        tuning = []
        knob, grid = ("temperature", TEMPERATURES) if name == "eflops" else ("lr", LRS)
        if tune_data is None:
            value = 1e-4 if name == "eflops" else 0.1
        else:
            for cand in grid:
                try:
                    model, run = train(name, cand, tune_data, args, derive_seed(args.seed, "tune/train"))
                    acc = evaluate(model, run.weights, tune_data.X_val, tune_data.y_val, "classification")
                except FedAuditError:
                    acc = -math.inf
                tuning.append({knob: cand, "val_accuracy": acc})
                print(f"  tune {name} {knob}={cand}: validation accuracy {acc:.4f}", file=sys.stderr)
            value = max(tuning, key=lambda r: r["val_accuracy"])[knob]
        accs, dens, macs, per_client, secs, last = [], [], [], [], [], []
        dense_macs = 0
        for j, data in enumerate(evals):
            model, run = train(name, value, data, args, derive_seed(args.seed, f"eval-{j}/train"))
            accs.append(evaluate(model, run.weights, data.X_test, data.y_test, "classification"))
            dens.append(run.density)
            last.append(run.history["density"][-1])
            sparse, dense_macs = inference_macs(model, run.weights != 0, image)
            macs.append(sparse)
            per_client.append(run.bytes_uploaded / max(1, sum(run.history["clients"])))
            secs.append(run.seconds)
            print(f"  {name} seed {j}: accuracy {accs[-1]:.4f}, density {run.density:.4f}, MACs {sparse}/{dense_macs}, "
                  f"{per_client[-1]:.0f} B/client/round, {run.seconds:.1f} s", file=sys.stderr)
        acc, ci = mean_ci(accs)
        out[name] = {"accuracy": acc, "accuracy_ci95": ci, "accuracy_per_seed": accs, "density": float(np.mean(dens)),
                     "final_density_history": float(np.mean(last)), "macs": float(np.mean(macs)), "dense_macs": dense_macs,
                     "macs_fraction": float(np.mean(macs)) / dense_macs,
                     "bytes_per_client_round": float(np.mean(per_client)), "seconds_per_run": float(np.mean(secs)),
                     knob: value, "tuning": tuning, "seconds": time.perf_counter() - t0}
    dim = sum(p.numel() for p in model_for(0).parameters())
    out["setup"] = {"dataset": "mnist" if args.mnist else "digits", "clients": args.clients, "rounds": args.rounds,
                    "density": args.density, "m": m_for_density(args.density, dim), "dim": dim,
                    "upload": args.upload, "scheme": args.scheme, "beta": args.beta, "seeds": args.seeds,
                    "dense_fedavg_bytes_per_client_round": 4 * dim, "seconds_total": time.perf_counter() - start}
    for name in methods:
        r = out[name]
        print(f"{name:13s} accuracy {r['accuracy']:.4f} [{r['accuracy_ci95'][0]:.4f}, {r['accuracy_ci95'][1]:.4f}]  "
              f"density {r['density']:.4f}  MACs {r['macs']:.0f}/{r['dense_macs']} ({100 * r['macs_fraction']:.2f} %)  "
              f"{r['bytes_per_client_round']:.0f} B/client/round  " + ("T " + str(r["temperature"]) if name == "eflops" else "lr " + str(r["lr"])))
    print(f"dense FedAvg upload: {4 * dim} B/client/round; total {out['setup']['seconds_total']:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(jsonable(out), fh, indent=2, allow_nan=False)
    return out


if __name__ == "__main__":
    main()
