"""E-FLoPS against Fed-IHT and FedAvg+prune on planted sparse regression in the scarce regime (d ≫ N).

``python benchmarks/eflops_synthetic.py [--seeds 5] [--tune-seeds 2] [--rounds 200] [--d 1000]
[--support 50] [--samples 300] [--clients 10] [--heterogeneity 0.5] [--noise 1.0] [--quick]
[--dense-rounds 0,3] [--json FILE]``, or with ``--fair [--arms A,B,...] [--sweep 100,300,1000]
[--sweep-seeds 3]`` the fair protocol of issue #22 (below; the figures of docs/results.md).

**The fair protocol** (``--fair``; :func:`fair`). Arms (:data:`ARMS`): E-FLoPS (T = 0.05) and
FLoPS (E-FLoPS at T = 0, the entropy claim) through the top-m gated upload (the seed's protocol,
the main row) and dense; Fed-HT with the top-m upload (each client sends H_m of its local model)
and dense; FedAvg + pruning (dense). Every arm gets a grid of the same size over the same
schedule options (:func:`fair_grid`): optimizer {SGD, Adam} × two step sizes in the method's
stable range (:data:`FAIR_LRS`; E-FLoPS's gate step is 10× its weight step) × level warm-up
{none, E-FLoPS's: level 0.95 → ρ over 60 % of the rounds, for Fed-HT the threshold budget τ_t}.
Selection by mean R² on the *validation* rows of ``--tune-seeds`` tuning problems (disjoint from
the evaluation problems; a diverged run scores −inf); the chosen configuration then runs on
every evaluation problem, and only the test rows are reported. Every comparison (:data:`COMPARISONS`)
is the mean of the per-seed differences with its paired 95 % Student-t interval (:func:`paired`).
A run is *diverged* when it stops on non-finite weights or its R² < −1
(:func:`fedaudit.fl.sparse_baselines.is_diverged`); its scores are None and it is counted, never
averaged in. The sweep over the scarce regime (``--sweep``, N/|θ| = N/d) reruns the two main-row
arms with their tuned configurations on ``--sweep-seeds`` fresh problems per N. The clients'
Gram spectrum λ_max(X_iᵀX_i/n_i) (:func:`fedaudit.fl.sparse_data.gram_spectrum`) is recorded in
``setup.gram_lambda_max``.

Data: :func:`fedaudit.fl.sparse_data.scarce_regression` (d = 1000, 50 true non-zeros, 300 training
rows over 10 clients with covariate shift h = 0.5, noise σ = 1), a fresh problem per seed. Every
method trains the same zero-initialised ``torch.nn.Linear(d, 1, bias=False)`` for the same number
of rounds on the same clients, with the same budget m = ⌊ρ·d⌋ (ρ = support/d unless ``--density``)
and the same training seed. Metrics on the test rows: R² and support recovery
|supp(θ̂) ∩ S| / |S|; mean and a 95 % Student-t interval over the evaluation seeds.

Fed-IHT is **Fed-HT** (local SGD, H_τ after averaging; Tong et al. 2021) — ``fediht``; FedIter-HT
(also H_τ after every local step) is reported inside it as ``fediht.fediter_ht``.

Tuning (fair and documented): each method gets a grid of 4 configurations in its own stable range,
fixed before any test figure was seen — E-FLoPS lr ∈ {0.05, 0.1} × temperature T ∈ {0.01, 0.05}
(K = 5 local steps, the EFLoPS defaults otherwise; docs/guides/eflops.md: lr ≤ 0.01 is too small for
the gates to move); Fed-HT, FedIter-HT and FedAvg+prune lr ∈ {0.003, 0.01} × K ∈ {2, 5} (the largest
step sizes of Tong et al.'s grid that do not diverge here: lr ≥ 0.02 does. The clients' Gram
spectrum λ_max(X_iᵀX_i/n_i) is 260–316 on the default problems, not 46: the covariate shift adds
‖μ_i‖² ≈ d·h² = 250 to the (√(d/n_i) + 1)² ≈ 46 of centred rows, so plain gradient descent on a
dense model is stable only below 2/316 ≈ 0.0063; lr = 0.01 survives only because H_τ keeps 50
coordinates and the K steps are few. The fair protocol's SGD grid for the baselines is
{0.002, 0.005}, below that bound) — scored by
mean *validation* R² on ``--tune-seeds`` problems that are disjoint from the evaluation seeds
(a diverged configuration — non-finite, or R² < −1 — scores −∞). The chosen configuration is then run on every
evaluation seed; the test split is used only for the reported figures.

Through the upload (``eflops.through_upload``): the tuned E-FLoPS trained through the gated sparse
upload (:func:`gated_upload`: rule "votes", client error feedback, non-senders' gates from the
data-free gate step; ``docs/guides/gated-upload.md``) on the same evaluation problems, rounds and
seeds as the dense figures, once per ``--dense-rounds`` value W (the first W rounds dense; default
0 and 3): R², support recovery (95 % intervals) and bytes per client per round.

Robustness (``--robust-seeds R``, default 2; ``--f``, default 2): E-FLoPS with the gated sparse
upload (:func:`gated_upload`, W = 0) and f Byzantine
clients next to the honest ones, each round sending sparse ALIE or sparse IPM packets
(:mod:`fedaudit.attacks.sparse`, attacker-chosen support), aggregated by the upload's FedAvg rule
("votes": the n-weighted mean of the reconstructions) or by NNM+CWTM on the reconstructions (``train_eflops(byzantine=f, attack=...)``; a Byzantine
packet weighs the mean honest n_i under FedAvg); test R² and support recovery on the first R evaluation
problems with the tuned configuration (``eflops.robustness``). ``--robust-upload dense`` runs the same
section on the dense upload with the dense ALIE / IPM of :mod:`fedaudit.attacks.byzantine` (the
rows keep the names "sparse-alie"/"sparse-ipm").

Output (``--json``): ``{"eflops": {"r2", "support_recovery", ...}, "fediht": {...},
"fedavg_prune": {...}, "density", "target_density"}``; each method's dict also holds the 95 %
intervals, per-seed values, the chosen configuration, the tuning table, realised density, bytes
uploaded per client per round and seconds; ``density`` is E-FLoPS' mean realised density (of the
hard mask) and ``final_density_history`` the last round's density in the run's history (E-FLoPS:
the expected density ρ̂ of the gates; the baselines: the non-zero fraction of the global model).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import numpy as np
from scipy import stats

from fedaudit.attacks.byzantine import ALIE, IPM
from fedaudit.attacks.sparse import SparseALIE, SparseIPM
from fedaudit.defenses.registry import make_aggregator
from fedaudit.errors import FedAuditError
from fedaudit.fl.eflops import EFLoPS, train_eflops
from fedaudit.fl.sparse_baselines import (DIVERGED_R2, evaluate, is_diverged, train_fed_ht, train_fedavg_prune,
                                          train_fediter_ht)
from fedaudit.fl.sparse_data import gram_spectrum, scarce_regression, support_recovery
from fedaudit.json import jsonable
from fedaudit.mechanisms.gated import GatedSparseUpload, m_for_density
from fedaudit.rng import derive_seed

LRS = (0.003, 0.01)
GRIDS: dict[str, list[dict[str, Any]]] = {
    "eflops": [{"lr": lr, "temperature": T} for lr in (0.05, 0.1) for T in (0.01, 0.05)],
    "fed_ht": [{"lr": lr, "local_steps": K} for lr in LRS for K in (2, 5)],
    "fediter_ht": [{"lr": lr, "local_steps": K} for lr in LRS for K in (2, 5)],
    "fedavg_prune": [{"lr": lr, "local_steps": K} for lr in LRS for K in (2, 5)],
}
TRAIN = {"fed_ht": train_fed_ht, "fediter_ht": train_fediter_ht, "fedavg_prune": train_fedavg_prune}


def zero_linear(d: int) -> Any:
    import torch

    model = torch.nn.Linear(d, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    return model


def train(name: str, config: dict[str, Any], data: Any, *, rounds: int, density: float, seed: int,
          **attack: Any) -> Any:
    """One run of ``name`` with ``config`` on ``data`` (a SparseRun); ``attack`` holds the
    robustness section's upload/aggregator/byzantine/attack keywords of ``train_eflops``."""
    model = zero_linear(data.n_features)
    if name == "eflops":
        return train_eflops(model, data.clients, method=EFLoPS(density=density, **config), rounds=rounds, rng=seed,
                            **attack)
    return TRAIN[name](model, data, rounds=rounds, density=density, rng=seed, **config)


