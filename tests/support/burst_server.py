"""A streaming server whose chunk times are known: every open stream gets its next chunk in one burst per tick.

The load generator's hardest case is C chunks arriving together: its streams' code then runs one after another,
and a time taken there is late by the handling of every stream ahead in the burst. This server makes that case on
purpose and keeps the truth: every `interval_s` it writes one text chunk to each open stream, back to back, in a
fresh random order each tick (so a stream is early in one burst and late in the next), and notes when each write
went out (time.perf_counter_ns, CLOCK_MONOTONIC, the clock the generator stamps with, on the same machine).

Each write is one send() on the socket itself, timed before and after: when it returns, the bytes are in the
client's socket (loopback), so the true time of a write lies in that window. (The event loop's transport.write may
keep bytes back to send later in the loop pass, which would put a write's bytes out after the time noted for it; and a
server that a busy box preempts between its send and its clock reading has a wide window: the window says so.)

POST /v1/chat/completions streams `max_tokens` one-token chunks, then a finish/usage chunk and [DONE]; the stream is
known by the `[level-i]` tag that starts its (random dataset) prompt. GET /schedule answers {"writes": {tag: [[ns before
the send, ns after it], ...]}, "late_ms_p99": how late the server itself started its bursts}, GET /v1/models one model.
`gap_errors` compares a generator's records with that schedule.

`--stagger-s S` spaces one tick's writes S apart instead (a chunk then arrives while the client handles the one before).

Run standalone: python tests/support/burst_server.py --port P [--interval-s 0.02] [--stagger-s 0] [--cpu N]; prints "ready"
when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import time

from hostile_http import read_request

TAG = re.compile(r"\[([^\]]+)\]")
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


TEXT = _chunk(b'data: {"choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}\n\n')


class BurstServer:
    def __init__(self, interval_s: float, stagger_s: float = 0.0) -> None:
        self.interval_s = interval_s
        self.stagger_s = stagger_s   # > 0: the writes of one tick this far apart, not back to back
        self.open: list[list] = []          # [writer, tag, remaining]
        self.writes: dict[str, list[tuple[int, int]]] = {}
        self.late_ms: list[float] = []      # how late each burst started against its tick
        self._rng = random.Random(1)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head, body = await read_request(reader)
                if head.startswith(b"GET "):
                    path = head.split(b" ")[1]
                    obj: object = {"data": [{"id": "burst-model"}]}
                    if path == b"/schedule":
                        late = sorted(self.late_ms) or [0.0]
                        obj = {"writes": self.writes, "late_ms_p99": late[int(0.99 * (len(late) - 1))]}
                    data = json.dumps(obj).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(data) + data)
                    continue
                req = json.loads(body)
                match = TAG.search(req["messages"][0]["content"])
                tag = match.group(1) if match else f"untagged-{len(self.writes)}"
                self.writes[tag] = []
                fd = writer.transport.get_extra_info("socket").fileno()
                os.write(fd, HEAD)
                self.open.append([writer, tag, int(req["max_tokens"]), fd])
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            writer.close()

    async def tick(self) -> None:
        loop = asyncio.get_running_loop()
        due = loop.time()
        while True:
            due += self.interval_s
            await asyncio.sleep(max(0.0, due - loop.time()))
            streams, self.open = self.open, []
            if streams:
                self.late_ms.append((loop.time() - due) * 1000)
            self._rng.shuffle(streams)
            for k, entry in enumerate(streams):
                if k and self.stagger_s:
                    await asyncio.sleep(self.stagger_s)
                writer, tag, remaining, fd = entry
                if writer.is_closing():
                    continue
                before = time.perf_counter_ns()
                os.write(fd, TEXT)
                self.writes[tag].append((before, time.perf_counter_ns()))
                entry[2] = remaining - 1
                if remaining > 1:
                    self.open.append(entry)
                else:
                    n = len(self.writes[tag])
                    final = (b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
                             b'"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n' % n)
                    os.write(fd, _chunk(final) + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def gap_errors(records: list[dict], writes: dict[str, list[list[int]]]) -> tuple[list[float], list[float], list[float]]:
    """Per gap between two chunks of one stream (ms): the gap the generator measured (its records), the true one (the
    middle of the server's write windows) and the error: how far the measured gap is outside what the windows allow
    (a gap between writes k and k+1 lies between before[k+1] - after[k] and after[k+1] - before[k]). Records of
    failed requests or without a schedule entry count as no gaps: the caller checks their number."""
    measured: list[float] = []
    true: list[float] = []
    errors: list[float] = []
    for r in records:
        w = writes.get(f"{r['concurrency']}-{r['i']}", [])
        if not r["ok"] or len(w) != len(r["itl_us"]) + 1:
            continue
        for g, (a, b) in zip(r["itl_us"], zip(w, w[1:])):
            m = g / 1000
            lo, hi = (b[0] - a[1]) / 1e6, (b[1] - a[0]) / 1e6
            measured.append(m)
            true.append((lo + hi) / 2)
            errors.append(max(0.0, lo - m, m - hi))
    return measured, true, errors


async def _serve(port: int, interval_s: float, stagger_s: float) -> None:
    server = BurstServer(interval_s, stagger_s)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=4096)
    ticker = asyncio.get_running_loop().create_task(server.tick())
    print("ready", flush=True)
    async with listener:
        await listener.serve_forever()
    ticker.cancel()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--interval-s", type=float, default=0.02)
    ap.add_argument("--stagger-s", type=float, default=0.0, help="space one tick's writes this far apart")
    ap.add_argument("--cpu", type=int, help="pin the server to this CPU")
    a = ap.parse_args()
    if a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    try:
        import uvloop
    except ImportError:
        asyncio.run(_serve(a.port, a.interval_s, a.stagger_s))
    else:
        uvloop.run(_serve(a.port, a.interval_s, a.stagger_s))
