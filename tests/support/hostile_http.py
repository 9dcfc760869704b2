"""A raw-socket HTTP server that breaks the rules on purpose, for load-generator hardening tests.

aiohttp's web server cannot send what a broken or hostile server sends (an invalid chunk size, a stream that never
ends), so this one writes the bytes itself. GET /v1/models answers normally (so `specmon sweep` gets past its probe);
every POST gets the behaviour named by `mode`:

- `bad_chunk_size`: one valid SSE text chunk, then the chunk-size line `ZZZZ`, then silence (connection held open).
- `endless_chunks`: text chunks every 20 ms, forever.
- `usage`: a normal short stream whose final usage chunk carries the JSON text given as `usage` (e.g. `10**400`).
- `silent`: reads the request and never answers (not even a status line), connection held open.
- `endless_line`: one SSE event that never ends (`data: {"x` and then 64 KiB of `x` after 64 KiB, forever).
- `cut_event`: a body delimited by the connection's end (no chunking, no length): one text event, then the first 40
  bytes of the next, then the connection is reset (RST).

`get` names what GETs do instead of answering /v1/models normally (other paths get 404):
- `trickle`: /v1/models announces 1000 bytes and sends one every 2 s;
- `huge`: /v1/models answers 400 MB (one model whose id is all of it), as fast as the client reads;
- `long_id`: /v1/models lists one model whose id is 5000 characters;
- `huge_info`: /v1/models is normal, /server_info answers 400 MB;
- `deep`: /v1/models answers 100,000 nested `[` (valid JSON would need as many `]`; the parser recursed first);
- `metrics_huge`: /metrics announces 60 MB (Content-Length) and sends them, as fast as the client reads;
- `metrics_endless`: /metrics answers chunked, 64 KiB chunks without end;
- `metrics_unframed`: /metrics answers with neither Content-Length nor chunked (the body runs to the connection's
  end), bytes without end.

Run standalone: python tests/support/hostile_http.py --port P --mode MODE [--usage TEXT] [--get GET]; prints "ready" when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import struct

MODELS = json.dumps({"object": "list", "data": [{"id": "fixture-model", "object": "model"}]}).encode()
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
CLOSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"   # body to the end


def text_event(content: str) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def chunk(data: bytes) -> bytes:
    """One HTTP/1.1 chunk of a chunked body."""
    return b"%x\r\n" % len(data) + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One HTTP/1.1 request off the connection: its head and its body (by Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return head, await reader.readexactly(length) if length else b""


class HostileServer:
    """Serves `mode` on 127.0.0.1; `url` once started. Counts POSTs in `requests`."""

    def __init__(self, mode: str, usage: str = "{}", get: str = "ok") -> None:
        self.mode = mode
        self.usage = usage
        self.get = get
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
                head, _ = await read_request(reader)
                if head.startswith(b"GET "):
                    await self._answer_get(head.split(b" ")[1].decode(), writer)
                    continue
                self.requests += 1
                if self.mode == "silent":
                    await asyncio.sleep(3600)
                writer.write(CLOSE_HEAD if self.mode == "cut_event" else HEAD)
                await getattr(self, "_" + self.mode)(writer)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        writer.close()

    async def _answer_get(self, path: str, writer: asyncio.StreamWriter) -> None:
        json_head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        if path == "/v1/models" and self.get == "trickle":
            writer.write(json_head % 1000)
            for _ in range(1000):
                writer.write(b" ")
                await writer.drain()
                await asyncio.sleep(2)
        elif (path, self.get) in (("/v1/models", "huge"), ("/server_info", "huge_info")):
            head, tail, size = b'{"object":"list","data":[{"id":"', b'"}]}', 400 << 20
            writer.write(json_head % (len(head) + size + len(tail)) + head)
            block = b"x" * (1 << 20)
            for _ in range(size >> 20):
                writer.write(block)
                await writer.drain()
            writer.write(tail)
        elif path == "/metrics" and self.get.startswith("metrics_"):
            await self._metrics(writer)
        elif (path, self.get) == ("/v1/models", "deep"):
            body = b"[" * 100_000 + b"]" * 100_000
            writer.write(json_head % len(body) + body)
        elif path == "/v1/models":
            body = MODELS if self.get != "long_id" else json.dumps({"data": [{"id": "m" * 5000}]}).encode()
            writer.write(json_head % len(body) + body)
        else:
            writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()

    async def _metrics(self, writer: asyncio.StreamWriter) -> None:
        line = b'vllm:num_requests_running{engine="0"} 1.0\n'
        block = line * ((64 << 10) // len(line))
        if self.get == "metrics_huge":
            size = 60_000_000
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % size)
            for _ in range(size // len(block)):
                writer.write(block)
                await writer.drain()
            writer.write(line[: size % len(block)])
            return
        chunked = self.get == "metrics_endless"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                     + (b"Transfer-Encoding: chunked\r\n" if chunked else b"") + b"\r\n")
        while True:
            writer.write(chunk(block) if chunked else block)
            await writer.drain()

    async def _endless_line(self, writer: asyncio.StreamWriter) -> None:
        writer.write(chunk(b'data: {"x'))
        block = chunk(b"x" * (64 << 10))
        while True:
            writer.write(block)
            await writer.drain()

    async def _cut_event(self, writer: asyncio.StreamWriter) -> None:
        writer.write(text_event("a") + text_event("b")[:40])
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()   # closed with linger 0: a reset
        raise ConnectionResetError   # nothing more on this connection

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


async def _serve(port: int, mode: str, usage: str, get: str) -> None:
    server = HostileServer(mode, usage, get)
    await server.start(port)
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", required=True, choices=("bad_chunk_size", "endless_chunks", "usage", "endless_line",
                                                      "cut_event"))
    ap.add_argument("--usage", default="{}")
    ap.add_argument("--get", default="ok", choices=("ok", "trickle", "huge", "long_id", "huge_info", "deep",
                                                    "metrics_huge", "metrics_endless", "metrics_unframed"))
    a = ap.parse_args()
    asyncio.run(_serve(a.port, a.mode, a.usage, a.get))
