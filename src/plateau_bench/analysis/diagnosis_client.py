"""The checks that come before any server figure: the load generator, its connections, and failures.

1. **Stalled client**: an event loop that lagged >= ``STALL_MS`` (p99) at any level makes every chunk
   time of that level untrustworthy, so it is named first, whatever else the sweep shows.
2. **Slow connections**: requests that waited >= 1 s (p99) for a connection (``connect_ms``: a listen
   backlog that overflowed and SYNs retried after 1 s, 3 s, ...; a connection limit in the client or a
   proxy) measure the network path, not the server.
3. **Load generator bound**, on sustained evidence only: in the steady window the client held fewer
   requests than asked (``in_flight`` from its own record, else achieved concurrency; a burst level's
   whole-level average includes ramp-up and drain, so there only the peak in flight counts), its CPU
   or event-loop lag stayed high on average over the window (a maximum is one moment), the server had
   room, and the level's throughput exceeds what levels with a healthy client reached: a client that
   delivers the plateau is not what limits it.
4. **Errors**: failures grow with load; the verdict names the classes it saw (429 rate limiting, 5xx,
   timeouts, refused connections, hung requests) with their counts.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from plateau_bench.analysis.diagnosis_common import at, conc
from plateau_bench.result import LevelResult, Verdict

STALL_MS = 200.0          # event-loop lag (p99) beyond which client timings cannot be trusted at all
SLOW_CONNECT_MS = 1000.0  # connect p99 at or above this: the connection path is the limit
BUSY_CPU_PCT = 80.0       # the client's mean CPU (% of one core) over the window that says "saturated"
BUSY_LAG_MS = 20.0        # or its mean event-loop lag
SHORT = 0.85              # in flight below this share of the requested concurrency


def _spread(lv: LevelResult) -> list[str]:
    """How to give the load more event loops: ``--workers``, ``--ray`` (each process is one loop on one core)."""
    n = lv.client.processes
    if n <= 1:
        return ["spread the load over several processes on this machine: --workers auto (one per 512 streams, "
                "up to the cores) or --workers N"]
    return [f"the busiest of the {n} load processes was saturated: more of them (--workers {2 * n}) if the cores "
            "allow, else more machines (--ray, --workers-per-node)"]


def _stalled(levels: Sequence[LevelResult]) -> Verdict | None:
    stalled = [lv for lv in levels if (lv.client.loop_lag_ms_p99 or 0.0) >= STALL_MS]
    if not stalled:
        return None
    worst = max(stalled, key=lambda lv: lv.client.loop_lag_ms_p99 or 0.0)
    return Verdict(
        "load_generator",
        f"load generator stalled: its event loop lagged {worst.client.loop_lag_ms_p99 or 0.0:.0f} ms (p99) "
        f"at {at(worst)}, so chunk times, TPOT and concurrency are not measurable",
        "high",
        [f"event-loop lag p99 >= {STALL_MS:.0f} ms at " + ", ".join(at(lv) for lv in stalled),
         f"load generator CPU peaked at {worst.client.cpu_pct_max or float('nan'):.0f} % of one core"],
        suggestions=[*_spread(worst), "run the load generator on a machine (or cores) the server does not share",
                     "re-run the affected levels: every figure from them understates or distorts the server"],
    )


def _slow_connections(levels: Sequence[LevelResult]) -> Verdict | None:
    slow = [lv for lv in levels if (lv.connect_ms.p99 or 0.0) >= SLOW_CONNECT_MS]
    if not slow:
        return None
    first = slow[0]
    worst = max(slow, key=lambda lv: lv.connect_ms.p99 or 0.0)
    ev = [f"from {at(first)}: 1 % of requests waited {(first.connect_ms.p99 or 0) / 1000:.1f} s or more for a "
          f"connection (connect p99; median {(first.connect_ms.p50 or 0):.0f} ms)",
          f"worst at {at(worst)}: connect p99 {(worst.connect_ms.p99 or 0) / 1000:.1f} s, "
          f"max {(worst.connect_ms.max or 0) / 1000:.1f} s"]
    fast = [lv for lv in levels if lv.connect_ms.p99 is not None and lv not in slow]
    if fast:
        ev.append(f"connections opened quickly up to {at(fast[-1])} (p99 {fast[-1].connect_ms.p99:.0f} ms)")
    retried = _kernel_evidence(slow, first, ev)
    backlog = ["raise the server's listen backlog (Linux: sysctl -w net.core.somaxconn=4096; the server's own "
               "backlog setting) or the proxy's connection limit",
               "ramp concurrency up in steps (or reuse connections) so a burst of new connections does not overflow it"]
    elsewhere = ["the kernel saw no retried connection: look at the client (its event-loop lag and CPU in the level "
                 "table; --workers spreads it) and at any proxy in between before the server's backlog"]
    return Verdict(
        "load_generator", f"connections were slow to open from {at(first)}: the connection path, not the "
                          "server's engine, limits these levels",
        "high" if len(slow) >= 2 or (worst.connect_ms.p99 or 0) >= 3 * SLOW_CONNECT_MS else "medium", ev,
        suggestions=[*(elsewhere if retried is False else backlog),
                     "TTFT and throughput at these levels include the connection wait"],
    )


def _kernel_evidence(slow: Sequence[LevelResult], first: LevelResult, ev: list[str]) -> bool | None:
    """What this host's TCP counters say of the slow levels (appended to ``ev``): True when connections were
    retried, False when the kernel counted none, None when the counters were not read."""
    kernel = [lv.kernel_tcp for lv in slow if lv.kernel_tcp is not None]
    if not kernel:
        if (first.connect_ms.p99 or 0) < 3 * SLOW_CONNECT_MS:
            ev.append("~1 s matches the first SYN retransmission after a full listen backlog (not confirmed: this "
                      "host's TCP counters were not read)")
        return None
    syn = sum(k.syn_retransmits for k in kernel)
    here = any(k.server_here for k in kernel)
    overflows = sum(k.listen_overflows + k.listen_drops for k in kernel if k.server_here)
    queue = f" and {overflows} listen queue overflow(s) or drop(s)" if here else ""
    if syn or overflows:
        ev.append(f"this host's kernel counted {syn} SYN retransmission(s){queue} during these levels: connections "
                  "were retried")
        return True
    ev.append(f"this host's kernel counted no SYN retransmission{' and no listen overflow' if here else ''} during "
              "these levels: the wait was not a retried connection")
    return False


def _busy(lv: LevelResult) -> bool:
    """The client was saturated over the window: its means say so; maxima alone only for old results."""
    h = lv.client
    if h.cpu_pct_mean is not None or h.loop_lag_ms_mean is not None:
        return (h.cpu_pct_mean or 0.0) >= BUSY_CPU_PCT or (h.loop_lag_ms_mean or 0.0) >= BUSY_LAG_MS
    return (h.cpu_pct_max or 0.0) >= 90.0 or (h.loop_lag_ms_p99 or 0.0) >= 50.0


def _short(lv: LevelResult) -> bool:
    """Fewer requests in flight than asked, in the steady window (a burst: never all at once)."""
    c = conc(lv)
    if lv.mode == "rate" or c <= 0:
        return False
    if lv.client.in_flight_max is not None and lv.client.in_flight_max < 0.95 * c:
        return True
    if lv.mode == "burst" or "whole level" in lv.window_note:
        return False   # the whole-level average includes ramp-up and drain
    held = lv.client.in_flight_mean if lv.client.in_flight_mean is not None else lv.achieved_concurrency
    return held < SHORT * c


def _server_idle(lv: LevelResult) -> bool:
    held = (lv.telemetry.running_mean or 0.0) + (lv.telemetry.waiting_mean or 0.0)
    return lv.telemetry.running_mean is None or held < 0.8 * conc(lv)


def _starved(levels: Sequence[LevelResult]) -> Verdict | None:
    healthy = [lv.output_throughput for lv in levels if not _busy(lv)]
    for lv in levels:
        if not (_busy(lv) and _short(lv) and _server_idle(lv)):
            continue
        if healthy and lv.output_throughput <= 1.05 * max(healthy):
            continue   # levels with a healthy client already delivered this throughput
        h = lv.client
        held = h.in_flight_mean if h.in_flight_mean is not None else lv.achieved_concurrency
        ev = [f"at {at(lv)} only {held:.1f} requests were in flight on average"]
        if h.cpu_pct_max is not None:
            ev.append(f"load generator CPU {h.cpu_pct_mean or h.cpu_pct_max:.0f} % of one core"
                      + (" on average" if h.cpu_pct_mean is not None else " at its peak"))
        if h.loop_lag_ms_p99 is not None:
            ev.append(f"event-loop lag p99 {h.loop_lag_ms_p99:.0f} ms")
        if healthy:
            ev.append(f"throughput {lv.output_throughput:,.0f} tok/s, above the {max(healthy):,.0f} tok/s levels "
                      "with a healthy client reached")
        if lv.telemetry.running_mean is not None:
            ev.append(f"the server held only {(lv.telemetry.running_mean or 0) + (lv.telemetry.waiting_mean or 0):.1f}"
                      " requests on average (running + waiting): it had spare room")
        return Verdict(
            "load_generator", f"load generator bound from {at(lv)}: the client, not the server, is the limit",
            "high" if h.cpu_pct_mean is not None and h.in_flight_mean is not None else "medium", ev,
            suggestions=[*_spread(lv), "run the load from a faster or less busy machine, or spread it over several",
                         "every figure at and above this level understates the server"],
        )
    return None


def load_generator(levels: Sequence[LevelResult]) -> Verdict | None:
    return _stalled(levels) or _slow_connections(levels) or _starved(levels)


_KINDS = {"http_429": "429 Too Many Requests (rate limited)", "http_5xx": "5xx server errors",
          "timeout": "timeouts", "connect": "refused or reset connections", "hung": "hung requests",
          "http_4xx": "4xx client errors", "truncated": "truncated streams", "protocol": "malformed answers"}


def _kinds(levels: Sequence[LevelResult]) -> str:
    seen: Counter[str] = Counter()
    for lv in levels:
        seen.update(lv.errors)
    return ", ".join(f"{n} {_KINDS.get(k, k)}" for k, n in seen.most_common())


# A failure message saying the server ran out of room for the requests' tokens (llama.cpp's "Context size has
# been exceeded", a KV cache with no free block, CUDA out of memory): load-related, and cured by more room.
_OUT_OF_ROOM = re.compile(r"context (size|length|window)|kv[ _-]?cache|out of memory|\boom\b|no free (block|slot)s?",
                          re.IGNORECASE)


def _said(levels: Sequence[LevelResult]) -> Counter[str]:
    said: Counter[str] = Counter()
    for lv in levels:
        said.update(lv.error_details)
    return said


def errors(levels: Sequence[LevelResult]) -> Verdict | None:
    bad = [lv for lv in levels if lv.num_requests and lv.failed / lv.num_requests >= 0.05]
    if not bad:
        return None
    first = bad[0]
    worst = max(bad, key=lambda lv: lv.failed / lv.num_requests)
    ev = [f"from {at(first)}: {first.failed}/{first.num_requests} requests failed "
          f"(mostly {_KINDS.get(first.dominant_error or '', first.dominant_error)})",
          f"worst at {at(worst)}: {worst.failed / worst.num_requests:.0%} failed",
          f"failures seen: {_kinds(bad)}"]
    said = _said(bad)
    if said:
        ev.append("the failed requests said: " + "; ".join(f"'{m}' x{n}" for m, n in said.most_common(3)))
    hung = sum(lv.hung for lv in bad)
    if hung:
        ev.append(f"{hung} request(s) hung: still unanswered after the level's grace period")
    ok_below = [lv for lv in levels if lv.failed == 0 and conc(lv) < conc(first)]
    if ok_below:
        ev.append(f"no failures up to {at(ok_below[-1])}")
    if first.dominant_error == "connect" and first is levels[-1]:
        return Verdict(
            "errors", f"the server stopped answering at {at(first)} (connections refused or reset)", "high", ev,
            suggestions=["check the server's log: it may have crashed or been restarted (out of memory?)",
                         "the levels before it are valid; resume the sweep once the server is back"])
    kinds = {k for lv in bad for k in lv.errors}
    named = ", ".join(n for k, n in (("http_429", "429 rate limited"), ("http_5xx", "5xx"), ("timeout", "timeouts"),
                                     ("connect", "refused connections")) if k in kinds)
    what = ("requests hang" if first.dominant_error == "hung" else "errors / rate limiting" if "http_429" in kinds
            else "errors")
    statuses: Counter[str] = Counter()
    for lv in bad:
        statuses.update(lv.http_statuses)
    if statuses:
        ev.append("HTTP statuses: " + ", ".join(f"{code} x{n}" for code, n in statuses.most_common())
                  + (" (503: the server is overloaded and says so)" if "503" in statuses else ""))
    retry = max((lv.retry_after_s_max for lv in bad if lv.retry_after_s_max is not None), default=None)
    if retry is not None:
        ev.append(f"the server asked clients to retry after up to {retry:g} s (Retry-After)")
    suggestions = [_advice(kinds, first, at(first), said),
                   "check the server log for the rejected or unanswered requests"]
    return Verdict(
        "errors", f"{what} from {at(first)}" + (f" ({named})" if named else "")
        + (f"; {hung} hung" if hung and first.dominant_error != "hung" else ""),
        "high" if len(bad) >= 2 or bool(kinds & {"http_429", "http_5xx"}) or first.failed / first.num_requests >= 0.5
        else "medium", ev, suggestions=suggestions)


def _advice(kinds: set[str], first: LevelResult, where: str, said: Counter[str]) -> str:
    """What to do about the failures, by their class (a protocol error is not cured by rate limits) and, for a
    server failing under load, by what it said."""
    dominant = first.dominant_error or ""
    room = next((m for m, _ in said.most_common() if _OUT_OF_ROOM.search(m)), None)
    if room is not None and dominant in ("server_error_event", "http_5xx"):
        return (f"the server runs out of room for the requests' tokens from {where} ('{room}'): give its KV cache "
                "more (llama.cpp --ctx-size, split across --parallel slots unless --kv-unified; vLLM "
                "--gpu-memory-utilization; SGLang --mem-fraction-static), send shorter requests, or keep "
                f"concurrency below {where}")
    if "http_429" in kinds:
        return (f"the server (or a gateway before it) rejects load above its limit: raise the rate or queue limit, "
                f"or keep concurrency below {where}")
    if "timeout" in kinds:
        return (f"requests outlive the client's timeout from {where}: raise --timeout or keep concurrency lower "
                "(queueing, not failing, is the server's limit)")
    advice = {
        "http_5xx": f"the server fails requests under load (5xx) from {where}: its log says why (out of memory, a "
                    f"crashed worker); keep concurrency below {where}",
        "http_4xx": "the server refuses the requests themselves (4xx): check the model name, the endpoint, the "
                    "lengths against its context and the credentials; load does not cause these",
        "protocol": f"the server's answers are malformed or break off from {where}: check its log and any proxy in "
                    "between (response buffering, idle timeouts)",
        "truncated": f"streams end before their last token from {where}: check the server's log and any proxy's "
                     "idle or size limits",
        "server_error_event": f"the server reports errors inside its streams from {where}: its log says which",
        "connect": f"connections are refused or reset from {where}: raise the server's (or its proxy's) connection "
                   f"and backlog limits, or keep concurrency below {where}",
        "hung": f"requests are accepted and never answered from {where}: look for a stalled scheduler in the "
                f"server's log; keep concurrency below {where}",
    }
    return advice.get(dominant, f"raise the server's queue or rate limits, or keep concurrency below {where}")
