"""The lean /metrics reader against a real HTTP server on loopback: both body framings real servers use (uvicorn
sends vLLM's /metrics chunked), one kept-alive connection for many reads, a server that drops it, 404, refusal."""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from hostile_http import HostileServer
from paths import FIXTURES

from specmon.sources.local import LocalTransport
from specmon.sources.scrape import MAX_BODY, MetricsScraper

CAPTURE = (FIXTURES / "metrics" / "vllm-v0-aibrix-qwen25-coder.prom").read_text()


class Server:
    def __init__(self) -> None:
        self.peers: set[object] = set()
        self.close_after = False

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        self.peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        if request.query.get("chunked") or request.path == "/chunked":
            resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            for i in range(0, len(CAPTURE), 700):
                await resp.write(CAPTURE[i:i + 700].encode())
            await resp.write_eof()
            return resp
        headers = {"Connection": "close"} if self.close_after else {}
        return web.Response(text=CAPTURE, content_type="text/plain", headers=headers)


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, int]]:
    state = Server()
    app = web.Application()
    app.router.add_get("/metrics", state.metrics)
    app.router.add_get("/chunked", state.metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]   # type: ignore[union-attr]
    yield state, port
    await runner.cleanup()


@pytest.mark.slow
async def test_reads_over_one_kept_alive_connection(server: tuple[Server, int]) -> None:
    state, port = server
    scraper = MetricsScraper(LocalTransport(), port)
    try:
        for _ in range(5):
            result, text = await scraper.read()
            assert result.status == 200 and text == CAPTURE
        assert len(state.peers) == 1
    finally:
        await scraper.aclose()


@pytest.mark.slow
async def test_chunked_body_and_a_server_that_closes(server: tuple[Server, int]) -> None:
    state, port = server
    chunked = MetricsScraper(LocalTransport(), port, path="/chunked")
    closing = MetricsScraper(LocalTransport(), port)
    state.close_after = True
    try:
        assert (await chunked.read())[1] == CAPTURE
        assert (await chunked.read())[1] == CAPTURE
        for _ in range(3):   # each answer says Connection: close: a new connection each time, no error
            result, text = await closing.read()
            assert result.status == 200 and text == CAPTURE
    finally:
        await chunked.aclose()
        await closing.aclose()


@pytest.mark.slow
async def test_not_found_and_refused(server: tuple[Server, int], free_port: int) -> None:
    _, port = server
    missing = MetricsScraper(LocalTransport(), port, path="/nope")
    refused = MetricsScraper(LocalTransport(), free_port)
    try:
        result, text = await missing.read()
        assert result.status == 404 and text is None
        result, text = await refused.read()
        assert result.status is None and result.error == "connection refused" and text is None
    finally:
        await missing.aclose()
        await refused.aclose()


@pytest.mark.slow
async def test_a_kept_alive_connection_the_server_timed_out_is_replaced() -> None:
    """uvicorn drops an idle keep-alive connection after 5 s: with metrics_interval_s above that, the next read
    finds it closed and goes again on a new one."""
    state = Server()
    app = web.Application()
    app.router.add_get("/metrics", state.metrics)
    runner = web.AppRunner(app, keepalive_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]   # type: ignore[union-attr]
    scraper = MetricsScraper(LocalTransport(), port)
    try:
        assert (await scraper.read())[1] == CAPTURE
        await asyncio.sleep(0.6)
        result, text = await scraper.read()
        assert result.status == 200 and text == CAPTURE and len(state.peers) == 2
    finally:
        await scraper.aclose()
        await runner.cleanup()


@pytest.mark.slow
@pytest.mark.parametrize("get", ["metrics_huge", "metrics_endless", "metrics_unframed"])
async def test_an_answer_too_large_is_refused_with_its_reason_in_bounded_memory(get: str) -> None:
    """60 MB announced (under the old 64 MiB cap: read whole, ~390 MB and seconds of parsing on the UI's loop), a
    chunked answer without end, and one that runs to the end of a connection that never ends (read as an empty
    answer: every figure "—" and no reason). Each is refused once MAX_BODY is passed, saying so, and a read holds
    little more than MAX_BODY; the next read starts afresh."""
    server = HostileServer("usage", get=get)
    await server.start()
    scraper = MetricsScraper(LocalTransport(), int(server.url.rsplit(":", 1)[1]), timeout_s=60)
    tracemalloc.start()
    try:
        for _ in range(2):
            result, text = await scraper.read()
            assert (result.status, text) == (None, None)
            assert result.error is not None and result.error.startswith(f"answer over {MAX_BODY >> 20} MiB"), result
        peak = tracemalloc.get_traced_memory()[1]
        assert peak < 3 * MAX_BODY, f"{peak / 2**20:.0f} MiB held by two reads"
    finally:
        tracemalloc.stop()
        await scraper.aclose()
        await server.close()
