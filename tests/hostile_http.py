"""A raw-socket HTTP server that breaks the rules on purpose, for load-generator hardening tests.

aiohttp's web server cannot send what a broken or hostile server sends (an invalid chunk size, a stream that never
ends), so this one writes the bytes itself. GET /v1/models answers normally (so `specmon sweep` gets past its probe);
every POST gets the behaviour named by `mode`:

- `bad_chunk_size`: one valid SSE text chunk, then the chunk-size line `ZZZZ`, then silence (connection held open).
- `endless_chunks`: text chunks every 20 ms, forever.
- `usage`: a normal short stream whose final usage chunk carries the JSON text given as `usage` (e.g. `10**400`).

Run standalone: python tests/hostile_http.py --port P --mode MODE [--usage TEXT]; prints "ready" when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json

MODELS = json.dumps({"object": "list", "data": [{"id": "fixture-model", "object": "model"}]}).encode()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def text_event(content: str) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


class HostileServer:
    """Serves `mode` on 127.0.0.1; `url` once started. Counts POSTs in `requests`."""

    def __init__(self, mode: str, usage: str = "{}") -> None:
        self.mode = mode
        self.usage = usage
        self.requests = 0
        self.server: asyncio.AbstractServer | None = None
        self.url = ""

    async def start(self, port: int = 0) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", port)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                if head.startswith(b"GET "):
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                                 % len(MODELS) + MODELS)
                    await writer.drain()
                    continue
                self.requests += 1
                writer.write(HEAD)
                await getattr(self, "_" + self.mode)(writer)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        writer.close()

    async def _bad_chunk_size(self, writer: asyncio.StreamWriter) -> None:
        writer.write(chunk(text_event("a")))
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"ZZZZ\r\n")
        await writer.drain()
        await asyncio.sleep(3600)

    async def _endless_chunks(self, writer: asyncio.StreamWriter) -> None:
        while True:
            writer.write(chunk(text_event("a")))
            await writer.drain()
            await asyncio.sleep(0.02)

    async def _usage(self, writer: asyncio.StreamWriter) -> None:
        writer.write(chunk(text_event("a")) + chunk(text_event("b")))
        final = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}],"usage":' + self.usage.encode() + b"}\n\n"
        writer.write(chunk(final) + chunk(b"data: [DONE]\n\n"))
        await writer.drain()


async def _serve(port: int, mode: str, usage: str) -> None:
    server = HostileServer(mode, usage)
    await server.start(port)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True, choices=("bad_chunk_size", "endless_chunks", "usage"))
    ap.add_argument("--usage", default="{}")
    a = ap.parse_args()
    asyncio.run(_serve(a.port, a.mode, a.usage))
