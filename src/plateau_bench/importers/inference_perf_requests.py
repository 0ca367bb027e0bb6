"""inference-perf's per-request report (``per_request_lifecycle_metrics.json``): one level per load stage.

The file lists every request of the run, all stages together, each as ``{start_time, end_time, request,
response, info, error}`` (times in seconds on the tool's monotonic clock; ``computed_metrics`` too when
the config asks for it; ``request``/``response``/``info`` can each be left out by the config). A request
is matched to its stage:

1. by its stage id, where the entry states one (``stage_id``, at the top or under ``info``);
2. else by the stage reports written next to it (``stage_N_lifecycle_metrics.json``, same file prefix):
   stages run one after another, so in order of sending the requests fill stage 0's count, then stage
   1's, and so on; the counts must add up to the file's requests;
3. else by time: a request sent after nothing was in flight for ``STAGE_PAUSE_S`` opens the next stage
   (the tool pauses ``load.interval``, 1 s by default, between stages). The groups take the stage
   reports' settings in order when there are as many reports as groups.

A stage's settings (its concurrency, or its rate) come from its report. A group no report describes is a
closed-loop level at the most requests it had in flight at once when its sends refilled a freed slot
(a concurrency stage), else an open-loop level at its send rate; the level's notes say so. A closed-loop
level's requests are put back on the slots that sent them (``_in_slots``), so its steady window leaves out
the ramp-up and the drain as a native closed-loop level's does.

Token counts are the server's (``server_usage``), where it reported them: inference-perf's own
``output_tokens`` re-tokenizes the streamed text on the client, which can differ from what the server
generated. Each content chunk's arrival (``chunk_times``) is a token arrival time.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from plateau_bench.errors import ConfigError
from plateau_bench.importers.common import (
    TOKEN_SOURCE_IMPORTED,
    ImportedLevel,
    ImportOptions,
    Where,
    dig,
    error_class,
    json_values,
    level_label,
    ns,
    obj,
    read_text,
    records_level,
    spread_tokens,
)
from plateau_bench.importers.inference_perf import Stage, era_of_entry, is_summary, stage
from plateau_bench.records import RequestRecord

NAME = "inference-perf"
PER_REQUEST_NAME = "per_request_lifecycle_metrics.json"
STAGE_PAUSE_S = 0.5      # idle time that separates two stages when nothing else tells them apart
CLOSED_LOOP_SHARE = 0.75  # sends that kept the group's peak in flight, for it to be closed-loop
CLOSED_LOOP_DELAY = 0.1   # a closed loop's send follows an end within this share of the median latency


def entry_stage(entry: dict[str, Any]) -> int | None:
    value = entry.get("stage_id", dig(entry, "info", "stage_id"))
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def file_prefix(path: Path) -> str | None:
    """The report-name prefix (``storage.*.report_file_prefix``) of a per-request report, None if not one."""
    return path.name[: -len(PER_REQUEST_NAME)] if path.name.endswith(PER_REQUEST_NAME) else None


def stage_report_paths(directory: Path, prefix: str) -> dict[int, Path]:
    pattern = re.compile(re.escape(prefix) + r"stage_(\d+)_lifecycle_metrics\.json")
    found: dict[int, Path] = {}
    for f in directory.iterdir() if directory.is_dir() else ():
        m = pattern.fullmatch(f.name)
        if m and f.is_file():
            found[int(m.group(1))] = f
    return dict(sorted(found.items()))


# -- one request ------------------------------------------------------------------------------------
def _part(d: dict[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return v if isinstance(v, dict) else {}


def _response(info: dict[str, Any]) -> dict[str, Any]:
    """The response's figures: ``info.response_metrics`` (0.6+), ``info.response_info`` (0.5); earlier ones
    sit in ``info`` itself."""
    return _part(info, "response_metrics") or _part(info, "response_info")


def _server_count(usage: Any, *keys: str) -> int | None:
    return next((int(usage[k]) for k in keys if isinstance(usage, dict) and isinstance(usage.get(k), int)
                 and not isinstance(usage.get(k), bool)), None)


def _tokens(info: dict[str, Any], computed: dict[str, Any]) -> tuple[int, int]:
    """(prompt, output) tokens: the server's usage where it reported it, else the client's count."""
    resp = _response(info)
    usage = resp.get("server_usage")
    out = _server_count(usage, "completion_tokens", "output_tokens")
    if out is None:
        client = resp.get("output_tokens", info.get("output_tokens", computed.get("output_tokens")))
        out = client if isinstance(client, int) else 0
    prompt = _server_count(usage, "prompt_tokens", "input_tokens")
    if prompt is None:
        client = dig(info, "request_metrics", "text", "input_tokens") or info.get("input_tokens") \
            or computed.get("input_tokens")
        prompt = client if isinstance(client, int) else 0
    return prompt, out


def _has_text(chunk: Any) -> bool:
    """Whether a streamed chunk carried output (a role-only or usage-only one did not); unknown: yes."""
    try:
        data = json.loads(chunk) if isinstance(chunk, str) else None
    except ValueError:
        return True
    if not isinstance(data, dict):
        return True
    choices = data.get("choices")
    if isinstance(choices, list):
        first: dict[str, Any] = choices[0] if choices and isinstance(choices[0], dict) else {}
        delta = _part(first, "delta")
        return bool(first.get("text") or delta.get("content") or delta.get("reasoning_content")
                    or delta.get("reasoning"))
    if isinstance(data.get("type"), str):    # Anthropic's message events: only content deltas carry output
        return bool(data["type"] == "content_block_delta")
    return True


def _content_chunks(resp: dict[str, Any]) -> list[Any]:
    """The arrival times of the chunks that carried output (all of them when the chunks are not kept)."""
    times = resp.get("chunk_times") or []
    texts = resp.get("response_chunks")
    if not isinstance(times, list) or not isinstance(texts, list) or len(texts) != len(times):
        return times if isinstance(times, list) else []
    return [t for t, c in zip(times, texts, strict=True) if _has_text(c)]


def _arrivals(info: dict[str, Any], computed: dict[str, Any], start: float, out: int) -> list[float]:
    """When output arrived (s): each content chunk, else each client-counted token, else the first token."""
    resp = _response(info)
    chunks = _content_chunks(resp)
    tokens = resp.get("output_token_times") or info.get("output_token_times") or []
    times = tokens if tokens and (len(tokens) == out or not chunks) else chunks
    found = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)]
    ttft = computed.get("time_to_first_token")
    if not found and isinstance(ttft, int | float) and ttft >= 0:
        found = [start + float(ttft)]
    return found


def record(entry: dict[str, Any], i: int, t0: float, where: Where) -> RequestRecord:
    start, end = entry.get("start_time"), entry.get("end_time")
    if not isinstance(start, int | float):
        raise where.missing(f"[{i}].start_time")
    if not isinstance(end, int | float):
        raise where.missing(f"[{i}].end_time")
    info, computed = _part(entry, "info"), _part(entry, "computed_metrics")
    prompt, out = _tokens(info, computed)
    sent, finished = ns(float(start) - t0), ns(float(end) - t0)
    err = entry.get("error")
    if err:
        text = f"{dig(err, 'error_type') or ''}: {dig(err, 'error_msg') or ''}" if isinstance(err, dict) else str(err)
        return RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, end_ns=finished, prompt_tokens=prompt,
                             token_source=TOKEN_SOURCE_IMPORTED, error=error_class(text), error_detail=text[:500])
    chunks = [ns(t - t0) for t in _arrivals(info, computed, float(start), out)]
    # a chunk stamped after the end it belongs to (another clock read) moves the end, not the chunk
    return RequestRecord(index=i, scheduled_ns=sent, sent_ns=sent, end_ns=max(finished, *chunks[-1:]),
                         first_token_ns=chunks[0] if chunks else None, chunk_ns=chunks,
                         chunk_tokens=spread_tokens(out, len(chunks)), prompt_tokens=prompt, output_tokens=out,
                         token_source=TOKEN_SOURCE_IMPORTED)


# -- which stage each request belongs to -------------------------------------------------------------------
Row = tuple[int, dict[str, Any]]   # an entry and its index in the file


@dataclass
class Group:
    """The requests of one stage, what states the stage's settings, and how they were matched."""

    rows: list[Row]
    stage: Stage | None
    how: str


