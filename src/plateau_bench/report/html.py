"""The HTML report: one self-contained file that opens offline.

Everything is inlined: the stylesheet, and the plots as SVG drawn by matplotlib (see ``plots``).
There is no script and no external reference of any kind (fonts are the system's), so the page
makes no network request and can be attached to a ticket or a pull request as it is.

The page presents what the analysis computed and recomputes no metric: level figures come from
``result.json`` levels, the plateau, knee and verdict from the sweep's summary when present, and
the time series from ``analysis.timeseries`` over the saved request records and telemetry
samples (downsampled, which keeps a 10-level sweep far below a few megabytes). It reads no file:
the runs come loaded (``store.load_runs``), their records through each run's ``records`` loader.

Sections: verdict and headline figures, throughput vs concurrency, latency vs concurrency, the
throughput-latency frontier, the table of levels (with the server's own time split when it published
one), each level over time, and the spec and
environment of each run. Several runs are overlaid (one colour per run, named by directory);
when their workloads differ, the difference is stated at the top of the page.
"""

from __future__ import annotations

import html
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

from plateau_bench.analysis.timeseries import level_series
from plateau_bench.analysis.unmeasured import known, mean_only
from plateau_bench.errors import ConfigError
from plateau_bench.report import plots
from plateau_bench.report.html_turns import has_turns, turns_table
from plateau_bench.report.repeats import repeat_table_html
from plateau_bench.report.tables import COLUMNS, format_cell
from plateau_bench.report.time_split import time_split_html
from plateau_bench.result import Latency, LevelResult
from plateau_bench.run_view import ReportRun

_esc = html.escape

# The HTML table: the export columns, "ok" and "failed" merged, headers on two lines to fit the page.
_HTML_COLUMNS = (
    ("level", "level"), ("mode", "mode"), ("concurrency", "C"), ("ok", "ok"),
    ("output_tok_s", "output<br>tok/s"), ("total_tok_s", "total<br>tok/s"), ("peak_output_tok_s", "peak<br>tok/s"),
    ("achieved_concurrency", "achieved<br>conc."), ("decoding_concurrency", "decoding<br>conc."),
    ("ttft_p50_ms", "TTFT<br>p50 ms"), ("ttft_p99_ms", "TTFT<br>p99 ms"), ("tpot_mean_ms", "TPOT<br>mean ms"),
    ("tpot_p99_ms", "TPOT<br>p99 ms"), ("e2e_p50_ms", "E2E<br>p50 ms"), ("e2e_p99_ms", "E2E<br>p99 ms"),
    ("wall_s", "wall<br>s"),
)
_BY_NAME = {name: (get, decimals) for name, get, decimals in COLUMNS}
# The median columns that show the mean instead (marked) when a level summary states only the mean.
_MEDIAN_OR_MEAN: dict[str, Callable[[LevelResult], Latency]] = {
    "ttft_p50_ms": lambda lv: lv.ttft_ms, "e2e_p50_ms": lambda lv: lv.e2e_ms}

