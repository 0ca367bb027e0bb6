"""The report's plots, drawn with matplotlib and written as inline SVG or PNG.

matplotlib is the plotting library because it is well kept, renders offline to both SVG and PNG
with no JavaScript runtime, and its SVG can be inlined in an HTML page that then opens with no
network. Text stays text (``svg.fonttype = 'none'``): smaller files, selectable and searchable
labels. Metadata (creator, date) is left out and the hash salt is fixed, so the same results
give the same bytes.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot): no global figure
registry, no GUI backend, nothing to close.

Plots (all from figures the analysis already computed; nothing is recomputed here):

* throughput vs concurrency (output tok/s, log2 x axis), plateau as a horizontal line and knee
  as a vertical marker with its bracket shaded;
* TTFT, TPOT and E2E (p50 solid, p99 dashed) vs concurrency;
* the throughput-latency frontier: output tok/s per user (1000 / mean TPOT) against total
  output tok/s, for choosing an operating point;
* per level, in-flight requests, output tok/s (1 s buckets) and the server's running / waiting /
  KV usage over time, with the measurement window shaded.

Burst levels are drawn with hollow markers; several runs are overlaid, one colour per run.
"""

from __future__ import annotations

import functools
import io
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from plateau_bench.analysis.timeseries import LevelSeries
from plateau_bench.analysis.unmeasured import known, mean_only
from plateau_bench.errors import ConfigError
from plateau_bench.report.tables import x_value
from plateau_bench.result import LevelResult
from plateau_bench.run_view import ReportRun

PALETTE = ("#1f5fa8", "#d9822b", "#2e8b57", "#8e44ad", "#c0392b", "#5d6d7e", "#b8860b", "#17a2b8")
INK = "#2d3748"
MUTED = "#718096"
GRID = "#e2e8f0"

STYLE: dict[Any, Any] = {  # matplotlib types keys as literals; these are checked by rc_context
    "svg.fonttype": "none",
    "svg.hashsalt": "plateau-bench",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9.5,
    "axes.edgecolor": "#a0aec0",
    "axes.labelcolor": INK,
    "axes.titlesize": 10.5,
    "axes.titleweight": "bold",
    "axes.titlecolor": INK,
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": GRID,
    "grid.linewidth": 0.8,
    "xtick.color": MUTED,
    "ytick.color": MUTED,
    "xtick.labelcolor": INK,
    "ytick.labelcolor": INK,
    "legend.frameon": False,
    "legend.fontsize": 8.5,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
}

P = ParamSpec("P")

_NO_METADATA_SVG = {"Format": None, "Type": None, "Creator": None, "Date": None}
_NO_METADATA_PNG = {"Software": None}


def _styled(make: Callable[P, Figure]) -> Callable[P, Figure]:
    """Build the figure under the report style (rc parameters are read when artists are made)."""

    @functools.wraps(make)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> Figure:
        with mpl.rc_context(STYLE):
            return make(*args, **kwargs)

    return wrapper


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _points(levels: Sequence[LevelResult]) -> list[tuple[float, LevelResult]]:
    pts = [(x, lv) for lv in levels if (x := x_value(lv)) is not None]
    return sorted(pts, key=lambda p: p[0])


def _num_label(v: float, _pos: object = None) -> str:
    """Tick labels as people write numbers: 2,048 and 12.5, never 2.048e3."""
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:g}"


def _log2_x(ax: Axes, xs: Sequence[float]) -> None:
    """Log2 axis with a tick at each level (when few enough to read), labelled as plain numbers.

    Only measured levels get ticks: an interpolated knee (C~54.3) would print over its neighbour.
    """
    ax.set_xscale("log", base=2)
    distinct = sorted(set(xs))
    if 0 < len(distinct) <= 12:
        ax.xaxis.set_major_locator(FixedLocator(distinct))
    ax.xaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("concurrency")


def _draw_levels(ax: Axes, pts: list[tuple[float, float, LevelResult]], c: str, **line: Any) -> None:
    """A line through the points; burst levels hollow, failed levels crossed."""
    if not pts:
        return
    ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, **line)
    for x, y, lv in pts:
        face = "white" if lv.mode == "burst" else c
        marker = "X" if lv.level_failed else "o"
        ax.plot([x], [y], marker=marker, color=c, markerfacecolor=face, markeredgewidth=1.4, zorder=3)


