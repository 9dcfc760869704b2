"""The simulated server process: startup lifecycle, faults, and the aiohttp HTTP app.

Lifecycle (every duration times --time-scale): args dump -> distributed init (0.5 s) -> weight
loading (--load-seconds over --shards) -> bind the HTTP port -> KV-cache allocation (1 s) ->
CUDA-graph capture (2 s) -> warm-up (1 s) -> ready. Before the bind, connections are refused;
between the bind and ready, /health answers 503 and completions 503; after ready, 200.

A worker node of a multi-node server (--node-rank >= 1) follows the same steps without the shard bar (SGLang
prints it on global rank 0 only), binds no port and prints no ready line: it waits for a signal once its graphs
are captured.

SIGTERM/SIGINT: graceful stop (uvicorn shutdown lines once HTTP is up), exit 0. With
--ignore-sigterm, SIGTERM is logged and ignored.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, NoReturn

from aiohttp import web

from specmon.model.workload.datasets import builtin_categories
from specmon.sim import api
from specmon.sim.engine import Engine, Request
from specmon.sim.logwriter import LaunchLog, graph_sizes, make_log, server_args
from specmon.sim.metrics import metrics_text
from specmon.sim.options import SimConfig

DIST_INIT_S = 0.5
KV_ALLOC_S = 1.0
GRAPH_CAPTURE_S = 2.0
WARMUP_S = 1.0
NCCL_WAIT_S = 1.0


class SimServer:
    """One simulated server: owns the engine, the HTTP runner and the lifecycle."""

    def __init__(self, cfg: SimConfig, log: LaunchLog | None = None) -> None:
        self.cfg = cfg
        self.log = log or make_log(cfg)
        self.engine = Engine(cfg.step_model(), cfg.kv_tokens, cfg.spec_steps if cfg.speculative else None,
                             self.log, cfg.decode_log_interval, cfg.new_token_ratio)
        self.phase = "loading"  # loading -> starting -> ready
        self.port = cfg.port
        self.started_at = time.time()
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._stats_task: asyncio.Task[None] | None = None
        # Acceptance by prompt category: the sim has no model to find a prompt "easy", so it recognises the prompts
        # of the built-in set by their exact text (what a real server's acceptance depends on, and all it sees).
        by_category = dict(cfg.accept_by_category)
        self._accept_by_text = {text: by_category[cat] for text, cat in builtin_categories().items()
                                if cat in by_category} if by_category else {}

    # -- process entry ---------------------------------------------------------------------
    async def main(self) -> int:
        """Run until ready-and-stopped or a fault; returns the exit code."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, self._on_sigterm)
        loop.add_signal_handler(signal.SIGINT, self._stop.set)
        engine_task = asyncio.create_task(self.engine.run())
        life = asyncio.create_task(self.lifecycle())
        stop = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({life, stop, engine_task}, return_when=asyncio.FIRST_COMPLETED)
            if engine_task.done():
                engine_task.result()  # the scheduler never returns: surface its exception
            if life.done():
                code = life.result()
            else:
                life.cancel()
                self.log.shutdown(self._runner is not None)
                code = 0
        finally:
            tasks = [t for t in (engine_task, life, stop, self._stats_task) if t is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._runner is not None:
                await self._runner.cleanup()
        return code

    def _on_sigterm(self) -> None:
        if self.cfg.ignore_sigterm:
            self.log.sigterm_ignored()
        else:
            self._stop.set()

    async def lifecycle(self) -> int:
        cfg, log = self.cfg, self.log
        scale = cfg.time_scale
        loop = asyncio.get_running_loop()
        t_start = loop.time()
        log.args_dump()
        if cfg.spawn_child:
            log.child_spawned(spawn_session_child())
        await asyncio.sleep(DIST_INIT_S * scale)
        log.dist_init()
        log.load_begin()
        per_shard = cfg.load_seconds * scale / cfg.shards
        t0 = loop.time()
        bar = not cfg.worker_node
        if bar:
            log.shard_progress(0, 0.0)
        for k in range(1, cfg.shards + 1):
            if cfg.stall_at_shard == k:
                await _forever()  # silent; only a signal ends it
            await _sleep_until(t0 + k * per_shard)
            if cfg.crash_at_shard == k:
                log.crash_in_shard(k)
                if cfg.hang_after_crash:
                    await _forever()
                return 1
            if bar:
                log.shard_progress(k, loop.time() - t0)
        load_elapsed = loop.time() - t0
        if bar:
            log.shards_done(load_elapsed)
        log.load_end(load_elapsed)
        if cfg.nccl_timeout:
            await asyncio.sleep(NCCL_WAIT_S * scale)
            log.nccl_timeout()
            return 1
        if cfg.worker_node:
            return await self.serve_as_worker()
        if not await self.bind():
            return 1
        self.phase = "starting"
        await asyncio.sleep(KV_ALLOC_S * scale)
        if cfg.oom_at == "kv":
            log.oom("kv")
            return 1
        log.kv_allocated()
        if not await self.capture_graphs():
            return 1
        log.engine_ready(loop.time() - t_start)
        await asyncio.sleep(WARMUP_S * scale)
        # Ready before the line, so whoever reads the ready line finds /health answering 200.
        self.phase = "ready"
        log.ready(cfg.host, self.port)
        if not log.stats_by_steps:
            self._stats_task = asyncio.create_task(self._timed_stats())
        if cfg.exit_zero_after is not None:
            await asyncio.sleep(cfg.exit_zero_after)
            log.shutdown(True)
            return 0
        await _forever()  # serve until a signal; main() does the graceful stop

    async def serve_as_worker(self) -> int:
        """A worker node after its weights: KV cache and graphs (its own lines), then wait for a signal."""
        await asyncio.sleep(KV_ALLOC_S * self.cfg.time_scale)
        if self.cfg.oom_at == "kv":
            self.log.oom("kv")
            return 1
        self.log.kv_allocated()
        await asyncio.sleep(GRAPH_CAPTURE_S * self.cfg.time_scale)
        self.phase = "ready"
        await _forever()

    async def capture_graphs(self) -> bool:
        sizes = list(reversed(graph_sizes(self.cfg)))  # SGLang captures the largest batch first
        per = GRAPH_CAPTURE_S * self.cfg.time_scale / len(sizes)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        self.log.graph_begin()
        for i, bs in enumerate(sizes):
            self.log.graph_progress(i, len(sizes), bs, loop.time() - t0)
            if self.cfg.oom_at == "graph" and i == len(sizes) // 2:
                self.log.oom("graph")
                return False
            await _sleep_until(t0 + (i + 1) * per)
        self.log.graph_progress(len(sizes), len(sizes), sizes[-1], loop.time() - t0)
        self.log.graph_end(loop.time() - t0)
        return True

    async def bind(self) -> bool:
        """Start listening; when the port cannot be bound (e.g. already in use) log uvicorn's error and fail."""
        app = self.make_app()
        # handler_cancellation: a client that hangs up while its request is queued cancels the handler,
        # so the engine drops the request instead of running it for nobody.
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0,
                               handler_cancellation=True)
        await runner.setup()
        site = web.TCPSite(runner, self.cfg.host, self.cfg.port, reuse_port=False)
        try:
            await site.start()
        except OSError as exc:  # in use, not permitted, address not local: uvicorn's one-line error
            await runner.cleanup()
            self.log.bind_failed(self.cfg.host, self.cfg.port, exc)
            return False
        self._runner = runner
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        return True

    async def _timed_stats(self) -> None:
        # vLLM logs engine stats on a wall-clock cadence, and only when something happened.
        self.engine.log_stats_reset(time.perf_counter())  # the engine's clock
        while True:
            await asyncio.sleep(self.cfg.stats_interval)
            if self.engine.busy_since_last_stats():
                self.engine.log_stats(time.perf_counter())
            else:
                self.engine.log_stats_reset(time.perf_counter())

    # -- HTTP --------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.on_response_prepare.append(self._access_line)
        r = app.router
        r.add_get("/health", self.health)
        r.add_get("/v1/models", self.models)
        if not self.cfg.no_metrics:
            r.add_get("/metrics", self.metrics)
        r.add_get("/server_info", self.server_info)
        r.add_post("/v1/chat/completions", self.chat_completions)
        r.add_post("/v1/completions", self.completions)
        if self.cfg.flavor == "sglang":
            r.add_get("/health_generate", self.health)
            r.add_get("/get_server_info", self.server_info)
            r.add_get("/model_info", self.model_info)
            r.add_get("/get_model_info", self.model_info)
        else:
            r.add_get("/version", self.version)
        return app

    async def _access_line(self, request: web.Request, response: web.StreamResponse) -> None:
        # uvicorn logs when the response starts (so a stream is logged at its beginning).
        peer = request.transport.get_extra_info("peername") if request.transport else None
        where = f"{peer[0]}:{peer[1]}" if peer else "127.0.0.1:0"
        path = request.path_qs
        self.log.access(where, request.method, path, response.status)

    async def health(self, request: web.Request) -> web.Response:
        if self.cfg.slow_health:
            await asyncio.sleep(self.cfg.slow_health)
        return web.Response(status=200 if self.phase == "ready" else 503)

    async def models(self, request: web.Request) -> web.Response:
        card = {"id": self.cfg.model, "object": "model", "created": int(self.started_at), "owned_by":
                "sglang" if self.cfg.flavor == "sglang" else "vllm", "root": self.cfg.model, "parent": None,
                "max_model_len": self.cfg.context_length}
        return web.json_response({"object": "list", "data": [card]})

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": "0.33.0"})

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response({"model_path": self.cfg.model, "tokenizer_path": self.cfg.model, "is_generation": True,
                                  "served_model_name": self.cfg.model, "architectures": ["LlamaForCausalLM"]})

    async def metrics(self, request: web.Request) -> web.StreamResponse:
        if self.cfg.metrics_from is not None:
            return await self._metrics_from(request, self.cfg.metrics_from)
        text = metrics_text(self.cfg, self.engine.snapshot(), self.engine.counters)
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def _metrics_from(self, request: web.Request, path: str) -> web.StreamResponse:
        """`--metrics-from`: the file's bytes as they are, 64 KiB a chunk, until its end or the reader leaves."""
        resp = web.StreamResponse(headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            with open(path, "rb") as f:
                while block := f.read(1 << 16):
                    await resp.write(block)
            await resp.write_eof()
        except ConnectionResetError:   # the reader had enough
            pass
        return resp

    def server_info_body(self) -> dict[str, Any]:
        """SGLang-style /server_info (the vLLM flavour answers the same shape: a sim extension)."""
        snap = self.engine.snapshot()
        c = self.engine.counters
        step_model = self.engine.model
        info: dict[str, Any] = dict(server_args(self.cfg))
        info["port"] = self.port
        info.update({
            "max_total_num_tokens": self.cfg.kv_tokens,
            "max_req_input_len": self.cfg.context_length - 1,
            "internal_states": [{
                "last_gen_throughput": snap.last_gen_tps,
                "avg_spec_accept_length": snap.last_accept_len,
                "effective_max_running_requests_per_dp": self.cfg.max_running,
                "memory_usage": {"weight": self.log.weights_gb(), "kvcache": 2 * self.log.kv_gb(), "graph": 0.6},
            }],
            "version": "0.5.23" if self.cfg.flavor == "sglang" else "0.33.0",
            "startup_time": self.started_at,
            "sim": {
                "flavor": self.cfg.flavor,
                "phase": self.phase,
                "running": snap.running,
                "queued": snap.queued,
                "model": {"base_s": step_model.base_s, "slope_s": step_model.slope_s,
                          "tokens_per_step": step_model.tokens_per_step, "max_running": step_model.max_running,
                          "prefill_s_per_token": step_model.prefill_s_per_token},
                "accept_by_category": dict(self.cfg.accept_by_category),
                "steps": c.steps, "step_planned_s": c.step_planned_s, "step_actual_s": c.step_actual_s,
                "step_abs_error_s": c.step_abs_error_s, "steps_within_1pct": c.steps_within_1pct,
                "steps_within_5pct": c.steps_within_5pct, "generation_tokens": c.generation_tokens,
            },
        })
        return info

    async def server_info(self, request: web.Request) -> web.Response:
        return web.json_response(self.server_info_body())

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, chat: bool) -> web.StreamResponse:
        if self.phase != "ready":
            return web.json_response(api.error_body("The server is not ready yet.", 503), status=503)
        try:
            body = json.loads(await request.read() or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            return web.json_response(api.error_body(f"invalid JSON body: {exc}", 400), status=400)
        try:
            gen = api.parse_request(body, chat, self.cfg.model, self.cfg.context_length)
        except api.BadRequest as exc:
            return web.json_response(api.error_body(str(exc), 400), status=400)
        req = self.engine.submit(gen.prompt_tokens, gen.completion_tokens(), gen.max_tokens,
                                 self._accept_by_text.get(gen.prompt_text))
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        try:
            if gen.stream:
                return await self._stream(request, gen, req, rid, created)
            produced = 0
            while produced < req.target_tokens:
                produced += await req.tokens.get()
            text = api.token_text(gen.prompt_key, 0, produced)
            return web.json_response(api.full_response(gen, rid, created, text, produced))
        finally:
            if req.generated < req.target_tokens:
                self.engine.cancel(req)

    async def _stream(self, request: web.Request, gen: api.Generation, req: Request, rid: str,
                      created: int) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        try:
            await self._send_tokens(resp, gen, req, rid, created)
        except ConnectionResetError:
            pass  # the client hung up; the caller marks the request cancelled so its KV slot frees
        return resp

    async def _send_tokens(self, resp: web.StreamResponse, gen: api.Generation, req: Request, rid: str,
                           created: int) -> None:
        async def send(obj: dict[str, Any]) -> None:
            await resp.write(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")

        if gen.chat:
            await send(api.stream_chunk(gen, rid, created, None, None, role=True))
        produced = 0
        while produced < req.target_tokens:
            k = await req.tokens.get()
            # Tokens of steps that finished while we were writing are merged into one chunk.
            while not req.tokens.empty():
                k += req.tokens.get_nowait()
            if not k:
                continue
            text = api.token_text(gen.prompt_key, produced, k)
            produced += k
            finish = api.finish_reason(gen, produced) if produced >= req.target_tokens else None
            await send(api.stream_chunk(gen, rid, created, text, finish))
        if gen.include_usage:
            await send(api.usage_chunk(gen, rid, created, produced))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()


async def _forever() -> NoReturn:
    await asyncio.Event().wait()
    raise AssertionError("an event nobody sets was set")


async def _sleep_until(when: float) -> None:
    delay = when - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(delay)


def spawn_session_child() -> int:
    """A child in its own session that inherits the environment and sleeps forever (orphan tests)."""
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile True:\n    time.sleep(3600)"],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    return child.pid


def run(cfg: SimConfig) -> int:
    """Run the simulated server in this process (uvloop when available); returns the exit code."""
    try:
        import uvloop
    except ImportError:  # uvloop is optional: plain asyncio still meets the timing on Linux
        return asyncio.run(SimServer(cfg).main())
    return uvloop.run(SimServer(cfg).main())
