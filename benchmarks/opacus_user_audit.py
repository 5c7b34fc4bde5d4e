"""False alarms and power of the canary audit of a user's own Opacus run, on this machine.

A "user" model fedaudit does not ship (an MLP 20 → 64 → 2, 1474 parameters, float32), synthetic
data (2000 training and 2000 test examples, labels from a random two-layer teacher), a plain
training loop, ``PrivacyEngine.make_private`` with σ = 1.5, C = 1, batch 100 (q = 0.05), 100 steps,
SGD lr 0.5, Opacus's default PRV accountant (ε ≈ 1.68 at δ = 1e-5). For each threat model
(:mod:`fedaudit.audit.opacus_canaries`) and each of ``--seeds`` seeds:

* correct — the optimizer adds the noise the accountant is told; a flag is a false alarm (the
  certified bound promises at most 5 % at 95 % confidence);
* σ/10 broken — ``add_noise`` draws with σ/10 while the accountant records σ (Opacus's accountant
  hook reads ``optimizer.noise_multiplier`` at each step, so the bench swaps it only around the
  noise draw); a flag is a detection (power).

Every run also trains the same seed without canaries, to measure what the canaries cost: the
training CPU time with and without them (``hooks`` = wall-clock time in the audit's hooks,
``result`` = wall-clock time of ``audit.result``: scores, bounds, the engine's and fedaudit's
accountants) and the test accuracy on 2000 held-out examples.
Black-box canaries are N(0, 1) inputs scaled by ``--black-box-scale`` (out of distribution) with
random labels, mixed into the training set.

Usage: ``python benchmarks/opacus_user_audit.py [--seeds 10] [--canaries 1000] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import opacus
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fedaudit.audit.opacus_canaries import InputCanaries, OpacusCanaryAudit
from fedaudit.json import write

SIGMA, N, BATCH, STEPS, DELTA, LR = 1.5, 2000, 100, 100, 1e-5, 0.5
THREATS = ("white-box", "white-box-final", "black-box")


def data(seed: int) -> tuple[TensorDataset, TensorDataset]:
    g = torch.Generator().manual_seed(10_000 + seed)
    w1, w2 = torch.randn(20, 16, generator=g), torch.randn(16, generator=g)
    x = torch.randn(2 * N, 20, generator=g)
    y = (torch.tanh(x @ w1) @ w2 > 0).long()
    return TensorDataset(x[:N], y[:N]), TensorDataset(x[N:], y[N:])


def run(seed: int, threat: str | None, broken: bool, canaries: int, scale: float, accountants=()) -> dict:
    """One training run of the user's loop; ``threat`` None trains without canaries."""
    train_set, test_set = data(seed)
    inputs = None
    if threat == "black-box":
        shape_gen = torch.Generator().manual_seed(20_000 + seed)
        x = scale * torch.randn(canaries, 20, generator=shape_gen)
        y = torch.randint(0, 2, (canaries,), generator=shape_gen)
        inputs = InputCanaries(train_set, inputs=x, labels=y, seed=seed)
        train_set = inputs.dataset
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    engine = opacus.PrivacyEngine()
    model, opt, loader = engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                                             data_loader=DataLoader(train_set, batch_size=BATCH),
                                             noise_multiplier=SIGMA, max_grad_norm=1.0)
    if broken:
        own = opt.add_noise

        def add_noise():  # a tenth of the noise; the accountant's hook still reads σ afterwards
            opt.noise_multiplier = SIGMA / 10
            try:
                own()
            finally:
                opt.noise_multiplier = SIGMA

        opt.add_noise = add_noise
    audit = (None if threat is None else
             OpacusCanaryAudit(engine, model, opt, loader, canaries=canaries, threat=threat, seed=seed,
                               inputs=inputs))
    start, done = time.process_time(), 0
    while done < STEPS:
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            done += 1
            if done == STEPS:
                break
    train_s = time.process_time() - start  # CPU seconds: other jobs on the machine do not inflate them
    with torch.no_grad():
        acc = float((model(test_set.tensors[0]).argmax(1) == test_set.tensors[1]).float().mean())
    row = {"seed": seed, "threat": threat, "broken": broken, "accuracy": acc, "train_seconds": train_s}
    if audit is not None:
        r = audit.result(DELTA, accountants=accountants)
        row.update(flagged=r.violation, steinke=r.one_run.epsilon, fdp=r.one_run_fdp.epsilon, gdp=r.gdp.epsilon,
                   engine=r.engine_epsilon, hook_seconds=r.hook_seconds, result_seconds=r.seconds,
                   noise_ratio=r.noise_ratio, accountants={a.method: a.epsilon for a in r.accountants})
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--canaries", type=int, default=1000)
    parser.add_argument("--black-box-scale", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", help="write the rows to this file (strict JSON)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore", message="Full backward hook is firing")
    warnings.filterwarnings("ignore", message="Secure RNG turned off")
    wall, cpu = time.perf_counter(), time.process_time()
    print(f"user MLP 20-64-2 (1474 parameters), n = {N}, σ = {SIGMA}, q = {BATCH / N:g}, {STEPS} steps, "
          f"{args.canaries} canaries, δ = {DELTA:g}, 95 %, {args.seeds} seeds per row\n")
    plain = [run(s, None, b, args.canaries, args.black_box_scale) for b in (False, True) for s in range(args.seeds)]
    base = {(r["seed"], r["broken"]): r for r in plain}
    rows = []
    print(f"{'threat':<16} {'run':<13} {'flagged':>8} {'Steinke ε_lb (mean, max)':>25} {'engine ε':>9} "
          f"{'noise ratio':>11} {'acc. with / without':>20} {'train CPU s with / without':>27} {'hooks s':>8} "
          f"{'result s':>8}")
    for threat in THREATS:
        for broken in (False, True):
            batch = [run(s, threat, broken, args.canaries, args.black_box_scale,
                         accountants=("pld", "rdp") if s == 0 else ()) for s in range(args.seeds)]
            rows += batch
            steinke = [r["steinke"] for r in batch]
            ratio = [r["noise_ratio"] for r in batch if r["noise_ratio"] is not None]
            without = [base[(r["seed"], broken)] for r in batch]
            mean = statistics.fmean
            print(f"{threat:<16} {'σ/10 broken' if broken else 'correct':<13} "
                  f"{sum(r['flagged'] for r in batch):>3}/{len(batch):<4} "
                  f"{mean(steinke):>15.3f}, {max(steinke):>7.3f} {batch[0]['engine']:>9.3f} "
                  f"{(f'{mean(ratio):.3f}' if ratio else '—'):>11} "
                  f"{mean(r['accuracy'] for r in batch):>9.3f} / {mean(r['accuracy'] for r in without):.3f} "
                  f"{mean(r['train_seconds'] for r in batch):>15.2f} / {mean(r['train_seconds'] for r in without):.2f}"
                  f"{mean(r['hook_seconds'] for r in batch):>13.2f} {mean(r['result_seconds'] for r in batch):>8.2f}",
                  flush=True)
    first = next(r for r in rows if r["accountants"])
    print(f"\nfedaudit accountants on the engine's events (seed 0): "
          + ", ".join(f"{k} ε = {v:.4f}" for k, v in first["accountants"].items())
          + f"; engine (Opacus PRV) ε = {first['engine']:.4f}")
    total_wall, total_cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"total {total_wall:.1f} s wall, {total_cpu:.1f} s CPU")
    if args.json:
        write(args.json, {"rows": rows + plain, "seeds": args.seeds, "canaries": args.canaries,
                          "seconds": total_wall, "cpu_seconds": total_cpu})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