CSS = """
:root { --ink:#2d3748; --muted:#718096; --line:#e2e8f0; --soft:#f7fafc; --accent:#1f5fa8; }
* { box-sizing: border-box; }
body { margin:0; background:#fff; color:var(--ink);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 28px 28px 60px; }
h1 { font-size: 24px; margin: 0 0 4px; letter-spacing: -0.01em; }
h2 { font-size: 18px; margin: 36px 0 8px; padding-top: 12px; border-top: 1px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
p, li { max-width: 80ch; }
.sub { color: var(--muted); margin: 0 0 18px; }
.note { background: #fffaf0; border-left: 3px solid #d9822b; padding: 8px 14px; margin: 14px 0; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 14px 0; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; min-width: 170px;
  background: var(--soft); }
.card .k { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .d { color: var(--muted); font-size: 13px; }
.verdict { border: 1px solid var(--line); border-left: 4px solid var(--accent); border-radius: 6px;
  padding: 12px 18px; margin: 14px 0; }
.verdict .headline { font-size: 17px; font-weight: 600; margin: 0 0 6px; }
.badge { display: inline-block; font-size: 12px; padding: 1px 8px; border-radius: 10px; background: #ebf4ff;
  color: var(--accent); margin-right: 6px; }
.verdict ul { margin: 4px 0 8px; padding-left: 20px; }
.verdict h4 { margin: 10px 0 2px; font-size: 13px; color: var(--muted); text-transform: uppercase;
  letter-spacing: .04em; }
figure { margin: 12px 0 4px; }
figure h4 { margin: 18px 0 0; font-size: 14px; font-weight: 600; }
svg.plot { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 13px; }
.tablewrap { overflow-x: auto; border: 1px solid var(--line); border-radius: 6px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
th { background: var(--soft); text-align: right; font-weight: 600; vertical-align: bottom; line-height: 1.25; }
td { text-align: right; }
th.t, td.t { text-align: left; }
tr.failed td { color: #c0392b; }
.tag { font-size: 11px; padding: 0 6px; border-radius: 8px; background: #fdf2e9; color: #b9651f; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; overflow-x: auto; }
.swatch { display:inline-block; width:10px; height:10px; border-radius:2px; margin-right:6px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def _fmt(value: Any, decimals: int = 0) -> str:
    return format_cell(value, decimals)


def _list(items: Any) -> str:
    if not isinstance(items, list) or not items:
        return ""
    return "<ul>" + "".join(f"<li>{_esc(str(i))}</li>" for i in items) + "</ul>"


def _run_title(run: ReportRun, index: int, several: bool) -> str:
    swatch = f'<span class="swatch" style="background:{plots.color(index)}"></span>' if several else ""
    return f"{swatch}{_esc(run.name)}"


def _cards(run: ReportRun) -> str:
    cards: list[tuple[str, str, str]] = []
    plateau, knee = run.result.plateau, run.result.knee
    if plateau is not None:
        cards.append(("plateau", f"{_fmt(plateau.throughput)} tok/s",
                      f"at C={_fmt(plateau.concurrency)}" + ("" if plateau.reached else
                                                             " · not reached (highest so far)")))
    if knee is not None:
        lo, hi = knee.bracket
        cards.append(("knee", f"C={_fmt(knee.concurrency)}", f"between C={_fmt(lo)} and C={_fmt(hi)}"))
    if run.levels:
        best = max(run.levels, key=lambda lv: lv.output_throughput)
        where = f"C={_fmt(best.concurrency)}" if best.concurrency is not None else best.label
        cards.append(("highest level", f"{_fmt(best.output_throughput)} tok/s", f"{where} · {best.mode}"))
    slo = run.result.slo
    if slo is not None and slo.max_concurrency is not None:
        cards.append(("within SLO", f"C={_fmt(slo.max_concurrency)}",
                      f"{_fmt(slo.throughput)} tok/s · {', '.join(slo.bounds)}".strip(" ·")))
    failed = sum(lv.failed for lv in run.levels)
    if failed:
        hung = sum(lv.hung for lv in run.levels)
        cards.append(("failed requests", str(failed), f"{hung} hung" if hung else "not counted as throughput"))
    cards.append(("levels", str(len(run.levels)), ", ".join(sorted({lv.mode for lv in run.levels}))))
    stop = run.result.stop_reason
    if stop:
        cards.append(("stopped", "", stop))
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{_esc(k)}</div>' + (f'<div class="v">{_esc(v)}</div>' if v else "")
        + (f'<div class="d">{_esc(d)}</div>' if d else "") + "</div>"
        for k, v, d in cards
    ) + "</div>"


def _verdict(run: ReportRun) -> str:
    v = run.result.verdict
    if v is None:
        return ""
    pairs = [("constraint", v.constraint), ("confidence", v.confidence)]
    if v.secondary:
        pairs.append(("also binding", v.secondary))
    badges = "".join(f'<span class="badge">{_esc(label)}: {_esc(value.replace("_", " "))}</span>'
                     for label, value in pairs)
    parts = [f'<div class="verdict"><p class="headline">{_esc(v.headline)}</p>{badges}']
    secondary = f"Also binding: {v.secondary.replace('_', ' ')}" if v.secondary else ""
    roofline = [v.roofline.text] if v.roofline is not None else []
    for lines, title in ((v.evidence, "Evidence"), (v.secondary_evidence, secondary), (v.gpu_evidence, "GPUs"),
                         (roofline, "Against the hardware (roofline)"), (v.what_if, "What if"),
                         (v.suggestions, "What to try"),
                         (v.to_separate, "What would separate them" if v.secondary else "What would confirm it")):
        body = _list(lines)
        if body:
            parts.append(f"<h4>{_esc(title)}</h4>{body}")
    parts.append("</div>")
    return "".join(parts)


def workload_differences(runs: Sequence[ReportRun]) -> list[str]:
    """One sentence per workload field whose value differs between runs."""
    if len(runs) < 2:
        return []
    workloads = [msgspec.to_builtins(run.workload) for run in runs]
    keys = sorted({k for w in workloads for k in w})
    lines = []
    for key in keys:
        values = [w.get(key) for w in workloads]
        if any(v != values[0] for v in values[1:]):
            per_run = "; ".join(f"{run.name}: {json.dumps(v) if v is not None else 'not recorded'}"
                                for run, v in zip(runs, values, strict=True))
            lines.append(f"{key} differs ({per_run})")
    return lines


def _cell(lv: LevelResult, name: str) -> str:
    if name == "ok":
        done, sent = known(lv, "completed"), known(lv, "num_requests")
        return "-" if done is None or sent is None else f"{done:,.0f}/{sent:,.0f}"
    if name == "mode" and lv.mode == "burst":
        return '<span class="tag">burst</span>'
    get, decimals = _BY_NAME[name]
    lat = _MEDIAN_OR_MEAN.get(name)
    if lat is not None and mean_only(lat(lv)):   # a summary states the mean alone: show it, said as such
        return _esc(f"{format_cell(lat(lv).mean, decimals)} (mean)")
    return _esc(format_cell(get(lv), decimals))


def _level_table(run: ReportRun) -> str:
    def align(name: str) -> str:
        return ' class="t"' if name in ("level", "mode") else ""

    head = "".join(f"<th{align(n)}>{label}</th>" for n, label in _HTML_COLUMNS)
    rows = []
    for lv in run.levels:
        cells = "".join(f"<td{align(n)}>{_cell(lv, n)}</td>" for n, _ in _HTML_COLUMNS)
        cls = ' class="failed"' if lv.level_failed else ""
        rows.append(f"<tr{cls}>{cells}</tr>")
    return f'<div class="tablewrap"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _level_title(run: ReportRun, lv: LevelResult, several: bool) -> str:
    head = f"C={lv.concurrency:,}" if lv.concurrency is not None else f"level {lv.label}"
    if lv.rate is not None:
        head += f" · {lv.rate:g} req/s"
    mode = "burst" if lv.mode == "burst" else lv.mode
    tok_s, wall = known(lv, "output_throughput"), known(lv, "wall_s")
    parts = [f"{run.name} · " if several else "", head, f" · {mode}", f" · {lv.completed}/{lv.num_requests} ok",
             " · tok/s unknown" if tok_s is None else f" · {tok_s:,.0f} tok/s",
             "" if wall is None else f" · wall {wall:,.1f} s"]
    return "".join(parts)


def _timeseries(run: ReportRun, index: int, several: bool) -> str:
    records = run.records()
    figures = []
    for j, lv in enumerate(run.levels):
        series = level_series(records.level_requests(lv.label), records.level_telemetry(lv.label))
        if series.empty:
            continue
        window = (lv.window_start_s, lv.window_end_s)
        fig = plots.timeseries_figure(series, None, window)
        title = _esc(_level_title(run, lv, several))
        figures.append(f"<figure><h4>{title}</h4>{plots.to_svg(fig, f'r{index}l{j}')}</figure>")
    if not figures:
        return "<p class=\"sub\">No request records saved for this run.</p>"
    return "".join(figures)


def _environment(run: ReportRun) -> str:
    r = run.result
    keep = {k: v for k, v in (("kind", r.kind), ("created", r.created), ("tool", msgspec.to_builtins(r.tool)),
                              ("host", msgspec.to_builtins(r.host)), ("target", msgspec.to_builtins(r.target)),
                              ("spec", msgspec.to_builtins(r.spec))) if v not in (None, {}, "")}
    return f"<pre>{_esc(json.dumps(keep, indent=2, sort_keys=False, default=str))}</pre>"


_CAPTIONS = {
    "throughput": "Output tokens per second at each level. Dashed: the plateau; dotted: the knee "
                  "(shaded: the bracket it lies in). Hollow markers: burst levels.",
    "latency": "Time to first token, time per output token and end-to-end latency; "
               "solid p50, dashed p99.",
    "frontier": "Each point is a level: how fast each user is served against how much the server "
                "serves in all. Pick the rightmost point whose per-user speed is still acceptable.",
}
ROOFLINE_CAPTION = ("Each point is a level at its decoding batch; dashed: the roofline, the fastest the "
                    "hardware could decode that batch (log scales). The gap is what the engine leaves unused.")
_TITLES = {"throughput": "Throughput", "latency": "Latency", "frontier": "Throughput-latency frontier"}


def _head(runs: Sequence[ReportRun]) -> list[str]:
    names = ", ".join(run.name for run in runs)
    created = [run.result.created for run in runs if run.result.created]
    preset = [p.preset for run in runs for p in (run.result.spec.sim, run.result.spec.twin) if p is not None]
    sub = [f"{len(runs)} runs overlaid" if len(runs) > 1 else runs[0].result.kind]
    sub += [f"created {', '.join(created)}"] if created else []
    sub += [f"preset {', '.join(preset)}"] if preset else []
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>plateau-bench report: {_esc(names)}</title>",
           f"<style>{CSS}</style></head><body><main>",
           f"<h1>plateau-bench report: {_esc(names)}</h1>",
           f'<p class="sub">{_esc(" · ".join(sub))}</p>']
    diffs = workload_differences(runs)
    if diffs:
        out.append('<div class="note"><strong>The runs used different workloads.</strong> '
                   + _list(diffs) + "Compare their curves with this in mind.</div>")
    return out


def _per_run(runs: Sequence[ReportRun], section: Callable[[ReportRun, int], str]) -> list[str]:
    several = len(runs) > 1
    out = []
    for i, run in enumerate(runs):
        if several:
            out.append(f"<h3>{_run_title(run, i, several)}</h3>")
        out.append(section(run, i))
    return out


def render_html(runs: Sequence[ReportRun]) -> str:
    """The whole report for ``runs`` as one HTML document."""
    several = len(runs) > 1
    out = _head(runs)
    out.append("<h2>Verdict</h2>" if any(run.result.verdict for run in runs) else "<h2>Summary</h2>")
    out += _per_run(runs, lambda run, _: _verdict(run) + _cards(run))
    for kind in plots.MAIN_PLOTS:
        svg = plots.to_svg(plots.build(kind, runs, titled=False), kind)
        out.append(f"<h2>{_TITLES[kind]}</h2><figure>{svg}<figcaption>{_esc(_CAPTIONS[kind])}</figcaption>"
                   "</figure>")
    if plots.has_roofline(runs):
        svg = plots.to_svg(plots.roofline_figure(runs, titled=False), "roofline")
        out.append(f"<h2>Against the hardware</h2><figure>{svg}<figcaption>{_esc(ROOFLINE_CAPTION)}"
                   "</figcaption></figure>")
    out.append("<h2>Levels</h2>")
    out += _per_run(runs, lambda run, _: (_level_table(run) + time_split_html(run.levels)
                                          + repeat_table_html(run.levels)))
    if has_turns(runs):
        out.append("<h2>Turns of multi-turn sessions</h2><p class=\"sub\">Per level and turn index: the prompt "
                   "grows with the conversation's history; TTFT grows with it unless the prefix cache reuses it.</p>")
        out += _per_run(runs, lambda run, _: turns_table(run))
    out.append("<h2>Levels over time</h2><p class=\"sub\">In-flight requests, output tokens per second "
               "(1 s buckets) and, when scraped, the server's running and waiting requests and KV cache "
               "usage. Shaded: the measurement window.</p>")
    out += _per_run(runs, lambda run, i: _timeseries(run, i, several))
    out.append("<h2>Spec and environment</h2>")
    for i, run in enumerate(runs):
        out.append(f"<h3>{_run_title(run, i, several)}</h3><p class=\"sub\">{_esc(str(run.path))}</p>")
        out.append(_environment(run))
    out.append('<footer>Generated by plateau-bench. Self-contained: opens offline.</footer>')
    out.append("</main></body></html>\n")
    return "\n".join(out)


def check_writable(path: str | Path) -> Path:
    """Fail early, before any rendering, when ``path`` cannot be written as a file."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"cannot write {p}: it is a directory")
    blocker = next((a for a in p.parents if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConfigError(f"cannot write {p}: {blocker} is a file, not a directory")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot write {p}: {exc.strerror or exc}") from None
    if not os.access(p.parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise ConfigError(f"cannot write {p}: permission denied")
    return p


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` (parents created); ``ConfigError`` when it cannot be written."""
    p = check_writable(path)
    try:
        p.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot write {p}: {exc.strerror or exc}") from None
    return p


def write_html(runs: Sequence[ReportRun], out_path: str | Path) -> Path:
    """Render the report of ``runs`` (one or several, loaded by ``store.load_runs``) to ``out_path``."""
    check_writable(out_path)
    return write_text(out_path, render_html(runs))
