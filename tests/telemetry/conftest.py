"""A scripted /metrics server on 127.0.0.1 for the telemetry tests (plans in telemetry_support.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from telemetry_support import MetricsPlan, MetricsServer


@pytest.fixture
async def metrics_server() -> AsyncIterator[Callable[[MetricsPlan], Any]]:
    runners: list[web.AppRunner] = []

    async def start(plan: MetricsPlan) -> MetricsServer:
        async def metrics(request: web.Request) -> web.Response:
            i = plan.hits.count("/metrics")
            plan.hits.append("/metrics")
            if plan.hang_s:
                await asyncio.sleep(plan.hang_s)
            status = plan.status(i)
            if status != 200:
                return web.Response(status=status, text="not here")
            return web.Response(text=plan.metrics(i), content_type="text/plain", charset="utf-8")

        async def info(request: web.Request) -> web.Response:
            plan.hits.append(request.path)
            if request.path in plan.text_routes:
                return web.Response(text=plan.text_routes[request.path], content_type="text/plain", charset="utf-8")
            if request.path not in plan.json_routes:
                return web.Response(status=404, text="not found")
            return web.json_response(plan.json_routes[request.path])

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/{tail:.*}", info)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return MetricsServer(plan=plan, port=port)

    yield start
    for runner in runners:
        await runner.cleanup()
