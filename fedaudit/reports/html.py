"""Self-contained HTML rendering of a :class:`~fedaudit.reports.model.Report`.

One file, no network: inline CSS, figures as ``data:image/png;base64`` images, no scripts, and a
Content-Security-Policy that forbids loading anything else. Layout: the overall verdict (its
words, colour and per-guarantee lines from the report model) and a summary table of every claim
with its caveats first, then one section per claim (verdict, caveats, the claim in plain language
— claimed, tested, what it means and does not show, next step — expectation, summary, the evidence
table grouped into result / configuration / diagnostics with human names and units, figures),
then the manifest and integrity fields.
"""

from __future__ import annotations

import base64
import html
import math
import re
from typing import Any

from fedaudit.reports.explain import GROUP_TITLES, Row, evidence_groups, summarize_rows
from fedaudit.reports.model import Claim, Report, format_value
from fedaudit.reports.plots import describe, render_png

__all__ = ["render_html", "claim_anchor"]

_EXPECT_TEXT = {
    "pass": "the guarantee holds",
    "violation": "the audit finds a violation",
}

_CSS = """
:root { --pass:#1e8449; --violation:#7d3c98; --fail:#c0392b; --inc:#b9770e; --ink:#1c2833; --muted:#5d6d7e; --line:#d5d8dc; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 48px; font: 15px/1.5 "DejaVu Sans", "Liberation Sans", Arial, sans-serif;
       color: var(--ink); background: #ffffff; max-width: 1100px; }
h1 { font-size: 26px; margin: 0 0 6px; }
h2 { font-size: 20px; margin: 0 0 8px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
header { border-bottom: 3px solid var(--ink); padding-bottom: 12px; margin-bottom: 20px; }
.overall { font-size: 17px; margin: 6px 0 0; }
.muted { color: var(--muted); }
table { border-collapse: collapse; width: 100%; margin: 8px 0 12px; }
th, td { border: 1px solid var(--line); padding: 5px 9px; text-align: left; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
tbody tr:nth-child(even) td { background: #f8f9fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.deployment td:first-child { width: 34%; font-weight: 600; }
ul.hazards li { color: var(--fail); }
table.manifest td:first-child { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; white-space: nowrap;
       width: 34%; }
table.evidence { width: auto; min-width: 50%; max-width: 100%; }
table.evidence th.q { font-weight: normal; background: none; white-space: nowrap; padding-left: calc(9px + var(--depth, 0) * 18px); }
table.evidence th.q .key { font-family: "DejaVu Sans Mono", monospace; font-size: 11px; color: var(--muted);
       margin-left: .7em; }
table.evidence tr.parent th.q { font-weight: 600; }
table.evidence tr.group th { background: #e5e8ec; font-size: 14px; letter-spacing: .02em; }
table.evidence td.v { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; white-space: nowrap; }
table.evidence td.v.num { text-align: right; font-variant-numeric: tabular-nums; }
table.evidence td.v.long { white-space: normal; overflow-wrap: anywhere; min-width: 36ch; max-width: 72ch; }
table.evidence td.v .unit { color: var(--muted); margin-left: .4em; font-family: "DejaVu Sans", sans-serif; }
table.evidence td.v details { margin: 4px 0 0; }
table.evidence td.v pre { white-space: pre-wrap; overflow-wrap: anywhere; max-width: 72ch; max-height: 24em; overflow: auto;
       background: #f4f6f7; padding: 6px 8px; margin: 4px 0 0; font-size: 12px; }
table.evidence tr.records > td { padding-left: calc(9px + var(--depth, 0) * 18px); background: #fbfcfc; }
table.evidence div.scroll { width: 0; min-width: 100%; overflow-x: auto; }
table.records { width: auto; margin: 4px 0 6px; }
table.records th, table.records td { font-size: 12px; padding: 3px 7px; white-space: nowrap; }
table.records td { font-family: "DejaVu Sans Mono", monospace; }
table.records td.num { text-align: right; font-variant-numeric: tabular-nums; }
details.diagnostics > summary { font-size: 15px; font-weight: 600; color: var(--ink); margin: 6px 0; }
.explain { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 10px 0 14px;
           padding: 10px 14px; background: #f4f8fb; border: 1px solid #c9dceb; border-radius: 6px; font-size: 15px; }
.explain dt { font-weight: 700; color: #1b4f72; white-space: nowrap; }
.explain dd { margin: 0; }
.explain ul { margin: 0; padding-left: 18px; }
.badge { display: inline-block; min-width: 92px; padding: 2px 10px; border-radius: 12px; color: #fff;
         font-weight: 700; font-size: 13px; text-align: center; letter-spacing: .03em; }
.badge.pass { background: var(--pass); }
.badge.violation { background: var(--violation); }
.badge.fail { background: var(--fail); }
.badge.inconclusive { background: var(--inc); }
section.claim { border: 1px solid var(--line); border-left: 8px solid var(--muted); border-radius: 6px;
                padding: 16px 20px; margin: 22px 0; }
section.claim.pass { border-left-color: var(--pass); }
section.claim.violation { border-left-color: var(--violation); }
section.claim.fail { border-left-color: var(--fail); }
section.claim.inconclusive { border-left-color: var(--inc); }
ul.caveats { margin: 6px 0 10px; padding: 6px 12px 6px 28px; background: #fef5e7; border: 1px solid #f8c471;
             border-radius: 4px; font-size: 14px; }
p.self-tests { margin: 4px 0; font-size: 13px; color: #1e8449; }
p.self-tests.failed { color: #b03a2e; font-weight: bold; }
td .caveat { color: #7e5109; font-size: 12px; margin-top: 4px; }
ul.guarantees { margin: 6px 0 0; padding-left: 20px; }
ul.guarantees li.pass { color: var(--pass); }
ul.guarantees li.violation { color: var(--violation); font-weight: 700; }
ul.guarantees li.fail { color: var(--fail); font-weight: 700; }
.meta { margin: 0 0 8px; color: var(--muted); font-size: 14px; }
.meta code { color: var(--ink); }
.claim-summary { margin: 8px 0; }
.error { background: #fdedec; border: 1px solid #f5b7b1; padding: 8px 12px; border-radius: 4px;
         font-family: "DejaVu Sans Mono", monospace; font-size: 13px; white-space: pre-wrap; }
details { margin: 0 0 12px; }
summary { cursor: pointer; color: #1f5fa8; font-size: 14px; }
figure { margin: 14px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.plot-error { background: #fef5e7; border: 1px dashed var(--inc); padding: 8px 12px; font-size: 13px; }
code { font-family: "DejaVu Sans Mono", monospace; font-size: 13px; }
a { color: #1f5fa8; }
footer { margin-top: 28px; border-top: 1px solid var(--line); padding-top: 10px; font-size: 13px; }
"""

