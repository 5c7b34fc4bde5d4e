"""OpenDP make_randomized_response_bitvec before 0.15.0: one bit left unrandomised (ε = ∞).

Two steps, because the old opendp lives in its own environment (never in fedaudit's):

1. in a venv with the old version only (numpy + opendp), dump real calls:
     python3 -m venv /tmp/opendp014 && /tmp/opendp014/bin/pip install 'opendp==0.14.*' numpy
     /tmp/opendp014/bin/python benchmarks/opendp_bitvec_regression.py dump /tmp/bitvec014.npz
2. audit those reports with fedaudit (replayed in order, so the certified bound is about the real calls):
     PYTHONPATH=$PWD .venv/bin/python benchmarks/opendp_bitvec_regression.py audit /tmp/bitvec014.npz
Step 1 with fedaudit's own environment dumps the current version's calls for comparison.
"""

from __future__ import annotations

import sys

import numpy as np

F, NBYTES, N = 0.99, 2, 5_000


def dump(path: str) -> None:
    import opendp.prelude as dp
    from importlib.metadata import version

    dp.enable_features("contrib")
    bits = 8 * NBYTES
    meas = dp.m.make_randomized_response_bitvec(dp.bitvector_domain(max_weight=bits), dp.discrete_distance(), f=F)
    out = {}
    for name, x in (("x0", np.zeros(bits, dtype=np.uint8)), ("x1", np.ones(bits, dtype=np.uint8))):
        packed = np.packbits(x)
        out[name] = np.stack([np.unpackbits(np.frombuffer(meas(packed), dtype=np.uint8)) for _ in range(N)])
    np.savez(path, claim=float(meas.map(1)), version=version("opendp"), **out)
    print(f"opendp {version('opendp')}: {N} calls per input -> {path}; per-bit frequency under x0:",
          np.round(out["x0"].mean(axis=0), 3))


def audit(path: str) -> None:
    from fedaudit.targets.base import audit_sampler

    data = np.load(path)
    pos = {0: 0, 1: 0}

    def replay(x: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
        w = int(x[0])
        rows = data[f"x{w}"][pos[w]:pos[w] + size]
        if rows.shape[0] < size:
            raise RuntimeError("not enough dumped calls")
        pos[w] += size
        return rows.astype(np.float64)

    bits = data["x0"].shape[1]
    res = audit_sampler(replay, np.zeros(bits), np.ones(bits), epsilon=float(data["claim"]), delta=0.0,
                        samples=N - 10, seed=0)
    print(f"opendp {data['version']}: claimed ε = {float(data['claim']):.4f}; certified ε ≥ {res.epsilon_lower:.3f} "
          f"at 95% ({res.test}); {'VIOLATION' if res.violation else 'within the claim'}")


if __name__ == "__main__":
    {"dump": dump, "audit": audit}[sys.argv[1]](sys.argv[2])
