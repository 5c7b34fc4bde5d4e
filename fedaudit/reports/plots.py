"""Figures for reports: a plot *specification with data* (a dict from ``Claim.plots``) -> PNG bytes.

Rendering uses matplotlib's Agg canvas directly (no pyplot state, no display, thread-safe per
figure). Specifications (required keys; optional keys in brackets):

* ``epsilon_vs_samples``: samples, epsilon_lower, epsilon_claimed, epsilon_exact — the certified
  lower bound against the number of draws, with the claimed (and exact) ε as horizontal lines;
  the band above the claim is where a certified bound proves a violation.
* ``privacy_region``: tpr, fpr, epsilon, delta, tpr_lower, fpr_upper [epsilon_lower] — the set
  of (FPR, TPR) pairs any (ε, δ)-DP mechanism allows, TPR ≤ min(e^ε·FPR + δ, 1 − e^−ε(1 − FPR − δ))
  and symmetrically from below (Kairouz et al. 2015), with the observed rates and the certified
  corner (Clopper–Pearson FPR upper, TPR lower bounds). Log axes when the rates are small; the
  observed point (filled disc) is drawn above the certified corner (hollow square).
* ``mse_vs_dk``: d_over_k, series{label: {mse, [ci_low, ci_high]}} [hlines{label: value},
  slopes{label: slope}] — log–log; data are markers with CI bars (no connecting line), each
  fitted slope a dashed line of the series' colour drawn through its log-space centroid (the
  least-squares line passes through it) with its own legend entry; reference lines differ in
  colour and line style.
* ``nu_vs_bound``: configurations{label: ν̂}, nu_bound, nu_lower — one bar per attack
  configuration against the published upper bound and the universal lower bound f/(n−2f).
* ``heatmap``: title, x_label, y_label, x, y, values (len(y) rows × len(x) columns; null = no data)
  [value_label, vmin, vmax] — give vmin/vmax to put several panels on one colour scale (else the
  panel's own finite range).
* ``curves``: title, x_label, y_label, log_y, series{label: {x, y}} [hlines{label: value},
  markers{series label: {x, y}}, markers_label] — non-finite y ends a curve and is marked ✕ (diverged);
  reference lines differ in colour and style; a marker (◆) is a point of note on a series,
  e.g. where it first reached a target.
* ``epsilon_vs_steps``: steps, epsilon, epsilon_claimed, delta [x_label, accountant,
  references{label: [ε per step]}, lower_bounds[{label, steps, epsilon, confidence, [certified]}]] — an
  accountant's upper bound ε(steps) at δ (solid), other accountants' curves for comparison (thin,
  each its own reference style; they do not stretch the axes), the claimed budget as a horizontal
  line, and audited lower bounds as points (filled: certified at their confidence, a point above the
  accountant's curve or the budget is a violation; hollow: ``certified = false``, an estimate);
  ε = ∞ ends a curve. ``steps`` holds the counts of steps or rounds: ``x_label`` names them (default
  "steps"), on the axis, in the default title and in the caption.

Numbers may be JSON specials ("inf", "-inf", "nan") or null.
"""

from __future__ import annotations

import io
import math
from typing import Any, Callable, Mapping

import numpy as np

from fedaudit import json as fjson
from fedaudit.errors import FedAuditError
from fedaudit.guarantees import Bound
from fedaudit.reports.model import PLOT_TYPES, check_plot_spec

__all__ = ["render_png", "render_figure", "describe", "PLOTTERS"]

_BLUE, _RED, _GREEN, _GRAY, _ORANGE = "#1f5fa8", "#c0392b", "#1e8449", "#6b7280", "#d68910"
#: reference (horizontal) lines: each one its own colour and dash pattern, never a data colour
_REF_STYLES = (("#6b7280", (0, (6, 3))), ("#7d3c98", (0, (6, 2, 1, 2))), ("#117a65", (0, (2, 2))),
               ("#a04000", (0, (10, 2, 2, 2, 2, 2))), ("#2e4053", (0, (1, 1))))


def _ref_style(j: int) -> dict[str, Any]:
    color, dash = _REF_STYLES[j % len(_REF_STYLES)]
    return {"color": color, "ls": dash, "lw": 1.4}