def scores(run: Any, data: Any, split: str) -> tuple[float, float]:
    """(R², support recovery) of the run's θ̂ on the validation or test rows."""
    X, y = (data.X_val, data.y_val) if split == "val" else (data.X_test, data.y_test)
    r2 = evaluate(zero_linear(data.n_features), run.weights, X, y, "regression")
    return r2, support_recovery(run.weights, data.support)


def mean_ci(values: list[float]) -> tuple[float, list[float]]:
    """Mean and the 95 % Student-t interval (the mean twice for one value)."""
    v = np.asarray(values, dtype=np.float64)
    m = float(v.mean())
    if v.size < 2:
        return m, [m, m]
    h = float(stats.t.ppf(0.975, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return m, [m - h, m + h]


def problem(args: argparse.Namespace, key: str) -> Any:
    return scarce_regression(d=args.d, support=args.support, samples=args.samples, clients=args.clients,
                             heterogeneity=args.heterogeneity, noise=args.noise, rng=derive_seed(args.seed, key))


def tune(name: str, tuning: list[Any], args: argparse.Namespace, density: float) -> tuple[dict, list[dict]]:
    table = []
    for config in GRIDS[name]:
        vals = []
        for j, data in enumerate(tuning):
            try:
                run = train(name, config, data, rounds=args.rounds, density=density,
                            seed=derive_seed(args.seed, f"tune-{j}/train"))
                r2 = scores(run, data, "val")[0]
                vals.append(-math.inf if is_diverged(r2, "regression") else r2)  # an explosion to a finite R² too
            except FedAuditError:
                vals.append(-math.inf)
        table.append({"config": config, "val_r2": float(np.mean(vals))})
        print(f"  tune {name} {config}: validation R² {table[-1]['val_r2']:.4f}", file=sys.stderr)
    best = max(table, key=lambda row: row["val_r2"])
    return best["config"], table


def evaluate_method(name: str, config: dict, evals: list[Any], args: argparse.Namespace, density: float) -> dict:
    r2s, recs, dens, secs, bytes_, expected = [], [], [], [], [], []
    for j, data in enumerate(evals):
        run = train(name, config, data, rounds=args.rounds, density=density,
                    seed=derive_seed(args.seed, f"eval-{j}/train"))
        r2, rec = scores(run, data, "test")
        r2s.append(r2)
        recs.append(rec)
        dens.append(run.density)
        expected.append(run.info.get("expected_density", run.history["density"][-1]))
        secs.append(run.seconds)
        bytes_.append(run.bytes_uploaded / max(1, sum(run.history["clients"])))
        print(f"  {name} seed {j}: test R² {r2:.4f}, support recovery {rec:.3f}, density {run.density:.4f}, "
              f"{run.seconds:.1f} s", file=sys.stderr)
    r2, r2_ci = mean_ci(r2s)
    rec, rec_ci = mean_ci(recs)
    return {"r2": r2, "support_recovery": rec, "r2_ci95": r2_ci, "support_recovery_ci95": rec_ci,
            "r2_per_seed": r2s, "support_recovery_per_seed": recs, "density": float(np.mean(dens)),
            "final_density_history": float(np.mean(expected)),
            "bytes_per_client_round": float(np.mean(bytes_)), "seconds_per_run": float(np.mean(secs)),
            "config": config}


# ALIE at the z_max of Baruch et al.'s Algorithm 1 (variant "paper"): the "honest" variant of the
# public implementations is z = 0 at n = 12, f = 2 (no shift at all); IPM at its default τ = 0.1.
ATTACKS = {"none": None, "sparse-alie": SparseALIE(variant="paper"), "sparse-ipm": SparseIPM()}
DENSE_ATTACKS = {"none": None, "sparse-alie": ALIE(variant="paper"), "sparse-ipm": IPM()}
RULES = ("fedavg", "nnm+cwtm")


def gated_upload(d: int, density: float, dense_rounds: int = 0) -> GatedSparseUpload:
    """The gated upload E-FLoPS trains through (the configuration of ``fedaudit sparse --upload gated``):
    m = ⌊ρ·d⌋ and the upload's defaults: rule "votes" (κ = 0.05 for standalone use; E-FLoPS gives the
    non-senders' gates), error feedback."""
    return GatedSparseUpload(d, m_for_density(density, d), dense_rounds=dense_rounds)


def through_upload(config: dict, evals: list[Any], args: argparse.Namespace, density: float) -> dict:
    """The tuned E-FLoPS through the gated upload on every evaluation problem, per W in ``--dense-rounds``."""
    rows = []
    for w in args.dense_rounds:
        r2s, recs, bytes_ = [], [], []
        for j, data in enumerate(evals):
            run = train("eflops", config, data, rounds=args.rounds, density=density,
                        seed=derive_seed(args.seed, f"eval-{j}/train"), upload=gated_upload(data.n_features, density, w))
            r2, rec = scores(run, data, "test")
            r2s.append(r2)
            recs.append(rec)
            bytes_.append(run.bytes_uploaded / max(1, sum(run.history["clients"])))
            print(f"  through upload W={w} seed {j}: test R² {r2:.4f}, support recovery {rec:.3f}", file=sys.stderr)
        r2, r2_ci = mean_ci(r2s)
        rec, rec_ci = mean_ci(recs)
        rows.append({"dense_rounds": w, "r2": r2, "r2_ci95": r2_ci, "support_recovery": rec,
                     "support_recovery_ci95": rec_ci, "r2_per_seed": r2s, "support_recovery_per_seed": recs,
                     "bytes_per_client_round": float(np.mean(bytes_))})
    return {"upload": "gated (votes rule, error feedback)", "rows": rows}


def robustness(config: dict, evals: list[Any], args: argparse.Namespace, density: float) -> dict:
    """E-FLoPS with the gated upload, f Byzantine clients, each attack × {FedAvg (the votes rule),
    NNM+CWTM}: test R² and support recovery over the first ``--robust-seeds`` evaluation problems."""
    rows = []
    for attack in ATTACKS:
        for rule in RULES:
            r2s, recs = [], []
            for j, data in enumerate(evals[: args.robust_seeds]):
                up = gated_upload(data.n_features, density) if args.robust_upload == "gated" else None
                agg = None if rule == "fedavg" else make_aggregator(rule, args.f)
                chosen = (ATTACKS if up is not None else DENSE_ATTACKS)[attack]
                f = args.f if chosen else 0
                try:
                    run = train("eflops", config, data, rounds=args.rounds, density=density,
                                seed=derive_seed(args.seed, f"eval-{j}/train"), upload=up, aggregator=agg,
                                byzantine=f, attack=chosen)
                    r2, rec = scores(run, data, "test")
                except FedAuditError as err:  # a run the attack drove to divergence
                    print(f"  robustness {attack}/{rule} seed {j}: {err}", file=sys.stderr)
                    r2, rec = -math.inf, 0.0
                r2s.append(r2)
                recs.append(rec)
                print(f"  robustness {attack}/{rule} seed {j}: test R² {r2:.4f}, support recovery {rec:.3f}",
                      file=sys.stderr)
            finite = [v for v in r2s if math.isfinite(v)]
            r2, ci = mean_ci(finite) if len(finite) == len(r2s) else (-math.inf, [-math.inf, -math.inf])
            rows.append({"attack": attack, "aggregator": rule, "r2": r2, "r2_ci95": ci, "r2_per_seed": r2s,
                         "support_recovery": float(np.mean(recs)), "support_recovery_per_seed": recs})
    upload = "gated (votes rule, error feedback)" if args.robust_upload == "gated" else "dense"
    return {"f": args.f, "honest_clients": args.clients, "upload": upload, "seeds": args.robust_seeds, "rows": rows}


# ----------------------------------------------------------------------------- the fair protocol (issue #22)

#: the level warm-up option every method gets (E-FLoPS's recipe: the level from 0.95 down to ρ over 60 % of the rounds)
WARMUP = {"init_density": 0.95, "target_warmup": 0.6}
#: per method and optimizer the step sizes of its grid (two each, in the method's own stable range;
#: E-FLoPS's gate step is 10× its weight step, as in both of its recipes)
FAIR_LRS = {"eflops": {"sgd": (0.05, 0.1), "adam": (0.01, 0.03)},
            "fed_ht": {"sgd": (0.002, 0.005), "adam": (0.01, 0.03)},
            "fedavg_prune": {"sgd": (0.002, 0.005), "adam": (0.01, 0.03)}}
#: arm -> (method, upload, E-FLoPS temperature): "flops" is E-FLoPS at T = 0 (the entropy claim)
ARMS = {"eflops/top-m": ("eflops", "top-m", 0.05), "eflops/dense": ("eflops", "dense", 0.05),
        "flops/top-m": ("eflops", "top-m", 0.0), "flops/dense": ("eflops", "dense", 0.0),
        "fed_ht/top-m": ("fed_ht", "top-m", None), "fed_ht/dense": ("fed_ht", "dense", None),
        "fedavg_prune/dense": ("fedavg_prune", "dense", None)}
#: paired comparisons (a − b, matched by evaluation seed)
COMPARISONS = (("eflops/top-m", "fed_ht/top-m"), ("eflops/dense", "fed_ht/dense"),
               ("eflops/dense", "fedavg_prune/dense"), ("eflops/top-m", "flops/top-m"),
               ("eflops/dense", "flops/dense"), ("eflops/top-m", "eflops/dense"), ("fed_ht/top-m", "fed_ht/dense"))


def fair_grid(lrs: dict[str, tuple[float, ...]]) -> list[dict[str, Any]]:
    """optimizer {SGD, Adam} × the method's step sizes × level warm-up {none, :data:`WARMUP`}."""
    return [{"optimizer": opt, "lr": lr, "warmup": w} for opt in ("sgd", "adam") for lr in lrs[opt]
            for w in (False, True)]


def paired(a: list, b: list) -> dict[str, Any]:
    """Mean of a_j − b_j over the seeds where both ran (neither None) and its paired 95 % Student-t
    interval, t_{0.975, n−1}·sd/√n (``scipy.stats.t``); ``n`` pairs."""
    d = [x - y for x, y in zip(a, b) if x is not None and y is not None]
    mean, ci = mean_ci(d) if d else (None, [None, None])
    return {"mean": mean, "ci95": ci, "n": len(d), "per_seed": d,
            "significant": bool(d and len(d) > 1 and (ci[0] > 0 or ci[1] < 0))}


def fair_train(arm: str, config: dict, data: Any, *, rounds: int, density: float, seed: int) -> Any:
    """One run of ``arm`` (:data:`ARMS`) under a grid ``config`` on the planted problem ``data``."""
    method, upload, temperature = ARMS[arm]
    model = zero_linear(data.n_features)
    sched = WARMUP if config["warmup"] else {"target_warmup": 0.0}
    if method == "eflops":
        hyper = {"temperature": temperature, "local_optimizer": config["optimizer"], "lr": config["lr"],
                 "lr_gates": 10 * config["lr"], **sched}
        up = gated_upload(data.n_features, density) if upload == "top-m" else None
        return train_eflops(model, data.clients, method=EFLoPS(density=density, **hyper), rounds=rounds, rng=seed,
                            upload=up)
    return TRAIN[method](model, data, rounds=rounds, density=density, rng=seed, lr=config["lr"],
                         local_optimizer=config["optimizer"], upload=upload, **sched)


def fair_scores(arm: str, config: dict, data: Any, split: str, *, rounds: int, density: float,
                seed: int) -> dict[str, Any]:
    """R², support recovery, bytes per client per round and the divergence flag of one run
    (a run stopped on non-finite weights, or R² < DIVERGED_R2, is diverged: its scores are None)."""
    try:
        run = fair_train(arm, config, data, rounds=rounds, density=density, seed=seed)
        r2, rec = scores(run, data, split)
        per_client = run.bytes_uploaded / max(1, sum(run.history["clients"]))
    except FedAuditError:
        r2, rec, per_client = None, None, None
    diverged = is_diverged(r2, "regression")
    return {"r2": None if diverged else r2, "r2_raw": r2, "support_recovery": None if diverged else rec,
            "diverged": diverged, "bytes_per_client_round": per_client}


def fair_arm(arm: str, tuning: list, evals: list, args: argparse.Namespace, density: float) -> dict[str, Any]:
    """Tune ``arm`` over its grid by mean validation R² on the tuning problems (a diverged run scores
    −inf), then run the chosen configuration on every evaluation problem (test split)."""
    method = ARMS[arm][0]
    table = []
    for config in fair_grid(FAIR_LRS[method]):
        vals = [fair_scores(arm, config, data, "val", rounds=args.rounds, density=density,
                            seed=derive_seed(args.seed, f"tune-{j}/train")) for j, data in enumerate(tuning)]
        score = -math.inf if any(v["diverged"] for v in vals) else float(np.mean([v["r2"] for v in vals]))
        table.append({"config": config, "val_r2": score, "diverged": sum(v["diverged"] for v in vals)})
        print(f"  tune {arm} {config}: validation R² {score:.4f}", file=sys.stderr)
    best = max(table, key=lambda row: row["val_r2"])["config"]
    rows = [fair_scores(arm, best, data, "test", rounds=args.rounds, density=density,
                        seed=derive_seed(args.seed, f"eval-{j}/train")) for j, data in enumerate(evals)]
    return summarize(arm, best, table, rows)


def summarize(arm: str, config: dict, table: list, rows: list[dict]) -> dict[str, Any]:
    """Means, 95 % intervals and per-seed values of one arm's evaluation rows."""
    out: dict[str, Any] = {"config": config, "tuning": table, "diverged": sum(r["diverged"] for r in rows),
                           "bytes_per_client_round": float(np.mean([r["bytes_per_client_round"] for r in rows
                                                                    if r["bytes_per_client_round"] is not None]))}
    for key in ("r2", "support_recovery"):
        vals = [r[key] for r in rows]
        finite = [v for v in vals if v is not None]
        mean, ci = mean_ci(finite) if finite else (None, [None, None])
        out[key], out[key + "_ci95"], out[key + "_per_seed"] = mean, ci, vals
    out["r2_raw_per_seed"] = [r["r2_raw"] for r in rows]
    print(f"  {arm}: R² {out['r2']} support recovery {out['support_recovery']} diverged {out['diverged']} "
          f"config {config}", file=sys.stderr)
    return out


def fair(args: argparse.Namespace) -> dict[str, Any]:
    """The fair protocol: every arm tuned over the same-size grid, the same schedule options, on
    the tuning problems' validation split; test figures paired by seed; the scarce-regime sweep."""
    density = args.support / args.d if args.density is None else args.density
    start = time.perf_counter()
    tuning = [problem(args, f"tune-{j}") for j in range(args.tune_seeds)]
    evals = [problem(args, f"eval-{j}") for j in range(args.seeds)]
    spectrum = np.concatenate([gram_spectrum(data) for data in tuning + evals])
    arms = {arm: fair_arm(arm, tuning, evals, args, density) for arm in args.arms}
    comparisons = []
    for a, b in COMPARISONS:
        if a in arms and b in arms:
            comparisons.append({"a": a, "b": b, **{key: paired(arms[a][key + "_per_seed"], arms[b][key + "_per_seed"])
                                                   for key in ("r2", "support_recovery")}})
    sweep = []
    for samples in args.sweep:  # the scarce regime N/|θ|: the main-row arms with their tuned configurations
        sub = argparse.Namespace(**{**vars(args), "samples": samples})
        probs = [problem(sub, f"sweep-{samples}-{j}") for j in range(args.sweep_seeds)]
        rows = {arm: [fair_scores(arm, arms[arm]["config"], data, "test", rounds=args.rounds, density=density,
                                  seed=derive_seed(args.seed, f"sweep-{samples}-{j}/train"))
                      for j, data in enumerate(probs)] for arm in ("eflops/top-m", "fed_ht/top-m") if arm in arms}
        entry = {"samples": samples, "ratio": samples / args.d,
                 **{arm: summarize(arm, arms[arm]["config"], [], r) for arm, r in rows.items()}}
        if len(rows) == 2:
            entry["difference"] = {key: paired([r[key] for r in rows["eflops/top-m"]],
                                               [r[key] for r in rows["fed_ht/top-m"]])
                                   for key in ("r2", "support_recovery")}
        sweep.append(entry)
    setup = {"d": args.d, "support": args.support, "samples": args.samples, "clients": args.clients,
             "heterogeneity": args.heterogeneity, "noise": args.noise, "rounds": args.rounds, "seeds": args.seeds,
             "tune_seeds": args.tune_seeds, "sweep": args.sweep, "sweep_seeds": args.sweep_seeds, "seed": args.seed,
             "density": density, "m": m_for_density(density, args.d), "warmup": WARMUP, "lrs": FAIR_LRS,
             "diverged_r2": DIVERGED_R2, "dense_fedavg_bytes_per_client_round": 4 * args.d,
             "gram_lambda_max": {"min": float(spectrum.min()), "max": float(spectrum.max()),
                                 "stable_sgd_lr_below": float(2.0 / spectrum.max())},
             "seconds_total": time.perf_counter() - start}
    out = {"protocol": "fair", "setup": setup, "arms": arms, "comparisons": comparisons, "sweep": sweep}
    print_fair(out)
    return out


def _fmt(v: Any, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def print_fair(out: dict) -> None:
    for arm, r in out["arms"].items():
        print(f"{arm:20s} R² {_fmt(r['r2'])} [{_fmt(r['r2_ci95'][0])}, {_fmt(r['r2_ci95'][1])}]  recovery "
              f"{_fmt(r['support_recovery'])}  {r['bytes_per_client_round']:.0f} B/client/round  diverged "
              f"{r['diverged']}  config {r['config']}")
    for c in out["comparisons"]:
        print(f"{c['a']} − {c['b']}: " + "; ".join(
            f"{k} {_fmt(c[k]['mean'])} [{_fmt(c[k]['ci95'][0])}, {_fmt(c[k]['ci95'][1])}] (n={c[k]['n']})"
            for k in ("r2", "support_recovery") if k in c))
    for e in out["sweep"]:
        diff = e.get("difference", {})
        print(f"N/|θ| = {e['ratio']:.2f}: " + "; ".join(
            f"{k} {_fmt(v['mean'])} [{_fmt(v['ci95'][0])}, {_fmt(v['ci95'][1])}]" for k, v in diff.items()))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fair", action="store_true", help="the fair protocol (issue #22): same-size grids over "
                    "optimizer × lr × level warm-up for every arm, paired 95 %% intervals, the N/|θ| sweep")
    ap.add_argument("--arms", type=lambda v: [a for a in v.split(",") if a], default=list(ARMS),
                    help="--fair: comma-separated arms of " + ", ".join(ARMS))
    ap.add_argument("--sweep", type=lambda v: [int(x) for x in v.split(",") if x], default=[100, 300, 1000],
                    help="--fair: training rows N of the scarce-regime sweep (N/|θ| = N/d)")
    ap.add_argument("--sweep-seeds", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=5, help="evaluation seeds (fresh problems)")
    ap.add_argument("--tune-seeds", type=int, default=2, help="tuning seeds (disjoint problems, validation R²)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--d", type=int, default=1000)
    ap.add_argument("--support", type=int, default=50)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--heterogeneity", type=float, default=0.5)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--density", type=float, default=None, help="target density ρ (default support/d)")
    ap.add_argument("--f", type=int, default=2, help="Byzantine clients in the robustness section")
    ap.add_argument("--robust-seeds", type=int, default=2,
                    help="evaluation problems in the robustness section (0: skip)")
    ap.add_argument("--robust-upload", choices=("gated", "dense"), default="gated",
                    help="robustness section: gated sparse upload (sparse attacks) or dense upload (dense ALIE/IPM)")
    ap.add_argument("--dense-rounds", type=lambda v: [int(x) for x in v.split(",") if x], default=[0, 3],
                    help="through-upload section: comma-separated W (first W rounds dense), e.g. 0,3; empty: skip")
    ap.add_argument("--quick", action="store_true", help="first grid point only, no tuning (smoke test)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.fair:
        unknown = sorted(set(args.arms) - set(ARMS))
        if unknown:
            ap.error(f"--arms must name some of {', '.join(ARMS)}, got {', '.join(unknown)}")
        out = fair(args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(jsonable(out), fh, indent=2, allow_nan=False)
        return out
    density = args.support / args.d if args.density is None else args.density
    start = time.perf_counter()
    tuning = [problem(args, f"tune-{j}") for j in range(args.tune_seeds)]
    evals = [problem(args, f"eval-{j}") for j in range(args.seeds)]
    results: dict[str, dict] = {}
    for name in ("eflops", "fed_ht", "fediter_ht", "fedavg_prune"):
        t0 = time.perf_counter()
        if args.quick or not tuning:
            config, table = GRIDS[name][0], []
        else:
            config, table = tune(name, tuning, args, density)
        results[name] = {**evaluate_method(name, config, evals, args, density), "tuning": table,
                         "seconds": time.perf_counter() - t0}
    ef = results["eflops"]
    baselines = {"fediht": results["fed_ht"], "fedavg_prune": results["fedavg_prune"]}
    ef["at_least_baselines"] = {metric: bool(all(ef[metric] >= b[metric] for b in baselines.values()))
                                for metric in ("r2", "support_recovery")}
    setup = {"d": args.d, "support": args.support, "samples": args.samples, "clients": args.clients,
             "heterogeneity": args.heterogeneity, "noise": args.noise, "rounds": args.rounds,
             "seeds": args.seeds, "tune_seeds": args.tune_seeds, "seed": args.seed,
             "seconds_total": time.perf_counter() - start}
    if args.dense_rounds:
        t0 = time.perf_counter()
        ef["through_upload"] = {**through_upload(ef["config"], evals, args, density), "seconds": time.perf_counter() - t0}
    if args.robust_seeds > 0:
        t0 = time.perf_counter()
        ef["robustness"] = {**robustness(ef["config"], evals, args, density), "seconds": time.perf_counter() - t0}
    setup["seconds_total"] = time.perf_counter() - start
    out = {"eflops": {**ef, "setup": setup},
           "fediht": {**results["fed_ht"], "variant": "Fed-HT", "fediter_ht": results["fediter_ht"]},
           "fedavg_prune": results["fedavg_prune"],
           "density": ef["density"], "target_density": density}
    for key in ("eflops", "fediht", "fedavg_prune"):
        r = out[key]
        print(f"{key:13s} R² {r['r2']:.4f} [{r['r2_ci95'][0]:.4f}, {r['r2_ci95'][1]:.4f}]  support recovery "
              f"{r['support_recovery']:.3f} [{r['support_recovery_ci95'][0]:.3f}, {r['support_recovery_ci95'][1]:.3f}]"
              f"  density {r['density']:.4f}  config {r['config']}")
    fi = out["fediht"]["fediter_ht"]
    print(f"{'fediter_ht':13s} R² {fi['r2']:.4f}  support recovery {fi['support_recovery']:.3f}")
    for row in ef.get("through_upload", {}).get("rows", []):
        print(f"through upload W={row['dense_rounds']:<3d} R² {row['r2']:.4f} [{row['r2_ci95'][0]:.4f}, "
              f"{row['r2_ci95'][1]:.4f}]  support recovery {row['support_recovery']:.3f}  "
              f"{row['bytes_per_client_round']:.0f} B per client per round")
    for row in ef.get("robustness", {}).get("rows", []):
        print(f"robustness f={args.f} {row['attack']:12s} {row['aggregator']:9s} R² {row['r2']:.4f}  "
              f"support recovery {row['support_recovery']:.3f}")
    print(f"E-FLoPS >= both baselines: {ef['at_least_baselines']}  ({setup['seconds_total']:.0f} s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(jsonable(out), fh, indent=2, allow_nan=False)
    return out


if __name__ == "__main__":
    main()
