"""The streaming client against a real local SSE server: token counts, SSE framing, every error kind."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import pytest
import uvloop
from aiohttp import web
from hostile_http import HostileServer
from paths import SUPPORT
from sse_server import ServerState, serve

from specmon.loadgen.client import SSE_EVENT_MAX, WATCH, ArrivalWatch, Stream, StreamClient
from specmon.loadgen.runner import cpu_wait_s
from specmon.loadgen.workload import RequestFactory, Workload


@pytest.fixture
async def server() -> AsyncIterator[tuple[ServerState, str]]:
    state = ServerState(tokens_per_chunk=3, interval_s=0.001)
    runner, port = await serve(state)
    yield state, f"http://127.0.0.1:{port}"
    await runner.cleanup()


def body(api: str = "chat", output_len: int = 20, i: int = 0) -> bytes:
    return RequestFactory(Workload(levels=(1,), output_len=output_len, input_len=8, api=api), "fixture-model").body(1, i)


async def send(url: str, payload: bytes, api: str = "chat", timeout_s: float = 5.0) -> Stream:
    client = StreamClient(url, api, max_connections=8, timeout_s=timeout_s)
    try:
        return await client.send(payload, Stream())
    finally:
        await client.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_counts_usage_tokens_not_chunks(server: tuple[ServerState, str], api: str) -> None:
    state, url = server
    s = await send(url, body(api, output_len=20), api)
    assert s.error is None and s.done
    assert s.output_tokens == 20 == state.completion_tokens
    assert len(s.times) == 7          # 3+3+3+3+3+3+2 tokens: seven text chunks, the empty role chunk is not one
    assert s.prompt_tokens == state.prompt_tokens
    assert s.times == sorted(s.times) and s.start_ns < s.times[0]


@pytest.mark.slow
async def test_request_body_asks_for_usage_and_fixed_length(server: tuple[ServerState, str]) -> None:
    state, url = server
    state.keep_bodies = True
    await send(url, body("chat", output_len=7, i=3))
    sent = state.bodies[0]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 7 and sent["ignore_eos"] is True and sent["min_tokens"] == 7
    assert sent["messages"][0]["content"].startswith("[1-3] ")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("fault", "kind"),
    [("http_400", "http_4xx"), ("http_500", "http_5xx"), ("malformed", "malformed_sse"),
     ("truncate", "truncated"), ("abort", "truncated")],
)
async def test_each_fault_is_one_error_kind(server: tuple[ServerState, str], fault: str, kind: str) -> None:
    state, url = server
    state.faults = [fault]
    s = await send(url, body())
    assert s.error == kind, s.detail
    assert s.detail


@pytest.mark.slow
async def test_finished_stream_without_done_is_complete(server: tuple[ServerState, str]) -> None:
    # transformers serve ends with its usage/finish chunk and never sends [DONE].
    state, url = server
    state.faults = ["no_done"]
    s = await send(url, body(output_len=9))
    assert s.error is None and s.output_tokens == 9


@pytest.mark.slow
async def test_stalled_stream_is_a_timeout(server: tuple[ServerState, str]) -> None:
    state, url = server
    state.faults = ["stall"]
    s = await send(url, body(), timeout_s=0.3)
    assert s.error == "timeout", s.detail


@pytest.mark.slow
async def test_missing_usage_leaves_tokens_unknown(server: tuple[ServerState, str]) -> None:
    state, url = server
    state.faults = ["no_usage"]
    s = await send(url, body(output_len=9))
    assert s.error is None and s.output_tokens is None and len(s.times) == 3


async def test_refused_connection(free_port: int) -> None:
    s = await send(f"http://127.0.0.1:{free_port}", body())
    assert s.error == "refused", s.detail


async def _raw_server(handler: web.RequestHandler) -> tuple[web.AppRunner, str]:  # type: ignore[type-arg]
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]


async def send_to(handler: web.RequestHandler) -> Stream:  # type: ignore[type-arg]
    """One request from the client to a one-off server answering with `handler`."""
    runner, url = await _raw_server(handler)
    try:
        return await send(url, body())
    finally:
        await runner.cleanup()


@pytest.mark.slow
async def test_requests_are_independent_a_cookie_the_server_set_is_never_sent_back() -> None:
    """Each request is a new user: a cookie from an earlier response (a load balancer's sticky route) is not sent
    back, so it cannot pin every later request to one backend (a hostname URL: the cookie jar takes no IP's)."""
    cookies: list[str | None] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        cookies.append(request.headers.get("Cookie"))
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        resp.set_cookie("route", "backend-3")
        await resp.prepare(request)
        await resp.write(_event("a") + b"\n\n" + b"data: [DONE]\n\n")
        return resp

    runner, url = await _raw_server(handler)
    client = StreamClient(url.replace("127.0.0.1", "localhost"), "chat", max_connections=1, timeout_s=5.0)
    try:
        streams = [await client.send(body(i=i), Stream()) for i in range(3)]
    finally:
        await client.aclose()
        await runner.cleanup()
    assert [s.error for s in streams] == [None] * 3
    assert cookies == [None] * 3


def _event(content: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": content}}]}).encode()


@pytest.mark.slow
async def test_text_chunks_are_those_with_a_non_empty_text_field_however_written() -> None:
    """A chunk is a text chunk (it gets a time) when content, reasoning_content or reasoning (chat) or text
    (completions) holds a non-empty string, compact or spaced, whichever of them comes first."""
    chat = {
        b'{"choices":[{"delta":{"content":"a"}}]}': True,
        b'{"choices": [{"delta": {"content" : "a"}}]}': True,
        b'{"choices":[{"delta":{"content":"\\"q"}}]}': True,
        b'{"choices":[{"delta":{"content":"","reasoning_content":"think"}}]}': True,
        b'{"choices":[{"delta":{"content":null,"reasoning":"r"}}]}': True,
        b'{"choices":[{"delta":{"content":""}}],"x":{"content": "late"}}': True,
        b'{"choices":[{"delta":{"content":""}}]}': False,
        b'{"choices":[{"delta":{"content":null}}]}': False,
        b'{"choices":[{"delta":{"role":"assistant"}}]}': False,
        b'{"choices":[{"text":"a"}]}': False,
    }
    completions = {b'{"choices":[{"text":"a"}]}': True, b'{"choices":[{"text": " a"}]}': True,
                   b'{"choices":[{"text":""}]}': False, b'{"choices":[{"delta":{"content":"a"}}]}': False}
    for api, cases in (("chat", chat), ("completions", completions)):
        client = StreamClient("http://127.0.0.1:9", api, max_connections=1, timeout_s=1.0)
        try:
            counted = {}
            for payload in cases:
                s = Stream()
                client._event(b"data: " + payload, s, 7)
                counted[payload] = s.times == [7]
        finally:
            await client.aclose()
        assert counted == cases, api


@pytest.mark.slow
async def test_huge_events_split_reads_and_crlf() -> None:
    """A 300 KB event (over aiohttp's 128 KB line limit), events cut at odd byte boundaries, CRLF framing,
    a keep-alive comment and a usage chunk with spaces after colons all parse."""
    big = "x" * 300_000

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8"})
        await resp.prepare(request)
        payload = (_event(big) + b"\r\n\r\n" + b": keep-alive\r\n\r\n" + _event("a") + b"\n\n" + _event('"quoted"')
                   + b"\n\n" + b'data: {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 5}}\n\n'
                   + b"data: [DONE]\n\n")
        for i in range(0, len(payload), 7919):
            await resp.write(payload[i:i + 7919])
            await asyncio.sleep(0)
        return resp

    s = await send_to(handler)
    assert s.error is None, s.detail
    assert len(s.times) == 3 and s.output_tokens == 5 and s.prompt_tokens == 4


@pytest.mark.slow
async def test_a_stream_that_outruns_the_read_buffer_is_paused_resumed_and_counted_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The client is busy (50 ms on its first event) while the server writes 300 events at once, more than its read
    buffer (1 KB here): aiohttp pauses the socket and resumes it as the stream drains its buffer. Every event is
    counted, in order, each with its own arrival stamp (the protocol skips only resumes where nothing is paused)."""
    from specmon.loadgen import client as client_module

    monkeypatch.setattr(client_module, "READ_BUFSIZE", 1024)
    pauses = []
    pause = client_module._StampingProtocol.pause_reading

    def counted_pause(protocol: client_module._StampingProtocol) -> None:
        pauses.append(protocol)
        pause(protocol)

    monkeypatch.setattr(client_module._StampingProtocol, "pause_reading", counted_pause)

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"".join(_event(f"t{k}") + b"\n\n" for k in range(300)) + b"data: [DONE]\n\n")
        return resp

    runner, url = await _raw_server(handler)
    client = StreamClient(url, "chat", max_connections=1, timeout_s=10.0)
    handle = client._event

    def busy_first(ev: bytes, s: Stream, t: int) -> bool:
        if not s.times:
            time.sleep(0.05)
        return handle(ev, s, t)

    client._event = busy_first  # type: ignore[method-assign]
    try:
        s = await client.send(body(), Stream())
    finally:
        await client.aclose()
        await runner.cleanup()
    assert pauses, "the socket was never paused: the test did not outrun the read buffer"
    assert s.error is None and s.done, s.detail
    assert len(s.times) == 300 and s.times == sorted(s.times)


@pytest.mark.slow
async def test_error_object_inside_the_stream() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_event("a") + b"\n\n")
        await resp.write(b'data: {"error": {"message": "out of memory", "code": 500}}\n\n')
        return resp

    s = await send_to(handler)
    assert s.error == "http_5xx" and "out of memory" in (s.detail or "")


@pytest.mark.slow
async def test_not_an_event_stream_is_malformed() -> None:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response({"choices": [{"message": {"content": "hi"}}]})

    s = await send_to(handler)
    assert s.error == "malformed_sse" and "content-type" in (s.detail or "")


@pytest.mark.slow
async def test_last_event_without_blank_line_still_counts() -> None:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_event("a") + b"\n\n" + _event("b") + b"\n\n")
        await resp.write(b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], '
                         b'"usage": {"prompt_tokens": 2, "completion_tokens": 2}}')
        return resp

    s = await send_to(handler)
    assert s.error is None and s.output_tokens == 2 and len(s.times) == 2


@pytest.mark.slow
async def test_a_stream_cut_inside_an_event_is_truncated_not_malformed() -> None:
    """A body that ends with the connection (no chunking, no length) reset after half an event: the server cut the
    stream, it did not send bad data (the half event was taken for a last event without its blank line)."""
    s = await _send_hostile("cut_event", timeout_s=10.0)
    assert s.error == "truncated" and len(s.times) == 1, (s.error, s.detail)
    assert "inside an event" in (s.detail or ""), s.detail


@pytest.mark.slow
async def test_an_event_past_the_cap_is_refused_when_its_end_comes_in_the_read_that_crosses_it() -> None:
    """The 4 MiB event cap held only while an event's end had not come: a read that crossed the cap and held the
    event's end let the whole event through (parsed as JSON, however long)."""
    head = b'data: {"x":"'

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(_event("a") + b"\n\n" + head + b"x" * (SSE_EVENT_MAX - 64))   # under the cap, not ended
        await asyncio.sleep(0.3)   # the client takes all of that in
        await resp.write(b"x" * 128 + b'"}\n\n' + b"data: [DONE]\n\n")   # past the cap, and its end
        return resp

    s = await send_to(handler)
    assert s.error == "malformed_sse" and "longer than 4 MiB" in (s.detail or ""), (s.error, s.detail)


async def _send_hostile(mode: str, timeout_s: float, deadline_s: float | None = None, usage: str = "{}") -> Stream:
    """One request to a HostileServer; a 60 s guard turns a hang into a test failure instead of a stuck suite."""
    server = HostileServer(mode, usage)
    await server.start()
    client = StreamClient(server.url, "chat", max_connections=2, timeout_s=timeout_s, deadline_s=deadline_s)
    try:
        return await asyncio.wait_for(client.send(body(), Stream()), 60)
    finally:
        await client.aclose()
        await server.close()


def _run(loop: str, coro: Coroutine[Any, Any, Stream]) -> Stream:
    return uvloop.run(coro) if loop == "uvloop" else asyncio.run(coro)


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_invalid_chunk_size_ends_as_a_timeout_instead_of_hanging(loop: str) -> None:
    """A chunk-size line `ZZZZ` after the first event left aiohttp's reader waiting forever (the generator runs
    under uvloop); the silence timeout must end the request whatever the parser did."""
    s = _run(loop, _send_hostile("bad_chunk_size", timeout_s=1.0))
    assert s.error == "timeout" and s.detail == "no data from the server for 1 s", (s.error, s.detail)
    assert len(s.times) == 1   # the event before the fault was still timed


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_a_server_that_never_answers_ends_as_a_timeout(loop: str) -> None:
    """A server that takes the request and sends nothing, not even a status line. aiohttp's own read timeout is off
    (it re-armed a timer on every socket read); the request's silence timeout ends it."""
    s = _run(loop, _send_hostile("silent", timeout_s=1.0))
    assert s.error == "timeout" and s.detail == "no data from the server for 1 s", (s.error, s.detail)
    assert s.status is None and not s.times
    assert (s.end_ns - s.start_ns) / 1e9 < 30   # guard: the 60 s hang guard in _send_hostile never came into it


@pytest.mark.slow
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_endless_small_chunks_end_at_the_request_deadline(loop: str) -> None:
    """A stream that never goes silent never trips the silence timeout; the end-to-end deadline ends it."""
    s = _run(loop, _send_hostile("endless_chunks", timeout_s=30.0, deadline_s=1.5))
    assert s.error == "timeout" and s.detail == "request still running after its 1.5 s deadline", (s.error, s.detail)
    assert len(s.times) >= 2
    assert (s.end_ns - s.start_ns) / 1e9 < 30   # guard: ended by the deadline, long before the silence timeout


@pytest.mark.slow
async def test_sweep_cancel_still_propagates_through_a_request() -> None:
    """The watchdog's own cancellation becomes a timeout, but stopping the sweep still stops a request."""
    server = HostileServer("endless_chunks")
    await server.start()
    client = StreamClient(server.url, "chat", max_connections=2, timeout_s=30.0)
    try:
        task = asyncio.ensure_future(client.send(body(), Stream()))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await client.aclose()
        await server.close()


@pytest.mark.slow
@pytest.mark.parametrize(("usage", "shown"), [
    ('{"prompt_tokens": 4, "completion_tokens": ' + "1" + "0" * 400 + "}", "usage.completion_tokens is a huge number"),
    ('{"prompt_tokens": 4, "completion_tokens": -5}', "usage.completion_tokens is -5"),
    ('{"prompt_tokens": -1, "completion_tokens": 2}', "usage.prompt_tokens is -1"),
    ('{"prompt_tokens": 4, "completion_tokens": 2.5}', "usage.completion_tokens is 2.5"),
    ('{"prompt_tokens": 4, "completion_tokens": true}', "usage.completion_tokens is True"),
])
async def test_impossible_usage_is_a_bad_usage_error(usage: str, shown: str) -> None:
    """10**400 tokens crashed the generator (OverflowError) and -5 became negative throughput."""
    s = await _send_hostile("usage", timeout_s=10.0, usage=usage)
    assert s.error == "bad_usage" and (s.detail or "").startswith(shown), (s.error, s.detail)
    assert s.output_tokens is None or s.output_tokens >= 0


@pytest.mark.slow   # a second a try, and timing that the quick subset's CPU-bound workers disturb
async def test_a_chunk_that_arrives_while_the_client_is_busy_is_stamped_when_it_arrived(free_port_factory: Any) -> None:
    """Two streams get a chunk every 20 ms, the second 2 ms after the first (which one is first changes at random);
    the client spends 5 ms on each event. The second chunk comes in while the client is busy with the first: stamped
    when the event loop next read it (or when a look at the sockets next ran: the first event's 5 ms is one step),
    it was 3 ms late, so one gap in two was 3 ms off (p90 3.0-3.1 ms measured). The look after that gap takes the
    kernel's receive time of the bytes, and the gaps are the server's own."""
    await _held_on_an_undisturbed_try(free_port_factory, "p90", 0.9, 1.0, stagger_ms=2.0)


@pytest.mark.slow   # a second a try, and timing that the quick subset's CPU-bound workers disturb
async def test_chunks_that_queue_in_the_socket_while_the_client_is_behind_keep_their_arrival_times(
        free_port_factory: Any) -> None:
    """Two streams get a chunk every 20 ms; the client spends 15 ms on each event, as busy with many other streams
    (looking at its sockets as their steps do), so it falls further behind each burst and a stream's next chunks wait
    in its socket while it handles the last. Two faults stamped them late: aiohttp 3.14 calls data_received(b"") to
    resume its parser whenever a stream takes data from its buffer, which took the arrival time noted for bytes still
    in the socket; and a read holding two chunks stamped both with the later one's arrival. With both, the gap error
    was p50 20 ms, p90 60-80 ms; with the first fixed alone, p99 160-200 ms; with both fixed, p90 0.02-0.04 ms and
    p99 0.04-0.31 ms (this box). Each chunk keeps the time its own bytes came in: p90 within 0.5 ms."""
    await _held_on_an_undisturbed_try(free_port_factory, "p90", 0.9, 0.5, slow_ms=15.0, looking=True)


def test_a_read_is_cut_where_its_bytes_came_in() -> None:
    """The looks found a socket's unread bytes growing (40 by t=100, 90 by 200, 150 by 300); a read of 120 bytes is
    three pieces stamped 100, 200 and 300, and the 30 bytes it left are the next read's, still stamped 300. A read no
    look saw coming is stamped when read."""
    watch = ArrivalWatch()
    watch._seen[7] = [(100, 40), (200, 90), (300, 150)]
    assert watch.arrived(7, 120, now=999) == [(100, 40), (200, 90), (300, 120)]
    assert watch.arrived(7, 30, now=1000) == [(300, 30)]
    assert watch.arrived(7, 64, now=1001) == [(1001, 64)]
    watch._seen[7] = [(100, 40), (200, 40)]   # a look that found nothing more (a FIN): no empty piece
    assert watch.arrived(7, 100, now=1002) == [(100, 40), (1002, 100)]


TRIES = 8
STARVED_FRACTION = 0.05   # as tests/integration/test_loadgen_accuracy.py: kept off the CPU longer than this share of a try


async def _held_on_an_undisturbed_try(free_port_factory: Any, name: str, quantile: float, limit_ms: float,
                                      stagger_ms: float = 0.0, slow_ms: float = 5.0, looking: bool = False) -> None:
    """Passes when a try's gap error at `quantile` is under `limit_ms`. A try in which this process waited for a CPU
    (Linux schedstat) more than STARVED_FRACTION of its streaming measured the machine: each wait is a gap stamped
    late, whatever the client does (other workers of the suite, a CPU hog). Fails when a try that was not kept waiting
    missed; skips, naming the figures, only when every try was."""
    seen = []
    for _ in range(TRIES):
        errors, streamed_s, waited_s = await _stream_in_bursts(free_port_factory(), slow_ms=slow_ms,
                                                               stagger_ms=stagger_ms, looking=looking)
        at = errors[int(quantile * len(errors))]
        if at < limit_ms:
            return
        seen.append((at, waited_s, streamed_s))
        if waited_s is not None and waited_s <= STARVED_FRACTION * streamed_s:
            raise AssertionError(f"gap errors {name} {at:.2f} ms in a try that waited {1000 * waited_s:.0f} ms for a "
                                 f"CPU in {streamed_s:.2f} s (tries so far: {seen})")
    pytest.skip(f"every try waited for a CPU (a busy box): gap errors {name}, CPU wait, duration: {seen}")


async def _stream_in_bursts(free_port: int, slow_ms: float, n: int = 2, chunks: int = 30,
                            stagger_ms: float = 0.0, looking: bool = False) -> tuple[list[float], float, float | None]:
    """n streams from tests/support/burst_server.py (one chunk to every stream each 20 ms, in a new random order each time,
    `stagger_ms` apart), the client's own handling of every event made `slow_ms` slower (`looking`: spent as the
    steps of many other streams would be, each looking at the sockets); |measured - true| of every gap, ms, sorted."""
    import subprocess
    import sys
    import time
    import urllib.request

    proc = subprocess.Popen([sys.executable, str(SUPPORT / "burst_server.py"), "--port", str(free_port),
                             "--stagger-s", str(stagger_ms / 1000)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        url = f"http://127.0.0.1:{free_port}"
        client = StreamClient(url, "chat", max_connections=n, timeout_s=10.0)
        handle = client._event

        def slow(ev: bytes, s: Stream, t: int) -> bool:
            end = time.perf_counter() + slow_ms / 1000
            while time.perf_counter() < end:
                if looking:
                    WATCH.look(time.perf_counter_ns())
            return handle(ev, s, t)

        client._event = slow  # type: ignore[method-assign]
        await client.preconnect(n)
        payloads = [json.dumps({"model": "m", "max_tokens": chunks, "stream": True,
                                "messages": [{"role": "user", "content": f"[b-{k}] hi"}]}).encode() for k in range(n)]
        t0, wait0 = time.monotonic(), cpu_wait_s()
        streams = await asyncio.gather(*(client.send(p, Stream()) for p in payloads))
        streamed_s, wait1 = time.monotonic() - t0, cpu_wait_s()
        await client.aclose()
        with urllib.request.urlopen(url + "/schedule") as resp:
            writes = json.load(resp)["writes"]
    finally:
        proc.kill()
        proc.wait()
    from burst_server import gap_errors

    for s in streams:
        assert s.error is None and len(s.times) == chunks, s.detail
    records = [{"concurrency": "b", "i": k, "ok": True, "itl_us": [(b - a) // 1000 for a, b in zip(s.times, s.times[1:])]}
               for k, s in enumerate(streams)]
    _, _, errors = gap_errors(records, writes)
    assert len(errors) == n * (chunks - 1)
    return sorted(errors), streamed_s, None if wait0 is None or wait1 is None else wait1 - wait0


@pytest.mark.slow   # a second a try, and timing that the quick subset's CPU-bound workers disturb
async def test_a_chunk_is_stamped_when_it_arrives_not_when_its_stream_gets_to_it(free_port_factory: Any) -> None:
    """Two streams get their chunks together every 20 ms, first one then the other at random; the client spends 5 ms
    on each event. Stamped when each stream's code read its chunk, the stream handled second was 5 ms late, so the
    median gap was 5 ms off (4.8-4.9 ms measured); stamped when the generator's look at its sockets first found the
    bytes (before the first stream's 5 ms), both chunks of a burst get the moment they came in and the median gap is
    the server's own (0.002-0.05 ms measured on a 2-core box at load 3). Only the median is held: on a busy box the
    generator is sometimes preempted while a burst comes in, and its chunks are then stamped late (the 90th percentile
    measured 0.08-4.6 ms at load 3)."""
    await _held_on_an_undisturbed_try(free_port_factory, "p50", 0.5, 1.5)
