"""Capacity of `specmon sim`: measured throughput curve vs its model, and the per-step timing error.

For each mode (baseline, eagle3) this starts the sim as a subprocess and, at each concurrency C, runs a
bounded closed-loop client (C streams, each re-submitting a fresh streamed chat completion with
ignore_eos as soon as the previous one ends) for a warm-up plus a measuring window. It prints:

- per-request decode tok/s (median over the requests of this level with >= 16 tokens after the first chunk,
  finished or cut at the end of the window: those tokens divided by the time from first to last chunk) vs the model's per-request rate at batch min(C, max_running);
- total tok/s (tokens received by the client during the window, counted from the chunks; the sim's
  tokenizer is one word per token) vs the model's total;
- the per-step timing error over the level, from the sim's own step counters in /server_info
  (mean |actual - planned| / mean planned, the bias of the sum, and the share of steps within 5 %).

Usage: python bench/sim_capacity.py [--levels 1,2,4,...] [--seconds 6] [--max-tokens 128] [--modes baseline,eagle3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specmon.sim.options import SimConfig  # noqa: E402

DEFAULT_LEVELS = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256)


@dataclass
class Window:
    """What the client saw inside the measuring window."""

    start: float
    end: float
    tokens: int = 0
    per_request_tps: list[float] = field(default_factory=list)


async def one_request(session: aiohttp.ClientSession, url: str, max_tokens: int, n: int, w: Window) -> None:
    body = {"messages": [{"role": "user", "content": f"closed loop request {n}"}], "max_tokens": max_tokens,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    first = last = 0.0
    after_first = 0
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as resp:
            resp.raise_for_status()
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: {"):
                    continue
                obj = json.loads(line[6:])
                if not obj["choices"]:
                    continue
                text = obj["choices"][0]["delta"].get("content") or ""
                k = len(text.split())
                if not k:
                    continue
                now = time.monotonic()
                if w.start <= now <= w.end:
                    w.tokens += k
                if first:
                    after_first += k
                else:
                    first = now
                last = now
    finally:
        # Requests still streaming when the level ends count too (slow levels finish few requests);
        # warm-up ones ran at the same concurrency.
        if after_first >= 16 and last > first:
            w.per_request_tps.append(after_first / (last - first))


async def closed_loop(url: str, concurrency: int, max_tokens: int, warmup: float, seconds: float) -> Window:
    t0 = time.monotonic()
    w = Window(start=t0 + warmup, end=t0 + warmup + seconds)
    counter = iter(range(10**9))
    limit = concurrency * 1000  # hard bound on requests per level

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.monotonic() < w.end:
            n = next(counter)
            if n >= limit:
                return
            await one_request(session, url, max_tokens, n, w)

    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=None)) as session:
        tasks = [asyncio.create_task(worker(session)) for _ in range(concurrency)]
        await asyncio.sleep(max(0.0, w.end - time.monotonic()))
        for t in tasks:
            t.cancel()  # in-flight requests past the window are dropped (the sim frees them)
        await asyncio.gather(*tasks, return_exceptions=True)
    return w


async def step_counters(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as session, session.get(url + "/server_info") as resp:
        return (await resp.json())["sim"]


def start_sim(mode: str, port: int) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", "0.01",
            "--decode-log-interval", "1000", "--kv-tokens", "2000000", "--spec", "eagle3" if mode == "eagle3" else "none"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            try:
                async with session.get(url + "/health") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"sim at {url} not ready after {timeout} s")


async def bench_mode(mode: str, levels: list[int], max_tokens: int, seconds: float, port: int) -> None:
    model = SimConfig(spec="eagle3" if mode == "eagle3" else "none").step_model()
    proc = start_sim(mode, port)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_ready(url)
        print(f"\n== {mode}: step t(b) = {model.base_s * 1e3:.2f} ms + {model.slope_s * 1e3:.3f} ms*b, "
              f"{model.tokens_per_step:g} tok/step, max running {model.max_running}")
        print(f"{'C':>5} {'req tok/s':>10} {'model':>8} {'err':>7} {'total tok/s':>12} {'model':>8} {'err':>7} "
              f"{'steps':>6} {'step |err|':>10} {'step bias':>10} {'<=5%':>6}")
        for c in levels:
            before = await step_counters(url)
            w = await closed_loop(url, c, max_tokens, warmup=1.0 + max_tokens / 200, seconds=seconds)
            after = await step_counters(url)
            steps = after["steps"] - before["steps"]
            planned = after["step_planned_s"] - before["step_planned_s"]
            abs_err = (after["step_abs_error_s"] - before["step_abs_error_s"]) / planned if planned else 0.0
            bias = (after["step_actual_s"] - before["step_actual_s"]) / planned - 1 if planned else 0.0
            within5 = (after["steps_within_5pct"] - before["steps_within_5pct"]) / steps if steps else 0.0
            req = statistics.median(w.per_request_tps) if w.per_request_tps else float("nan")
            req_model = model.per_request_tps(min(c, model.max_running))
            total = w.tokens / (w.end - w.start)
            total_model = model.total_tps(c)
            print(f"{c:>5} {req:>10.1f} {req_model:>8.1f} {req / req_model - 1:>+7.1%} {total:>12.1f} {total_model:>8.1f} "
                  f"{total / total_model - 1:>+7.1%} {int(steps):>6} {abs_err:>10.2%} {bias:>+10.2%} {within5:>6.0%}", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default=",".join(map(str, DEFAULT_LEVELS)), help="concurrency levels, comma-separated")
    parser.add_argument("--seconds", type=float, default=6.0, help="measuring window per level")
    parser.add_argument("--max-tokens", type=int, default=128, help="output tokens per request")
    parser.add_argument("--modes", default="baseline,eagle3")
    parser.add_argument("--port", type=int, default=18990)
    args = parser.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    for mode in args.modes.split(","):
        asyncio.run(bench_mode(mode, levels, args.max_tokens, args.seconds, args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