def _start(row: Row) -> float:
    return float(row[1]["start_time"])


def _by_stage_id(rows: list[Row], stages: dict[int, Stage], where: Where) -> list[Group] | None:
    ids = [entry_stage(r) for _, r in rows]
    if all(i is None for i in ids):
        return None
    if None in ids:
        raise where.fail(f"entry {rows[ids.index(None)][0]} of an inference-perf per-request report states no "
                         "stage id while others do: cannot tell which stage it belongs to")
    groups: dict[int, list[Row]] = {}
    for row, sid in zip(rows, ids, strict=True):
        groups.setdefault(int(sid or 0), []).append(row)
    return [Group(g, stages.get(sid), f"stage {sid} by the stage id its requests state")
            for sid, g in sorted(groups.items())]


def _by_counts(rows: list[Row], stages: dict[int, Stage]) -> list[Group] | None:
    counts = [st.count for st in stages.values()]
    if not counts or any(c is None or c <= 0 for c in counts) or sum(c or 0 for c in counts) != len(rows):
        return None
    ordered = sorted(rows, key=_start)
    groups, at = [], 0
    for st in stages.values():
        n = st.count or 0
        groups.append(Group(ordered[at:at + n], st, f"stage {st.number}: its {n} requests in order of sending, "
                                                     f"by the count {st.source} states"))
        at += n
    return groups