def _style_legend(fig: Figure, ax: Axes, runs: Sequence[ReportRun], extra: list[Line2D]) -> None:
    handles: list[Line2D] = []
    if len(runs) > 1:
        handles += [Line2D([], [], color=color(i), marker="o", label=run.name) for i, run in enumerate(runs)]
    if any(lv.mode == "burst" for run in runs for lv in run.levels):
        handles.append(Line2D([], [], color=MUTED, marker="o", markerfacecolor="white", ls="", label="burst"))
    if any(lv.level_failed for run in runs for lv in run.levels):
        handles.append(Line2D([], [], color=MUTED, marker="X", ls="", label="level failed"))
    handles += extra
    if handles:
        ax.legend(handles=handles, loc="best")


@_styled
def throughput_figure(runs: Sequence[ReportRun], titled: bool = True) -> Figure:
    fig = Figure(figsize=(8.6, 4.0), layout="constrained")
    ax = fig.add_subplot()
    xs: list[float] = []
    top = 0.0
    for i, run in enumerate(runs):
        c = color(i)
        pts = [(x, tok_s, lv) for x, lv in _points(run.levels)
               if (tok_s := known(lv, "output_throughput")) is not None]   # a summary may not state it
        top = max([top, *(p[1] for p in pts)])
        xs += [p[0] for p in pts]
        _draw_levels(ax, pts, c)
        plateau, knee = run.result.plateau, run.result.knee
        prefix = f"{run.name}: " if len(runs) > 1 else ""
        if plateau is not None and plateau.throughput:
            y = float(plateau.throughput)
            top = max(top, y)
            reached = plateau.reached
            ax.axhline(y, color=c, ls="--", lw=1.1, alpha=0.85, zorder=1)
            label = f"{prefix}plateau {y:,.0f} tok/s" + ("" if reached else " (not reached: highest so far)")
            ax.annotate(label, xy=(0.01, y), xycoords=("axes fraction", "data"), xytext=(0, 4),
                        textcoords="offset points", color=c, fontsize=8.5, va="bottom")
        if knee is not None:
            kx = float(knee.concurrency)
            lo, hi = knee.bracket
            if lo > 0 and hi > 0:
                ax.axvspan(float(lo), float(hi), color=c, alpha=0.07, lw=0, zorder=0)
            ax.axvline(kx, color=c, ls=":", lw=1.3, zorder=1)
            ax.annotate(f"{prefix}knee C={kx:,.0f}", xy=(kx, 0.03), xycoords=("data", "axes fraction"),
                        xytext=(4, 0), textcoords="offset points", color=c, fontsize=8.5, rotation=90,
                        va="bottom")
    if xs:
        _log2_x(ax, xs)
    # Headroom above the highest point keeps the plateau's label inside the plot.
    ax.set_ylim(0, max(ax.get_ylim()[1], top * 1.08))
    ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.set_ylabel("output tok/s")
    if titled:
        ax.set_title("Output throughput vs concurrency")
    _style_legend(fig, ax, runs, [])
    return fig


_LATENCY = (("ttft_ms", "TTFT", "ms", 1.0), ("tpot_ms", "TPOT", "ms", 1.0), ("e2e_ms", "E2E latency", "s", 1e-3))


