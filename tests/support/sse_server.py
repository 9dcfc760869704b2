"""A small OpenAI-compatible streaming server for load-generator tests and bench/loadgen_overhead.py.

Streams `max_tokens` tokens per request, `tokens_per_chunk` per SSE chunk (several under "speculation"), one chunk
every `interval_s` (0: back to back), then a usage chunk and [DONE]. It keeps totals of the usage it reported so
tests can check the generator counted exactly what the server said. A fault schedule (cycled per request) injects
the failures a sweep must survive: http_400, http_500, malformed, truncate, abort, stall, no_usage, no_done.

Run standalone: python tests/support/sse_server.py --port P [--interval-s S] [--tokens-per-chunk K] [--cpu N] [--reuse-port]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import heapq
import json
import os
import time
from dataclasses import dataclass, field

from aiohttp import web


@dataclass
class ServerState:
    interval_s: float = 0.0
    tokens_per_chunk: int = 1
    faults: list[str] = field(default_factory=list)
    requests: int = 0
    completion_tokens: int = 0     # sum of usage.completion_tokens reported
    prompt_tokens: int = 0
    running: int = 0
    max_running: int = 0
    bodies: list[dict] = field(default_factory=list)
    keep_bodies: bool = False
    auth_headers: list[str] = field(default_factory=list)
    write_gaps_s: list[float] | None = None   # set to [] to record the server's own gaps between token chunks
    late_s: list[float] = field(default_factory=list)   # with write_gaps_s: how late each paced write was, against
    #                                                     its schedule (the pacer's deadline)
    models_status: int = 200                   # e.g. 500, as transformers serve answers without an HF cache dir
    first_method: dict[object, str] = field(default_factory=dict)   # peer address -> its connection's first method


@functools.lru_cache(maxsize=64)   # a few distinct chunks in all: encoded once (json.dumps was 10 % of the server)
def _chunk(api: str, text: str, finish: str | None = None) -> bytes:
    if api == "chat":
        choice = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
        obj = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "fixture-model", "choices": [choice]}
    else:
        choice = {"index": 0, "text": text, "finish_reason": finish}
        obj = {"id": "c1", "object": "text_completion", "created": 1, "model": "fixture-model", "choices": [choice]}
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class Pacer:
    """Writes paced token chunks for every stream from one task, on absolute deadlines.

    One timer for the whole server instead of a sleeping task per stream keeps the server's own CPU per chunk
    small, so at C=256 the gaps it produces stay close to interval_s and a test measures the client, not us.
    """

    def __init__(self, state: ServerState) -> None:
        self._state = state
        self._heap: list[tuple[float, int, list]] = []
        self._seq = 0
        self._waiter: asyncio.Future[None] | None = None   # the pacer's sleep, ended early by a new stream
        self._task: asyncio.Task[None] | None = None

    async def stream(self, resp: web.StreamResponse, api: str, max_tokens: int, k: int) -> int:
        """Send max_tokens tokens, k per chunk, the first now and then one chunk every interval_s."""
        loop = asyncio.get_running_loop()
        if self._task is None:
            self._task = loop.create_task(self._run())
        done: asyncio.Future[int] = loop.create_future()
        # entry: [resp, api, remaining, k, sent, last_write, done]
        entry = [resp, api, max_tokens, k, 0, 0.0, done]
        self._seq += 1
        heapq.heappush(self._heap, (time.perf_counter(), self._seq, entry))
        self._wake()
        return await done

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _sleep(self, delay: float | None) -> None:
        """Until `delay` seconds have passed (None: no limit) or a stream is added. A future and a timer, not
        wait_for on an Event (a task and a cancellation per wake: 12 % of the server's CPU, profiled)."""
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        timer = None if delay is None else loop.call_later(delay, self._wake)
        try:
            await self._waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def _run(self) -> None:
        # perf_counter, not loop.time(): uvloop's clock has 1 ms steps and stands still within a loop pass, which
        # would hide the lateness of a long pass's writes
        interval = self._state.interval_s
        gaps = self._state.write_gaps_s
        while True:
            if not self._heap:
                await self._sleep(None)
                continue
            delay = self._heap[0][0] - time.perf_counter()
            if delay > 0:
                await self._sleep(delay)
                continue
            deadline, seq, entry = heapq.heappop(self._heap)
            resp, api, remaining, k, sent, last, done = entry
            step = min(k, remaining)
            now = time.perf_counter()
            if gaps is not None:
                self._state.late_s.append(now - deadline)
                if sent:
                    gaps.append(now - last)
            try:
                await resp.write(_chunk(api, " tok" * step, "length" if step == remaining else None))
            except (ConnectionError, RuntimeError) as exc:
                if not done.done():
                    done.set_exception(exc)
                continue
            entry[2], entry[4], entry[5] = remaining - step, sent + step, now
            if remaining - step > 0:
                heapq.heappush(self._heap, (deadline + interval, seq, entry))
            elif not done.done():
                done.set_result(sent + step)


def make_app(state: ServerState) -> web.Application:
    pacer = Pacer(state)

    def seen(request: web.Request) -> None:
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        state.first_method.setdefault(peer, request.method)

    async def models(request: web.Request) -> web.Response:
        seen(request)
        if state.models_status != 200:
            return web.Response(status=state.models_status, text="Internal Server Error")
        return web.json_response({"object": "list", "data": [{"id": "fixture-model", "object": "model", "max_model_len": 4096}]})

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response({"max_total_num_tokens": 123456, "mem_fraction_static": 0.8, "api_key": "sk-fixturesecret123",
                                  "speculative_algorithm": "EAGLE3" if state.tokens_per_chunk > 1 else None, "version": "fixture"})

    async def stats(_: web.Request) -> web.Response:
        # The server's own p99 gap between chunks, and how late its paced writes were against their schedule (p50,
        # p99), since the last /stats call (then forgotten): shows when the server or the machine, not the client,
        # delayed tokens.
        def ms(xs: list[float] | None, q: float) -> float | None:
            xs = sorted(xs or ())
            return round(xs[min(len(xs) - 1, int(q * len(xs)))] * 1000, 3) if xs else None

        figures = {"write_gap_ms_p99": ms(state.write_gaps_s, 0.99), "late_ms_p50": ms(state.late_s, 0.5),
                   "late_ms_p99": ms(state.late_s, 0.99), "cpu_s": time.process_time(),
                   # connections opened by a streaming request (not by a client's warm-up GET /v1/models)
                   "opened_by_post": sum(m == "POST" for m in state.first_method.values())}
        if state.write_gaps_s:
            state.write_gaps_s.clear()
        state.late_s.clear()
        return web.json_response({"requests": state.requests, "completion_tokens": state.completion_tokens,
                                  "prompt_tokens": state.prompt_tokens, "max_running": state.max_running, **figures})

    async def complete(request: web.Request) -> web.StreamResponse:
        seen(request)
        api = "chat" if request.path.endswith("chat/completions") else "completions"
        body = await request.json()
        n = state.requests
        state.requests += 1
        if state.keep_bodies:
            state.bodies.append(body)
        if "Authorization" in request.headers:
            state.auth_headers.append(request.headers["Authorization"])
        fault = state.faults[n % len(state.faults)] if state.faults else ""
        if fault == "http_400":
            # Echoes the credentials, as some servers' "invalid key" errors do: they must not reach the records.
            who = request.headers.get("Authorization", "anonymous")
            return web.json_response({"error": {"message": f"bad request from {who}", "code": 400}}, status=400)
        if fault == "http_500":
            return web.json_response({"error": {"message": "boom", "code": 500}}, status=500)
        max_tokens = int(body.get("max_tokens", 16))
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        prompt = body.get("prompt") or " ".join(str(m.get("content", "")) for m in body.get("messages", []))
        prompt_tokens = len(str(prompt).split())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        state.running += 1
        state.max_running = max(state.max_running, state.running)
        try:
            if api == "chat":
                await resp.write(b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
                                 b'"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n')
            sent = 0
            k = max(1, state.tokens_per_chunk)
            if state.interval_s and fault in ("", "no_usage", "no_done"):
                sent = await pacer.stream(resp, api, max_tokens, k)
            loop = asyncio.get_running_loop()
            next_t = last_write = loop.time()
            while sent < max_tokens:
                if sent and state.interval_s:
                    # Deadline pacing: a late wake-up shortens the next sleep, so gaps average interval_s.
                    next_t += state.interval_s
                    await asyncio.sleep(max(0.0, next_t - loop.time()))
                if fault == "truncate" and sent >= max_tokens // 2:
                    return resp  # ends the body cleanly, but without usage or [DONE]
                if fault == "abort" and sent >= max_tokens // 2:
                    assert request.transport is not None
                    request.transport.abort()  # the connection drops mid-stream (a crashed server)
                    return resp
                if fault == "stall" and sent >= 1:
                    await asyncio.sleep(3600)
                if fault == "malformed" and sent >= 1:
                    await resp.write(b"data: {not json\n\n")
                    await resp.write(b"data: [DONE]\n\n")
                    return resp
                step = min(k, max_tokens - sent)
                sent += step
                if state.write_gaps_s is not None:
                    now = loop.time()
                    if sent > step:
                        state.write_gaps_s.append(now - last_write)
                    last_write = now
                await resp.write(_chunk(api, " tok" * step, "length" if sent >= max_tokens else None))
            if include_usage and fault != "no_usage":
                usage = {"prompt_tokens": prompt_tokens, "completion_tokens": sent, "total_tokens": prompt_tokens + sent}
                state.completion_tokens += sent
                state.prompt_tokens += prompt_tokens
                await resp.write(b"data: " + json.dumps({"id": "c1", "choices": [], "usage": usage}).encode() + b"\n\n")
            if fault != "no_done":
                await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            state.running -= 1

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/stats", stats)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_post("/v1/completions", complete)
    return app


async def serve(state: ServerState, port: int = 0, reuse_port: bool = False) -> tuple[web.AppRunner, int]:
    """Start the app on 127.0.0.1 (port 0: a free one); returns the runner (to clean up) and the port.

    `reuse_port`: several server processes share the port (the kernel spreads connections over them), and this one
    also listens on a port of its own, returned instead, where its own /stats can be asked."""
    runner = web.AppRunner(make_app(state), access_log=None, shutdown_timeout=0.5, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096, reuse_port=reuse_port or None)
    await site.start()
    if reuse_port:
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=64)
        await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    return runner, sock.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interval-s", type=float, default=0.0)
    ap.add_argument("--tokens-per-chunk", type=int, default=1)
    ap.add_argument("--cpu", type=int, help="pin this server to one CPU core")
    ap.add_argument("--reuse-port", action="store_true",
                    help="share --port with other server processes; prints 'ready PORT' with a port of its own for /stats")
    args = ap.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    state = ServerState(interval_s=args.interval_s, tokens_per_chunk=args.tokens_per_chunk,
                        write_gaps_s=[] if args.interval_s > 0 else None)

    async def run() -> None:
        _, own = await serve(state, args.port, args.reuse_port)
        print(f"ready {own}" if args.reuse_port else "ready", flush=True)
        while True:
            await asyncio.sleep(3600)

    try:
        import uvloop
        uvloop.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
