"""A plain open-loop client, the yardstick of `bench/loadgen_overhead.py --vs-reference`.

Written the way common benchmark clients send an open loop: one uvloop event loop, Poisson arrival times drawn up
front, a sleep until each, a task per request, aiohttp streaming, every SSE data line parsed as JSON. Lateness is
taken when the request's bytes are handed to the socket (the end of aiohttp's body write), as specmon takes it; the
connections are opened before the clock starts, as specmon opens them. Prints one JSON line of figures.
Run: python bench/openloop_reference.py URL RATE N OUTPUT_LEN
"""

import asyncio
import contextvars
import json
import random
import sys
import time

import aiohttp
import uvloop
from aiohttp.client_reqrep import ClientRequest

SENT: contextvars.ContextVar[list[float]] = contextvars.ContextVar("sent")   # the sending task's: when it went


class StampedRequest(ClientRequest):
    async def write_bytes(self, writer, conn, content_length=None):  # type: ignore[no-untyped-def]
        await super().write_bytes(writer, conn, content_length)
        SENT.get().append(time.perf_counter())   # the request is in the socket now


async def main(url: str, rate: float, n: int, output_len: int) -> dict[str, float]:
    rng, t, due = random.Random(0), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        due.append(t)
    late, sent, tokens, gaps = [], [], 0, []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), request_class=StampedRequest) as session:
        await asyncio.gather(*(session.get(url + "/v1/models") for _ in range(min(n, int(rate * 0.3) + 64))))

        async def one(i: int, t0: float) -> None:
            nonlocal tokens
            payload = {"model": "fixture-model", "messages": [{"role": "user", "content": f"[{i}] " + "hi " * 16}],
                       "max_tokens": output_len, "stream": True, "stream_options": {"include_usage": True}}
            mine: list[float] = []
            SENT.set(mine)
            async with session.post(url + "/v1/chat/completions", json=payload) as resp:
                sent.append(mine[0])
                late.append(mine[0] - t0 - due[i])
                last = None
                async for line in resp.content:
                    line = line.strip()
                    if not line.startswith(b"data: ") or line == b"data: [DONE]":
                        continue
                    now, chunk = time.perf_counter(), json.loads(line[6:])
                    if chunk.get("usage"):
                        tokens += chunk["usage"]["completion_tokens"]
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        if last is not None:
                            gaps.append(now - last)
                        last = now

        cpu0, t0, tasks = time.process_time(), time.perf_counter(), []
        for i, d in enumerate(due):
            await asyncio.sleep(max(0.0, t0 + d - time.perf_counter()))
            tasks.append(asyncio.create_task(one(i, t0)))
        await asyncio.gather(*tasks)
        cpu = time.process_time() - cpu0
    late.sort()
    return {"requests": n, "cpu_s": cpu, "tokens": tokens, "gaps": len(gaps), "late_p50_ms": late[n // 2] * 1e3,
            "late_p99_ms": late[int(n * 0.99)] * 1e3, "achieved_rate": n / (max(sent) - t0)}


if __name__ == "__main__":
    print(json.dumps(uvloop.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])))))
