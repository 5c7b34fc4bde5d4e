"""The ``fedaudit`` argument parser (:func:`build_parser`): every command that is not a claim
kind's twin, with its flags and help.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Iterator, Sequence

import fedaudit
from fedaudit.cli.argtypes import Parser, count_arg
from fedaudit.cli.exitcodes import exit_code_table
from fedaudit.cli.kinds import add_kind_commands, examples_epilog
from fedaudit.cli.handlers import (LISTINGS, cmd_account_compose, cmd_account_dpsgd, cmd_account_shuffle,
                                   cmd_aggregators, cmd_audit_dpsgd, cmd_audit_fedavg_dp, cmd_audit_ldp,
                                   cmd_audit_robustness, cmd_audit_scores, cmd_audit_sparse_upload,
                                   cmd_demo, cmd_list, cmd_mechanisms, cmd_plans, cmd_run, cmd_sign, cmd_sparse,
                                   cmd_stress, cmd_verify)
from fedaudit.cli.options import (agg_param_option, engine_options, mech_param_option, plan_engine_options,
                                  progress_options, renamed_flag, sparse_model_options)


PLAN_REFERENCE = "docs/plans.md"

#: the claim kinds whose command is still written by hand (every other kind's is generated from
#: its plan keys: :mod:`fedaudit.cli.kinds`)
HAND_WRITTEN_KINDS = frozenset({"ldp", "robustness", "dpsgd", "dp-fedavg", "sparse-upload", "stress"})

#: commands renamed since an earlier release, old path -> new path (issue #24: one spelling of
#: DP-FedAvg): the old spelling still runs, with a one-line note (:func:`renamed_command`)
RENAMED_COMMANDS: dict[tuple[str, str], tuple[str, str]] = {
    ("audit", "fedavg-dp"): ("audit", "dp-fedavg"),
    ("account", "fedavg"): ("account", "dp-fedavg"),
}

#: example command lines of every hand-written command (and group), shown at the end of its
#: ``--help``; the first is the command's example in docs/index.md
EXAMPLES: dict[str, tuple[str, ...]] = {
    "fedaudit": ("fedaudit demo", "fedaudit run accounting --out reports/accounting",
                 "fedaudit audit ldp --mechanism sstq --dim 64 --epsilon 1", "fedaudit audit --help"),
    "mechanisms": ("fedaudit mechanisms", "fedaudit mechanisms --dim 64 --epsilon 2"),
    "list": ("fedaudit list aggregators", "fedaudit list kinds"),
    "demo": ("fedaudit demo", "fedaudit demo --out reports/demo --resume", "fedaudit demo --showcase --dim 256"),
    "plans": ("fedaudit plans",),
    "run": ("fedaudit run accounting --out reports/accounting",
            "fedaudit run plan.toml --out report --resume --backend process --workers 4"),
    "aggregators": ("fedaudit aggregators", "fedaudit aggregators --n 31 --f 7"),
    "audit": ("fedaudit audit ldp --mechanism sstq --dim 64 --epsilon 1", "fedaudit audit robustness --aggregator krum",
              "fedaudit audit variance --dim 1024 --ks 16 32 64"),
    "audit robustness": ("fedaudit audit robustness --aggregator nnm+cwtm --n 21 --f 5",
                         "fedaudit audit robustness --aggregator bucketing+cwtm --agg-param s=2 --json robust.json"),
    "audit ldp": ("fedaudit audit ldp --mechanism sstq --dim 64 --epsilon 1 --samples 200000",
                  "fedaudit audit ldp --mechanism rr --dim 4 --pair search --json ldp.json",
                  "fedaudit audit ldp --sampler mypkg.noise:sample --dim 1 --epsilon 1"),
    "audit scores": ("fedaudit audit scores in.npy out.npy --delta 1e-5",
                     "fedaudit audit scores in.npy out.npy --delta 1e-5 --selection bonferroni --thresholds 0.5,1,2"),
    "audit dpsgd": ("fedaudit audit dpsgd --noise-multiplier 1 --sample-rate 0.1 --steps 100",
                    "fedaudit audit dpsgd --noise-multiplier 0.2 --claimed-noise-multiplier 2 --sample-rate 0.1 "
                    "--steps 50 --plot dpsgd.png"),
    "audit dp-fedavg": ("fedaudit audit dp-fedavg --noise-multiplier 1 --sample-rate 0.5 --rounds 20",
                        "fedaudit audit dp-fedavg --noise-multiplier 0.4 --claimed-noise-multiplier 4 --sample-rate 0.5 "
                        "--rounds 10 --json fedavg.json"),
    "audit sparse-upload": ("fedaudit audit sparse-upload", "fedaudit audit sparse-upload --upload private --pair worst"),
    "sparse": ("fedaudit sparse", "fedaudit sparse --method fediht --dataset digits --rounds 50"),
    "stress": ("fedaudit stress --out stress-results",
               "fedaudit stress --aggregators cwtm,krum --attacks alie,ipm --f 1,3 --beta 0.5,1 --out stress-results"),
    "account": ("fedaudit account dpsgd --noise-multiplier 1.1 --sample-rate 0.01 --steps 1000",
                "fedaudit account shuffle --n 10000 --eps0 1"),
    "account compose": ("fedaudit account compose --epsilon 0.5 --uses 100",
                        "fedaudit account compose --epsilon 1 --uses 50 --mechanism rr --dim 4 --accountant pld"),
    "account dpsgd": ("fedaudit account dpsgd --noise-multiplier 1.1 --sample-rate 0.01 --steps 1000",
                      "fedaudit account dpsgd --target-epsilon 3 --sample-rate 0.01 --steps 1000 --accountant all"),
    "account dp-fedavg": ("fedaudit account dp-fedavg --noise-multiplier 1 --sample-rate 0.1 --rounds 500",
                          "fedaudit account dp-fedavg --target-epsilon 2 --sample-rate 0.1 --rounds 500 --plot eps.png"),
    "account shuffle": ("fedaudit account shuffle --n 10000 --eps0 1",
                        "fedaudit account shuffle --n 10000 --eps0 2 --k 8 --accountant blanket"),
    "verify": ("fedaudit verify reports/demo", "fedaudit verify report/ --key-file report.key --require-signature",
               "fedaudit verify report/ --plan plan.toml"),
    "sign": ("fedaudit sign reports/demo --key-file report.key",),
}

_RUN_EPILOG = (f"Every claim kind and plan key, with types, ranges and defaults: {PLAN_REFERENCE} in the source "
               "tree (generated from the schema), or print it with `python -m fedaudit.experiments.plan_reference`. "
               "The shipped plans (fedaudit plans lists them) run by name: fedaudit run accounting --out DIR. Exit codes: 0 every claim met its "
               "expectation, 1 some claim did not, 2 bad input, 130 interrupted and 143 terminated (SIGTERM; "
               "rerun with --resume); every command's: fedaudit --help.")


def build_parser() -> argparse.ArgumentParser:
    """The ``fedaudit`` argument parser (every option has help text)."""
    from fedaudit.audit.pairs import LDP_PAIRS

    parser = Parser(prog="fedaudit", formatter_class=argparse.RawDescriptionHelpFormatter,
                     description="Audit the privacy and Byzantine robustness of federated learning.",
                     epilog=exit_code_table())
    parser.add_argument("--version", action="version", version=f"fedaudit {fedaudit.__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    progress = progress_options()

    p = sub.add_parser("mechanisms", help="list mechanisms with ε, δ and bits per report")
    p.add_argument("--dim", type=int, default=1024, help="input dimension d (default 1024)")
    p.add_argument("--k", type=int, default=None, help="SSTQ coordinates per report (default dim/16)")
    p.add_argument("--levels", type=int, default=4, help="quantization levels s of SSTQ (default 4)")
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy parameter ε of every mechanism (default 1)")
    p.add_argument("--delta", type=float, default=1e-5, help="δ of the Gaussian mechanism (default 1e-5)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clip radius of the inputs (default 1)")
    p.set_defaults(func=cmd_mechanisms)

    p = sub.add_parser("list", help="list the registered components of one kind, with a one-line summary each")
    p.add_argument("what", choices=LISTINGS, help="which registry: " + ", ".join(LISTINGS))
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("demo", parents=[progress], epilog=_RUN_EPILOG,
                       help="run the shipped demo plan into reports/demo/ (--showcase: the mechanism tour)")
    p.add_argument("--out", default="reports/demo", help="report directory (overwritten; default reports/demo)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted demo in --out instead of starting over (finished claims are kept)")
    p.add_argument("--showcase", action="store_true",
                   help="instead, encode and decode random inputs with every mechanism (the earlier demo)")
    p.add_argument("--dim", type=int, default=None, help="showcase: dimension (default 1024; implies --showcase)")
    p.add_argument("--n", type=count_arg, default=None, help="showcase: inputs to encode (default 2000; implies --showcase)")
    p.add_argument("--epsilon", type=float, default=None, help="showcase: ε (default 4; implies --showcase)")
    p.add_argument("--seed", type=int, default=None, help="showcase: seed (default 0; implies --showcase)")
    plan_engine_options(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("plans", help="list the plans shipped with fedaudit (run one with fedaudit run NAME --out DIR)")
    p.set_defaults(func=cmd_plans)

    p = sub.add_parser("run", parents=[progress], epilog=_RUN_EPILOG,
                       help="check every claim of a TOML plan and write report.json/.html/.md",
                       description="Check every claim of a TOML plan and write report.json, report.html and "
                                   "report.md into --out. Each finished claim is checkpointed in "
                                   "OUT/.checkpoint/, so an interrupted run continues with --resume.")
    p.add_argument("plan", help=f"the plan: a TOML file (a [plan] table and [[claim]] tables; keys: {PLAN_REFERENCE}) "
                                "or the name of a shipped plan (fedaudit plans lists them)")
    p.add_argument("--out", required=True, help="report directory (must be empty or new unless --force or --resume)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="write into a non-empty report directory (starts over)")
    mode.add_argument("--resume", action="store_true",
                      help="continue an interrupted run into --out: claims with a checkpoint are not recomputed "
                           "(checkpoints of a different plan are refused)")
    plan_engine_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("aggregators", help="robust aggregation rules with their published (f, κ) bounds")
    p.add_argument("--n", type=int, default=21, help="number of clients n (default 21)")
    p.add_argument("--f", type=int, default=5, help="number of Byzantine clients f (default 5)")
    p.set_defaults(func=cmd_aggregators)

    audit = sub.add_parser("audit", help="run one audit").add_subparsers(dest="audit", required=True, metavar="AUDIT",
                                                                         parser_class=Parser)
    p = audit.add_parser("robustness", parents=[progress], help="estimate a rule's (f, ν)-robustness constant from below (exit 1: above the "
                                            "published bound, or unbounded)")
    p.add_argument("--aggregator", default="nnm+cwtm",
                   help="registry spec, e.g. cwtm, krum, nnm+cwtm, or a stage package.module:attr (default nnm+cwtm)")
    agg_param_option(p)
    p.add_argument("--n", type=int, default=21, help="number of input vectors n (default 21)")
    p.add_argument("--f", type=int, default=5, help="number of Byzantine vectors f, n > 2f (default 5)")
    p.add_argument("--d", type=int, default=100, help="dimension of the vectors (default 100)")
    p.add_argument("--trials", type=count_arg, default=200, help="honest draws spread over shapes × attacks (default 200)")
    p.add_argument("--attacks", default="all", help="comma-separated attack names, or 'all' (default)")
    p.add_argument("--search-evals", type=int, default=60,
                   help="evaluations of the final search around the worst configuration (default 60)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    engine_options(p, "the attack trials and the optimiser's local runs",
                    checkpoint="chunk of trials or optimiser runs")
    p.set_defaults(func=cmd_audit_robustness)
    p = audit.add_parser("ldp", parents=[progress], help="certify a lower bound on a randomizer's LDP ε")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--mechanism", default="sstq",
                     help="registry name (see `fedaudit mechanisms`) or package.module:attr factory (default sstq)")
    src.add_argument("--sampler", default=None,
                     help="package.module:function, a black box sampler(x, size, rng); modules in the working "
                          "directory are found, as with `python -m`")
    mech_param_option(p)
    p.add_argument("--dim", type=int, default=None, help="input dimension (default 64; required with --sampler)")
    p.add_argument("--k", type=int, default=None, help="SSTQ coordinates per report (default dim/16)")
    p.add_argument("--levels", type=int, default=4, help="quantization levels (default 4)")
    p.add_argument("--epsilon", type=float, default=None, help="the claimed ε (default: the mechanism's)")
    p.add_argument("--delta", type=float, default=None,
                   help="the claimed δ, and the Gaussian mechanism's δ (default 1e-5 for it; 0 is passed on as 0)")
    p.add_argument("--clip", type=float, default=1.0, help="L2 clip radius of the inputs (default 1)")
    p.add_argument("--samples", type=count_arg, default=1_000_000, help="draws per input (default 1e6)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bound, in (0, 1)")
    p.add_argument("--distinguisher", default="auto",
                   help="the test that tells the two inputs' reports apart: auto, likelihood-ratio, black-box, column, ...")
    renamed_flag(p, "--test", "--distinguisher")
    p.add_argument("--pair", default="antipodal", choices=(*LDP_PAIRS, "search"),
                   help="the audited input pair, or 'search' for the worst pair found (default antipodal)")
    p.add_argument("--search-samples", type=count_arg, default=20_000,
                   help="draws per input per candidate pair with --pair search (default 20000)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    engine_options(p, "the candidate audits and the audit's draws", checkpoint="certification chunk")
    p.set_defaults(func=cmd_audit_ldp)

    p = audit.add_parser("scores", help="certify a lower bound on ε from attack scores of runs with and without "
                                        "the target (.npy files)")
    p.add_argument("scores_in", metavar="IN.npy", help="1-D scores of runs on the input with the target")
    p.add_argument("scores_out", metavar="OUT.npy", help="1-D scores of runs on the neighbouring input without it")
    p.add_argument("--delta", type=float, required=True, help="the claimed δ, in [0, 1)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bound, in (0, 1)")
    p.add_argument("--selection", default="split", choices=("split", "bonferroni"),
                   help="split: choose the threshold on part of the scores, certify on the rest (default); "
                        "bonferroni: every --thresholds value on all scores, confidence split over them")
    p.add_argument("--fraction", type=float, default=0.5, help="split: share of each score set that selects (default 0.5)")
    p.add_argument("--thresholds", default=None, metavar="T1,T2,...",
                   help="bonferroni: comma-separated thresholds fixed before seeing the scores (required there)")
    p.add_argument("--seed", type=int, default=0, help="split: seed of the random split (default 0)")
    p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
    p.set_defaults(func=cmd_audit_scores)

    for name, count in (("dpsgd", "--steps"), ("dp-fedavg", "--rounds")):
        dpsgd = name == "dpsgd"
        p = audit.add_parser(name, parents=[progress],
                             help=("train once with Opacus DP-SGD and canaries" if dpsgd else
                                   "train DP-FedAvg once with canary clients (client level)")
                                  + "; certified one-run bounds next to the accountant's ε (exit 1: violation)")
        p.add_argument("--noise-multiplier", type=float, required=True,
                       help="the noise multiplier training uses (" + ("> 0" if dpsgd else ">= 0") + ")")
        p.add_argument("--claimed-noise-multiplier", type=float, default=None,
                       help="what the accountant is told (default: --noise-multiplier); e.g. 10x the real one "
                            "for the under-calibrated run the audit must flag")
        p.add_argument("--sample-rate", type=float, required=True,
                       help="Poisson sampling rate of " + ("examples per step" if dpsgd else "clients per round")
                            + ", in (0, 1]")
        p.add_argument(count, type=count_arg, required=True, help=f"training {count[2:]}, >= 1")
        p.add_argument("--delta", type=float, default=1e-5, help="δ of the accountant and the bounds (default 1e-5)")
        p.add_argument("--canaries", type=count_arg, default=1000,
                       help="canaries, each included with probability 1/2 (default 1000)")
        p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bounds (default 0.95)")
        if dpsgd:
            p.add_argument("--max-grad-norm", type=float, default=1.0, help="per-example clipping norm C (default 1)")
            p.add_argument("--dataset", default="digits", help="digits (default) or synthetic")
            p.add_argument("--threat", default="white-box",
                           help="white-box (gradient canaries, default) or black-box (mislabelled inputs, final loss)")
            p.add_argument("--accountant", default="pld", help="pld (default), rdp or prv")
            p.add_argument("--learning-rate", type=float, default=0.5, help="SGD step size (default 0.5)")
        else:
            p.add_argument("--clip", type=float, default=1.0, help="L2 clipping norm C of client updates (default 1)")
            p.add_argument("--clients", type=count_arg, default=50, help="honest clients (default 50)")
            p.add_argument("--dataset", default="synthetic", help="synthetic (default) or digits")
            p.add_argument("--local-lr", type=float, default=0.5, help="clients' local step size (default 0.5)")
            p.add_argument("--local-steps", type=count_arg, default=1, help="local steps per round (default 1)")
            p.add_argument("--server-lr", type=float, default=1.0, help="server step size (default 1)")
        p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
        p.add_argument("--json", default=None, help="write the audit as JSON here (checked before the audit runs)")
        p.add_argument("--plot", default=None, help=f"draw the accountant's ε against {count[2:]} with the audited "
                                                    f"bounds here (.png, .svg, .pdf, …; checked first)")
        engine_options(p, "the --plot's accountant ε points (the training run itself is sequential)")
        p.set_defaults(func=cmd_audit_dpsgd if dpsgd else cmd_audit_fedavg_dp)

    p = audit.add_parser("sparse-upload", parents=[progress],
                         help="certified ε lower bounds of the gated sparse upload (plain and private) on "
                              "neighbouring client datasets (exit 1: the private bound exceeds its stated ε)")
    p.add_argument("--upload", default="both", choices=("plain", "private", "both"),
                   help="which upload to audit (default both)")
    sparse_model_options(p, rounds=False)
    p.add_argument("--dim", type=count_arg, default=64, help="parameters |θ| of the client's linear model (default 64)")
    p.add_argument("--records", type=count_arg, default=20, help="records in the client's local dataset (default 20)")
    p.add_argument("--local-steps", type=count_arg, default=5, help="local training steps per upload (default 5)")
    p.add_argument("--epsilon", type=float, default=1.0, help="stated ε of the private upload, > 0 (default 1)")
    p.add_argument("--samples", type=count_arg, default=4000, help="uploads drawn per dataset (default 4000)")
    p.add_argument("--pair", default=None, choices=("data", "worst", "both"),
                   help="private upload: neighbouring client datasets (data), the mechanism's worst input pair, "
                        "which audits the stated ε (worst), or both (default both; the plain upload: data)")
    p.add_argument("--worst-samples", type=count_arg, default=100_000,
                   help="draws per input of the worst-pair audit (default 100000)")
    p.add_argument("--plain-epsilon", type=float, default=None,
                   help="an ε claimed for the plain upload, > 0: exit 1 when its certified bound exceeds it "
                        "(default: no claim, the bound is reported)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the certified bounds (default 0.95)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the audits as JSON here (checked before the audit runs)")
    engine_options(p, "the audits' draws",
                    checkpoint="certification chunk (--upload both: the private upload's in FILE.private; with "
                               "--pair both, the worst pair's in FILE[.private].worst)")
    p.set_defaults(func=cmd_audit_sparse_upload)

    p = sub.add_parser("sparse", parents=[progress],
                       help="train a sparse federated model (E-FLoPS, Fed-IHT, FedAvg + pruning): test metric, "
                            "support recovery, realised density, bytes per client per round")
    p.add_argument("--method", default="eflops", metavar="NAME",
                   help="a sparse method of fedaudit.fl.registry.SPARSE_METHODS: eflops (probabilistic gates, "
                        "default), fediht or fed-ht (Fed-HT), fediter-ht (FedIter-HT), fedavg-prune (FedAvg, then "
                        "magnitude pruning), or a registered method of your own / 'package.module:attr'")
    p.add_argument("--dataset", default="synthetic", choices=("synthetic", "digits"),
                   help="synthetic (planted sparse regression, d >> N; default) or digits (8x8, classification)")
    sparse_model_options(p, rounds=True)
    p.add_argument("--upload", default="dense", choices=("gated", "dense"),
                   help="eflops only: dense (weights and gates in full; default) or gated (top m coordinates by "
                        "gate, votes rule with error feedback; on the synthetic data R2 0.57 against 0.85 dense at "
                        "100 rounds)")
    p.add_argument("--seed", type=int, default=0, help="root seed (default 0)")
    p.add_argument("--json", default=None, help="write the run as JSON here (checked before training)")
    p.set_defaults(func=cmd_sparse)

    p = sub.add_parser("stress", parents=[progress],
                       help="train over aggregators × attacks × f × β and map where robustness breaks")
    p.add_argument("--dataset", default="digits", help="digits, mnist (needs --data-path) or synthetic")
    p.add_argument("--data-path", default=None, help="MNIST files (IDX directory or .npz)")
    p.add_argument("--aggregators", default="cwtm,nnm+cwtm,krum,gm",
                   help="comma-separated registry specs (`fedaudit list aggregators`); a stage may be package.module:attr")
    agg_param_option(p)
    p.add_argument("--attacks", default="alie,ipm,signflip,minmax", help="comma-separated attack names")
    p.add_argument("--f", default="1,3,5", help="comma-separated Byzantine counts (each < --n-honest)")
    p.add_argument("--declared-f", type=int, default=None,
                   help="f every rule is configured for (default: each cell's f); below f the rule may break down")
    p.add_argument("--beta", default="0.5,1,5", help="comma-separated Dirichlet concentrations (> 0)")
    p.add_argument("--optimizer", default="dgd",
                   help="dgd, dnag, robust-accelerated, pigs (`fedaudit list optimizers`) or package.module:attr")
    p.add_argument("--rounds", type=int, default=300, help="training rounds per cell (default 300)")
    p.add_argument("--lr", type=float, default=0.1, help="step size of dgd and dnag (robust-accelerated, pigs set their own)")
    p.add_argument("--n-honest", type=int, default=20, help="honest clients (default 20)")
    p.add_argument("--mu", type=float, default=1e-2, help="ℓ2 regularisation")
    p.add_argument("--no-optimal-attack", action="store_true",
                   help="use the attacks' default scale instead of a line search against the aggregator")
    p.add_argument("--seed", type=int, default=0, help="root seed; each cell's seed derives from it and the cell key")
    engine_options(p, "the grid cells")
    p.add_argument("--target-accuracy", type=float, default=None,
                   help="report rounds to reach it; exit 1 if some cell never does")
    p.add_argument("--out", required=True, help="results directory (rerun to resume; one run at a time)")
    p.set_defaults(func=cmd_stress)

    account = sub.add_parser("account", help="privacy accountants: composition, shuffling, DP-SGD, DP-FedAvg"
                             ).add_subparsers(dest="account", required=True, metavar="ACCOUNTANT", parser_class=Parser)
    p = account.add_parser("compose", help="compose per-report ε (basic, advanced, PLD)")
    p.add_argument("--epsilon", required=True, metavar="E1,E2,...",
                   help="per-report ε (> 0), or a comma-separated list of them (one use each)")
    p.add_argument("--uses", type=count_arg, default=1, help="repeat the list this many times (default 1)")
    p.add_argument("--report-delta", type=float, default=0.0,
                   help="δ of each report, in [0, 1) (default 0: pure ε-LDP reports)")
    p.add_argument("--mechanism", default=None,
                   help="compose reports of this mechanism (registry name, see `fedaudit mechanisms`) at --epsilon: "
                        "pld then uses its own privacy loss distribution, e.g. k-ary RR's")
    mech_param_option(p)
    p.add_argument("--dim", type=int, default=2, help="with --mechanism: its dimension (categories for rr; default 2)")
    p.add_argument("--mechanism-delta", type=float, default=1e-5,
                   help="with --mechanism: its δ parameter (gaussian; default 1e-5)")
    p.add_argument("--delta", type=float, default=1e-6, help="total δ of the result, in (0, 1) (default 1e-6)")
    p.add_argument("--accountant", default="all", help="basic, advanced, pld, comma-separated, or all (default)")
    renamed_flag(p, "--method", "--accountant")
    p.add_argument("--json", default=None, help="write the results as JSON here (checked first)")
    p.set_defaults(func=cmd_account_compose)
    for name, what, count in (("dpsgd", "DP-SGD (example-level)", "--steps"),
                              ("dp-fedavg", "DP-FedAvg (client-level)", "--rounds")):
        p = account.add_parser(name, help=f"ε of {what} by PLD, RDP or PRV, or the noise multiplier for a target ε")
        p.add_argument("--noise-multiplier", type=float, default=None,
                       help="noise standard deviation / clipping norm, > 0 (or give --target-epsilon)")
        p.add_argument("--sample-rate", type=float, required=True,
                       help="Poisson sampling rate of " + ("examples" if name == "dpsgd" else "clients")
                            + " per " + ("step" if name == "dpsgd" else "round") + ", in (0, 1]")
        p.add_argument(count, type=count_arg, required=True, help=f"number of {count[2:]}, >= 1")
        p.add_argument("--delta", type=float, default=1e-5, help="δ, in (0, 1) (default 1e-5)")
        p.add_argument("--accountant", default="pld",
                       help="pld (default), rdp, prv, dpa-rdp or a registered one, comma-separated, or all (pld, rdp, prv)")
        renamed_flag(p, "--method", "--accountant")
        p.add_argument("--target-epsilon", type=float, default=None,
                       help="print the smallest noise multiplier with ε <= this (by the first --accountant)")
        p.add_argument("--json", default=None, help="write the accounts as JSON here (checked first)")
        p.add_argument("--plot", default=None, help=f"draw ε against {count[2:]} here (.png, .svg, .pdf, …; "
                                                    f"the target ε as a line; checked first)")
        engine_options(p, "the --plot's ε points")
        p.set_defaults(func=cmd_account_dpsgd)
    p = account.add_parser("shuffle", help="ε of n shuffled ε0-LDP reports (Feldman–McMillan–Talwar)")
    p.add_argument("--n", type=count_arg, required=True, help="number of shuffled reports, >= 1")
    p.add_argument("--eps0", type=float, required=True, help="ε0 of each local report, > 0")
    p.add_argument("--delta", type=float, default=1e-6, help="δ, in (0, 1) (default 1e-6)")
    p.add_argument("--accountant", default="all",
                   help="closed, numerical (Feldman–McMillan–Talwar), blanket (needs --k), comma-separated, or all "
                        "(default; blanket only with --k)")
    renamed_flag(p, "--method", "--accountant")
    p.add_argument("--k", type=int, default=None,
                   help="categories of k-ary randomized response, for the privacy blanket (Balle et al. 2019)")
    p.add_argument("--json", default=None, help="write the bounds as JSON here (checked first)")
    p.set_defaults(func=cmd_account_shuffle)

    p = sub.add_parser("verify", help="check a report's schema, digest, renderings (SHA-256 each) and signature "
                                      "(key from --key-file or FEDAUDIT_REPORT_KEY; a signed report without the key "
                                      "exits 1; an unsigned one is 'integrity only')")
    p.add_argument("report", help="report.json, or a report directory holding one (renderings are looked up "
                                  "beside it); read as data only, nothing in it is imported or run")
    p.add_argument("--key-file", default=None,
                   help="file holding the HMAC key (one trailing newline is ignored); overrides FEDAUDIT_REPORT_KEY")
    p.add_argument("--require-signature", action="store_true",
                   help="exit 1 unless the report carries a valid signature under the key (an unsigned report "
                        "proves only that its files agree with each other, not who wrote them)")
    p.add_argument("--plan", default=None, metavar="PLAN.toml",
                   help="exit 1 unless the report was made from this plan file (its SHA-256, and the plan text "
                        "the report embeds); read as data, nothing it names is imported")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("sign", help="sign a written report with the HMAC key in --key-file, as a step after the run "
                                    "(so that no plugin of the run can read the key); refuses a report that is "
                                    "not intact")
    p.add_argument("report", help="report directory (or its report.json)")
    p.add_argument("--key-file", required=True,
                   help="file holding the HMAC key (one trailing newline is ignored), e.g. made by: "
                        "python3 -c \"import secrets; print(secrets.token_hex(32))\" > report.key")
    p.add_argument("--force", action="store_true", help="replace a signature made under another key")
    p.set_defaults(func=cmd_sign)
    add_kind_commands({(): sub, ("audit",): audit}, progress, skip=HAND_WRITTEN_KINDS)
    add_examples(parser)
    return parser


def renamed_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with a renamed command (:data:`RENAMED_COMMANDS`, e.g. ``account fedavg``) spelled
    the new way, and a one-line note saying so; other command lines are returned unchanged."""
    from fedaudit.cli.progress import note

    argv = list(argv)
    words = [i for i, a in enumerate(argv) if not a.startswith("-")][:2]
    if len(words) == 2 and words[1] == words[0] + 1:
        old = (argv[words[0]], argv[words[1]])
        if old in RENAMED_COMMANDS:
            new = RENAMED_COMMANDS[old]
            note(f"'fedaudit {' '.join(old)}' is deprecated and will be removed in the next release; use "
                 f"'fedaudit {' '.join(new)}'", quiet=False)
            argv[words[0]:words[1] + 1] = new
    return argv


def subcommands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, str]]:
    """Every command of ``parser`` as ``(path, its parser, its one-line help)``, depth first
    (``("audit", "ldp")``); groups such as ``audit`` are listed too (argparse keeps them in a
    private list: there is no public API to walk a parser)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, child in action.choices.items():
                yield (*path, name), child, helps.get(name, "")
                yield from subcommands(child, (*path, name))


def add_examples(parser: argparse.ArgumentParser) -> None:
    """End every command's ``--help`` with its ``Examples:`` (:data:`EXAMPLES`; the generated kind
    commands already carry theirs). A command without examples is a programming error."""
    missing = []
    for path, child, _ in subcommands(parser):
        command = " ".join(path)
        if "Examples:" in (child.epilog or ""):
            continue
        if command not in EXAMPLES:
            missing.append(command)
            continue
        child.formatter_class = argparse.RawDescriptionHelpFormatter
        before = textwrap.fill(child.epilog, 100) + "\n\n" if child.epilog else ""
        child.epilog = before + examples_epilog(EXAMPLES[command])
    if missing:
        raise AssertionError(f"commands without examples: {', '.join(missing)}")
    parser.epilog = (parser.epilog or "") + "\n\n" + examples_epilog(EXAMPLES["fedaudit"])
