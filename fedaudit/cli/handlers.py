"""The command handlers ``cmd_*``: each reads its parsed flags, calls the Python API and prints
the result (exit code 0/1 as :data:`fedaudit.cli.exitcodes.EXIT_CODES` says).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import Any

from fedaudit.errors import FedAuditError
from fedaudit.reports.terminal import escape
from fedaudit.cli.argtypes import accountant_list, load_scores, mech_params, method_list, number_list
from fedaudit.cli.options import engine_command, engine_flags, plan_engine
from fedaudit.cli.outputs import save_plot, write_data, write_json, check_output_file
from fedaudit.cli.progress import PlanBars, err, out, progress_bar


def cmd_mechanisms(args: argparse.Namespace) -> int:
    from fedaudit.guarantees import PureLDP
    from fedaudit.mechanisms.registry import MECHANISMS, make_mechanism
    from fedaudit.reports.terminal import print_mechanisms

    rows = []
    for name in MECHANISMS.names():
        m = make_mechanism(name, args.dim, args.epsilon, k=args.k, levels=args.levels, clip=args.clip, delta=args.delta)
        claim = ("NOT LDP (as published)" if m.as_published
                 else ("pure" if isinstance(m.guarantee, PureLDP) else "approximate"))
        rows.append((name, m, claim))
    print_mechanisms(out, rows, dim=args.dim, k=args.k or max(1, args.dim // 16), levels=args.levels)
    return 0


def registries() -> dict[str, object]:
    """What ``fedaudit list`` lists: every open registry by the plural a user types."""
    from fedaudit.attacks.registry import ATTACKS
    from fedaudit.defenses.gossip import GOSSIP_RULES
    from fedaudit.defenses.registry import AGGREGATORS, PREAGGREGATORS
    from fedaudit.experiments.kinds import CLAIM_KINDS
    from fedaudit.fl.registry import DATASETS, OPTIMIZERS, PARTITIONS
    from fedaudit.mechanisms.registry import MECHANISMS

    return {"mechanisms": MECHANISMS, "aggregators": AGGREGATORS, "preaggregators": PREAGGREGATORS,
            "gossip-rules": GOSSIP_RULES, "attacks": ATTACKS, "optimizers": OPTIMIZERS, "partitions": PARTITIONS, "datasets": DATASETS,
            "kinds": CLAIM_KINDS}


LISTINGS = ("mechanisms", "aggregators", "preaggregators", "gossip-rules", "attacks", "optimizers", "partitions",
            "datasets", "kinds")


def cmd_list(args: argparse.Namespace) -> int:
    from fedaudit.reports.terminal import print_registry

    print_registry(out, args.what, registries()[args.what].describe())
    return 0


def cmd_plans(args: argparse.Namespace) -> int:
    from fedaudit import plans

    names = plans.available()
    width = max(map(len, names))
    for name in names:  # one plain line each: easy to read and to grep
        out.print(f"{name:<{width}}  {plans.describe(name)}", markup=False, highlight=False)
    return 0


_SHOWCASE_DEFAULTS = {"dim": 1024, "n": 2000, "epsilon": 4.0, "seed": 0}


def cmd_demo(args: argparse.Namespace) -> int:
    showcase_flags = [k for k in _SHOWCASE_DEFAULTS if getattr(args, k) is not None]
    if args.showcase or showcase_flags:  # the showcase's own options select it
        for k, v in _SHOWCASE_DEFAULTS.items():
            if getattr(args, k) is None:
                setattr(args, k, v)
        return cmd_showcase(args)
    from fedaudit.plans import plan_path

    engine = plan_engine(args)
    with plan_path("demo") as plan:  # shipped as package data: works from any directory
        return run_plan_command(plan, args.out, force=not args.resume, resume=args.resume, quiet=args.quiet,
                                print_html=True, every=args.progress_every, engine=engine, key=report_key(args),
                                allow_large=args.allow_large,
                                command=shlex.join(["fedaudit", "demo", "--out", str(args.out)]
                                                   + (["--resume"] if args.resume else []) + engine_command(args)))


def cmd_showcase(args: argparse.Namespace) -> int:
    from fedaudit.experiments.showcase import round_trips
    from fedaudit.mechanisms.registry import MECHANISMS
    from fedaudit.reports.terminal import print_showcase

    with progress_bar(len(MECHANISMS), "mechanisms", args.quiet, args.progress_every) as advance:
        rows = round_trips(args.dim, args.n, args.epsilon, args.seed, advance)
    print_showcase(out, rows, n=args.n, dim=args.dim, epsilon=args.epsilon)
    return 0


def cmd_audit_scores(args: argparse.Namespace) -> int:
    from fedaudit.audit.scores import BonferroniSelection, ScoreAuditor, SplitSelection

    check_output_file("--json", args.json)
    if args.selection == "bonferroni":
        if args.thresholds is None:
            raise FedAuditError("--selection bonferroni needs --thresholds T1,T2,... fixed before seeing the scores")
        selection = BonferroniSelection(thresholds=number_list("--thresholds", args.thresholds, float))
    else:
        if args.thresholds is not None:
            raise FedAuditError("--thresholds applies to --selection bonferroni only (split chooses its own)")
        selection = SplitSelection(fraction=args.fraction, seed=args.seed)
    scores_in, scores_out = load_scores("IN", args.scores_in), load_scores("OUT", args.scores_out)
    res = ScoreAuditor(scores_in, scores_out).epsilon_lower(confidence=args.confidence, delta=args.delta,
                                                            selection=selection)
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    write_json(args.json, res)
    return 0


def cmd_aggregators(args: argparse.Namespace) -> int:
    from fedaudit.defenses.kappa import kappa_lower_bound, kappa_upper_bound
    from fedaudit.defenses.registry import AGGREGATORS, PREAGGREGATORS, make_aggregator
    from fedaudit.reports.terminal import print_aggregators

    specs = ([(name, "aggregator") for name in AGGREGATORS.names()]
             + [(name, "pre-aggregator") for name in PREAGGREGATORS.names()])
    specs += [(f"nnm+{name}", "composition") for name in ("cwtm", "krum", "gm", "cwmed")]
    rows = []
    for name, kind in specs:
        rule = make_aggregator(name, args.f) if kind != "pre-aggregator" else None
        rows.append((name, kind, rule, kappa_upper_bound(rule, args.n, args.f) if rule is not None else None))
    print_aggregators(out, rows, n=args.n, f=args.f, lower=kappa_lower_bound(args.n, args.f))
    return 0


def _check_sparse_options(args: argparse.Namespace) -> None:
    """The shared options of ``fedaudit sparse`` and ``fedaudit audit sparse-upload``, checked before
    any work (a FedAuditError naming the flag and its range: exit 2)."""
    from fedaudit.validation import check_int, check_real

    check_real("--density", args.density, low=0.0, high=1.0, open_low=True, open_high=True)
    if args.temperature is not None:
        check_real("--temperature", args.temperature, low=0.0)
    for flag, high in (("rounds", 100_000), ("clients", 1000)):
        if hasattr(args, flag):
            check_int(f"--{flag}", getattr(args, flag), low=1, high=high)


def cmd_sparse(args: argparse.Namespace) -> int:
    """``fedaudit sparse``: train one sparse method, print its test metric, support recovery,
    realised density and bytes per client per round next to dense FedAvg."""
    from fedaudit.fl.sparse_training import train_sparse

    _check_sparse_options(args)
    check_output_file("--json", args.json)
    with progress_bar(args.rounds, "training rounds", args.quiet, args.progress_every) as advance:
        res = train_sparse(args.method, args.dataset, density=args.density, temperature=args.temperature,
                           rounds=args.rounds, clients=args.clients, seed=args.seed, upload=args.upload,
                           progress=advance)
    out.print(res.summary(), markup=False, highlight=False, soft_wrap=True)
    write_json(args.json, res)
    return 0


def cmd_account_compose(args: argparse.Namespace) -> int:
    """``fedaudit account compose``: k uses of per-report guarantees, by basic, advanced and PLD."""
    from fedaudit.accounting import METHODS, compose
    from fedaudit.guarantees import ApproxLDP
    from fedaudit.reports.terminal import print_account
    from fedaudit.validation import check_int, check_real

    check_output_file("--json", args.json)
    from fedaudit.accounting.composition import CLOSED_FORMS

    methods = accountant_list("--accountant", args.accountant, METHODS, CLOSED_FORMS)
    uses = check_int("--uses", args.uses, low=1)
    report_delta = check_real("--report-delta", args.report_delta, low=0.0, high=1.0, open_high=True)
    eps = number_list("--epsilon", args.epsilon, float) * uses
    if args.mech_param and args.mechanism is None:
        raise FedAuditError("--mech-param needs --mechanism (it sets that mechanism's own keywords)")
    if args.mechanism is not None:  # the mechanism's own PLD for pld, its guarantee for basic and advanced
        from fedaudit.mechanisms.registry import make_mechanism

        if len(eps) != uses or report_delta:
            raise FedAuditError("--mechanism takes one --epsilon (its parameter) and no --report-delta")
        from fedaudit.accounting.pld import pld_of

        mech = make_mechanism(args.mechanism, args.dim, eps[0], delta=args.mechanism_delta,
                              params=mech_params(args.mech_param))
        try:
            pld_of(mech)
            reports, pld_note = [mech] * uses, "the mechanism's own PLD (upper bound)"
        except FedAuditError:  # no PLD for this mechanism: the pair that dominates its (ε, δ) claim
            reports, pld_note = [mech.guarantee] * uses, "PLD of its (ε, δ) claim (none of its own)"
        what = f"{uses} report(s) of {mech!r}"
    else:
        reports = [ApproxLDP(e, report_delta) for e in eps] if report_delta > 0 else eps
        what = f"{len(eps)} use(s) of ε = {args.epsilon}" + (f", δ = {report_delta:g} each" if report_delta else "")
        pld_note = "dp-accounting PLD (upper bound)"
    results = {m: compose(reports, m, args.delta) for m in methods}
    rows = [(m, r.epsilon, r.delta, {"basic": "Σε", "advanced": "Kairouz–Oh–Viswanath (optimal for ε-DP)",
                                     "pld": pld_note}.get(m, "accountant (events of the reports)"))
            for m, r in results.items()]
    print_account(out, f"Composition of {what}", rows)
    write_data(args.json, {"epsilons": eps, "report_delta": report_delta, "mechanism": args.mechanism,
                            "results": {m: r.to_dict() for m, r in results.items()}})
    return 0


def cmd_account_dpsgd(args: argparse.Namespace) -> int:
    """``fedaudit account dpsgd`` / ``fedaudit account dp-fedavg``: ε of a Poisson-subsampled Gaussian
    run (per example or per client), or with --target-epsilon the noise multiplier it needs."""
    from fedaudit.reports.terminal import print_account

    check_output_file("--json", args.json)
    check_output_file("--plot", args.plot, plot=True)
    engine = engine_flags(args)
    client = args.account == "dp-fedavg"
    from fedaudit.accounting import DPSGD_METHODS

    if client:
        from fedaudit.accounting.dp_fedavg import calibrate_dp_fedavg as inverse, epsilon_dp_fedavg as account
        count, unit = args.rounds, "rounds"
    else:
        from fedaudit.accounting import calibrate_dpsgd as inverse, epsilon_dpsgd as account
        count, unit = args.steps, "steps"
    # 'all' is the built-ins; any registered accountant or module:attr reference may be named (one that
    # does not support the Poisson-subsampled Gaussian is refused by the accountant, naming those that do)
    methods = accountant_list("--accountant", args.accountant, DPSGD_METHODS)
    if (args.noise_multiplier is None) == (args.target_epsilon is None):
        raise FedAuditError("give exactly one of --noise-multiplier (to get ε) or --target-epsilon (to get the noise "
                            "multiplier it needs)")
    data: dict = {}
    notes = []
    sigma = args.noise_multiplier
    if args.target_epsilon is not None:
        sigma = inverse(args.target_epsilon, args.sample_rate, count, args.delta, methods[0])
        data["noise_multiplier_for"] = {"target_epsilon": args.target_epsilon, "method": methods[0],
                                        "noise_multiplier": sigma}
        notes.append(f"noise multiplier needed for ε ≤ {args.target_epsilon:g} at δ = {args.delta:g} after {count} "
                     f"{unit} ({methods[0]}): {sigma:.4g}")
    results = {m: account(sigma, args.sample_rate, count, args.delta, m) for m in methods}
    label = "client-level DP-FedAvg" if client else "DP-SGD"
    rows = [(m, r.epsilon, r.delta, ", ".join(f"{k} {v:g}" for k, v in r.parameters.items()
                                             if isinstance(v, (int, float)) and k not in ("noise_multiplier",
                                                                                          "sample_rate", "steps")))
            for m, r in results.items()]
    print_account(out, f"{label}: {'z' if client else 'σ'} = {sigma:.4g}, q = {args.sample_rate:g}, {count} {unit}",
                  rows, notes)
    data["accounts"] = {m: r.to_dict() for m, r in results.items()}
    if args.plot:
        from fedaudit.accounting.curves import epsilon_dpsgd_curve

        first = results[methods[0]]
        xs, ys = epsilon_dpsgd_curve(sigma, args.sample_rate, count, args.delta, methods[0], 30, first.epsilon,
                                     lambda n: None, **engine)
        save_plot(args.plot, {"type": "epsilon_vs_steps", "title": f"{label} ε against {unit} "
                                                                    f"({'z' if client else 'σ'} = {sigma:.4g}, "
                                                                    f"q = {args.sample_rate:g})",
                               "steps": xs, "epsilon": ys, "epsilon_claimed": args.target_epsilon,
                               "delta": args.delta, "x_label": unit, "accountant": methods[0].upper()})
    write_data(args.json, data)
    return 0


def cmd_account_shuffle(args: argparse.Namespace) -> int:
    """``fedaudit account shuffle``: ε of n shuffled ε0-LDP reports (Feldman–McMillan–Talwar; the
    privacy blanket of k-RR with --k)."""
    import warnings

    from fedaudit.accounting import SHUFFLE_METHODS, blanket_epsilon, shuffle_epsilon
    from fedaudit.reports.terminal import print_account

    check_output_file("--json", args.json)
    every = args.accountant.strip().lower() == "all"
    methods = method_list("--accountant", args.accountant, (*SHUFFLE_METHODS, "blanket"))
    if args.k is None:
        if "blanket" in methods and not every:
            raise FedAuditError("--accountant blanket is the privacy blanket of k-ary randomized response: give --k")
        methods = [m for m in methods if m != "blanket"]
    results, notes = {}, []
    for m in methods:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            results[m] = (blanket_epsilon(args.n, "krr", args.eps0, args.delta, k=args.k) if m == "blanket"
                          else shuffle_epsilon(args.n, args.eps0, args.delta, m))
        notes += [str(w.message) for w in caught]
    rows = [(m, r.epsilon, r.delta, ("amplified" if r.amplified else "NO amplification certified (ε0 returned)")
             + (f" ({args.k}-RR, γ = {r.gamma:.3g})" if m == "blanket" else "")) for m, r in results.items()]
    print_account(out, f"Shuffling {args.n:,} reports of ε0 = {args.eps0:g}", rows, notes)
    write_data(args.json, {"results": {m: r.to_dict() for m, r in results.items()}})
    return 0


def report_key(args: argparse.Namespace) -> bytes | None:
    """The report key ``main()`` took out of the environment (``FEDAUDIT_REPORT_KEY``; an empty
    one is a FedAuditError here, in the commands that read it); the environment itself when the
    command function is called without ``main()``."""
    from fedaudit.reports.integrity import signing_key

    return getattr(args, "report_key", signing_key)()


def cmd_verify(args: argparse.Namespace) -> int:
    """``fedaudit verify``: schema, digest, every rendering's SHA-256, the signature, and the
    report's content: overall and counts, every verdict re-derived from its evidence
    (:func:`fedaudit.experiments.rederive.rederive_claim`, built-in kinds only), the embedded plan
    text, the provenance and, with ``--plan``, that the report was made from that plan. Exit 0
    when the report is intact and verified (signed: valid under the key; unsigned: no key given,
    printed as "integrity only"); 1 otherwise, including a signed report checked without the key
    and, with ``--require-signature``, an unsigned one; 2 when unreadable. The detached Ed25519
    signature (``signature.ed25519.json``) is checked too (:func:`fedaudit.reports.signatures.verify_folder`):
    against ``--public-key`` and/or the fingerprint ``--signer``, it must verify, be by that key and
    bind the folder's facts (exit 1 otherwise); without either it is "present but unverified".
    Nothing in the folder is imported or run: this command never puts the folder or the working
    directory on ``sys.path``."""
    from fedaudit.experiments.rederive import rederive_claim
    from fedaudit.reports.integrity import read_bounded, read_key_file
    from fedaudit.reports.signatures import load_public_key, parse_fingerprint, verify_folder
    from fedaudit.reports.terminal import print_verify

    key = read_key_file(args.key_file) if args.key_file is not None else report_key(args)
    plan = None if args.plan is None else read_bounded(args.plan, 1 << 24, "--plan", "a plan is a small TOML file")
    trusted = None if args.public_key is None else load_public_key(args.public_key)
    pin = None if args.signer is None else parse_fingerprint(args.signer)
    # unreadable or missing: FedAuditError, exit 2
    res = verify_folder(args.report, key=key, plan=plan, rederive=rederive_claim, trusted=trusted, signer=pin)
    print_verify(out, res, str(args.report), key_set=key is not None, require_signature=args.require_signature,
                 plan=args.plan)
    return 0 if res.ok and (res.authenticated or not args.require_signature) else 1


def cmd_keygen(args: argparse.Namespace) -> int:
    """``fedaudit keygen``: an Ed25519 key pair for ``fedaudit sign`` (private key PEM PKCS#8,
    mode 0600, encrypted under the passphrase in ``--passphrase-env``'s variable; public key PEM),
    never replacing a file without ``--force``; prints the fingerprint and the commands that
    use the keys."""
    from fedaudit.reports.signatures import generate_keypair, key_paths, passphrase_from_env

    private, public = key_paths(args.out, args.private_key, args.public_key)
    passphrase = None if args.passphrase_env is None else passphrase_from_env(args.passphrase_env)
    key = generate_keypair(private, public, passphrase=passphrase, name=args.name, force=args.force)
    unlock = "" if passphrase is None else f" --passphrase-env {shlex.quote(args.passphrase_env)}"
    out.print(f"Ed25519 key pair{f' of {key.name}' if key.name else ''}: fingerprint {key.fingerprint}\n"
              f"  private key {private} (mode 0600, {'encrypted' if passphrase else 'NOT encrypted'}): keep it to "
              f"yourself; sign with: fedaudit sign DIR --key-file {shlex.quote(str(private))}{unlock}\n"
              f"  public key  {public}: give it to verifiers; they check with: fedaudit verify DIR --public-key "
              f"{shlex.quote(str(public))} (or --signer {key.fingerprint})", highlight=False, markup=False,
              soft_wrap=True)
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    """``fedaudit diff OLD NEW``: compare two reports claim by claim
    (:func:`fedaudit.reports.diff.compare_reports`), each loaded as ``verify`` checks it (every
    verdict re-derived too; a report that fails is exit 2). Prints (or writes to ``--out``) the
    summary line, the table of changes and the plan diff in ``--format``; exit 1 when, under
    ``--fail-on``, a claim got worse beyond its noise, else 0. With ``--key-file`` (HMAC) or
    ``--public-key``/``--signer`` (Ed25519) both reports must carry a valid signature. Nothing in
    either folder is imported or run."""
    from fedaudit.experiments.rederive import rederive_claim, tracked_of
    from fedaudit.reports.diff import Tolerance, compare_reports, load_verified
    from fedaudit.reports.diff_render import render_diff
    from fedaudit.reports.integrity import read_key_file
    from fedaudit.reports.io import atomic_write
    from fedaudit.reports.signatures import load_public_key, parse_fingerprint

    check_output_file("--out", args.out)
    tolerance = Tolerance(rel=args.rel_tol, abs=args.abs_tol)
    key = read_key_file(args.key_file) if args.key_file is not None else report_key(args)
    trusted = None if args.public_key is None else load_public_key(args.public_key)
    pin = None if args.signer is None else parse_fingerprint(args.signer)
    old, new = (load_verified(path, what=what, key=key, rederive=rederive_claim, trusted=trusted, signer=pin)
                for what, path in (("OLD", args.old), ("NEW", args.new)))
    diff = compare_reports(old, new, tracked=tracked_of, tolerance=tolerance, fail_on=args.fail_on,
                           old_label=str(args.old), new_label=str(args.new))
    text = render_diff(diff, args.format)
    if args.out is None:
        out.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True, end="")
    else:
        try:
            atomic_write(Path(args.out), text)
        except OSError as exc:
            raise FedAuditError(f"--out {args.out} cannot be written: {exc.strerror or exc}") from None
        out.print(f"{diff.summary()}\n{diff.outcome()}\n{args.format}: {args.out}", markup=False, highlight=False,
                  emoji=False, soft_wrap=True)
    return diff.exit_code()


def cmd_sign(args: argparse.Namespace) -> int:
    """``fedaudit sign DIR --key-file F``: verify the report (every verdict re-derived from its
    evidence too), then sign it, as a separate step after the run (no plugin of the run sees the
    key): with an Ed25519 private key (a PEM file, ``fedaudit keygen``) a detached signature
    ``signature.ed25519.json`` (:func:`fedaudit.reports.signatures.sign_folder`); with any other
    file, an HMAC-SHA256 under the key it holds, sealed into report.json."""
    from fedaudit.experiments.rederive import rederive_claim
    from fedaudit.reports.integrity import read_bounded, read_key_file
    from fedaudit.reports.io import sign_report
    from fedaudit.reports.signatures import (MAX_PEM_BYTES, is_private_key_pem, load_signing_key, passphrase_from_env,
                                             sign_folder)

    if is_private_key_pem(read_bounded(args.key_file, MAX_PEM_BYTES, "--key-file", "a key file holds one key")):
        passphrase = None if args.passphrase_env is None else passphrase_from_env(args.passphrase_env)
        signing = load_signing_key(args.key_file, passphrase)
        outcome, res = sign_folder(args.report, signing, force=args.force, rederive=rederive_claim)
        who = f"{signing.public.name}, " if signing.public.name else ""
        out.print(f"{outcome}: {args.report} (Ed25519 by {who}key fingerprint {signing.public.fingerprint}; "
                  f"{res.ed25519.statement['report']['digest']} is the report digest it binds); check it with: "
                  f"fedaudit verify {args.report} --public-key PUBLIC.pem (or --signer {signing.public.fingerprint})",
                  highlight=False, markup=False, soft_wrap=True)
        return 0
    if args.passphrase_env is not None:
        raise FedAuditError(f"--passphrase-env unlocks an Ed25519 private key (a PEM file); --key-file "
                            f"{args.key_file} holds an HMAC key")
    key = read_key_file(args.key_file)
    outcome, res = sign_report(args.report, key, force=args.force, rederive=rederive_claim)
    out.print(f"{outcome}: {args.report} (HMAC-SHA256; content digest {res.content_digest}); check it with: "
              f"fedaudit verify {args.report} --key-file {args.key_file} --require-signature",
              highlight=False, markup=False, soft_wrap=True)
    return 0


def cmd_export_registry(args: argparse.Namespace) -> int:
    """``fedaudit export-registry DIR``: the report's deployment facts grouped by the DP Deployments
    Registry's transparency tiers as JSON (:func:`fedaudit.reports.deployment.registry_export`), on
    stdout or into ``--out``. The folder is data: it is verified and loaded from the checked bytes
    as ``fedaudit diff`` loads a report (:func:`fedaudit.reports.diff.load_verified`: schema, digest,
    renderings, content, every verdict re-derived; the HMAC signature with a key, the Ed25519 one
    with ``--public-key``/``--signer``; nothing in the folder imported or run), and a report that is
    not intact is refused (exit 2). The export records which signatures were checked."""
    from fedaudit import json as fjson
    from fedaudit.experiments.rederive import rederive_claim
    from fedaudit.reports.deployment import registry_export
    from fedaudit.reports.diff import load_verified
    from fedaudit.reports.integrity import read_key_file
    from fedaudit.reports.signatures import load_public_key, parse_fingerprint

    check_output_file("--out", args.out)
    key = read_key_file(args.key_file) if args.key_file is not None else report_key(args)
    trusted = None if args.public_key is None else load_public_key(args.public_key)
    pin = None if args.signer is None else parse_fingerprint(args.signer)
    report = load_verified(args.report, what="export-registry", key=key, rederive=rederive_claim, trusted=trusted,
                           signer=pin)
    hmac_status = "valid" if key is not None and report.signature else \
        ("present, not checked (no key)" if report.signature else "absent")
    verification = {"intact": True, "verdicts_rederived": True, "hmac_signature": hmac_status,
                    "ed25519_signature": "verified" if (trusted is not None or pin is not None) else "not checked",
                    "content_digest": report.content_digest()}
    entry = registry_export(report.to_dict(), verification=verification)
    if args.out:
        write_data(args.out, entry)
    else:
        out.print(fjson.dumps(entry, indent=2), highlight=False, markup=False, soft_wrap=True)
    return 0

def run_plan_command(plan_path, out_dir, *, force: bool, quiet: bool, print_html: bool = False,
                     command: str | None = None, resume: bool = False, every: float | None = None,
                     engine: dict[str, Any] | None = None, key: bytes | None = None,
                     allow_large: bool = False) -> int:
    """Validate the plan, lock and check the report directory, run (checkpointing every claim,
    reusing checkpoints with ``resume``), write the report (signed under ``key`` when given) and
    print the verdicts; one warning line when a fedaudit module ran from stale bytecode."""
    from fedaudit.experiments.plan import load_plan
    from fedaudit.experiments.runner import run_plan_to_dir
    from fedaudit.reports.terminal import print_plan_report

    plan = load_plan(plan_path, allow_large=allow_large)  # every plan mistake is reported before anything runs
    header = (f"{'resuming' if resume else 'running'} {len(plan.claims)} claim(s) of {escape(str(plan_path))} "
              f"(plan seed {plan.seed}, sha256 {plan.sha256[:12]}) into {escape(str(out_dir))}")
    with PlanBars(len(plan.claims), quiet, every, header) as hooks:
        # the directory (unwritable, locked by another run, not empty, foreign checkpoints) is
        # refused inside, before the first claim runs
        report, paths = run_plan_to_dir(plan, out_dir, force=force, resume=resume, progress=hooks, command=command,
                                        engine=engine, key=key, allow_large=allow_large)
    stale = (report.manifest.provenance or {}).get("stale_bytecode")
    if stale:
        err.print(f"fedaudit: warning: fedaudit ran bytecode that is not compiled from its source (a stale or planted "
                  f".pyc) in {', '.join(stale)}; the report records it and verify refuses it: delete the __pycache__ "
                  f"folders of the fedaudit package and run again", highlight=False, markup=False, soft_wrap=True)
    print_plan_report(out, report, paths, print_html=print_html)
    met = report.counts["PASS"]
    return 0 if met == len(report.claims) else 1


def cmd_run(args: argparse.Namespace) -> int:
    from fedaudit.plans import resolve

    engine = plan_engine(args)
    command = shlex.join(["fedaudit", "run", args.plan, "--out", args.out] + (["--force"] if args.force else [])
                         + (["--resume"] if args.resume else []) + engine_command(args))
    with resolve(args.plan) as plan:  # a plan file, or a shipped plan's name (fedaudit plans)
        return run_plan_command(plan, args.out, force=args.force, quiet=args.quiet, command=command,
                                resume=args.resume, every=args.progress_every, engine=engine, key=report_key(args),
                                allow_large=args.allow_large)
