"""E-FLoPS against Fed-HT, FedIter-HT and FedAvg+prune with a small CNN at 97.5 % sparsity on digits.

``python benchmarks/eflops_digits.py [--seeds 3] [--rounds 100] [--clients 10] [--density 0.025] [--methods eflops,...]
[--scheme iid|dirichlet --beta 1.0] [--upload gated|dense] [--mnist PATH] [--no-tune] [--json FILE]``

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
from fedaudit.fl.sparse_baselines import evaluate, inference_macs, train_fed_ht, train_fedavg_prune, train_fediter_ht
from fedaudit.fl.sparse_data import load_digits_federated, load_mnist_federated
from fedaudit.json import jsonable
from fedaudit.mechanisms.gated import GatedSparseUpload, m_for_density
from fedaudit.rng import derive_seed

from eflops_synthetic import mean_ci  # the same 95 % Student-t interval (this script's directory is on sys.path)

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
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
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