def _by_pauses(rows: list[Row], stages: dict[int, Stage]) -> list[Group]:
    runs: list[list[Row]] = []
    busy_until = float("-inf")
    for row in sorted(rows, key=_start):
        if not runs or _start(row) - busy_until >= STAGE_PAUSE_S:
            runs.append([])
        runs[-1].append(row)
        busy_until = max(busy_until, float(row[1]["end_time"]))
    paired = len(runs) == len(stages)
    how = (f"split where nothing was in flight for {STAGE_PAUSE_S:g} s or more (the tool pauses between stages)"
           + (", the stage reports taken in order" if paired and stages else ""))
    return [Group(run, list(stages.values())[i] if paired else None, how) for i, run in enumerate(runs)]


def stage_reports(path: Path) -> dict[int, Stage]:
    """The stage reports written next to a per-request report (same prefix), by stage number; one that
    cannot be read is left out (its stage's settings are then inferred, and the notes say so)."""
    prefix = file_prefix(path)
    found: dict[int, Stage] = {}
    for number, report in stage_report_paths(path.parent, prefix).items() if prefix is not None else ():
        try:
            values = json_values(report, read_text(report))
        except ConfigError:
            continue
        if values and isinstance(values[0][0], dict) and is_summary(values[0][0]):
            found[number] = stage(values[0][0], number, report.name)
    return found


# -- levels ----------------------------------------------------------------------------------------------
def _in_flight_after_starts(rows: list[Row]) -> list[int]:
    """How many requests were in flight just after each send, in order of sending (an end at the same
    instant as a send counts first)."""
    events = sorted([(_start(r), 1) for r in rows] + [(float(r[1]["end_time"]), -1) for r in rows])
    out, now = [], 0
    for _, step in events:
        now += step
        if step > 0:
            out.append(now)
    return out


