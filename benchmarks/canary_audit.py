"""Canary audits of DP training: accountant ε next to the one-run lower bounds, on this machine.

Part "dpsgd": :func:`fedaudit.audit.dpsgd_audit.audit_dpsgd` on digits with 1000 canaries, δ = 1e-5,
95 % confidence, three configurations × three threat models (white-box: Dirac gradient canaries,
every iterate seen; white-box-final: the same canaries, initial and final parameters only;
black-box: mislabelled inputs scored by the final loss):

* correct — Opacus trains with σ and the accountant is told σ;
* σ/10 broken — Opacus trains with σ/10, the accountant still gets σ (must be a violation, white box);
* non-private — σ = 1e-3 trained and claimed (its accountant ε, by RDP, is astronomical; the
  one-run bound is capped near 5.78 at m = 1000 whatever the training does).

Each row: accountant ε (PLD, RDP for the non-private row), Steinke et al. ε_lb, f-DP ε_lb (with
the (ε, δ)-DP trade-off curve: certified for every algorithm), the GDP estimate, violation, test
accuracy and the audit's seconds (training + bounds + accountant).

Part "fedavg" (after it): :func:`fedaudit.audit.dp_fedavg_audit.audit_dp_fedavg`, client-level
canaries, correct and z/10 configurations: the synthetic setting of its tests (z = 4, q = ½,
5 rounds, 1000 canary clients, 20 clients) and a larger one on digits (z = 8, q = ½, 20 rounds,
2000 canary clients, 50 clients).

Usage: ``python benchmarks/canary_audit.py [--quick] [--part dpsgd|fedavg|all] [--json FILE]``;
``--quick`` runs the test configuration (σ = 2, q = 0.1, 100 steps) instead of the default
(σ = 1, q = 0.02, 1000 steps, accountant ε ≈ 3.90).
"""

from __future__ import annotations

import argparse
import time
import warnings

import dp_accounting  # noqa: F401  (heavy imports before any timing, so row 1 is not charged for them)
import opacus  # noqa: F401
import torch  # noqa: F401

from fedaudit.audit.dpsgd_audit import audit_dpsgd
from fedaudit.json import write

FULL = dict(sigma=1.0, sample_rate=0.02, steps=1000)
QUICK = dict(sigma=2.0, sample_rate=0.1, steps=100)
NON_PRIVATE_SIGMA = 1e-3


def dpsgd_rows(cfg: dict, seed: int) -> list[dict]:
    sigma, q, steps = cfg["sigma"], cfg["sample_rate"], cfg["steps"]
    configs = [
        ("correct", dict(noise_multiplier=sigma)),
        ("σ/10 broken", dict(noise_multiplier=sigma / 10, claimed_noise_multiplier=sigma)),
        ("non-private", dict(noise_multiplier=NON_PRIVATE_SIGMA, accountant="rdp")),
    ]
    rows = []
    for threat in ("white-box", "white-box-final", "black-box"):
        for name, kw in configs:
            a = audit_dpsgd(sample_rate=q, steps=steps, threat=threat, seed=seed, **kw)
            rows.append({
                "part": "dpsgd", "configuration": f"{name} ({threat})", "threat": threat,
                "noise_multiplier": a.noise_multiplier, "claimed_noise_multiplier": a.claimed_noise_multiplier,
                "sample_rate": q, "steps": steps, "canaries": a.canaries, "accountant": a.accountant.method,
                "epsilon_accountant": a.accountant.epsilon, "epsilon_steinke": a.one_run.epsilon,
                "epsilon_fdp": a.one_run_fdp.epsilon, "epsilon_gdp": a.gdp.epsilon, "violation": a.violation,
                "accuracy": a.accuracy, "seconds": a.seconds, "training_seconds": a.training_seconds})
            print(_line(rows[-1]), flush=True)
    return rows


def fedavg_rows(seed: int) -> list[dict]:
    from fedaudit.audit.dp_fedavg_audit import audit_dp_fedavg

    configs = [  # (name, settings): the synthetic setting of the tests, then a larger one on digits
        ("synthetic, 1000 canaries", dict(sample_rate=0.5, rounds=5, canaries=1000, clients=20, z=4.0)),
        ("digits, 2000 canaries", dict(sample_rate=0.5, rounds=20, canaries=2000, clients=50, z=8.0,
                                       dataset="digits")),
    ]
    rows = []
    for label, cfg in configs:
        cfg = dict(cfg)
        z = cfg.pop("z")
        for name, kw in (("correct", dict(noise_multiplier=z)),
                         ("z/10 broken", dict(noise_multiplier=z / 10, claimed_noise_multiplier=z))):
            a = audit_dp_fedavg(seed=seed, **cfg, **kw)
            rows.append({
                "part": "fedavg", "configuration": f"{name} ({label})", "noise_multiplier": a.noise_multiplier,
                "claimed_noise_multiplier": a.claimed_noise_multiplier, "sample_rate": a.sample_rate,
                "steps": a.rounds, "canaries": a.canaries, "accountant": a.accountant.method,
                "epsilon_accountant": a.accountant.epsilon, "epsilon_steinke": a.one_run.epsilon,
                "epsilon_fdp": a.one_run_fdp.epsilon, "epsilon_gdp": a.gdp.epsilon, "violation": a.violation,
                "accuracy": a.test_accuracy, "seconds": a.seconds})
            print(_line(rows[-1]), flush=True)
    return rows


HEADER = (f"{'configuration':<40} {'noise':>7} {'claimed':>7} {'accountant ε':>14} {'Steinke':>8} {'f-DP':>8} "
          f"{'GDP':>8} {'violation':>9} {'accuracy':>8} {'seconds':>8}")


def _line(r: dict) -> str:
    acc = "—" if r["accuracy"] is None else f"{r['accuracy']:.3f}"
    eps = r["epsilon_accountant"]
    eps_s = f"{eps:.4g} ({r['accountant']})"
    return (f"{r['configuration']:<40} {r['noise_multiplier']:>7.3g} {r['claimed_noise_multiplier']:>7.3g} "
            f"{eps_s:>14} {r['epsilon_steinke']:>8.3f} {r['epsilon_fdp']:>8.3f} {r['epsilon_gdp']:>8.3f} "
            f"{str(r['violation']):>9} {acc:>8} {r['seconds']:>8.1f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the test configuration (σ=2, q=0.1, 100 steps)")
    parser.add_argument("--part", choices=("dpsgd", "fedavg", "all"), default="all")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the rows to this file (strict JSON)")
    args = parser.parse_args(argv)
    # Opacus's RDP accountant warns that the non-private row's best order is its smallest alpha
    warnings.filterwarnings("ignore", message="Optimal order is the smallest alpha")
    cfg = QUICK if args.quick else FULL
    start = time.perf_counter()
    rows: list[dict] = []
    if args.part in ("dpsgd", "all"):
        print(f"DP-SGD (digits, 1000 canaries, δ = 1e-5, 95 %): σ = {cfg['sigma']:g}, q = {cfg['sample_rate']:g}, "
              f"{cfg['steps']} steps")
        print(HEADER)
        rows += dpsgd_rows(cfg, args.seed)
    if args.part in ("fedavg", "all"):
        print("\nDP-FedAvg (client-level canaries)")
        print(HEADER)
        rows += fedavg_rows(args.seed)
    total = time.perf_counter() - start
    print(f"\ntotal {total:.1f} s")
    if args.json:
        write(args.json, {"rows": rows, "config": cfg, "seed": args.seed, "seconds": total})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