_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def claim_anchor(claim_id: str, index: int) -> str:
    """A unique, HTML-safe element id for a claim section."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", claim_id).strip("-")[:60] or "claim"
    return f"claim-{index + 1}-{slug}"


def _badge(label: str, tone: str) -> str:
    """A verdict badge: ``label`` (:attr:`Claim.label`) in the colour of ``tone`` (:attr:`Claim.tone`)."""
    return f'<span class="badge {_e(tone)}">{_e(label)}</span>'


def _caveats(claim: Claim) -> str:
    """The claim's caveats as a list next to its verdict (empty when it has none)."""
    if not claim.caveats:
        return ""
    return '<ul class="caveats">' + "".join(f"<li>caveat: {_e(c)}</li>" for c in claim.caveats) + "</ul>"


def _self_tests(claim: Claim) -> str:
    """The claim's auditor self-tests in one line (:meth:`Claim.self_test_line`), in the fail
    colour when one failed; empty for a claim without self-tests."""
    line = claim.self_test_line()
    if line is None:
        return ""
    state = "failed" if claim.failed_self_tests else "passed"
    return f'<p class="self-tests {state}">{_e(line)}</p>'


def _runtime(seconds: float) -> str:
    if not math.isfinite(seconds):
        return format_value(seconds)
    return f"{seconds:.3g} s" if seconds < 100 else f"{seconds:,.0f} s"