def _num(value: Any, name: str = "value") -> float:
    if value is None:
        return math.nan
    if isinstance(value, str):
        if value in fjson.SPECIAL:
            return fjson.SPECIAL[value]
        raise FedAuditError(f"plot {name} must be a number, got {value!r}")
    if isinstance(value, bool):
        raise FedAuditError(f"plot {name} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise FedAuditError(f"plot {name} must be a number, got {value!r}") from None


def _arr(values: Any, name: str) -> np.ndarray:
    if not isinstance(values, (list, tuple, np.ndarray)):
        raise FedAuditError(f"plot {name} must be a list of numbers, got {type(values).__name__}")
    return np.array([_num(v, name) for v in values], dtype=np.float64)


def _same_length(name_a: str, a: np.ndarray, name_b: str, b: np.ndarray) -> None:
    if len(a) != len(b):
        raise FedAuditError(f"plot {name_b} has {len(b)} values but {name_a} has {len(a)}")


def _figure(width: float = 7.2, height: float = 4.3):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _set_title(ax, text: str, share: float = 0.9) -> None:
    """Set a title wrapped to ``share`` of the figure's width (about 9 px per character at 12 pt),
    so a long title (a worst configuration, a plot's note) breaks onto more lines instead of
    running off the figure; ``share`` is the part of the width the axes (the title's centre) get."""
    import textwrap

    width_px = share * ax.figure.get_figwidth() * ax.figure.dpi
    chars = max(30, int(width_px / 9))
    ax.set_title("\n".join(textwrap.fill(part, chars) for part in str(text).split("\n")))


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.3g}"


def _si(v: float) -> str:
    """1500 -> 1.5k, 2000000 -> 2M (sample counts on an axis)."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{v / scale:.3g}{suffix}"
    return f"{v:g}"


def _log_ticks(ax, values: np.ndarray, fmt: Callable[[float], str] = lambda v: f"{v:g}") -> None:
    """Label a log x axis at the data's own values when there are few of them."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    vals = np.unique(values[np.isfinite(values) & (values > 0)])
    if 1 <= len(vals) <= 10:
        ax.xaxis.set_major_locator(FixedLocator(vals))
        ax.set_xticklabels([fmt(v) for v in vals])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())


# ------------------------------------------------------------------------------ plot types
def _epsilon_vs_samples(spec: Mapping[str, Any]):
    n = _arr(spec["samples"], "samples")
    e = _arr(spec["epsilon_lower"], "epsilon_lower")
    _same_length("samples", n, "epsilon_lower", e)
    claimed, exact = _num(spec["epsilon_claimed"], "epsilon_claimed"), _num(spec["epsilon_exact"], "epsilon_exact")
    fig, ax = _figure(7.2, 4.8)
    ok = np.isfinite(n) & np.isfinite(e)
    order = np.argsort(n[ok])
    ax.plot(n[ok][order], e[ok][order], "o-", color=_BLUE, lw=2, label="certified ε lower bound")
    finite = [v for v in (*e[ok], claimed, exact) if math.isfinite(v)]
    top = max(finite) * 1.15 if finite and max(finite) > 0 else 1.0
    if math.isfinite(claimed):
        ax.axhline(claimed, color=_RED, ls="--", lw=1.6, label=f"claimed ε = {claimed:.4g}")
        ax.axhspan(claimed, top, color=_RED, alpha=0.07, lw=0, label="violation region (ε_lb > claim)")
    if math.isfinite(exact):
        ax.axhline(exact, color=_GREEN, ls=":", lw=1.8, label=f"exact ε of the pair = {exact:.4g}")
    if ok.any() and (n[ok] > 0).all() and n[ok].max() / n[ok].min() >= 10:
        ax.set_xscale("log")
        _log_ticks(ax, n[ok], _si)
    low = min(0.0, *finite) if finite else 0.0
    ax.set_ylim(low, top)
    ax.set_xlabel("samples per input")
    ax.set_ylabel("ε")
    _set_title(ax, spec.get("title", "Certified ε lower bound against samples"))
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)  # never over the data
    return fig


