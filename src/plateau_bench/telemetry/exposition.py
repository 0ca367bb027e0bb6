"""Prometheus text exposition in, a sample-name index out, reading only what the engine maps need.

``parse_exposition`` runs prometheus_client's official text parser. Before it, ``prefilter`` keeps
only the lines whose metric name some engine map reads (plus vLLM's ``*_info`` metrics): a vLLM
page is mostly histogram buckets, and the official parser costs tens of microseconds a line, so parsing a whole
2,000-line page would stall the load generator's event loop for tens of milliseconds per scrape. Of the
histograms only the few the time split reads are kept (``EngineMap.histograms``: seven on vLLM, ~170 lines).
The filter compares names exactly (a regular expression factored by common prefix, anchored on
the character after the name), so it never keeps ``vllm:num_requests_waiting_by_reason`` for
``vllm:num_requests_waiting`` or the reverse: both are wanted, each as itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from plateau_bench.telemetry.engines import ENGINES, MetricIndex


def _wanted_names() -> frozenset[str]:
    names: set[str] = set()
    for engine in ENGINES:
        for q in engine.quantities:
            for n in q.names:
                names.update((n, n + "_total"))
                for suffix in ("_sum", "_count"):
                    if n.endswith(suffix):
                        names.add(n[: -len(suffix)])   # the histogram's TYPE line
        for _, n in engine.histograms:   # kept whole: TYPE line, buckets, count and sum (not ``_created``)
            names.update((n, n + "_bucket", n + "_count", n + "_sum"))
    return frozenset(names)


_WANTED = _wanted_names()
_WANTED_SUFFIXES = tuple((e.prefix, s) for e in ENGINES for s in e.wanted_suffixes)


def is_wanted(name: str) -> bool:
    """Whether a metric name carries a quantity any engine map reads (the specification that
    ``prefilter``'s regular expression implements)."""
    if name in _WANTED:
        return True
    return any(name.startswith(p) and name.endswith(s) for p, s in _WANTED_SUFFIXES)


def _line_name(line: str) -> str:
    if line.startswith(("# HELP ", "# TYPE ")):
        parts = line.split(maxsplit=3)
        return parts[2] if len(parts) > 2 else ""
    if line.startswith("#"):
        return ""
    end = len(line)
    for sep in ("{", " ", "\t"):
        pos = line.find(sep)
        if pos != -1:
            end = min(end, pos)
    return line[:end]


def _trie_regex(words: Iterable[str]) -> str:
    """An alternation of ``words`` factored by common prefix, so the regex engine decides on
    each character once instead of trying every word in turn (a flat alternation of ~100 names
    costs as much as the per-line loop it replaces)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        optional = "" in node
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 and not optional else "(?:" + "|".join(branches) + ")"
        return body + "?" if optional else body

    return emit(trie)


def _wanted_line_pattern() -> re.Pattern[str]:
    suffixed = [f"{re.escape(p)}[A-Za-z0-9_:]*{re.escape(s)}" for p, s in _WANTED_SUFFIXES]
    alternatives = "|".join([_trie_regex(_WANTED), *suffixed])
    # a sample or HELP/TYPE line whose metric name is exactly one of the wanted names
    return re.compile(rf"[ \t]*(?:#[ \t]+(?:HELP|TYPE)[ \t]+)?(?:{alternatives})[{{ \t]")


_WANTED_LINE = _wanted_line_pattern()


def prefilter(text: str) -> str:
    """Keep only the exposition lines whose metric name ``is_wanted`` accepts.

    A vLLM /metrics page is mostly histogram buckets we never read; dropping them before the
    official parser runs cuts the parse time by an order of magnitude, which matters because the
    scraper shares the event loop with the load generator. Each line is tested with one
    compiled regular expression (see ``_trie_regex``).
    """
    match = _WANTED_LINE.match
    return "\n".join(line for line in text.splitlines() if match(line)) + "\n"


def parse_exposition(text: str, *, filtered: bool = True) -> MetricIndex:
    """Parse Prometheus text exposition with prometheus_client into a sample-name index.

    Raises:
        ValueError: the text is not valid exposition format (the parser's own error).
    """
    index: MetricIndex = {}
    if filtered:
        text = _take_histogram_lines(prefilter(text), index)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            index.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    return index


def _histogram_names() -> tuple[frozenset[str], frozenset[str]]:
    families = frozenset(n for engine in ENGINES for _, n in engine.histograms)
    return families, frozenset(n + suffix for n in families for suffix in ("_bucket", "_count", "_sum"))


_HISTOGRAM_FAMILIES, _HISTOGRAM_SAMPLES = _histogram_names()
_SAMPLE_LINE = re.compile(r"([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?[ \t]+(\S+)(?:[ \t]+-?\d+)?[ \t]*")
_LABEL = r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"'
_LABEL_PAIR = re.compile(_LABEL)
_LABELS = re.compile(rf"(?:{_LABEL}(?:,|$))*")
_UNESCAPE = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _take_histogram_lines(text: str, index: MetricIndex) -> str:
    """Read the time split's histogram samples into ``index`` directly; return the other lines.

    Their ~170 bucket lines would cost the official parser ~3 ms a scrape (six times the rest of a vLLM
    page), on the event loop the load shares; a sample line is simple enough to read with one regular
    expression (~5x faster). A line it does not fully understand goes to the official parser, untyped
    (its name and labels kept), and the families' HELP/TYPE lines are dropped with their samples.
    """
    rest: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            if _line_name(line) not in _HISTOGRAM_FAMILIES:
                rest.append(line)
            continue
        sample = _histogram_sample(line)
        if sample is None:
            rest.append(line)
        else:
            name, labels, value = sample
            index.setdefault(name, []).append((labels, value))
    return "\n".join(rest) + "\n"


def _histogram_sample(line: str) -> tuple[str, dict[str, str], float] | None:
    match = _SAMPLE_LINE.fullmatch(line)
    if match is None or match.group(1) not in _HISTOGRAM_SAMPLES:
        return None
    body = match.group(2) or ""
    if not _LABELS.fullmatch(body.rstrip(",")):
        return None
    try:
        value = float(match.group(3))
    except ValueError:
        return None
    labels = {key: re.sub(r"\\[\\\"n]", lambda m: _UNESCAPE[m.group(0)], raw) if "\\" in raw else raw
              for key, raw in _LABEL_PAIR.findall(body)}
    return match.group(1), labels, value


def engine_names_present(text: str) -> set[str]:
    """Engine names whose prefix appears on any metric line (cheap, no parsing)."""
    found: set[str] = set()
    for line in text.splitlines():
        name = _line_name(line.strip())
        for engine in ENGINES:
            if name.startswith(engine.prefix):
                found.add(engine.name)
    return found