def _closed_loop_size(rows: list[Row]) -> int | None:
    """The concurrency of a group whose sends refilled freed slots (its peak in flight), None if open loop.

    Closed loop: once the peak was first reached, nearly every send kept the count at it (one or a tenth
    below, where several requests ended together and the refills came one by one), and came moments after
    an end (a tenth of the median latency or less) rather than on its own clock.
    """
    after = _in_flight_after_starts(rows)
    peak = max(after)
    first = after.index(peak)
    refills = after[first + 1:]
    if not refills:
        return peak          # every request was in flight at once
    near = sum(1 for n in refills if n >= peak - max(1, peak // 10))
    starts = sorted(_start(r) for r in rows)[first + 1:]
    ends = sorted(float(r[1]["end_time"]) for r in rows)
    delays = [t - ends[i - 1] for t in starts if (i := bisect.bisect_right(ends, t)) > 0]
    latency = float(np.median([float(r[1]["end_time"]) - _start(r) for r in rows]))
    prompt = bool(delays) and float(np.median(delays)) <= CLOSED_LOOP_DELAY * latency
    return peak if near >= CLOSED_LOOP_SHARE * len(refills) and prompt else None


def _inferred(rows: list[Row], opts: ImportOptions, alone: bool) -> tuple[str, int | None, float | None, str]:
    """A group's settings when no report states them: closed loop at its peak in flight, else its send rate."""
    if opts.concurrency and alone:
        return "steady", opts.concurrency, None, f"concurrency {opts.concurrency} as given (--concurrency)"
    size = _closed_loop_size(rows)
    if size is not None:
        return "steady", size, None, (f"concurrency {size} inferred: the most requests in flight at once, each new "
                                      "send refilling a freed slot (the file does not state its stage's settings)")
    starts = [_start(r) for r in rows]
    span = max(starts) - min(starts)
    rate = (len(rows) - 1) / span if span > 0 else None
    return "rate", None, rate, ("open loop: the file does not state its stage's settings"
                                + (f"; rate {rate:.3g} req/s inferred from its sends" if rate else ""))


def _in_slots(records: list[RequestRecord], concurrency: int) -> list[RequestRecord]:
    """A closed loop's requests on the slots that sent them: each send takes the slot freed longest ago.

    inference-perf does not record which of its ``concurrency`` slots sent a request; a closed loop refills a
    slot when its request ends, so in order of sending, the earliest-freed slot is the one. The slots are
    the level's workers: its steady window opens once every slot has a first token and closes when the
    first slot has sent its last request (ramp-up and drain excluded, as for a native closed-loop level).
    """
    free = [(-1, slot) for slot in range(concurrency)]
    heapq.heapify(free)
    out = []
    for r in sorted(records, key=lambda r: (r.sent_ns, r.index)):
        _, slot = heapq.heappop(free)
        out.append(msgspec.structs.replace(r, worker=slot))
        heapq.heappush(free, (r.end_ns, slot))
    return out


def _level(group: Group, where: Where, opts: ImportOptions, alone: bool) -> ImportedLevel:
    t0 = min(_start(r) for r in group.rows)
    records = [record(entry, i, t0, where) for i, entry in group.rows]
    st = group.stage
    if st is not None and (st.concurrency or st.rate):
        mode, concurrency, rate = st.mode, st.concurrency, st.rate
        settings = f"settings from {st.source}"
    else:
        mode, concurrency, rate, settings = _inferred(group.rows, opts, alone)
    notes = [f"{group.how}; {settings}"]
    if st is not None and st.goodput is not None:
        notes.append(st.goodput.note())
    if mode == "steady" and concurrency:
        records = _in_slots(records, concurrency)
    level = records_level(records, label=level_label(mode, concurrency, rate), mode=mode, concurrency=concurrency,
                          rate=rate, source=f"{NAME}: {where}", notes=notes)
    if st is not None and st.goodput is not None:
        level.level.goodput_rps = st.goodput.request_rate
    _peak_decoding(level)
    return level


def _held_peak(records: list[RequestRecord]) -> tuple[int, float] | None:
    """The most requests decoding together for at least one inter-chunk gap (median), and that gap (ms).

    inference-perf stamps chunks in several worker processes, each behind its own event loop by a few ms,
    so one request's last token can read after the first token of the request the server admitted in its
    place, a step later. A batch one larger than the server ran then shows for a moment shorter than a
    step; a sequence that really decoded beside the others stays for at least one token's gap.
    """
    gaps = [b - a for r in records for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False) if b > a]
    spans = [(r.first_token_ns, r.chunk_ns[-1]) for r in records if r.first_token_ns is not None and r.chunk_ns]
    if not gaps or not spans:
        return None
    step = float(np.median(gaps))
    events = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    counts: list[tuple[int, int]] = []       # (time, count from then on)
    now = 0
    for t, delta in events:
        now += delta
        counts.append((t, now))
    for k in range(max(c for _, c in counts), 0, -1):
        since: int | None = None
        for t, c in counts:
            if c >= k and since is None:
                since = t
            elif c < k and since is not None:
                if t - since >= step:
                    return k, step / 1e6
                since = None
    return None


def _peak_decoding(level: ImportedLevel) -> None:
    """``peak_decoding`` as the batch held for a step, not a moment's overlap of two processes' stamps."""
    held = _held_peak([r for r in level.records if r.ok and not r.warmup])
    lv = level.level
    if held is not None and held[0] < lv.peak_decoding:
        lv.notes.append(f"peak decoding {held[0]}: the most requests past their first token together for at least "
                        f"one inter-chunk gap ({held[1]:.1f} ms); {lv.peak_decoding} overlapped for less, which "
                        "several client processes' timestamps read, not a larger batch")
        lv.peak_decoding = held[0]


def matches_stage_reports(path: Path) -> bool:
    """Whether a per-request report's requests fall into the stage reports next to it (a directory holding
    both then reads the requests; else the stage reports). A file that cannot be read says so when read."""
    try:
        items = json.loads(read_text(path))
        rows = [(i, r) for i, r in enumerate(items) if isinstance(r, dict) and _numbers(r)]
        if len(rows) != len(items) or not rows:
            return True
        stages = stage_reports(path)
        groups = _by_stage_id(rows, stages, Where(str(path))) or _by_counts(rows, stages) or _by_pauses(rows, stages)
    except (ConfigError, ValueError, TypeError):
        return True
    return any(g.stage is not None for g in groups)


def _numbers(entry: dict[str, Any]) -> bool:
    return all(isinstance(entry.get(k), int | float) and not isinstance(entry.get(k), bool)
               for k in ("start_time", "end_time"))


def per_request_levels(items: list[Any], path: Path, where: Where, opts: ImportOptions) -> list[ImportedLevel]:
    """One level per stage of the run (see the module docstring for how requests find their stage)."""
    stages = stage_reports(path)
    rows = [(i, obj(r, where, f"entry {i}")) for i, r in enumerate(items)]
    for i, r in rows:
        for key in ("start_time", "end_time"):
            if not isinstance(r.get(key), int | float) or isinstance(r.get(key), bool):
                raise where.fail(f"an inference-perf per-request report ({era_of_entry(r)}, by its keys): entry {i} "
                                 f"has no number '{key}'")
    groups = _by_stage_id(rows, stages, where) or _by_counts(rows, stages) or _by_pauses(rows, stages)
    levels = [_level(g, where, opts, alone=len(groups) == 1) for g in groups]
    if stages and all(g.stage is None for g in groups):
        counts = ", ".join(str(st.count) for st in stages.values())
        for level in levels:
            level.level.notes.append(f"the stage reports next to the file ({len(stages)}, of {counts} requests) "
                                     f"match neither its {len(rows)} requests nor its {len(groups)} stage(s): unused")
    return levels