def _figure(spec: dict[str, Any]) -> str:
    caption = describe(spec)
    try:
        png = render_png(spec)
    except Exception as exc:  # a bad plot must not lose the rest of a long run's report
        return (f'<div class="plot-error">Could not draw the {_e(spec.get("type"))} plot: '
                f'{_e(type(exc).__name__)}: {_e(exc)}</div>')
    data = base64.b64encode(png).decode("ascii")
    return (f'<figure class="plot" data-plot-type="{_e(spec.get("type"))}">'
            f'<img src="data:image/png;base64,{data}" alt="{_e(caption)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _explanation(claim: Claim) -> str:
    """The claim in plain language (:meth:`Claim.plain`): claimed, tested, what the result means,
    what it does not show, the next step — above the evidence, for a reader who is not the
    audit's author."""
    x = claim.plain()
    items = [("Claimed", _e(x.claimed)), ("Tested", _e(x.tested)), ("What it means", _e(x.means))]
    for title, lines in (("Does not show", x.does_not_show), ("Next step", x.next_steps)):
        if lines:
            items.append((title, "<ul>" + "".join(f"<li>{_e(t)}</li>" for t in lines) + "</ul>"))
    body = "".join(f"<dt>{title}</dt><dd>{html_}</dd>" for title, html_ in items)
    return f'<dl class="explain" aria-label="the claim in plain language">{body}</dl>'


def _evidence_value(row: Row) -> str:
    """The value cell of one evidence row: the number or text with its unit, a summarised array
    with every value behind a details element, a list of records as a small table."""
    classes = "v" + (" num" if row.numeric else "") + (" long" if row.long or row.full else "")
    unit = f'<span class="unit">{_e(row.unit)}</span>' if row.unit and row.text and row.numeric else ""
    inner = _e(row.text) + unit
    if row.full is not None:
        inner += f"<details><summary>show all values</summary><pre>{_e(row.full)}</pre></details>"
    return f'<td class="{classes}">{inner}</td>'


#: a records cell that holds one number (right-aligned)
_NUMBER = re.compile(r"^[−-]?(\d[\d,]*(\.\d+)?(e[+-]?\d+)?|∞|NaN)$")


def _records(row: Row) -> str:
    """A list of records as a table in a row of its own under its label's row, across both
    columns and scrolling sideways when wide (open up to 8 rows, folded beyond)."""
    assert row.records is not None
    head = "".join(f"<th>{_e(c)}</th>" for c in row.records.columns)
    body = "".join("<tr>" + "".join(f'<td class="num">{_e(v)}</td>' if _NUMBER.match(v) else f"<td>{_e(v)}</td>"
                                    for v in r) + "</tr>" for r in row.records.rows)
    table = f'<div class="scroll"><table class="records"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'
    fold = (f"<details open><summary>{_e(row.label)}: {_e(row.text)}</summary>{table}</details>"
            if len(row.records.rows) <= 8 else
            f"<details><summary>{_e(row.label)}: {_e(row.text)}, show the table</summary>{table}</details>")
    return f'<tr class="records"><td colspan="2" style="--depth:{row.depth}">{fold}</td></tr>'


def _evidence_rows(rows: list[Row]) -> str:
    out = []
    for row in rows:
        parent = not row.text and row.records is None and row.full is None
        cls = ' class="parent"' if parent else ""
        out.append(f"<tr{cls}>"
                   f'<th scope="row" class="q" style="--depth:{row.depth}">{_e(row.label)}'
                   f'<span class="key">{_e(row.key)}</span></th>' + _evidence_value(row) + "</tr>")
        if row.records is not None:
            out.append(_records(row))
    return "".join(out)


def _evidence(claim: Claim) -> str:
    """The evidence table: result first (what decides the verdict), then configuration, both open;
    diagnostics (raw records, curves, timings) folded, with what they hold in the summary line.
    Every value is in the page, complete (arrays and long tables behind details elements)."""
    fields = claim.explanation.fields if claim.explanation is not None else None
    groups = evidence_groups(claim.evidence, fields)
    if not groups:
        return '<p class="muted">No evidence recorded.</p>'
    out, folded = ['<table class="evidence"><tbody>'], []
    for group, rows in groups:
        if group == "diagnostics":
            folded = rows
            continue
        out.append(f'<tr class="group"><th colspan="2">{_e(GROUP_TITLES[group])}</th></tr>')
        out.append(_evidence_rows(rows))
    out.append("</tbody></table>")
    if folded:
        out.append(f'<details class="diagnostics"><summary>{_e(GROUP_TITLES["diagnostics"])}: '
                   f'{_e(summarize_rows(folded))} ({len(folded)} row(s))</summary>'
                   f'<table class="evidence"><tbody>{_evidence_rows(folded)}</tbody></table></details>')
    return "".join(out)


def _claim_section(claim: Claim, index: int) -> str:
    parts = [f'<section class="claim {_e(claim.tone)}" id="{claim_anchor(claim.id, index)}">',
             f"<h2>{index + 1}. {_e(claim.title)} {_badge(claim.label, claim.tone)}</h2>"]
    parts.append(_caveats(claim))
    parts.append(_explanation(claim))
    meta = [f"id <code>{_e(claim.id)}</code>", f"kind <b>{_e(claim.kind)}</b>",
            f"expectation <b>{_e(claim.expect)}</b> ({_e(_EXPECT_TEXT.get(claim.expect, claim.expect))})",
            f"seed {_e('—' if claim.seed is None else claim.seed)}", f"runtime {_e(_runtime(claim.runtime_s))}"]
    parts.append('<p class="meta">' + " · ".join(meta) + "</p>")
    parts.append(_self_tests(claim))
    if claim.summary:
        parts.append(f'<p class="claim-summary">{_e(claim.summary)}</p>')
    if claim.error:
        parts.append(f'<div class="error">{_e(claim.error)}</div>')
    parts.append("<h3>Evidence</h3>")
    parts.append(_evidence(claim))
    if claim.plots:
        parts.append("<h3>Figures</h3>")
        parts.extend(_figure(spec) for spec in claim.plots)
    parts.append("</section>")
    return "\n".join(parts)


# ------------------------------------------------------------------------------ deployment (issue #26 §1)
def _deployment_section(report: Report) -> str:
    """The "Deployment" section at the top of the report (:mod:`fedaudit.reports.deployment`): the
    plan's deployment facts in plain names, one row per privacy claim, and the NIST SP 800-226
    hazards the plan did not address. Empty for a report without deployment facts (before 1.5)."""
    from fedaudit.reports.deployment import CLAIM_COLUMNS, claim_rows, fact_rows, hazards

    if report.deployment is None:
        return ""
    parts = ['<section id="deployment"><h2>Deployment</h2>',
             '<p class="muted">The facts the plan declares about the deployment its privacy claims describe '
             '(NIST SP 800-226; DP Deployments Registry tiers). <code>fedaudit export-registry</code> writes them '
             'as JSON.</p>',
             '<table class="deployment"><tbody>']
    parts += [f"<tr><td>{_e(name)}</td><td>{_e(value)}</td></tr>" for name, value in fact_rows(report.deployment)]
    parts.append("</tbody></table>")
    rows = claim_rows(report.deployment)
    if rows:
        parts.append('<table class="deployment-claims"><thead><tr>' + "".join(f"<th>{_e(c)}</th>" for c in CLAIM_COLUMNS)
                     + "</tr></thead><tbody>")
        parts += ["<tr>" + "".join(f"<td>{_e(v)}</td>" for v in row) + "</tr>" for row in rows]
        parts.append("</tbody></table>")
    found = hazards(report.deployment)
    if found:
        parts.append(f'<h3>Privacy hazards not addressed ({len(found)})</h3><ul class="hazards">')
        parts += [f"<li>{_e(h.text)}" + (f' <span class="muted">(claims: {_e(", ".join(h.claims))})</span>'
                                         if h.claims else "") + "</li>" for h in found]
        parts.append("</ul>")
    elif rows:
        parts.append('<p class="pass-note">Every NIST SP 800-226 hazard fedaudit can check is addressed by a stated '
                     'fact.</p>')
    parts.append("</section>")
    return "\n".join(parts)


def render_html(report: Report) -> str:
    """The report as one self-contained HTML document (UTF-8 text)."""
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>{_e(report.title)} — {_e(report.overall_label)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>"]
    m = report.manifest
    out.append("<header>")
    out.append(f"<h1>{_e(report.title)}</h1>")
    out.append(f'<p class="overall">Overall: {_badge(report.overall_label, report.overall_tone)} — '
               f'{_e(report.counts_line())}</p>')
    if report.claims:
        out.append('<ul class="guarantees">' + "".join(f'<li class="{_e(tone)}">{_e(text)}</li>'
                                                       for tone, text in report.guarantee_lines()) + "</ul>")
    out.append(f'<p class="muted">fedaudit {_e(m.fedaudit)} · started {_e(m.started)} · finished {_e(m.finished)}'
               + (f" · commit <code>{_e(m.git_commit[:12])}</code>" if m.git_commit else "") + "</p>")
    out.append("</header>")
    out.append(_deployment_section(report))  # deployment facts first (issue #26 §1)

    out.append('<section id="summary"><h2>Summary</h2>')
    out.append('<table class="summary"><thead><tr><th>#</th><th>claim</th><th>kind</th><th>expectation</th>'
               '<th>verdict</th><th>runtime</th></tr></thead><tbody>')
    for i, c in enumerate(report.claims):
        out.append(f'<tr><td class="num">{i + 1}</td><td><a href="#{claim_anchor(c.id, i)}">{_e(c.title)}</a>'
                   f'<br><code class="muted">{_e(c.id)}</code></td><td>{_e(c.kind)}</td><td>{_e(c.expect)}</td>'
                   f'<td>{_badge(c.label, c.tone)}'
                   + "".join(f'<div class="caveat">caveat: {_e(v)}</div>' for v in c.caveats)
                   + f'</td><td class="num">{_e(_runtime(c.runtime_s))}</td></tr>')
    if not report.claims:
        out.append('<tr><td colspan="6" class="muted">This report holds no claims.</td></tr>')
    out.append("</tbody></table></section>")

    for i, c in enumerate(report.claims):
        out.append(_claim_section(c, i))

    out.append('<section id="manifest"><h2>Manifest</h2><table class="manifest"><tbody>')
    for key, value in m.rendered_fields():
        out.append(f"<tr><td>{_e(key)}</td><td>{_e('—' if value is None else value)}</td></tr>")
    out.append(f"<tr><td>schema_version</td><td>{_e(report.schema_version)}</td></tr>")
    # rendered from Report.rendering_view(): the content digest; the signature covers this page, so only its presence
    out.append(f"<tr><td>content digest (SHA-256)</td><td><code>{_e(report.digest or 'not sealed')}</code></td></tr>")
    out.append(f"<tr><td>signature (HMAC-SHA256)</td><td>{'signed' if report.signature else 'unsigned'}</td></tr>")
    out.append("</tbody></table></section>")
    out.append('<footer class="muted">Check integrity with <code>fedaudit verify report.json</code> '
               "(report.json's digest and signature cover this page's SHA-256; the content digest above is "
               "report.json's with its artifact table null).</footer>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
