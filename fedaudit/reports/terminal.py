"""Terminal renderings of results: the tables and lines the ``fedaudit`` commands print.

Every function takes a :class:`rich.console.Console` and the result to show (registry listings,
mechanisms, accountants, aggregators, a claim, integrity checks, plan reports); it reads the result's attributes and imports nothing that computes one.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, Sequence

from rich.console import Console
from rich.markup import escape as _markup_escape
from rich.table import Table

from fedaudit.reports.model import nonfinite_text

__all__ = ["printable", "escape", "SafeConsole", "print_claim", "print_explanation", "print_registry", "print_mechanisms", "print_showcase",
           "print_aggregators", "print_verify", "print_plan_report",
           "print_account", "TONE_STYLE", "verdict_markup"]

#: characters that move the cursor, clear the screen, ring, or reorder text (C0 but tab and newline,
#: DEL, C1, Unicode bidi overrides and isolates)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: Any) -> str:
    """``str(text)`` with every terminal control character shown as a visible escape (``\\x1b``,
    ``\\u202e``). Everything fedaudit prints that it did not write itself (plan titles, claim ids,
    artifact names, report fields, error messages quoting them) passes through here, so an artifact
    named ``ESC[2J…`` cannot redraw the screen with a fake table."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def escape(text: Any) -> str:
    """:func:`printable` text with rich markup escaped: safe to embed in a markup string."""
    return _markup_escape(printable(text))


class SafeConsole(Console):
    """A :class:`rich.console.Console` whose :meth:`print` passes every string argument through
    :func:`printable` (fedaudit's own text has no control characters, so only foreign text changes);
    table cells are made safe where they are built, with :func:`escape`."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)


#: the rich style of each verdict tone (:data:`fedaudit.reports.model.TONES`)
TONE_STYLE = {"pass": "green", "violation": "bold magenta", "fail": "bold red", "inconclusive": "yellow"}


def verdict_markup(label: str, tone: str, width: int = 0) -> str:
    """``label`` (:attr:`Claim.label`, :attr:`Report.overall_label`) in the style of its tone,
    padded to ``width``."""
    return f"[{TONE_STYLE[tone]}]{escape(label):<{width}}[/]"


def print_registry(console: Console, what: str, entries: Iterable[tuple[str, str]]) -> None:
    """``fedaudit list``: one row per registered name with its one-line summary."""
    table = Table(title=f"{what} (registered names; 'package.module:attr' is accepted wherever a name is)")
    table.add_column("name", no_wrap=True)
    table.add_column("summary", overflow="fold")
    for name, summary in entries:
        table.add_row(escape(name), escape(summary))
    console.print(table)


def print_mechanisms(console: Console, rows: Sequence[tuple[str, Any, str]], *, dim: int, k: int, levels: int) -> None:
    """``fedaudit mechanisms``: ``rows`` of (name, mechanism, LDP claim)."""
    table = Table(title=f"Mechanisms at d={dim} (k={k}, s={levels})")
    for col in ("name", "class", "ε", "δ", "bits/report", "LDP claim"):
        table.add_column(col, justify="right" if col in ("ε", "δ", "bits/report") else "left")
    for name, m, claim in rows:
        table.add_row(name, type(m).__name__, f"{m.epsilon:g}", f"{m.delta:g}", f"{m.bits_per_report:,}", claim)
    console.print(table)


def print_showcase(console: Console, rows: Sequence[Any], *, n: int, dim: int, epsilon: float) -> None:
    """``fedaudit demo --showcase``: the encode → decode errors of every mechanism (``RoundTrip`` rows)."""
    table = Table(title=f"Encode → decode of {n:,} inputs at d={dim}, ε={epsilon:g} (clip 1)")
    for col in ("mechanism", "bits/report", "MSE per report", "‖mean error‖²", "note"):
        table.add_column(col, justify="left" if col in ("mechanism", "note") else "right")
    for row in rows:
        note = ("as published: NOT LDP" if row.mechanism.as_published
                else {"rr": f"{dim}-ary, one-hot inputs", "gaussian": f"δ={row.mechanism.delta:g}"}.get(row.name, ""))
        table.add_row(row.name, f"{row.mechanism.bits_per_report:,}", f"{row.mse_per_report:.4g}",
                      f"{row.mean_error:.4g}", note)
    console.print(table)


def print_account(console: Console, title: str, rows: Sequence[tuple[str, float, float, str]],
                  notes: Sequence[str] = ()) -> None:
    """``fedaudit account …``: one row per accountant or method, (label, ε, δ, note), then notes."""
    table = Table(title=title)
    for col in ("method", "ε", "δ", "note"):
        table.add_column(col, justify="right" if col in ("ε", "δ") else "left", overflow="fold")
    for label, eps, delta, note in rows:
        table.add_row(escape(label), "∞ (no finite ε)" if eps == float("inf") else f"{eps:.4g}", f"{delta:.3g}",
                      escape(note))
    console.print(table)
    for note in notes:
        console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)


def print_aggregators(console: Console, rows: Sequence[tuple[str, str, Any, Any]], *, n: int, f: int,
                      lower: float) -> None:
    """``fedaudit aggregators``: ``rows`` of (spec, kind, rule or None, published ``KappaBound`` or None)."""
    table = Table(title=f"Robust aggregation rules at n={n}, f={f} (universal lower bound f/(n−2f) = {lower:.4g})")
    for col in ("name", "class", "kind", "needs n ≥", "published κ", "formula"):
        table.add_column(col, overflow="fold")
    for name, kind, rule, bound in rows:
        need = str(rule.min_n(rule.f)) if rule is not None else "—"
        kappa = "—" if bound is None else ("unbounded" if bound.kappa == float("inf") else f"{bound.kappa:.4g}")
        table.add_row(name, type(rule).__name__ if rule is not None else "(compose it)", kind, need, kappa,
                      escape(bound.formula) if bound is not None else "")
    console.print(table)
    console.print("Bounds: Allouah et al., AISTATS 2023 (formulas as recorded in the research notes; not "
                  "re-verified against the paper here). `fedaudit audit robustness` measures each rule from below.")


def print_verify(console: Console, res: Any, report: str, *, key_set: bool, require_signature: bool = False,
                 plan: str | None = None) -> None:
    """``fedaudit verify``: a ``VerifyResult`` (``key_set``: a key was given; ``plan``: the plan
    file it was matched against). After the table, the problems and notes: the plan's hash, what
    the signature (or, unsigned, the digest) covers, who made the Ed25519 signature and every
    fact it binds, the guarantee each signature present gives (:data:`~fedaudit.reports.signatures.HMAC_GUARANTEE`,
    :func:`~fedaudit.reports.signatures.ed25519_guarantee`), then a last line saying which
    guarantee holds: "intact and signed" (by the Ed25519 key named, or by a holder of the HMAC
    key), "integrity only: authenticity not established" (unsigned, or an Ed25519 signature
    checked against no trusted key: the files agree with each other, nothing says who wrote
    them), or why it is not verified."""
    from fedaudit.reports.integrity import KEY_ENV, UNCHECKED
    from fedaudit.reports.signatures import HMAC_GUARANTEE, ed25519_guarantee

    ed = getattr(res, "ed25519", None)
    ed_status = getattr(ed, "status", "absent")
    mark = lambda ok: "[green]✓[/]" if ok else "[bold red]✗[/]"
    table = Table(title=f"Integrity of {escape(report)}")
    table.add_column("check")
    table.add_column("", justify="center")
    table.add_column("result")
    table.add_row("schema", mark(res.schema_ok), "valid" if res.schema_ok else "invalid")
    table.add_row("digest (SHA-256)", mark(res.digest_ok), "matches the content" if res.digest_ok else "mismatch")
    note = {UNCHECKED: f"signed, signature not checked (set {KEY_ENV} or pass --key-file)",
            "absent": "absent" if ed_status != "absent" else "absent (unsigned report: authorship not established)"
            }.get(res.signature, res.signature)
    sig_mark = {"valid": mark(True), "invalid": mark(False)}.get(
        res.signature, "[bold red]✗[/]" if res.signature == "absent" and (
            key_set or (require_signature and ed_status != "verified")) else "[bold yellow]?[/]")
    table.add_row("signature (HMAC-SHA256)", sig_mark, escape(note))
    if ed is not None and (ed_status != "absent" or ed.problems):
        table.add_row("signature (Ed25519)", {"verified": mark(True), "unverified": "[bold yellow]?[/]"}.get(
            ed_status, mark(False)), {"verified": "valid, by the key given",
                                      "unverified": "present, NOT verified (pass --public-key or --signer)",
                                      "invalid": "invalid", "absent": "absent"}[ed_status])
    for name, state in res.artifacts.items():
        table.add_row(escape(name), mark(state == "ok"),
                      {"ok": "matches its recorded SHA-256"}.get(state, state))
    if not res.artifacts:
        table.add_row("renderings", "–", "none recorded")
    rederived = getattr(res, "rederived", None)
    if rederived is not None and res.schema_ok:
        failed = any(p.startswith("verdict:") for p in res.problems)
        table.add_row("verdicts", mark(not failed) if rederived or failed else "[bold yellow]?[/]",
                      "a verdict contradicts its evidence" if failed else
                      f"{rederived} consistent with their evidence" + (f", {len(res.notes)} not re-derived"
                                                                      if res.notes else ""))
    console.print(table)
    for problem in res.problems:
        console.print(f"[red]•[/] {escape(problem)}", highlight=False, soft_wrap=True)
    for note in getattr(res, "notes", ()):
        console.print(f"[yellow]•[/] {escape(note)}", highlight=False, soft_wrap=True)
    plan_sha = getattr(res, "plan_sha256", None)
    if plan_sha:
        matched = (f": it matches {escape(plan)}" if not any(p.startswith("plan:") for p in res.problems)
                   else f": it does NOT match {escape(plan)}") if plan is not None else ""
        console.print(f"plan SHA-256 {plan_sha}{matched}", highlight=False, soft_wrap=True)
    if getattr(res, "covers", None):
        what = ("the signature covers" if res.signature != "absent" or ed_status in ("verified", "unverified")
                else "the digest covers (unsigned: anyone can recompute it)")
        console.print(f"{what}: " + "; ".join(escape(c) for c in res.covers), highlight=False, soft_wrap=True)
    if res.content_digest and res.artifacts:
        console.print(f"renderings show content digest {res.content_digest}", highlight=False, soft_wrap=True)
    if getattr(res, "unlisted", None):
        console.print("[yellow]not covered by the report[/] (neither verified nor read): "
                      + ", ".join(escape(n) for n in res.unlisted), highlight=False, soft_wrap=True)
    if ed_status in ("verified", "unverified"):
        console.print("the Ed25519 signature binds:" if ed_status == "verified" else
                      "[yellow]an Ed25519 signature is present but NOT verified[/] (no --public-key or --signer "
                      "given; whoever edits the folder can sign it with a key of their own); it states:",
                      highlight=False, soft_wrap=True)
        for line in ed.bound():
            console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    if res.signature == "valid":
        console.print(f"guarantee of HMAC-SHA256 (valid): {HMAC_GUARANTEE}", highlight=False, soft_wrap=True)
    elif res.signature == UNCHECKED:
        console.print(f"guarantee of HMAC-SHA256 (not checked): none until it is checked with the key; once it is, "
                      f"{HMAC_GUARANTEE}", highlight=False, soft_wrap=True)
    if ed_status == "verified":
        console.print(f"guarantee of Ed25519 (verified): {escape(ed25519_guarantee(ed.fingerprint))}",
                      highlight=False, soft_wrap=True)
    elif ed_status == "unverified":
        console.print(f"guarantee of Ed25519 (present, unverified): none until it is checked with --public-key or "
                      f"--signer; once it is, {escape(ed25519_guarantee(ed.fingerprint))}",
                      highlight=False, soft_wrap=True)
    if res.authenticated:
        done = []
        if ed_status == "verified":
            done.append(f"the Ed25519 signature is valid and binds this report: it was made by {escape(ed.signer)}")
        if res.signature == "valid":
            done.append("the HMAC-SHA256 is valid under the key given, so a holder of that key wrote or signed this "
                        "report (every holder of the key could have)")
        console.print("[bold green]intact and signed[/]: " + "; ".join(done), highlight=False, soft_wrap=True)
    elif res.ok:
        console.print("[bold yellow]integrity only: authenticity not established[/] ("
                      + ("its Ed25519 signature was not checked against a trusted key: its files agree with each "
                         "other, but anyone could have written them; check it with --public-key or --signer)"
                         if ed_status == "unverified" else "unsigned report: its files agree with each other, but "
                         "anyone could have written them; sign it with fedaudit sign)")
                      + (" — --require-signature: NOT accepted" if require_signature else ""),
                      highlight=False, soft_wrap=True)
    elif res.signature == UNCHECKED and len(res.problems) == 1:
        console.print(f"[bold yellow]NOT verified: signed, signature not checked (set {KEY_ENV} or pass "
                      f"--key-file)[/]", highlight=False, soft_wrap=True)
    elif res.schema_ok and res.digest_ok and res.artifacts_ok and not any(
            p.startswith("signature:") for p in res.problems):
        console.print("[bold red]NOT verified[/]: the report's files are intact, but its content is not consistent "
                      "(see above)", highlight=False, soft_wrap=True)
    elif res.schema_ok and res.digest_ok and res.artifacts_ok and ed is not None and ed.problems and all(
            p in ed.problems for p in res.problems if p.startswith("signature:")):
        console.print("[bold red]NOT verified[/]: the report's files are intact, but its Ed25519 signature is not "
                      "one by the key given over this report (see above)", highlight=False, soft_wrap=True)
    else:
        console.print("[bold red]NOT intact[/]")


def _short(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: row labels for evidence keys whose plain spelling misleads: ``nu_lower`` is the universal lower
#: bound f/(n − 2f) on ν for *any* rule, not the audited ν̂ (``nu_empirical``) printed above it
EVIDENCE_LABELS = {
    "nu_empirical": "ν̂ (audited)",
    "nu_bound": "published bound κ",
    "nu_lower": "any rule's ν ≥ f/(n−2f)",
}


def _cell(value: Any) -> str:
    """One evidence value in a table cell: numbers as 4 significant digits (±∞ in words, as the
    summaries write them), short JSON-like text for the rest."""
    if isinstance(value, bool) or value is None:
        return {True: "true", False: "false", None: "—"}[value]
    if isinstance(value, float):
        return nonfinite_text(value) or f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(_cell(v) for v in value)
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_cell(v)}" for k, v in value.items())
    return str(value)


def print_explanation(console: Console, claim: Any, *, compact: bool = False) -> None:
    """The claim in plain language (:meth:`~fedaudit.reports.model.Claim.plain`) as short labelled
    lines: claimed, tested, what it means, what it does not show, next step. ``compact`` (a plan
    run's many claims): what it means, the first thing it does not show and the first next step."""
    x = claim.plain()
    rows = ([] if compact else [("claimed", x.claimed), ("tested", x.tested)]) + [("means", x.means)]
    rows += [("not shown", t) for t in (x.does_not_show[:1] if compact else x.does_not_show)]
    rows += [("next", t) for t in (x.next_steps[:1] if compact else x.next_steps)]
    for label, text in rows:
        console.print(f"  [bold cyan]{label:>9}[/] {escape(text)}", highlight=False, soft_wrap=True)


def print_claim(console: Console, claim: Any) -> None:
    """A claim run on its own (the commands generated from the claim kinds): its title and verdict,
    the summary, the evidence's scalars and objects as rows, each list of objects (per k, per
    cell, per check) as a table of its own, then the caveats."""
    table = Table(title=escape(claim.title), show_header=False)
    table.add_column("what", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_row("verdict", verdict_markup(claim.label, claim.tone))
    subtables = []
    for name, value in claim.evidence.items():
        if isinstance(value, list) and value and all(isinstance(row, Mapping) for row in value):
            subtables.append((name, value))
        else:
            text = _cell(value) if value != [] else "—"
            table.add_row(escape(EVIDENCE_LABELS.get(name, name.replace("_", " "))), escape(text if len(text) <= 240 else "(long: in --json)"))
    console.print(table)
    for name, rows in subtables:
        sub = Table(title=escape(name.replace("_", " ")))
        columns = list(dict.fromkeys(k for row in rows for k in row))
        for col in columns:
            sub.add_column(escape(col.replace("_", " ")), overflow="fold")
        for row in rows:
            sub.add_row(*(escape(_cell(row.get(col))) for col in columns))
        console.print(sub)
    console.print(escape(claim.summary), highlight=False, soft_wrap=True)
    for caveat in claim.caveats:
        console.print(f"[yellow]caveat[/] {escape(caveat)}", highlight=False, soft_wrap=True)
    console.print("[bold]In plain language[/]", highlight=False)
    print_explanation(console, claim)


# ------------------------------------------------------------------------------ deployment (issue #26 §1)
def print_deployment(console: Console, report: Any) -> None:
    """The deployment facts in one line (privacy unit, neighbours, flavour, trust model, accountant)
    and one line per NIST SP 800-226 hazard the plan did not address; nothing for a report
    without deployment facts."""
    from fedaudit.reports.deployment import fact, hazards, plain

    deployment = getattr(report, "deployment", None)
    if deployment is None:
        return
    facts = deployment.get("plan") or {}
    parts = [f"{name} {plain(fact(facts, key))}" for key, name in (
        ("privacy_unit", "unit"), ("neighbouring", "neighbours"), ("dp_flavour", "flavour"),
        ("trust_model", "trust"), ("accounting.accountant", "accountant"))]
    console.print(f"[bold]Deployment[/]: {escape('; '.join(parts))}", highlight=False, soft_wrap=True)
    for h in hazards(deployment):
        console.print(f"[yellow]hazard:[/] {escape(h.text)}" + (f" ({escape(', '.join(h.claims))})" if h.claims else ""),
                      highlight=False, soft_wrap=True)


def print_plan_report(console: Console, report: Any, paths: Mapping[str, Any], *, print_html: bool = False) -> None:
    """``fedaudit run`` / ``demo``: one row per claim (verdict as :attr:`Claim.label` in its
    tone's colour, with its summary when the terminal is at least 150 columns wide, else a note
    per claim that did not pass), then every claim's caveats, each claim in plain language
    (compact: :func:`print_explanation`), the overall line (all
    expectations met or not), one line per guarantee saying whether any of its claims failed,
    and where the report files are."""
    wide = console.width >= 150  # room for the summaries inside the table
    table = Table(title=escape(report.title))
    for col in ("#", "claim", "kind", "expect", "verdict", "time") + (("summary",) if wide else ()):
        table.add_column(col, justify="right" if col in ("#", "time") else "left",
                         no_wrap=col not in ("summary", "verdict"), overflow="fold")
    notes = []
    for i, c in enumerate(report.claims, 1):
        summary = c.summary if c.error is None else f"error: {c.error}"
        row = [str(i), escape(c.id), escape(c.kind), c.expect, verdict_markup(c.label, c.tone),
               f"{c.runtime_s:.1f} s"]
        table.add_row(*row, *((escape(_short(summary)),) if wide else ()))
        if not wide and c.verdict != "PASS":
            notes.append(f"{verdict_markup(c.label, c.tone)} {escape(c.id)}: {escape(summary)}")
        notes += [f"[yellow]caveat[/] {escape(c.id)}: {escape(v)}" for v in c.caveats]
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, soft_wrap=True)
    if report.claims:
        console.print("[bold]In plain language[/] (report.html has the whole account of each claim)", highlight=False)
    for i, c in enumerate(report.claims, 1):
        console.print(f"{i}. {escape(c.id)}", highlight=False, soft_wrap=True)  # its verdict is in the table above
        print_explanation(console, c, compact=True)
    console.print(f"Overall: {verdict_markup(report.overall_label, report.overall_tone)} — "
                  f"{escape(report.counts_line())}", highlight=False, soft_wrap=True)
    for tone, text in report.guarantee_lines() if report.claims else ():
        console.print(verdict_markup(text, tone), highlight=False, soft_wrap=True)
    print_deployment(console, report)  # deployment facts and open hazards (issue #26 §1)
    if print_html:
        console.print(f"report: {escape(str(paths['html'].resolve()))}", highlight=False, soft_wrap=True)
    else:
        console.print(f"report: {escape(', '.join(str(paths[k]) for k in ('html', 'json', 'md') if k in paths))}",
                      highlight=False, soft_wrap=True)
