"""Flower's own RdpAccountant against fedaudit's accountants on the same events (issue #25 §2).

Per (sampling, z, q, T, δ): ε of Flower's ``flwr.supercore.privacy_accounting.rdp_accountant.RdpAccountant``
(and its optimal order), of fedaudit's ``"dpa-rdp"`` (the same dp-accounting backend), ``"rdp"`` (Opacus's RDP)
and ``"pld"`` (dp-accounting's PLD), and ratio = ε_flower / ε_pld
(:func:`fedaudit.integrations.flower.accountant_check.cross_check`). Population 1000, so q = 0.01, 0.1, 1
are 10, 100, 1000 sampled clients.

Usage: ``python benchmarks/flower_accountant.py [--quick] [--json FILE]`` (``--quick``: T ≤ 100;
the full grid, T up to 1000, takes about 12 minutes on one core, most of it in the PLD of T = 1000).
Writes ``benchmarks/results/flower_accountant.json`` unless ``--json`` names another file.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

from fedaudit.integrations.flower.accountant_check import GRID_ROUNDS, cross_check
from fedaudit.json import write

HEADER = (f"{'sampling':>16} {'σ':>5} {'q':>5} {'T':>5} {'δ':>7} {'ε_flower':>10} {'α*':>5} {'ε_dpa-rdp':>10} "
          f"{'ε_rdp':>10} {'ε_pld':>10} {'ratio':>6} {'agree':>5} {'under':>5}")


def line(r: dict) -> str:
    return (f"{r['sampling']:>16} {r['sigma']:>5g} {r['rate']:>5g} {r['rounds']:>5d} {r['delta']:>7.0e} "
            f"{r['eps_flower']:>10.4f} {r['order_flower']:>5g} {r['eps_dpa_rdp']:>10.4f} {r['eps_rdp']:>10.4f} "
            f"{r['eps_pld']:>10.4f} {r['ratio']:>6.3f} {str(r['agrees']):>5} {str(r['under_counts']):>5}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="rounds up to 100 only")
    parser.add_argument("--json", metavar="FILE", default=str(Path(__file__).parent / "results" / "flower_accountant.json"),
                        help="where to write the rows (strict JSON)")
    args = parser.parse_args(argv)
    # dp-accounting warns for every RDP order whose series does not converge (it drops that order, which can
    # only raise its ε); the rows show the effect, the warnings would bury the table
    logging.getLogger().setLevel(logging.ERROR)
    rounds = tuple(t for t in GRID_ROUNDS if t <= 100) if args.quick else GRID_ROUNDS
    t0 = time.perf_counter()
    print(HEADER)
    rows = []
    for row in cross_check(rounds=rounds):
        rows.append(row.to_dict())
        print(line(rows[-1]), flush=True)
    seconds = time.perf_counter() - t0
    import flwr
    import importlib.metadata
    import opacus

    write(args.json, {"rows": rows, "seconds": seconds, "flwr": flwr.__version__,
                      "dp_accounting": importlib.metadata.version("dp-accounting"), "opacus": opacus.__version__})
    agree = sum(r["agrees"] for r in rows)
    under = [r for r in rows if r["under_counts"]]
    print(f"{agree}/{len(rows)} rows: Flower equals dp-accounting's RDP; {len(under)} rows where Flower's ε is "
          f"below the PLD ε; {seconds:.0f} s → {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
