"""Markdown rendering of a :class:`~fedaudit.reports.model.Report`, for pull requests and tickets.

GitHub-flavoured: a verdict summary table, then per claim its verdict, expectation, summary and
evidence as bullets (nested fields as dotted keys, long lists shortened). Figures are not embedded;
each claim names its figures, which are in ``report.html``.
"""

from __future__ import annotations

from fedaudit.reports.model import Claim, Report, flatten_evidence, format_value
from fedaudit.reports.plots import describe

__all__ = ["render_markdown"]

_ICON = {"PASS": "✅", "FAIL": "❌", "INCONCLUSIVE": "⚠️"}


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _inline(text: object) -> str:
    """Text as inline code, with backticks that cannot close it early."""
    s = str(text).replace("\n", " ")
    fence = "``" if "`" in s else "`"
    pad = " " if "`" in s else ""
    return f"{fence}{pad}{s}{pad}{fence}"


def _verdict(v: str) -> str:
    return f"{_ICON.get(v, '')} **{v}**".strip()


def _runtime(seconds: float) -> str:
    text = format_value(seconds)
    return text if text in ("∞", "NaN", "−∞") else f"{seconds:.3g} s"


def _claim(claim: Claim, index: int, max_rows: int) -> list[str]:
    lines = [f"### {index}. {claim.title} — {_verdict(claim.verdict)}", ""]
    seed = "—" if claim.seed is None else str(claim.seed)
    lines.append(f"id {_inline(claim.id)} · kind **{claim.kind}** · expectation **{claim.expect}** · "
                 f"seed {seed} · runtime {_runtime(claim.runtime_s)}")
    lines.append("")
    if claim.summary:
        lines += [claim.summary, ""]
    if claim.error:
        lines += [f"> **Error:** {claim.error}".replace("\n", "\n> "), ""]
    rows = flatten_evidence(claim.evidence, max_rows=max_rows)
    if rows:
        lines.append("<details><summary>Evidence</summary>" if len(rows) > 25 else "**Evidence**")
        lines.append("")
        lines += [f"- {_inline(k)}: {v}" if k != "…" else f"- … {v}" for k, v in rows]
        if len(rows) > 25:
            lines += ["", "</details>"]
        lines.append("")
    if claim.plots:
        names = "; ".join(describe(p).rstrip(".") for p in claim.plots)
        lines += [f"_Figures ({len(claim.plots)}) in report.html: {names}._", ""]
    return lines


def render_markdown(report: Report, *, max_rows: int = 40) -> str:
    """The report as GitHub-flavoured Markdown (no images; figures are referenced)."""
    c, m = report.counts, report.manifest
    lines = [f"# {report.title}", "",
             f"**Overall:** {_verdict(report.overall)} — {len(report.claims)} claim(s): "
             f"{c['PASS']} PASS, {c['FAIL']} FAIL, {c['INCONCLUSIVE']} INCONCLUSIVE", ""]
    lines += ["| # | claim | kind | expectation | verdict | runtime |", "|---:|---|---|---|---|---:|"]
    for i, claim in enumerate(report.claims, 1):
        lines.append(f"| {i} | {_cell(claim.title)} ({_inline(_cell(claim.id))}) | {claim.kind} | {claim.expect} | "
                     f"{_verdict(claim.verdict)} | {_runtime(claim.runtime_s)} |")
    if not report.claims:
        lines.append("| — | no claims | | | | |")
    lines += ["", "## Claims", ""]
    for i, claim in enumerate(report.claims, 1):
        lines += _claim(claim, i, max_rows)
    lines += ["## Manifest", "", "| field | value |", "|---|---|"]
    for key, value in m.to_dict().items():
        lines.append(f"| {key} | {_cell('—' if value is None else value)} |")
    lines += [f"| schema_version | {report.schema_version} |",
              f"| digest (SHA-256) | {_inline(report.digest or 'not sealed')} |",
              f"| signature | {'HMAC-SHA256 ' + _inline(report.signature[:16] + '…') if report.signature else 'unsigned'} |",
              "", "Verify with `fedaudit verify report.json`.", ""]
    return "\n".join(lines)
