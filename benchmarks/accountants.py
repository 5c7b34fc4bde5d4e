"""fedaudit's accountants next to dp-accounting, Opacus and the published reference values
(/work/shared/research/privacy.md §4), with the time each computation takes.

Sections:

* ``compose`` — basic, advanced and pld composition of per-report guarantees, and mechanism PLDs
  (k-RR, Gaussian and Laplace noise) next to dp-accounting's PLDAccountant / RdpAccountant on the
  same events;
* ``dpsgd`` — ``epsilon_dpsgd`` by pld, rdp and prv next to dp-accounting's PLD and Opacus's RDP
  and PRV accountants called directly, and the published values;
* ``shuffle`` — ``shuffle_epsilon`` (closed, numerical) next to the published values of
  Feldman–McMillan–Talwar's code;
* ``blanket`` — ``blanket_epsilon`` (Hoeffding, Bennett) for k-RR and Laplace next to the generic
  ``shuffle_epsilon(method="numerical")``: which one is tighter where;
* ``accuracy`` — the signed error of ``epsilon_dpsgd``'s default accuracy settings (PLD loss
  grid 1e-4, PRV ``eps_error`` 0.01) and of RDP at 10^3, 10^4 and 10^5 steps, against
  dp-accounting's PLD on a 5x finer grid (2e-5, connect-the-dots, itself an upper bound);
* ``mixed`` — ``compose(method="pld")`` of k uses of an asymmetric ``PmfPair`` next to the exact
  worst case over all 2^k direction sequences (enumerated products), k = 2, 3.

Usage: ``python benchmarks/accountants.py [--section compose|dpsgd|shuffle|blanket|accuracy|mixed|all]
[--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import warnings

from fedaudit.accounting import (GaussianPLD, LaplacePLD, blanket_epsilon, compose, epsilon_dpsgd,
                                 shuffle_epsilon)
from fedaudit.guarantees import PureLDP
from fedaudit.json import jsonable
from fedaudit.mechanisms import RandomizedResponse

ROWS: list[dict] = []


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def row(section: str, case: str, what: str, fedaudit: float, seconds: float, reference: float | None = None,
        source: str = "") -> None:
    ROWS.append({"section": section, "case": case, "what": what, "fedaudit": fedaudit, "seconds": seconds,
                 "reference": reference, "source": source})
    ref = "" if reference is None else f"{reference:10.5g}  {source}"
    print(f"  {case:34s} {what:26s} {fedaudit:10.5g} {seconds:7.2f}s   {ref}")


def header(title: str) -> None:
    print(f"\n== {title}\n  {'case':34s} {'method':26s} {'fedaudit':>10s} {'time':>8s}   reference  source")


# ------------------------------------------------------------------------------ compose
def section_compose() -> None:
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from dp_accounting.rdp import RdpAccountant

    header("compose (per-report guarantees and mechanism PLDs), delta = 1e-6 unless noted")
    for case, eps, count in (("20 x eps=0.5", 0.5, 20), ("1000 x eps=0.1", 0.1, 1000)):
        basic, t = timed(lambda: compose([eps] * count, "basic").epsilon)
        row("compose", case, "basic", basic, t, count * eps, "k*eps")
        adv, t = timed(lambda: compose([eps] * count, "advanced", 1e-6).epsilon)
        pld, t2 = timed(lambda: compose([eps] * count, "pld", 1e-6).epsilon)
        row("compose", case, "advanced (KOV exact)", adv, t)
        row("compose", case, "pld", pld, t2, adv, "advanced = exact k-fold RR")

    rr = RandomizedResponse(4, 0.5)
    got, t = timed(lambda: compose([rr] * 50, "pld", 1e-6).epsilon)
    acc = PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    event = dp_accounting.RandomizedResponseDpEvent(4 / (math.exp(0.5) + 3), 4)
    for _ in range(50):  # dp-accounting 0.6.0's PLDAccountant ignores count for this event
        acc.compose(event)
    row("compose", "50 x 4-RR eps=0.5", "pld (mechanism PLD)", got, t, acc.get_epsilon(1e-6), "dp-accounting PLD")
    pure, t = timed(lambda: compose([PureLDP(0.5)] * 50, "pld", 1e-6).epsilon)
    row("compose", "50 x 4-RR eps=0.5", "pld (its pure eps)", pure, t)

    got, t = timed(lambda: compose([GaussianPLD(2.0)] * 100, "pld", 1e-5).epsilon)
    acc = PLDAccountant()
    acc.compose(dp_accounting.GaussianDpEvent(2.0), 100)
    row("compose", "100 x Gaussian sigma=2, d=1e-5", "pld (mechanism PLD)", got, t, acc.get_epsilon(1e-5),
        "dp-accounting PLD")
    got, t = timed(lambda: compose([LaplacePLD(2.0)] * 50, "pld", 1e-6).epsilon)
    rdp = RdpAccountant()
    rdp.compose(dp_accounting.LaplaceDpEvent(2.0), 50)
    acc = PLDAccountant()
    acc.compose(dp_accounting.LaplaceDpEvent(2.0), 50)
    row("compose", "50 x Laplace b=2", "pld (mechanism PLD)", got, t, acc.get_epsilon(1e-6), "dp-accounting PLD")
    row("compose", "50 x Laplace b=2", "(dp-accounting RDP)", rdp.get_epsilon(1e-6), 0.0)


# ------------------------------------------------------------------------------ DP-SGD
DPSGD_CASES = (  # σ, q, steps, published (RDP, PLD Δ=1e-3, PRV estimate) from privacy.md §4 at δ = 1e-5
    (1.1, 256 / 60000, 14062, (2.597, 2.391, 2.382)),
    (1.0, 0.01, 5000, (4.589, 4.204, 4.202)),
    (0.8, 4096 / 50000, 1220, (40.18, 35.53, 35.53)),
)


def section_dpsgd() -> None:
    import dp_accounting
    from dp_accounting.pld import PLDAccountant
    from opacus.accountants import PRVAccountant, RDPAccountant

    header("epsilon_dpsgd, delta = 1e-5")
    for sigma, q, steps, (pub_rdp, pub_pld, pub_prv) in DPSGD_CASES:
        case = f"sigma={sigma}, q={q:.4g}, T={steps}"
        pld, t = timed(lambda: epsilon_dpsgd(sigma, q, steps, 1e-5, method="pld").epsilon)
        acc = PLDAccountant(value_discretization_interval=1e-4)
        acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
        row("dpsgd", case, "pld", pld, t, acc.get_epsilon(1e-5), "dp-accounting PLD")
        row("dpsgd", case, "", pld, 0.0, pub_pld, "published PLD (1e-3 grid)")
        rdp, t = timed(lambda: epsilon_dpsgd(sigma, q, steps, 1e-5, method="rdp").epsilon)
        op = RDPAccountant()
        op.history = [(sigma, q, steps)]
        row("dpsgd", case, "rdp", rdp, t, op.get_epsilon(1e-5), "Opacus RDP")
        row("dpsgd", case, "", rdp, 0.0, pub_rdp, "published RDP (dp-accounting)")
        prv, t = timed(lambda: epsilon_dpsgd(sigma, q, steps, 1e-5, method="prv").epsilon)
        op = PRVAccountant()
        op.history = [(sigma, q, steps)]
        row("dpsgd", case, "prv", prv, t, op.get_epsilon(1e-5), "Opacus PRV")
        row("dpsgd", case, "", prv, 0.0, pub_prv, "published PRV estimate")


# ------------------------------------------------------------------------------ shuffling
SHUFFLE_PUBLISHED = {  # (n, ε0): (closed, numerical) at δ = 1e-6, privacy.md §4 (FMT's code)
    (10**4, 1.0): (0.233, 0.055), (10**4, 2.0): (0.524, 0.159), (10**4, 4.0): (None, 0.621),
    (10**5, 1.0): (0.075, 0.016), (10**5, 2.0): (0.191, 0.045), (10**5, 4.0): (0.538, 0.173),
    (10**5, 8.0): (None, 2.357),
    (10**6, 1.0): (0.024, 0.005), (10**6, 2.0): (0.063, 0.014), (10**6, 4.0): (0.202, 0.050),
    (10**6, 8.0): (1.003, 0.515),
}


def section_shuffle() -> None:
    header("shuffle_epsilon, delta = 1e-6 (n = 1e5, eps0 = 4 numerical: published interval [0.1675, 0.1728])")
    for (n, eps0), (pub_closed, pub_num) in SHUFFLE_PUBLISHED.items():
        case = f"n={n:.0e}, eps0={eps0:g}"
        if pub_closed is not None:
            b, t = timed(lambda: shuffle_epsilon(n, eps0, 1e-6, method="closed").epsilon)
            row("shuffle", case, "closed", b, t, pub_closed, "FMT code")
        b, t = timed(lambda: shuffle_epsilon(n, eps0, 1e-6, method="numerical").epsilon)
        row("shuffle", case, "numerical", b, t, pub_num, "FMT code")


# ------------------------------------------------------------------------------ blanket
def section_blanket() -> None:
    header("blanket_epsilon vs shuffle_epsilon(numerical) [reference column], delta = 1e-6")
    for n in (10**4, 10**5, 10**6):
        for eps0 in (1.0, 2.0, 4.0):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fmt = shuffle_epsilon(n, eps0, 1e-6, method="numerical").epsilon
                for name, k in (("krr", 2), ("krr", 10), ("krr", 100), ("laplace", None)):
                    for bound in ("hoeffding", "bennett"):
                        res, t = timed(lambda: blanket_epsilon(n, name, eps0, 1e-6, k=k, bound=bound))
                        what = f"{k}-RR {bound}" if name == "krr" else f"Laplace {bound}"
                        flag = "" if res.amplified else " (none)"
                        row("blanket", f"n={n:.0e}, eps0={eps0:g}", what + flag, res.epsilon, t, fmt,
                            "FMT numerical")


# ------------------------------------------------------------------------------ accuracy
ACCURACY_REGIMES = ((1.1, 256 / 60000), (1.0, 0.01))  # (σ, q): DP-SGD on MNIST; 1 % of clients per round


def section_accuracy() -> None:
    from dp_accounting.pld import privacy_loss_distribution as dpl

    header("accuracy of the default settings, delta = 1e-5: signed error vs dp-accounting PLD on a 2e-5 grid "
           "[reference]")
    for sigma, q in ACCURACY_REGIMES:
        for steps in (10**3, 10**4, 10**5):
            case = f"sigma={sigma}, q={q:.4g}, T={steps:.0e}"
            ref, t = timed(lambda: dpl.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=2e-5)
                           .self_compose(steps).get_epsilon_for_delta(1e-5))
            row("accuracy", case, "reference (PLD 2e-5)", ref, t, ref, "")
            for method in ("pld", "prv", "rdp"):
                got, t = timed(lambda: epsilon_dpsgd(sigma, q, steps, 1e-5, method=method).epsilon)
                row("accuracy", case, f"{method} ({100 * (got / ref - 1):+.3f} %)", got, t, ref, "PLD 2e-5")


# ------------------------------------------------------------------------------ mixed directions
MIXED_PAIRS = (  # asymmetric pairs: T(P, Q) != T(Q, P)
    ((0.00290241, 0.04708651, 0.08230428, 0.8677068), (3.0006362e-05, 0.0461688852, 0.504004667, 0.449796441)),
    ((0.27563812, 0.28347523, 0.43619951, 0.00468714), (0.37393804, 0.24372149, 0.38145925, 0.00088122)),
    ((0.0090673, 0.9307174, 0.0602153), (0.000484785108, 0.513277274, 0.486237941)),
)


def mixed_worst_epsilon(p, q, k: int, delta: float) -> float:
    """The exact ε at ``delta`` of the worst of the 2^k products of (p, q) / (q, p), enumerated."""
    import itertools

    import numpy as np
    from scipy.optimize import brentq

    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    best = 0.0
    for dirs in itertools.product((False, True), repeat=k):
        a, b = np.ones(1), np.ones(1)
        for flip in dirs:
            a, b = np.outer(a, q if flip else p).ravel(), np.outer(b, p if flip else q).ravel()

        def excess(e, a=a, b=b):
            return float(np.maximum(a - math.exp(e) * b, 0.0).sum()) - delta

        if excess(0.0) > 0:
            best = max(best, math.inf if excess(60.0) > 0 else brentq(excess, 0.0, 60.0, xtol=1e-12))
    return best


def section_mixed() -> None:
    from fedaudit.accounting import PmfPair

    header("compose(k x PmfPair, 'pld', 1e-4) vs the exact worst mixed-direction product [reference]")
    for i, (p, q) in enumerate(MIXED_PAIRS):
        for k in (2, 3):
            exact = mixed_worst_epsilon(p, q, k, 1e-4)
            got, t = timed(lambda: compose([PmfPair(p, q)] * k, "pld", 1e-4).epsilon)
            row("mixed", f"pair {i}, k={k}", f"pld ({100 * (got / exact - 1):+.2f} %)", got, t, exact,
                "exact worst of 2^k")


SECTIONS = {"compose": section_compose, "dpsgd": section_dpsgd, "shuffle": section_shuffle,
            "blanket": section_blanket, "accuracy": section_accuracy, "mixed": section_mixed}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--section", choices=[*SECTIONS, "all"], default="all")
    parser.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    for name, fn in SECTIONS.items():
        if args.section in (name, "all"):
            fn()
    total = time.perf_counter() - start
    print(f"\ntotal {total:.1f} s")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(jsonable({"rows": ROWS, "seconds": total}), fh, indent=1, allow_nan=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