@_styled
def latency_figure(runs: Sequence[ReportRun], titled: bool = True) -> Figure:
    fig = Figure(figsize=(11.5, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    means = False
    for ax, (attr, name, unit, scale) in zip(axes, _LATENCY, strict=True):
        xs: list[float] = []
        for i, run in enumerate(runs):
            c = color(i)
            pts = _points(run.levels)
            for pct, ls in (("p50", "-"), ("p99", "--")):
                vals = [(x, getattr(getattr(lv, attr), pct), lv) for x, lv in pts]
                drawn = [(x, v * scale, lv) for x, v, lv in vals if v is not None]
                xs += [p[0] for p in drawn]
                _draw_levels(ax, drawn, c, ls=ls)
            # Level summaries that state the mean alone: the mean, dotted, rather than nothing.
            mean_pts = [(x, lat.mean * scale, lv) for x, lv in pts
                        if mean_only(lat := getattr(lv, attr)) and lat.mean is not None]
            means = means or bool(mean_pts)
            xs += [p[0] for p in mean_pts]
            _draw_levels(ax, mean_pts, c, ls=":")
        if xs:
            _log2_x(ax, xs)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
        ax.set_title(f"{name} ({unit})")
    extra = [Line2D([], [], color=MUTED, ls="-", label="p50"), Line2D([], [], color=MUTED, ls="--", label="p99")]
    if means:
        extra.append(Line2D([], [], color=MUTED, ls=":", label="mean (only the mean known)"))
    _style_legend(fig, axes[0], runs, extra)
    if titled:
        fig.suptitle("Latency vs concurrency", x=0.005, ha="left", fontsize=11, fontweight="bold", color=INK)
    return fig


def _level_name(lv: LevelResult) -> str:
    return f"{lv.concurrency:,}" if lv.concurrency is not None else lv.label


def _frontier_labels(per_run: list[list[tuple[float, float, LevelResult]]]) -> list[list[tuple[float, float, str]]]:
    """Labels that do not print on top of each other.

    Within a run, points closer than 3 % of both axis ranges (the plateau, typically) share one
    label naming the first and last level; across runs, a label is dropped where an earlier run
    already put one (overlaid runs often coincide at low concurrency).
    """
    everything = [p for pts in per_run for p in pts]
    if not everything:
        return [[] for _ in per_run]
    span_x = max(p[0] for p in everything) or 1.0
    span_y = max(p[1] for p in everything) or 1.0

    def near(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return abs(a[0] - b[0]) < 0.03 * span_x and abs(a[1] - b[1]) < 0.03 * span_y

    placed: list[tuple[float, float]] = []
    out: list[list[tuple[float, float, str]]] = []
    for pts in per_run:
        groups: list[list[tuple[float, float, LevelResult]]] = []
        for p in pts:
            if groups and near(p[:2], groups[-1][0][:2]):
                groups[-1].append(p)
            else:
                groups.append([p])
        labels = []
        for g in groups:
            at = (max(p[0] for p in g), max(p[1] for p in g))
            if any(near(at, q) for q in placed):
                continue
            placed.append(at)
            tag = f"C={_level_name(g[0][2])}" + (f"…{_level_name(g[-1][2])}" if len(g) > 1 else "")
            labels.append((at[0], at[1], tag))
        out.append(labels)
    return out


@_styled
def frontier_figure(runs: Sequence[ReportRun], titled: bool = True) -> Figure:
    fig = Figure(figsize=(8.6, 4.0), layout="constrained")
    ax = fig.add_subplot()
    per_run = [
        [(lv.output_throughput, 1000.0 / lv.tpot_ms.mean, lv) for _, lv in _points(run.levels) if lv.tpot_ms.mean]
        for run in runs
    ]
    for i, pts in enumerate(per_run):
        _draw_levels(ax, pts, color(i))
    for labels in _frontier_labels(per_run):
        for x, y, tag in labels:
            ax.annotate(tag, (x, y), xytext=(5, 4), textcoords="offset points", fontsize=7.5, color=MUTED)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.xaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.set_xlabel("total output tok/s")
    ax.set_ylabel("output tok/s per user (1000 / mean TPOT)")
    if titled:
        ax.set_title("Throughput-latency frontier: up and to the right is better")
    _style_legend(fig, ax, runs, [])
    return fig


_SERVER_STYLE = {"running": ("running", PALETTE[0], "-"), "waiting": ("waiting", PALETTE[1], "-")}


@_styled
def timeseries_figure(series: LevelSeries, title: str | None = None,
                      window: tuple[float, float] | None = None) -> Figure:
    """In flight, output tok/s and (when sampled) server state of one level over time."""
    panels = 3 if series.server else 2
    fig = Figure(figsize=(11.5, 2.5), layout="constrained")
    axes = fig.subplots(1, panels, sharex=True)
    drawn = [
        (axes[0], series.in_flight, "in-flight requests", PALETTE[0]),
        (axes[1], series.output_tps, "output tok/s (1 s buckets)", PALETTE[2]),
    ]
    for ax, s, name, c in drawn:
        if len(s):
            # A level shorter than a few buckets has too few points for a line to show.
            ax.plot(s.t_s, s.values, color=c, lw=1.4, marker="o" if len(s) < 4 else None, markersize=4)
            ax.fill_between(s.t_s, s.values, color=c, alpha=0.12, lw=0)
        ax.set_title(name)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
    if series.server:
        ax = axes[2]
        counts = [k for k in ("running", "waiting") if k in series.server]
        for key in counts:
            label, c, ls = _SERVER_STYLE[key]
            ax.plot(series.server[key].t_s, series.server[key].values, color=c, ls=ls, lw=1.4, label=label)
        kv = series.server.get("kv_usage")
        if kv is not None:
            kv_ax = ax.twinx() if counts else ax
            kv_ax.plot(kv.t_s, kv.values, color=PALETTE[3], ls="--", lw=1.2, label="KV usage %")
            kv_ax.set_ylim(0, 105)
            kv_ax.grid(False)
            if counts:
                kv_ax.spines["right"].set_visible(True)
                kv_ax.set_ylabel("KV %", color=PALETTE[3])
        handles = [Line2D([], [], color=_SERVER_STYLE[k][1], label=k) for k in counts]
        if kv is not None:
            handles.append(Line2D([], [], color=PALETTE[3], ls="--", label="KV usage %"))
        # Above the plot, level with its title: a legend inside would hide a line pinned at the top.
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(handles),
                  fontsize=7.5, borderaxespad=0.2, handlelength=1.6, columnspacing=1.0)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
        ax.set_title("server")
    for ax in axes:
        ax.set_xlabel("s since level start")
        if window is not None and window[1] > window[0]:
            ax.axvspan(window[0], window[1], color=MUTED, alpha=0.07, lw=0, zorder=0)
    if title:
        fig.suptitle(title, x=0.005, ha="left", fontsize=10.5, fontweight="bold", color=INK)
    return fig


# -- output ------------------------------------------------------------------------------------
_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(url\(#|href="#)([^")]+)')


def _scope_ids(svg: str, prefix: str) -> str:
    """Prefix every id (and reference to it) so that several SVGs can share one HTML page."""
    svg = _ID.sub(lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    return _REF.sub(lambda m: f"{m.group(1)}{prefix}-{m.group(2)}", svg)


def to_svg(fig: Figure, id_prefix: str = "fig") -> str:
    """The figure as an ``<svg>`` element ready to inline in HTML (scales to its container)."""
    buf = io.StringIO()
    with mpl.rc_context(STYLE):
        fig.savefig(buf, format="svg", metadata=_NO_METADATA_SVG)
    svg = buf.getvalue()
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    # Drop the fixed size in points: the viewBox keeps the aspect ratio and CSS sets the width.
    head_end = svg.index(">")
    head = re.sub(r'\s(width|height)="[^"]*"', "", svg[:head_end])
    svg = head + ' class="plot" role="img"' + svg[head_end:]
    return _scope_ids(svg, id_prefix).strip()


def to_png(fig: Figure, path: str, dpi: int = 150) -> None:
    with mpl.rc_context(STYLE):
        fig.savefig(path, format="png", dpi=dpi, metadata=_NO_METADATA_PNG, facecolor="white")


@_styled
def roofline_figure(runs: Sequence[ReportRun], titled: bool = True) -> Figure:
    """Measured output tok/s against the decoding batch, under each run's roofline ceiling (dashed)."""
    fig = Figure(figsize=(8.6, 4.0), layout="constrained")
    ax = fig.add_subplot()
    xs: list[float] = []
    for i, run in enumerate(runs):
        placed = run.result.verdict.roofline if run.result.verdict is not None else None
        if placed is None:
            continue
        c, prefix = color(i), f"{run.name}: " if len(runs) > 1 else ""
        ax.plot([b for b, _ in placed.curve], [t for _, t in placed.curve], color=c, ls="--", lw=1.2,
                label=f"{prefix}roofline ({placed.hardware})")
        pts = sorted((lv.batch, lv.output_throughput) for lv in placed.levels)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=c, marker="o", label=f"{prefix}measured")
        ax.annotate(f"{placed.share:.0%} of the ceiling", xy=(placed.batch, placed.share * placed.ceiling_tok_s),
                    xytext=(6, -12), textcoords="offset points", color=c, fontsize=8.5)
        xs += [p[0] for p in pts]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.yaxis.set_major_formatter(FuncFormatter(_num_label))
    ax.set_xlabel("decoding batch (sequences)")
    ax.set_ylabel("output tok/s")
    if titled:
        ax.set_title("Measured throughput under the hardware's ceiling")
    if xs:
        ax.legend(loc="best")
    return fig


def has_roofline(runs: Sequence[ReportRun]) -> bool:
    return any(run.result.verdict is not None and run.result.verdict.roofline is not None for run in runs)


MAIN_PLOTS = ("throughput", "latency", "frontier")


def build(kind: str, runs: Sequence[ReportRun], titled: bool = True) -> Figure:
    """One of the main figures (``throughput``, ``latency``, ``frontier``) under the report style."""
    makers = {"throughput": throughput_figure, "latency": latency_figure, "frontier": frontier_figure}
    return makers[kind](runs, titled)




def write_pngs(runs: Sequence[ReportRun], out_dir: str | Path) -> list[Path]:
    """The main plots as ``throughput.png``, ``latency.png`` and ``frontier.png`` in ``out_dir``."""
    d = Path(out_dir)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {d}: {exc.strerror or exc}") from None
    if not os.access(d, os.W_OK):
        raise ConfigError(f"cannot write to {d}: permission denied")
    written = []
    for kind in MAIN_PLOTS:
        path = d / f"{kind}.png"
        try:
            to_png(build(kind, runs), str(path))
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    if has_roofline(runs):
        path = d / "roofline.png"
        try:
            to_png(roofline_figure(runs), str(path))
        except OSError as exc:
            raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from None
        written.append(path)
    return written
