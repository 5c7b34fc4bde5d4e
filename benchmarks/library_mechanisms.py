"""Library mechanisms: real calls per second against the library's (or numpy's) own vectorised
sampling speed, and the time to certify each finding (issue #25 §3).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/library_mechanisms.py
"""

from __future__ import annotations

import time
import warnings

import numpy as np


def rate(fn, n: int) -> float:
    t0 = time.perf_counter()
    fn(n)
    return n / (time.perf_counter() - t0)


def main() -> None:
    warnings.simplefilter("ignore")
    from diffprivlib.mechanisms import GaussianAnalytic, GaussianDiscrete, Laplace

    from fedaudit.targets import blackbox_audit, calibration_check
    from fedaudit.targets.opendp import OpenDPTarget
    from fedaudit.targets.planted import UnrandomisedBitRR
    from fedaudit.targets.base import audit_sampler
    from fedaudit.targets.opacus_noise import blackbox_audit as opacus_audit

    rows = []
    lap = Laplace(epsilon=1.0, sensitivity=1.0)
    rows.append(("diffprivlib Laplace.randomise", rate(lambda n: [lap.randomise(0.0) for _ in range(n)], 50_000),
                 rate(lambda n: np.random.default_rng(0).laplace(size=n), 10**6)))
    t = OpenDPTarget.laplace(1.0)
    rows.append(("opendp make_laplace (scalar)", rate(lambda n: [t.measurement(0.0) for _ in range(n)], 10_000),
                 rate(lambda n: np.random.default_rng(0).laplace(size=n), 10**6)))
    bv = OpenDPTarget.bitvec(0.99)
    x = np.packbits(np.zeros(16, dtype=np.uint8))
    rows.append(("opendp make_randomized_response_bitvec (16 bits)",
                 rate(lambda n: [bv.measurement(x) for _ in range(n)], 10_000), float("nan")))
    for name, real, own in rows:
        print(f"{name:55s} {real:12,.0f} calls/s   vectorised numpy {own:14,.0f} draws/s")
    import torch
    from opacus.optimizers.optimizer import _generate_noise

    ref = torch.zeros(10**6)
    print(f"{'opacus _generate_noise (float32, 10^6 per call)':55s} "
          f"{rate(lambda n: [_generate_noise(1.0, ref) for _ in range(n)], 20) * 1e6:12,.0f} draws/s")
    for label, fn in (
        ("GaussianAnalytic δ=1e-30 under-calibration (white box)",
         lambda: calibration_check(GaussianAnalytic(epsilon=1.0, delta=1e-30, sensitivity=1.0), epsilons=(), deltas=())),
        ("GaussianDiscrete ε=20, δ=1e-6 (white box)",
         lambda: calibration_check(GaussianDiscrete(epsilon=20.0, delta=1e-6, sensitivity=1), epsilons=(), deltas=())),
        ("diffprivlib Laplace float support (black box, 20,000 draws)",
         lambda: blackbox_audit(Laplace(epsilon=1.0, sensitivity=1.0), samples=20_000, real_calls=2_000, seed=0)),
        ("Opacus float32 noising step, secure_mode (black box, 20,000 draws)",
         lambda: opacus_audit(1.0, 1.0, dtype="float32", secure_mode=True, samples=20_000, seed=0)),
        ("planted pre-0.15 bitvec (black box, 4,000 draws)",
         lambda: audit_sampler(UnrandomisedBitRR(0.99), np.zeros(16), np.ones(16),
                               epsilon=UnrandomisedBitRR(0.99).claimed_epsilon(16), delta=0.0, samples=4_000, seed=0)),
    ):
        t0 = time.perf_counter()
        res = fn()
        print(f"{label:55s} {time.perf_counter() - t0:8.2f} s  "
              f"{res.summary() if hasattr(res, 'summary') else f'ε ≥ {res.epsilon_lower:.3f}'}")


if __name__ == "__main__":
    main()