def _region_bounds(x: np.ndarray, eps: float, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """Upper and lower TPR allowed at FPR = x by (ε, δ)-DP (both directions of the inequality)."""
    e = math.exp(min(eps, 700.0))
    upper = np.minimum.reduce([np.ones_like(x), e * x + delta, 1.0 - (1.0 - x - delta) / e])
    lower = np.maximum.reduce([np.zeros_like(x), (x - delta) / e, 1.0 - e * (1.0 - x) - delta])
    return np.clip(upper, 0.0, 1.0), np.clip(lower, 0.0, 1.0)


def _privacy_region(spec: Mapping[str, Any]):
    tpr, fpr = _num(spec["tpr"], "tpr"), _num(spec["fpr"], "fpr")
    tpr_lo, fpr_hi = _num(spec["tpr_lower"], "tpr_lower"), _num(spec["fpr_upper"], "fpr_upper")
    eps, delta = _num(spec["epsilon"], "epsilon"), _num(spec["delta"], "delta")
    eps_lb = _num(spec.get("epsilon_lower"), "epsilon_lower")
    delta = 0.0 if not math.isfinite(delta) else delta
    fig, ax = _figure(6.4, 6.2)
    pts = [v for v in (tpr, fpr, tpr_lo, fpr_hi) if math.isfinite(v)]
    small = bool(pts) and max(pts) < 0.2
    if small:  # the interesting corner: log axes, where e^ε·FPR is a line offset by ε
        positive = [v for v in pts if v > 0]
        lo = 10 ** math.floor(math.log10(min(positive))) / 10 if positive else 1e-6
        x = np.geomspace(lo, 1.0, 600)
    else:
        lo = 0.0
        x = np.linspace(0.0, 1.0, 601)
    if math.isfinite(eps):
        upper, lower = _region_bounds(x, eps, delta)
        ax.fill_between(x, lower, upper, color=_BLUE, alpha=0.12, lw=0, label=f"allowed by ε = {eps:.3g}, δ = {delta:.3g}")
        ax.plot(x, upper, color=_BLUE, lw=1.8, label=r"boundary TPR = $e^{\varepsilon}$·FPR + δ")
    else:
        ax.text(0.5, 0.5, "no privacy claim (ε = ∞)", transform=ax.transAxes, ha="center", color=_GRAY)
    if math.isfinite(eps_lb):
        ax.plot(x, _region_bounds(x, eps_lb, delta)[0], color=_ORANGE, ls="--", lw=1.4,
                label=f"boundary at certified ε_lb = {eps_lb:.3g}")
    ax.plot(x, x, color=_GRAY, ls=":", lw=1, label="random guess (TPR = FPR)")
    clip = lambda v: max(v, lo) if small else v  # a zero rate sits on the log axis edge
    # z-order: the certified corner is a hollow square under the observed point (a small filled disc
    # on top), joined by a thin line, so neither hides the other when they nearly coincide
    if math.isfinite(tpr_lo) and math.isfinite(fpr_hi):
        outside = math.isfinite(eps) and tpr_lo > float(_region_bounds(np.array([fpr_hi]), eps, delta)[0][0]) + 1e-15
        ax.plot([clip(fpr_hi)], [clip(tpr_lo)], "s", mfc="none", mec=_RED if outside else _GREEN, mew=2.2, ms=12,
                zorder=4, label="certified corner (FPR upper, TPR lower)" + (" — outside: violation" if outside else ""))
        if math.isfinite(tpr) and math.isfinite(fpr):
            ax.plot([clip(fpr), clip(fpr_hi)], [clip(tpr), clip(tpr_lo)], color=_GRAY, lw=0.8, zorder=3)
    if math.isfinite(tpr) and math.isfinite(fpr):
        ax.plot([clip(fpr)], [clip(tpr)], "o", color="black", mec="white", mew=0.8, ms=6, zorder=5,
                label=f"observed (FPR {_fmt(fpr)}, TPR {_fmt(tpr)})")
    if small:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, 1.0)
        ax.set_ylim(lo, 1.0)
    else:
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("FPR  P[M(b) ∈ E]")
    ax.set_ylabel("TPR  P[M(a) ∈ E]")
    _set_title(ax, spec.get("title", r"Privacy region: (FPR, TPR) against the $e^{\varepsilon}$ boundary"))
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return fig


