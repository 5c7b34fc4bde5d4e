"""``fedaudit`` command line: a thin shell over the Python API.

Exit codes: 0 every claim holds, 1 a claim failed, 2 bad input (one line on stderr).
Tables go to stdout; progress bars to stderr, only on a terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Callable, Iterator, Sequence

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.markup import escape
from rich.table import Table

import fedaudit
from fedaudit.errors import FedAuditError

__all__ = ["main"]

out = Console()
err = Console(stderr=True)


@contextlib.contextmanager
def progress_bar(total: int, description: str, quiet: bool = False) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr; yields an ``advance(n)`` callback (no-op when not a TTY)."""
    if quiet or not err.is_terminal:
        yield lambda n: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def _int_list(text: str) -> list[int]:
    try:
        return [int(float(t)) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _count(text: str) -> int:
    """Integers written as 20000, 2e4 or 1e6."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    return int(value)


# ---------------------------------------------------------------------------- commands
def cmd_mechanisms(args: argparse.Namespace) -> int:
    from fedaudit.mechanisms.registry import MECHANISM_NAMES, make_mechanism

    table = Table(title=f"Mechanisms at d={args.dim} (k={args.k or max(1, args.dim // 16)}, s={args.levels})")
    for col in ("name", "class", "ε", "δ", "bits/report", "LDP claim"):
        table.add_column(col, justify="right" if col in ("ε", "δ", "bits/report") else "left")
    for name in MECHANISM_NAMES:
        m = make_mechanism(name, args.dim, args.epsilon, k=args.k, levels=args.levels, clip=args.clip, delta=args.delta)
        claim = "NOT LDP (reference)" if name == "sstq-sketch" else ("pure" if m.delta == 0 else "approximate")
        table.add_row(name, type(m).__name__, f"{m.epsilon:g}", f"{m.delta:g}", f"{m.bits_per_report:,}", claim)
    out.print(table)
    return 0


def _demo_rows(dim: int, n: int, epsilon: float, seed: int, advance: Callable[[int], None]):
    from fedaudit.mechanisms.registry import MECHANISM_NAMES, make_mechanism
    from fedaudit.rng import spawn_generators

    data_rng, *rngs = spawn_generators(seed, len(MECHANISM_NAMES) + 1)
    X = data_rng.normal(size=(n, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= data_rng.uniform(0.5, 1.0, size=(n, 1))  # inside the unit clip ball
    for name, rng in zip(MECHANISM_NAMES, rngs):
        m = make_mechanism(name, dim, epsilon, k=max(1, dim // 16), levels=4, clip=1.0)
        inputs = X
        if name == "rr":
            inputs = np.eye(dim)[data_rng.integers(0, dim, size=n)]
        est = m.decode(m.encode(inputs, rng=rng))
        per_report = float(np.mean(np.sum((est - inputs) ** 2, axis=1)))
        mean_err = float(np.sum((est.mean(0) - inputs.mean(0)) ** 2))
        advance(1)
        yield name, m, per_report, mean_err


def cmd_demo(args: argparse.Namespace) -> int:
    from fedaudit.mechanisms.registry import MECHANISM_NAMES

    table = Table(title=f"Encode → decode of {args.n:,} inputs at d={args.dim}, ε={args.epsilon:g} (clip 1)")
    for col in ("mechanism", "bits/report", "MSE per report", "‖mean error‖²", "note"):
        table.add_column(col, justify="left" if col in ("mechanism", "note") else "right")
    with progress_bar(len(MECHANISM_NAMES), "mechanisms", args.quiet) as advance:
        for name, m, per_report, mean_err in _demo_rows(args.dim, args.n, args.epsilon, args.seed, advance):
            note = {"sstq-sketch": "seed pseudo-code: NOT LDP", "rr": f"{args.dim}-ary, one-hot inputs",
                    "gaussian": f"δ={m.delta:g}"}.get(name, "")
            table.add_row(name, f"{m.bits_per_report:,}", f"{per_report:.4g}", f"{mean_err:.4g}", note)
    out.print(table)
    return 0


def cmd_audit_variance(args: argparse.Namespace) -> int:
    from fedaudit.audit.variance import plot_variance_curve, variance_vs_dk

    total = args.samples * (2 * len(args.k) + 3)
    with progress_bar(total, "reports", args.quiet) as advance:
        curve = variance_vs_dk(args.dim, args.k, args.epsilon, levels=args.levels, clip=args.clip,
                               samples=args.samples, seed=args.seed, progress=advance)
    table = Table(title=f"MSE vs d/k — d={curve.dim}, ε={curve.epsilon:g}, s={curve.levels}, {curve.samples:,} reports each")
    for col in ("k", "d/k", "SSTQ ε MSE ± 95% CI", "no privacy MSE ± 95% CI", "unbiased"):
        table.add_column(col, justify="right")
    for k, dk, p, q in zip(curve.ks, curve.d_over_k, curve.sstq, curve.sstq_nonprivate):
        table.add_row(str(k), f"{dk:g}", f"{p.mse:.4g} ± {p.ci_high - p.mse:.2g}",
                      f"{q.mse:.4g} ± {q.ci_high - q.mse:.2g}", "yes" if p.unbiased and q.unbiased else "NO")
    out.print(table)
    out.print(f"log–log slope of MSE on d/k: private {curve.slope_private:+.3f}, "
              f"non-private {curve.slope_nonprivate:+.3f} (the seed claims +1)")
    out.print(f"vqSGD ε={curve.epsilon:g}: MSE {curve.vqsgd.mse:.4g}; vqSGD no privacy: MSE {curve.vqsgd_nonprivate.mse:.4g};  "
              f"PrivUnitG ε={curve.epsilon:g}: MSE {curve.privunitg.mse:.4g} (optimal unbiased reference)")
    if args.plot:
        out.print(f"plot: {plot_variance_curve(curve, args.plot)}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(curve.to_dict(), fh, indent=2)
        out.print(f"json: {args.json}")
    return 0


def _load_sampler(spec: str):
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise FedAuditError(f"--sampler must look like package.module:function, got {spec!r}")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise FedAuditError(f"cannot load sampler {spec!r}: {exc}") from None
    if not callable(fn):
        raise FedAuditError(f"sampler {spec!r} is not callable")
    return fn


def _audit_pair(args: argparse.Namespace, target, dim: int) -> tuple[np.ndarray, np.ndarray]:
    from fedaudit.mechanisms.randomized_response import RandomizedResponse

    e = np.eye(dim)
    if isinstance(target, RandomizedResponse):
        return e[0], e[1]
    c = args.clip
    pairs = {"antipodal": (c * e[0], -c * e[0]),
             "flat": (c * np.ones(dim) / np.sqrt(dim), -c * np.ones(dim) / np.sqrt(dim)),
             "zero-boundary": (np.zeros(dim), c * e[0])}
    return pairs[args.pair]


def cmd_audit_ldp(args: argparse.Namespace) -> int:
    from fedaudit.audit.ldp import audit_ldp
    from fedaudit.audit.pair_search import audit_worst_case

    if args.sampler:
        if args.dim is None or args.epsilon is None:
            raise FedAuditError("--sampler needs --dim and --epsilon (the claimed guarantee)")
        target, name = _load_sampler(args.sampler), args.sampler
    else:
        from fedaudit.mechanisms.registry import make_mechanism

        dim = 64 if args.dim is None else args.dim
        target = make_mechanism(args.mechanism, dim, 1.0 if args.epsilon is None else args.epsilon,
                                k=args.k, levels=args.levels, clip=args.clip,
                                delta=args.delta if args.delta else 1e-5)
        name = repr(target)
    dim = target.dim if hasattr(target, "dim") else args.dim
    searches = 23 if args.pair == "search" else 0  # 7 structured pairs + 2 rounds × 8 local moves
    total = 2 * args.samples + 2 * searches * args.search_samples
    with progress_bar(total, "samples drawn", args.quiet) as advance:
        if args.pair == "search":
            res = audit_worst_case(target, dim=dim, clip=args.clip, epsilon=args.epsilon, delta=args.delta,
                                   samples=args.samples, search_samples=args.search_samples,
                                   confidence=args.confidence, test=args.test, seed=args.seed, progress=advance)
        else:
            x0, x1 = _audit_pair(args, target, dim)
            res = audit_ldp(target, x0, x1, epsilon=args.epsilon, delta=args.delta, samples=args.samples,
                            confidence=args.confidence, test=args.test, seed=args.seed, progress=advance)
    verdict = "[bold red]VIOLATION[/]" if res.violation else "[bold green]no violation[/]"
    table = Table(title=f"LDP audit of {name}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    exact = "—" if res.epsilon_exact is None else f"{res.epsilon_exact:.4g}"
    rows = [
        ("verdict", verdict),
        ("claimed", f"ε = {res.epsilon_claimed:g}, δ = {res.delta_claimed:g}"),
        (f"certified ε lower bound ({res.confidence:.0%})", f"{res.epsilon_lower:.4f}"),
        ("exact ε of the pair (white box)", exact),
        ("tightness ε_lb / ε", "—" if res.tightness is None else f"{res.tightness:.3f}"),
        ("distinguisher", f"{res.test}  ({res.event['event']}, positive {res.event['positive_input']})"),
        ("event counts", f"TP {res.event['tp']:,} / FP {res.event['fp']:,} of {res.event['n']:,}  "
                         f"(TPR {res.tpr:.4g}, FPR {res.fpr:.4g})"),
        ("GDP μ (estimate, not a bound)", "—" if res.gdp_mu is None else f"{res.gdp_mu:.3f}"),
        ("max certifiable at this N", f"{res.max_certifiable:.3f}"),
        ("samples per input", f"{res.samples:,} ({res.selection_samples:,} select, {res.certification_samples:,} certify)"),
        ("runtime", f"{res.runtime_s:.2f} s ({res.sampling_s:.2f} s drawing samples)"),
    ]
    if res.search:
        rows.insert(5, ("pair (searched)", f"{res.search['best']} — {len(res.search['candidates'])} candidates"))
    for k, v in rows:
        table.add_row(escape(k), v if k == "verdict" else escape(v))
    out.print(table)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res.to_dict(), fh, indent=2)
        out.print(f"json: {escape(args.json)}")
    return 1 if res.violation else 0


def cmd_aggregators(args: argparse.Namespace) -> int:
    from fedaudit.defenses.registry import AGGREGATOR_NAMES, PREAGGREGATOR_NAMES, make_aggregator
    from fedaudit.defenses.theory import kappa_lower_bound, kappa_upper_bound

    table = Table(title=f"Robust aggregation rules at n={args.n}, f={args.f} "
                        f"(universal lower bound f/(n−2f) = {kappa_lower_bound(args.n, args.f):.4g})")
    for col in ("name", "rule", "kind", "needs n ≥", "published κ", "formula"):
        table.add_column(col)
    specs = [(name, "aggregator") for name in AGGREGATOR_NAMES] + [(name, "pre-aggregator") for name in PREAGGREGATOR_NAMES]
    specs += [(f"nnm+{name}", "composition") for name in ("cwtm", "krum", "gm", "cwmed")]
    for name, kind in specs:
        rule = make_aggregator(name, args.f) if kind != "pre-aggregator" else None
        bound = kappa_upper_bound(name, args.n, args.f) if kind != "pre-aggregator" else None
        need = str(rule.min_n(rule.f)) if rule is not None else "—"
        kappa = "—" if bound is None else ("unbounded" if bound.kappa == float("inf") else f"{bound.kappa:.4g}")
        table.add_row(name, escape(repr(rule)) if rule is not None else "(use in a composition)", kind, need, kappa,
                      escape(bound.formula) if bound is not None else "")
    out.print(table)
    out.print("Bounds: Allouah et al., AISTATS 2023 (formulas as recorded in the research notes; not re-verified "
              "against the paper here). `fedaudit audit robustness` measures each rule from below.")
    return 0


def cmd_audit_robustness(args: argparse.Namespace) -> int:
    from fedaudit.audit.robustness import audit_robustness

    total = args.trials + 3 + args.search_evals + 1
    with progress_bar(total, "configurations", args.quiet) as advance:
        res = audit_robustness(args.aggregator, n=args.n, f=args.f, d=args.d, trials=args.trials,
                               attacks=args.attacks, seed=args.seed, search_evals=args.search_evals,
                               progress=advance)
    fmt = lambda v: "—" if v is None else ("unbounded" if v == float("inf") else f"{v:.4g}")
    verdict = "[bold red]VIOLATION of the published bound[/]" if res.violation else (
        "[bold yellow]unbounded (not robust)[/]" if res.unbounded else "[bold green]within the published bound[/]"
        if res.nu_bound is not None else "no published bound")
    table = Table(title=f"(f, ν)-robustness of {res.aggregator} at n={res.n}, f={res.f}, d={res.d}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for k, v in (("verdict", verdict),
                 ("ν̂ (empirical, lower bound on κ)", fmt(res.nu_empirical)),
                 ("published upper bound κ", fmt(res.nu_bound)),
                 ("universal lower bound f/(n−2f)", fmt(res.nu_lower)),
                 ("search reached the lower bound", "yes" if res.reaches_lower_bound else "no"),
                 ("worst configuration", escape(res.worst_attack)),
                 ("subsets S", res.subsets),
                 ("trials / runtime", f"{res.trials} / {res.runtime_s:.2f} s")):
        table.add_row(escape(k), v)
    out.print(table)
    top = Table(title="worst configurations")
    top.add_column("configuration")
    top.add_column("ν̂", justify="right")
    for label, nu in list(res.per_configuration.items())[:8]:
        top.add_row(escape(label), fmt(nu))
    out.print(top)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res.to_dict(), fh, indent=2)
        out.print(f"json: {escape(args.json)}")
    return 1 if res.violation else 0


# ---------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedaudit", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"fedaudit {fedaudit.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("mechanisms", help="list mechanisms with ε, δ and bits per report")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--k", type=int, default=None, help="SSTQ coordinates per report (default dim/16)")
    p.add_argument("--levels", type=int, default=4)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--clip", type=float, default=1.0)
    p.set_defaults(func=cmd_mechanisms)

    p = sub.add_parser("demo", help="the flagship showcase on embedded defaults")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--n", type=_count, default=2000, help="inputs to encode")
    p.add_argument("--epsilon", type=float, default=4.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("aggregators", help="robust aggregation rules with their published (f, κ) bounds")
    p.add_argument("--n", type=int, default=21)
    p.add_argument("--f", type=int, default=5)
    p.set_defaults(func=cmd_aggregators)

    audit = sub.add_parser("audit", help="run one audit").add_subparsers(dest="audit", required=True)
    p = audit.add_parser("robustness", help="estimate a rule's (f, ν)-robustness constant from below")
    p.add_argument("--aggregator", default="nnm+cwtm", help="registry spec, e.g. cwtm, krum, nnm+cwtm")
    p.add_argument("--n", type=int, default=21)
    p.add_argument("--f", type=int, default=5)
    p.add_argument("--d", type=int, default=100)
    p.add_argument("--trials", type=_count, default=200)
    p.add_argument("--attacks", default="all")
    p.add_argument("--search-evals", type=int, default=60)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_audit_robustness)
    p = audit.add_parser("ldp", help="certify a lower bound on a randomizer's LDP ε")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--mechanism", default="sstq", help="registry name (see `fedaudit mechanisms`)")
    src.add_argument("--sampler", default=None, help="package.module:function, a black box sampler(x, size, rng)")
    p.add_argument("--dim", type=int, default=None)
    p.add_argument("--k", type=int, default=None)
    p.add_argument("--levels", type=int, default=4)
    p.add_argument("--epsilon", type=float, default=None, help="the claimed ε (default: the mechanism's)")
    p.add_argument("--delta", type=float, default=None)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--samples", type=_count, default=1_000_000, help="draws per input")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--test", default="auto")
    p.add_argument("--pair", default="antipodal", choices=("antipodal", "flat", "zero-boundary", "search"))
    p.add_argument("--search-samples", type=_count, default=20_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_audit_ldp)

    p = audit.add_parser("variance", help="MSE against d/k for SSTQ next to vqSGD and PrivUnitG")
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--k", type=_int_list, default=[16, 32, 64, 128, 256])
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--levels", type=int, default=2)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--samples", type=_count, default=20000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="write a log–log PNG here")
    p.add_argument("--json", default=None, help="write the curve as JSON here")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_audit_variance)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except FedAuditError as exc:
        err.print(f"fedaudit: error: {exc}", highlight=False, markup=False, soft_wrap=True)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
