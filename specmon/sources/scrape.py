"""GET /metrics once a second per ready server, cheaply: HTTP/1.1 over one kept-alive TCP connection opened through
the host's transport (a direct-tcpip channel of the host's one SSH connection when remote).

httpx costs about 1.5 ms of CPU a request on a busy box; eight servers read every second would cost the idle TUI
more than its whole budget. This reader writes one fixed request and reads the status, the headers it needs
(Content-Length or chunked), and the body: about 0.1 ms.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from specmon.sources import timelimit
from specmon.sources.health import ProbeResult
from specmon.sources.transport import Transport, TransportError

MAX_BODY = 64 * 1024 * 1024   # a /metrics answer larger than this is not one


class BadAnswer(Exception):
    """The peer did not answer in HTTP/1.1 as expected."""


class MetricsScraper:
    """Reads `addr`:`port`/metrics as the host reaches it (its own loopback, or a Slurm job's node), or `path`: a
    run's health probe reads its health path so. Close with `aclose()`."""

    def __init__(self, transport: Transport, port: int, timeout_s: float = 5.0, path: str = "/metrics",
                 addr: str = "127.0.0.1") -> None:
        self.transport = transport
        self.port = port
        self.addr = addr
        self.timeout_s = timeout_s
        self._request = f"GET {path} HTTP/1.1\r\nHost: {addr}:{port}\r\nAccept: text/plain\r\n\r\n".encode()
        self._streams: tuple[Any, Any] | None = None

    async def read(self) -> tuple[ProbeResult, str | None]:
        """One GET: how it answered (as the health probes say it), and the text when that was a 200."""
        t0 = time.monotonic()
        try:
            status, body = await timelimit.wait_for(self._exchange(), self.timeout_s)
        except asyncio.TimeoutError:
            await self.aclose()
            return ProbeResult(None, "timed out", time.monotonic() - t0), None
        except ConnectionRefusedError:
            await self.aclose()
            return ProbeResult(None, "connection refused", time.monotonic() - t0), None
        except TransportError:
            await self.aclose()
            return ProbeResult(None, "link down", time.monotonic() - t0), None
        except (OSError, EOFError, BadAnswer, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            await self.aclose()
            return ProbeResult(None, type(exc).__name__, time.monotonic() - t0), None
        text = body.decode("utf-8", errors="replace") if status == 200 else None
        return ProbeResult(status, None, time.monotonic() - t0), text

    async def _exchange(self) -> tuple[int, bytes]:
        fresh = self._streams is None
        if self._streams is None:
            self._streams = await self.transport.open_tcp(self.addr, self.port, wait_s=self.timeout_s)
        reader, writer = self._streams
        writer.write(self._request)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            if fresh:
                raise
            # The server closed the kept-alive connection between reads: once more on a new one.
            await self.aclose()
            return await self._exchange()
        status, headers = _head(head)
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _chunked(reader)
        else:
            length = int(headers.get("content-length", "0"))
            if not 0 <= length <= MAX_BODY:
                raise BadAnswer(f"Content-Length {length}")
            body = await reader.readexactly(length) if length else b""
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return status, body

    async def aclose(self) -> None:
        if self._streams is not None:
            _, writer = self._streams
            self._streams = None
            writer.close()


def _head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise BadAnswer(lines[0][:80])
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers


async def _chunked(reader: Any) -> bytes:
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip() or b"0", 16)
        if size == 0:
            await reader.readuntil(b"\r\n")   # the empty trailer
            return bytes(body)
        if len(body) + size > MAX_BODY:
            raise BadAnswer("chunked body too large")
        body += await reader.readexactly(size)
        await reader.readexactly(2)
