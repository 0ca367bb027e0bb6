"""The HTML report as a person sees it: opened in headless Chromium, driven over the DevTools protocol.

Checks that the plots are drawn (non-empty SVG paths, plots with a real size on the page), that
the page made no network request and logged no console error, and takes a screenshot. Set
``PLATEAU_REPORT_SCREENSHOT=path.png`` to keep the screenshot for a look.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``); skipped without it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from plateau_bench.report.html import write_html
from plateau_bench.store import load_runs

pytestmark = pytest.mark.browser

SweepFactory = Callable[..., Path]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
]
# Guards against a hung browser, not assertions on speed.
STARTUP_GUARD_S = 60.0
COMMAND_GUARD_S = 60.0


class DevTools:
    """Just enough of the Chrome DevTools protocol: commands by id, events collected in order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._event_seen = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            data = json.loads(msg.data)
            future = self._pending.pop(data.get("id", -1), None)
            if future is not None:
                future.set_result(data)
            elif "method" in data:
                self.events.append(data)
                self._event_seen.set()

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[self._next_id] = future
        await self.ws.send_json({"id": self._next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, COMMAND_GUARD_S)
        assert "error" not in reply, f"{method}: {reply['error']}"
        return dict(reply.get("result", {}))

    async def wait_for_event(self, method: str) -> dict[str, Any]:
        async def seen() -> dict[str, Any]:
            while True:
                for event in self.events:
                    if event["method"] == method:
                        return event
                self._event_seen.clear()
                await self._event_seen.wait()

        return await asyncio.wait_for(seen(), COMMAND_GUARD_S)

    async def evaluate(self, expression: str) -> Any:
        reply = await self.send("Runtime.evaluate", expression=expression, returnByValue=True)
        return reply["result"].get("value")

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


async def _devtools_port(profile: Path) -> int:
    """Chromium writes the port it chose into the profile once it listens."""
    port_file = profile / "DevToolsActivePort"

    async def wait() -> int:
        while True:
            if port_file.exists():
                lines = port_file.read_text().splitlines()
                if lines and lines[0].isdigit():
                    return int(lines[0])
            await asyncio.sleep(0.05)

    return await asyncio.wait_for(wait(), STARTUP_GUARD_S)


async def open_in_chromium(page: Path, profile: Path) -> tuple[dict[str, Any], bytes, list[dict[str, Any]]]:
    """Load ``page``; return what the page reports about itself, a screenshot and every DevTools event."""
    assert CHROMIUM is not None
    proc = await asyncio.create_subprocess_exec(
        CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        port = await _devtools_port(profile)
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                targets = await resp.json(content_type=None)
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            async with http.ws_connect(ws_url, max_msg_size=0) as ws:
                tools = DevTools(ws)
                for domain in ("Page", "Runtime", "Log", "Network"):
                    await tools.send(f"{domain}.enable")
                await tools.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                                 deviceScaleFactor=1, mobile=False)
                await tools.send("Page.navigate", url=page.resolve().as_uri())
                await tools.wait_for_event("Page.loadEventFired")
                facts = await tools.evaluate("""(() => {
                    const plots = Array.from(document.querySelectorAll('svg.plot'));
                    const paths = Array.from(document.querySelectorAll('svg path'));
                    return {
                        svgs: plots.length,
                        sized: plots.filter(s => { const r = s.getBoundingClientRect();
                                                   return r.width > 300 && r.height > 100; }).length,
                        paths: paths.length,
                        drawn_paths: paths.filter(p => (p.getAttribute('d') || '').length > 10).length,
                        texts: document.querySelectorAll('svg text').length,
                        height: document.documentElement.scrollHeight,
                    };
                })()""")
                shot = await tools.send("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                                        clip={"x": 0, "y": 0, "width": 1280,
                                              "height": min(int(facts["height"]), 6000), "scale": 1})
                await tools.close()
                return facts, base64.b64decode(shot["data"]), tools.events
    finally:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


def _network_requests(events: list[dict[str, Any]]) -> list[str]:
    urls = [e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"]
    return [u for u in urls if not u.startswith(("file:", "data:", "about:"))]


def _console_errors(events: list[dict[str, Any]]) -> list[str]:
    errors = []
    for e in events:
        p = e["params"]
        if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            errors.append(json.dumps(p.get("args")))
        elif e["method"] == "Runtime.exceptionThrown":
            errors.append(json.dumps(p.get("exceptionDetails")))
        elif e["method"] == "Log.entryAdded" and p["entry"].get("level") == "error":
            errors.append(p["entry"].get("text", ""))
    return errors


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
async def test_report_draws_its_plots_offline_in_chromium(make_sweep: SweepFactory, tmp_path: Path) -> None:
    runs = [make_sweep("tp4", [1, 4, 16, 64], cap=32, output_len=128, telemetry=False, verdict=False),
            make_sweep("tp8ep", [1, 4, 16, 64, 256], cap=64)]
    page = write_html(load_runs(runs), tmp_path / "report.html")

    facts, screenshot, events = await open_in_chromium(page, tmp_path / "profile")

    expected_svgs = 3 + 4 + 5  # throughput, latency, frontier + one per level and run
    assert facts["svgs"] == expected_svgs
    assert facts["sized"] == expected_svgs
    assert facts["paths"] > 100
    assert facts["drawn_paths"] > 100
    assert facts["texts"] > 100
    assert any(e["method"] == "Network.requestWillBeSent" for e in events), "network events were recorded"
    assert _network_requests(events) == []
    assert _console_errors(events) == []
    assert screenshot.startswith(b"\x89PNG\r\n\x1a\n") and len(screenshot) > 50_000
    keep = os.environ.get("PLATEAU_REPORT_SCREENSHOT")
    if keep:
        Path(keep).write_bytes(screenshot)