def _mse_vs_dk(spec: Mapping[str, Any]):
    x = _arr(spec["d_over_k"], "d_over_k")
    series, hlines, slopes = spec["series"], spec.get("hlines") or {}, spec.get("slopes") or {}
    if not isinstance(series, Mapping):
        raise FedAuditError("plot series must map labels to {mse, ci_low, ci_high}")
    fig, ax = _figure(7.2, 5.6)
    colors = [_BLUE, _RED, _GREEN, _ORANGE, "#7d3c98", "#117a65", "#2e4053"]
    drawn = False
    for i, (label, s) in enumerate(series.items()):
        color = colors[i % len(colors)]
        y = _arr(s["mse"], f"series[{label}].mse")
        _same_length("d_over_k", x, f"series[{label}].mse", y)
        m = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
        slope = _num(slopes.get(label), f"slopes[{label}]")
        if "ci_low" in s and "ci_high" in s:
            lo, hi = _arr(s["ci_low"], f"series[{label}].ci_low"), _arr(s["ci_high"], f"series[{label}].ci_high")
            _same_length("d_over_k", x, f"series[{label}].ci_low", lo)
            _same_length("d_over_k", x, f"series[{label}].ci_high", hi)
            err = np.vstack([np.nan_to_num(y - lo, nan=0.0), np.nan_to_num(hi - y, nan=0.0)]).clip(min=0.0)
            ax.errorbar(x[m], y[m], yerr=err[:, m], fmt="o", color=color, capsize=4, ms=7, elinewidth=1.4,
                        zorder=4, label=f"{label}: measured (CI bars)")
        else:
            ax.plot(x[m], y[m], "o", color=color, ms=7, zorder=4, label=f"{label}: measured")
        drawn |= bool(m.any())
        if math.isfinite(slope) and m.sum() >= 2:  # the fit: a dashed line, drawn past the data at both ends
            lx, ly = np.log(x[m]), np.log(y[m])
            xs = np.geomspace(x[m].min() / 1.25, x[m].max() * 1.25, 50)
            ax.plot(xs, np.exp(ly.mean() + slope * (np.log(xs) - lx.mean())), ls=(0, (7, 3)), color=color,
                    lw=1.6, alpha=0.9, zorder=3, label=f"{label}: least-squares fit, slope {slope:+.2f}")
    for j, (label, v) in enumerate(hlines.items()):
        v = _num(v, f"hlines[{label}]")
        if math.isfinite(v) and v > 0:
            ax.axhline(v, zorder=2, label=f"{label} = {v:.3g}", **_ref_style(j))
            drawn = True
    orphans = [f"{k}: {_num(v, 'slope'):.2f}" for k, v in slopes.items() if k not in series
               and math.isfinite(_num(v, "slope"))]
    if drawn:
        ax.set_xscale("log")
        ax.set_yscale("log")
        _log_ticks(ax, x)
    ax.set_xlabel("d / k")
    ax.set_ylabel("MSE  E‖x̂ − x‖²")
    title = spec.get("title", "MSE against d/k (log–log), dashed: fitted slope")
    _set_title(ax, title + ("\n" + "; ".join(orphans) if orphans else ""))
    ax.grid(True, which="both", alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    rank = {str(label): i for i, label in enumerate(series)}  # each series' data, then its fit; then references

    def order(j: int) -> tuple[int, int]:
        name, _, what = labels[j].partition(": ")
        return (rank.get(name, len(rank)), 0 if what.startswith("measured") else 1) if name in rank else (len(rank), j)

    keep = sorted(range(len(labels)), key=order)
    fig.legend([handles[j] for j in keep], [labels[j] for j in keep], loc="outside lower center", ncol=2,
               fontsize=8, frameon=False)
    return fig


def _nu_vs_bound(spec: Mapping[str, Any]):
    configs = spec["configurations"]
    if not isinstance(configs, Mapping):
        raise FedAuditError("plot configurations must map labels to ν̂ values")
    items = [(str(k), _num(v, f"configurations[{k}]")) for k, v in configs.items()]
    items.sort(key=lambda kv: (math.isnan(kv[1]), -kv[1] if not math.isnan(kv[1]) else 0.0))
    total, cap = len(items), 25
    items = items[:cap]
    bound, lower = _num(spec["nu_bound"], "nu_bound"), _num(spec["nu_lower"], "nu_lower")
    fig, ax = _figure(7.2, max(3.0, 0.3 * len(items) + 1.6))
    vals = np.array([v for _, v in items], dtype=np.float64)
    finite = vals[np.isfinite(vals)]
    refs = [v for v in (bound, lower) if math.isfinite(v) and v > 0]
    positive = np.concatenate([finite[finite > 0], refs])
    log = len(positive) > 0 and positive.max() / positive.min() > 100
    right = (positive.max() if len(positive) else 1.0) * (3.0 if log else 1.15)
    shown = np.where(np.isinf(vals), right, np.nan_to_num(vals, nan=0.0))
    if log:
        shown = np.where(shown > 0, shown, positive.min() / 10 if len(positive) else 1e-3)
    over = [(math.isfinite(bound) and v > bound) or math.isinf(v) for v in vals]
    ypos = np.arange(len(items))[::-1]
    ax.barh(ypos, shown, color=[_RED if o else _BLUE for o in over], alpha=0.85, height=0.7)
    for y, v, s in zip(ypos, vals, shown):
        if not math.isfinite(v):
            ax.text(s, y, " ∞" if math.isinf(v) else " NaN", va="center", fontsize=9, color=_RED)
    ax.set_yticks(ypos, [k if len(k) <= 38 else k[:36] + "…" for k, _ in items], fontsize=8)
    if math.isfinite(bound):
        ax.axvline(bound, color=_RED, ls="--", lw=1.6, label=f"published bound ν ≤ {bound:.4g}")
    else:
        ax.plot([], [], " ", label="no published bound")
    if math.isfinite(lower):
        ax.axvline(lower, color=_GRAY, ls=":", lw=1.6, label=f"lower bound f/(n−2f) = {lower:.4g}")
    if log:
        ax.set_xscale("log")
    ax.set_xlim(right=right * (1.15 if log else 1.05))
    ax.set_xlabel(r"$\hat\nu$ (worst ratio found per attack configuration)")
    more = f" (top {cap} of {total})" if total > cap else ""
    _set_title(ax, spec.get("title", r"Empirical $\hat\nu$ against the published bound") + more, share=0.6)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    return fig


def _heatmap(spec: Mapping[str, Any]):
    xs, ys = list(spec["x"]), list(spec["y"])
    rows = spec["values"]
    if not isinstance(rows, (list, tuple)) or len(rows) != len(ys):
        raise FedAuditError(f"heatmap values must have one row per y value ({len(ys)}), got "
                            f"{len(rows) if isinstance(rows, (list, tuple)) else type(rows).__name__}")
    V = np.array([_arr(r, "values") for r in rows], dtype=np.float64).reshape(len(ys), -1)
    if V.shape[1] != len(xs):
        raise FedAuditError(f"heatmap rows must have one value per x value ({len(xs)}), got {V.shape[1]}")
    import matplotlib

    fig, ax = _figure(max(5.0, min(11.0, 1.0 + 0.75 * len(xs))), max(3.0, min(9.0, 1.4 + 0.45 * len(ys))))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="#d9d9d9")
    finite = V[np.isfinite(V)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if spec.get("vmin") is not None:  # a scale shared with other panels
        vmin = _num(spec["vmin"], "vmin")
    if spec.get("vmax") is not None:
        vmax = _num(spec["vmax"], "vmax")
    if not (math.isfinite(vmin) and math.isfinite(vmax)) or vmin > vmax:
        raise FedAuditError(f"heatmap vmin/vmax must be finite with vmin <= vmax, got {vmin}, {vmax}")
    if vmin == vmax:
        vmin, vmax = vmin - 0.5, vmax + 0.5
    im = ax.imshow(np.ma.masked_invalid(V), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", origin="lower",
                   interpolation="nearest")
    ax.set_xticks(range(len(xs)), [f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in xs],
                  rotation=30 if any(len(str(v)) > 6 for v in xs) else 0, fontsize=8)
    ax.set_yticks(range(len(ys)), [f"{v:g}" if isinstance(v, (int, float)) else str(v) for v in ys], fontsize=8)
    if V.size <= 200:
        for (i, j), v in np.ndenumerate(V):
            dark = math.isfinite(v) and (v - vmin) / (vmax - vmin) < 0.55
            ax.text(j, i, _fmt(v) if math.isfinite(v) else ("∞" if math.isinf(v) else "—"), ha="center",
                    va="center", fontsize=7, color="white" if dark else "black")
    fig.colorbar(im, ax=ax, label=spec.get("value_label", ""))
    ax.set_xlabel(spec["x_label"])
    ax.set_ylabel(spec["y_label"])
    _set_title(ax, spec["title"])
    return fig


def _curves(spec: Mapping[str, Any]):
    series = spec["series"]
    if not isinstance(series, Mapping):
        raise FedAuditError("plot series must map labels to {x, y}")
    fig, ax = _figure()
    log_y = bool(spec["log_y"])
    any_drawn = False
    for label, s in series.items():
        x, y = _arr(s["x"], f"series[{label}].x"), _arr(s["y"], f"series[{label}].y")
        _same_length(f"series[{label}].x", x, f"series[{label}].y", y)
        ok = np.isfinite(x) & np.isfinite(y) & ((y > 0) if log_y else True)
        diverged = bool((~np.isfinite(y)).any())
        (line,) = ax.plot(x[ok], y[ok], lw=1.5, label=f"{label} (diverged)" if diverged else str(label))
        if diverged and ok.any():
            last = np.flatnonzero(ok)[-1]
            ax.plot([x[last]], [y[last]], "x", color=line.get_color(), ms=9, mew=2)
        any_drawn |= bool(ok.any())
    colors = {str(line.get_label()).removesuffix(" (diverged)"): line.get_color() for line in ax.get_lines()}
    marked = False
    for label, pt in (spec.get("markers") or {}).items():
        mx, my = _num(pt.get("x"), f"markers[{label}].x"), _num(pt.get("y"), f"markers[{label}].y")
        if math.isfinite(mx) and math.isfinite(my) and (my > 0 or not log_y):
            ax.plot([mx], [my], "D", color=colors.get(str(label), "black"), mec="black", mew=0.8, ms=7, zorder=5)
            marked = True
    if marked:
        ax.plot([], [], "D", color="white", mec="black", mew=0.8, ms=7, label=spec.get("markers_label", "marked point"))
    for j, (label, v) in enumerate((spec.get("hlines") or {}).items()):
        v = _num(v, f"hlines[{label}]")
        if math.isfinite(v) and (v > 0 or not log_y):
            ax.axhline(v, zorder=1, label=f"{label} = {v:.3g}", **_ref_style(j))
    if log_y and any_drawn:
        ax.set_yscale("log")
    ax.set_xlabel(spec["x_label"])
    ax.set_ylabel(spec["y_label"])
    _set_title(ax, spec["title"])
    ax.grid(True, which="both", alpha=0.3)
    n = len(series)
    if n:
        ax.legend(loc="best", fontsize=8 if n <= 8 else 6, ncol=1 if n <= 8 else 2)
    return fig


def _count_name(spec: Mapping[str, Any]) -> str:
    """What an ``epsilon_vs_steps`` figure counts along x, in its words: its ``x_label`` ("rounds"
    for DP-FedAvg and the accounting schedule), else "steps" (the field ``steps`` holds either)."""
    return str(spec.get("x_label") or "steps")


def _epsilon_vs_steps(spec: Mapping[str, Any]):
    x = _arr(spec["steps"], "steps")
    y = _arr(spec["epsilon"], "epsilon")
    _same_length("steps", x, "epsilon", y)
    claimed, delta = _num(spec["epsilon_claimed"], "epsilon_claimed"), _num(spec["delta"], "delta")
    refs = spec.get("references") or {}
    if not isinstance(refs, Mapping):
        raise FedAuditError("plot references must map labels to lists of ε (one per step)")
    points = spec.get("lower_bounds") or []
    if not isinstance(points, (list, tuple)):
        raise FedAuditError("plot lower_bounds must be a list of {label, steps, epsilon, confidence}")
    fig, ax = _figure(7.2, 4.8)
    shown: list[float] = []
    ok = np.isfinite(x) & np.isfinite(y)
    name = spec.get("accountant", "accountant")
    ax.plot(x[ok], y[ok], "-", color=_BLUE, lw=2.2, zorder=4, label=f"{name}: ε upper bound at δ = {_fmt(delta)}")
    if (~np.isfinite(y)).any():
        ax.plot([], [], " ", label=f"{name}: no finite ε beyond the last point")
    shown += list(y[ok])
    for j, (label, values) in enumerate(refs.items()):
        r = _arr(values, f"references[{label}]")
        _same_length("steps", x, f"references[{label}]", r)
        m = np.isfinite(x) & np.isfinite(r)
        if m.any():
            ax.plot(x[m], r[m], zorder=2, label=f"{label} (for comparison)", **{**_ref_style(j), "lw": 1.2})
    if math.isfinite(claimed):
        ax.axhline(claimed, color=_RED, ls="--", lw=1.6, zorder=3, label=f"claimed budget ε = {claimed:.4g}")
        shown.append(claimed)
    markers = ("o", "s", "^", "D", "v")
    for i, pt in enumerate(points):
        if not isinstance(pt, Mapping):
            raise FedAuditError(f"plot lower_bounds[{i}] must be a mapping with label, steps, epsilon, confidence")
        px, py = _num(pt["steps"], f"lower_bounds[{i}].steps"), _num(pt["epsilon"], f"lower_bounds[{i}].epsilon")
        conf = _num(pt["confidence"], f"lower_bounds[{i}].confidence")
        if math.isfinite(px) and math.isfinite(py):
            kind = pt.get("epsilon_bound")  # the point's typed Bound; reports before it say "certified"
            certified = Bound(kind).certified if kind in {b.value for b in Bound} else pt.get("certified", True) is not False
            style = dict(color=_ORANGE, mec="black") if certified else dict(mfc="none", mec=_ORANGE)
            text = f"ε ≥ {py:.3g} ({conf:.0%} conf.)" if certified else f"ε ≈ {py:.3g} (estimate, not a bound)"
            ax.plot([px], [py], markers[i % len(markers)], mew=1.2, ms=9, zorder=5, label=f"{pt['label']}: {text}",
                    **style)
            shown.append(py)
    # the scale is the accountant's curve, the budget and the audited points; a looser reference
    # accountant may leave the top of the axes (it is there for comparison, not for reading off)
    finite = [v for v in shown if math.isfinite(v)]
    top = max(finite) * 1.25 if finite and max(finite) > 0 else 1.0
    ax.set_ylim(min(0.0, *finite) if finite else 0.0, top)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps and rounds are counts
    ax.set_xlabel(_count_name(spec))
    ax.set_ylabel("ε")
    _set_title(ax, spec.get("title", f"Accountant ε against {_count_name(spec)}, with the claimed budget"))
    ax.grid(True, which="both", alpha=0.3)
    fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    return fig


PLOTTERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "epsilon_vs_samples": _epsilon_vs_samples,
    "privacy_region": _privacy_region,
    "mse_vs_dk": _mse_vs_dk,
    "nu_vs_bound": _nu_vs_bound,
    "heatmap": _heatmap,
    "curves": _curves,
    "epsilon_vs_steps": _epsilon_vs_steps,
}
assert set(PLOTTERS) == set(PLOT_TYPES)


