"""The ``fedaudit`` argument parser (:func:`build_parser`): every command that is not a claim
kind's twin, with its flags and help; the claim kinds' commands (``audit ldp``, ``stress``, …)
are generated from their plan keys by :mod:`fedaudit.cli.kinds`.
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
                                   cmd_aggregators, cmd_audit_scores, cmd_demo, cmd_diff, cmd_list, cmd_mechanisms,
                                   cmd_plans, cmd_run, cmd_export_registry,
                                   cmd_keygen, cmd_sign, cmd_sparse, cmd_verify)
from fedaudit.cli.options import (engine_options, mech_param_option, plan_engine_options, progress_options,
                                  renamed_flag, report_dir_options, sparse_model_options)


PLAN_REFERENCE = "docs/plans.md"

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
    "audit scores": ("fedaudit audit scores in.npy out.npy --delta 1e-5",
                     "fedaudit audit scores in.npy out.npy --delta 1e-5 --selection bonferroni --thresholds 0.5,1,2"),
    "sparse": ("fedaudit sparse", "fedaudit sparse --method fediht --dataset digits --rounds 50"),
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
               "fedaudit verify report/ --plan plan.toml",
               "fedaudit verify report/ --public-key keys/ed25519-public.pem --require-signature",
               "fedaudit verify report/ --signer 5b2e0c4f8d1a9e7b3c6f0a2d4e8b1c7f9a3d5e2b8c0f4a6d1e9b7c3f5a8d2e0b"),
    "sign": ("fedaudit sign reports/demo --key-file report.key",
             "fedaudit sign reports/demo --key-file keys/ed25519-private.pem",
             "fedaudit sign reports/demo --key-file keys/ed25519-private.pem --passphrase-env "
             "FEDAUDIT_SIGNING_PASSPHRASE"),
    "keygen": ("fedaudit keygen --out keys --name 'Privacy team <privacy@example.org>'",
               "fedaudit keygen --private-key signer.pem --public-key signer.pub.pem --passphrase-env "
               "FEDAUDIT_SIGNING_PASSPHRASE"),
    "diff": ("fedaudit diff last-week/ reports/accounting",
             "fedaudit diff old/report.json new/ --format markdown --out diff.md",
             "fedaudit diff old/ new/ --rel-tol 0.1 --abs-tol 0.05 --fail-on any"),
    "export-registry": ("fedaudit export-registry reports/demo",
                        "fedaudit export-registry reports/demo --out registry.json"),
}

_RUN_EPILOG = (f"Every claim kind and plan key, with types, ranges and defaults: {PLAN_REFERENCE} in the source "
               "tree (generated from the schema), or print it with `python -m fedaudit.experiments.plan_reference`. "
               "The shipped plans (fedaudit plans lists them) run by name: fedaudit run accounting --out DIR. Exit codes: 0 every claim met its "
               "expectation, 1 some claim did not, 2 bad input, 130 interrupted and 143 terminated (SIGTERM; "
               "rerun with --resume); every command's: fedaudit --help.")


def build_parser() -> argparse.ArgumentParser:
    """The ``fedaudit`` argument parser (every option has help text)."""
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
    report_dir_options(p, "report directory (must be empty or new unless --force or --resume)", required=True,
                       force_help="write into a non-empty report directory (starts over)",
                       resume_help="continue an interrupted run into --out: claims with a checkpoint are not "
                                   "recomputed (checkpoints of a different plan are refused)")
    plan_engine_options(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("aggregators", help="robust aggregation rules with their published (f, κ) bounds")
    p.add_argument("--n", type=int, default=21, help="number of clients n (default 21)")
    p.add_argument("--f", type=int, default=5, help="number of Byzantine clients f (default 5)")
    p.set_defaults(func=cmd_aggregators)

    audit = sub.add_parser("audit", help="run one audit").add_subparsers(dest="audit", required=True, metavar="AUDIT",
                                                                         parser_class=Parser)
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
    p.add_argument("--accountant", default="all",
                   help="basic, advanced, pld, any registered accountant (dpa-rdp, ...) or a package.module:attr "
                        "reference, comma-separated, or all (basic, advanced, pld; default)")
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
                       help="pld (default), rdp, prv, dpa-rdp, another registered accountant or a "
                            "package.module:attr reference, comma-separated, or all (pld, rdp, prv)")
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

    p = sub.add_parser("verify", help="check a report's schema, digest, renderings (SHA-256 each) and signatures "
                                      "(HMAC key from --key-file or FEDAUDIT_REPORT_KEY: an HMAC-signed report without "
                                      "the key exits 1; Ed25519 against --public-key or --signer, and who signed; an "
                                      "unsigned report, or one whose Ed25519 signature no key checked, is 'integrity "
                                      "only')")
    p.add_argument("report", help="report.json, or a report directory holding one (renderings are looked up "
                                  "beside it); read as data only, nothing in it is imported or run")
    p.add_argument("--key-file", default=None,
                   help="file holding the HMAC key (one trailing newline is ignored); overrides FEDAUDIT_REPORT_KEY")
    p.add_argument("--require-signature", action="store_true",
                   help="exit 1 unless the report carries a verified signature: HMAC valid under the key, or "
                        "Ed25519 by --public-key/--signer (an unsigned report proves only that its files agree with "
                        "each other, not who wrote them)")
    p.add_argument("--plan", default=None, metavar="PLAN.toml",
                   help="exit 1 unless the report was made from this plan file (its SHA-256, and the plan text "
                        "the report embeds); read as data, nothing it names is imported")
    p.add_argument("--public-key", default=None, metavar="PUBLIC.pem",
                   help="the signer's Ed25519 public key (fedaudit keygen): exit 1 unless the folder's "
                        "signature.ed25519.json verifies, is by this key and binds this report, plan, code, seeds and "
                        "environment; without it (or --signer) an Ed25519 signature is 'present but unverified'")
    p.add_argument("--signer", default=None, metavar="FINGERPRINT",
                   help="pin the Ed25519 signer: exit 1 unless the signature is by the key with this fingerprint "
                        "(the 64 hex digits keygen and sign print; SHA-256 of the raw public key)")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("diff", help="compare two reports claim by claim: verdicts, certified bounds and accountant ε "
                                    "that moved beyond their noise, configurations, plans; exit 1 when a privacy "
                                    "claim got worse",
                       description="Compare two report folders claim by claim (matched by claim id): verdicts that "
                                   "changed, the numbers each claim's kind declares (certified bounds, accountant "
                                   "ε, ν̂) that moved beyond their recorded intervals or, for numbers recorded as "
                                   "points, beyond max(--abs-tol, --rel-tol × |old|), the claims' parameters, added "
                                   "and removed claims, the claims' self-tests, the deployment facts and the "
                                   "privacy hazards they leave open (a weakened fact is worse: a smaller privacy "
                                   "unit, more trust, pure → approximate DP), the plans (hash and a unified diff of "
                                   "their texts) and the versions that computed them. Both reports are checked as `fedaudit verify` "
                                   "checks them first; one that is not intact is exit 2. Exit 1 when, under "
                                   "--fail-on, something got worse beyond its noise, else 0.")
    p.add_argument("old", metavar="OLD", help="the earlier report: a report folder or its report.json (read as data "
                                              "only, nothing in it is imported or run)")
    p.add_argument("new", metavar="NEW", help="the later report: a report folder or its report.json")
    p.add_argument("--rel-tol", type=float, default=0.05,
                   help="a number recorded as a point (no interval) counts as moved when it changes by more than "
                        "this share of its old value (default 0.05), and by more than --abs-tol")
    p.add_argument("--abs-tol", type=float, default=0.01,
                   help="the smallest move of a number recorded as a point that counts (default 0.01)")
    p.add_argument("--fail-on", default="privacy", choices=("privacy", "any", "none"),
                   help="exit 1 when: a privacy claim's verdict, number or self-test, or a deployment fact or "
                        "hazard, got worse (privacy, default); any claim's or deployment fact got worse or a claim "
                        "was removed (any); never (none)")
    p.add_argument("--format", default="text", choices=("text", "markdown", "html", "json"),
                   help="text (default), markdown (a pull-request comment), html (one self-contained page) or json")
    p.add_argument("--out", default=None, metavar="FILE",
                   help="write the comparison here instead of stdout (the summary line is still printed)")
    p.add_argument("--key-file", default=None,
                   help="file holding the HMAC key: both reports must then carry a valid signature under it "
                        "(overrides FEDAUDIT_REPORT_KEY; without a key signatures are not checked)")
    p.add_argument("--public-key", default=None, metavar="PUBLIC.pem",
                   help="an Ed25519 public key (fedaudit keygen): both reports must carry an Ed25519 signature by it "
                        "that binds the folder's facts")
    p.add_argument("--signer", default=None, metavar="FINGERPRINT",
                   help="both reports must carry an Ed25519 signature by the key with this fingerprint (64 hex "
                        "digits, as keygen and verify print it)")
    p.set_defaults(func=cmd_diff)

    p = sub.add_parser("sign", help="sign a written report with the key in --key-file, as a step after the run "
                                    "(so that no plugin of the run can read the key): an Ed25519 private key writes "
                                    "signature.ed25519.json, an HMAC key seals report.json; refuses a report that is "
                                    "not intact")
    p.add_argument("report", help="report directory (or its report.json)")
    p.add_argument("--key-file", required=True,
                   help="an Ed25519 private key (PEM, from fedaudit keygen): a detached signature that only its "
                        "holder can make; or a file holding an HMAC key (one trailing newline is ignored), e.g. made "
                        "by: python3 -c \"import secrets; print(secrets.token_hex(32))\" > report.key")
    p.add_argument("--passphrase-env", default=None, metavar="VAR",
                   help="the environment variable holding the passphrase of an encrypted private key")
    p.add_argument("--force", action="store_true", help="replace a signature made under another key")
    p.set_defaults(func=cmd_sign)

    p = sub.add_parser("keygen", help="make an Ed25519 key pair for fedaudit sign: a private key (PEM PKCS#8, "
                                      "mode 0600) and the public key verifiers pass to fedaudit verify --public-key",
                       description="Make an Ed25519 key pair. The private key signs reports (fedaudit sign DIR "
                                   "--key-file PRIVATE.pem) and stays with its holder; the public key (or its "
                                   "fingerprint, printed here) lets anyone check who signed, and no one without "
                                   "the private key can sign. Existing files are never replaced without --force.")
    p.add_argument("--out", default=None, metavar="KEYDIR",
                   help="write KEYDIR/ed25519-private.pem and KEYDIR/ed25519-public.pem (KEYDIR is made, mode 0700)")
    p.add_argument("--private-key", default=None, metavar="FILE", help="instead of --out: the private key file")
    p.add_argument("--public-key", default=None, metavar="FILE", help="instead of --out: the public key file")
    p.add_argument("--name", default=None,
                   help="the signer's name or identity (one line), stored in both files and bound in every "
                        "signature; verify prints it")
    p.add_argument("--passphrase-env", default=None, metavar="VAR",
                   help="encrypt the private key with the passphrase in this environment variable (e.g. "
                        "FEDAUDIT_SIGNING_PASSPHRASE, which fedaudit never passes to a worker process)")
    p.add_argument("--force", action="store_true", help="replace existing key files")
    p.set_defaults(func=cmd_keygen)

    p = sub.add_parser("export-registry",
                       help="write a report's deployment facts as DP Deployments Registry tier fields (JSON); the "
                            "report is verified first and read as data")
    p.add_argument("report", help="report directory (or its report.json); nothing in it is imported or run")
    p.add_argument("--out", default=None, metavar="FILE.json", help="write the JSON here instead of stdout")
    p.add_argument("--key-file", default=None,
                   help="file holding the HMAC key: the report must then carry a valid HMAC signature (overrides "
                        "FEDAUDIT_REPORT_KEY)")
    p.add_argument("--public-key", default=None, metavar="PUBLIC.pem",
                   help="an Ed25519 public key (fedaudit keygen): the folder must carry a signature by it that binds "
                        "its facts")
    p.add_argument("--signer", default=None, metavar="FINGERPRINT", help="pin the Ed25519 signer's fingerprint")
    p.set_defaults(func=cmd_export_registry)
    add_kind_commands({(): sub, ("audit",): audit}, progress)
    add_examples(parser)
    return parser


def renamed_command(argv: Sequence[str]) -> list[str]:
    """``argv`` with a renamed command (:data:`RENAMED_COMMANDS`, e.g. ``account fedavg``) spelled
    the new way, and a one-line note saying so; other command lines are returned unchanged."""
    from fedaudit.cli.progress import note
    from fedaudit.deprecation import flag_note

    argv = list(argv)
    words = [i for i, a in enumerate(argv) if not a.startswith("-")][:2]
    if len(words) == 2 and words[1] == words[0] + 1:
        old = (argv[words[0]], argv[words[1]])
        if old in RENAMED_COMMANDS:
            new = RENAMED_COMMANDS[old]
            note(flag_note(f"'fedaudit {' '.join(old)}'", f"'fedaudit {' '.join(new)}'"), quiet=False)
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