def render_figure(spec: Mapping[str, Any]):
    """Draw one plot specification as a matplotlib ``Figure`` with an Agg canvas (for
    :func:`fedaudit.reports.figures.save_figure`, any format). Bad data raises :class:`FedAuditError`."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    kind = spec.get("type") if isinstance(spec, Mapping) else None
    if kind not in PLOTTERS:
        raise FedAuditError(f"unknown plot type {kind!r}; expected one of {', '.join(PLOTTERS)}")
    check_plot_spec(spec, where=f"{kind} plot")
    try:
        fig = PLOTTERS[kind](spec)
    except (KeyError, TypeError) as exc:
        raise FedAuditError(f"{kind} plot: malformed specification ({type(exc).__name__}: {exc})") from None
    FigureCanvasAgg(fig)
    return fig


def render_png(spec: Mapping[str, Any]) -> bytes:
    """Draw one plot specification; returns PNG bytes. Bad data raises :class:`FedAuditError`."""
    return _png(render_figure(spec))


def describe(spec: Mapping[str, Any]) -> str:
    """A one-line caption for a plot specification (also used as the image's alt text)."""
    kind = spec.get("type")
    if kind == "epsilon_vs_samples":
        return "Certified ε lower bound against the number of samples; dashed: the claimed ε."
    if kind == "privacy_region":
        return ("Privacy region: observed and certified (FPR, TPR) against the (ε, δ) boundary "
                "TPR ≤ e^ε·FPR + δ; a certified corner outside the shaded region proves a violation.")
    if kind == "mse_vs_dk":
        return ("MSE against d/k on log–log axes: markers are measurements with their CIs, dashed lines the "
                "least-squares fits (slopes in the legend), flat lines the references.")
    if kind == "nu_vs_bound":
        return "Empirical ν̂ per attack configuration against the published bound and the lower bound f/(n−2f)."
    if kind == "epsilon_vs_steps":
        return (f"Accountant ε upper bound against {_count_name(spec)} at fixed δ, the claimed budget as a dashed line"
                + (", audited lower bounds as points" if spec.get("lower_bounds") else "") + ".")
    if kind in ("heatmap", "curves"):
        return str(spec.get("title", kind))
    return str(kind)
