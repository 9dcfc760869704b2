"""GET /metrics once a second per ready server, cheaply: HTTP/1.1 over one kept-alive TCP connection opened through
the host's transport (a direct-tcpip channel of the host's one SSH connection when remote).

httpx costs about 1.5 ms of CPU a request on a busy box; eight servers read every second would cost the idle TUI
more than its whole budget. This reader writes one fixed request and reads the status, the headers it needs
(Content-Length or chunked), and the body: about 0.1 ms.

`answered_at` says when a server's /metrics last answered 200 (through a transport, at an address and port): a run's
watcher skips its own health read of a READY server while such an answer is recent: it already shows it alive.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from typing import Any

from specmon.sources import timelimit
from specmon.sources.health import ProbeResult
from specmon.sources.transport import Transport, TransportError

# A real vLLM or SGLang /metrics answer is tens of kB (mostly histogram buckets); a few MiB leaves room for many
# engines or adapters. Larger is not an answer worth reading: it is refused from its Content-Length before any of it
# is read, or once this much of it came (chunked or to the end of the connection), so a read holds at most this much,
# and parsing the largest answer kept stays a few tens of ms.
MAX_BODY = 4 * 1024 * 1024
_READ = 64 * 1024
# When each server's /metrics last answered 200 (monotonic), by the transport it was read through.
_ANSWERED: weakref.WeakKeyDictionary[Transport, dict[tuple[str, int], float]] = weakref.WeakKeyDictionary()


def answered_at(transport: Transport, addr: str, port: int) -> float | None:
    """When (monotonic s) `addr`:`port`/metrics, read through `transport`, last answered 200; None: never."""
    return _ANSWERED.get(transport, {}).get((addr, port))


class BadAnswer(Exception):
    """The peer did not answer in HTTP/1.1 as expected; the message says how."""


def too_large(size: int | None = None) -> BadAnswer:
    told = "" if size is None else f" ({size:,} bytes)"
    return BadAnswer(f"answer over {MAX_BODY >> 20} MiB{told}, not read")


class MetricsScraper:
    """Reads `addr`:`port`/metrics as the host reaches it (its own loopback, or a Slurm job's node), or `path`: a
    run's health probe reads its health path so. Close with `aclose()`."""

    def __init__(self, transport: Transport, port: int, timeout_s: float = 5.0, path: str = "/metrics",
                 addr: str = "127.0.0.1") -> None:
        self.transport = transport
        self.port = port
        self.addr = addr
        self.timeout_s = timeout_s
        self.path = path
        self._request = f"GET {path} HTTP/1.1\r\nHost: {addr}:{port}\r\nAccept: text/plain\r\n\r\n".encode()
        self._streams: tuple[Any, Any] | None = None
        self._metrics = path == "/metrics"   # its answers are remembered for `answered_at`

    @property
    def paced(self) -> bool:
        """Whether the next read waits for its period's next answer (the last one was a standing ask's, `relayread`):
        its caller then reads again at once instead of keeping a clock of its own. Never after a failed read, which
        may fail again at once."""
        return False

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
        except BadAnswer as exc:
            await self.aclose()
            return ProbeResult(None, str(exc), time.monotonic() - t0), None
        except (OSError, EOFError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            await self.aclose()
            return ProbeResult(None, type(exc).__name__, time.monotonic() - t0), None
        text = body.decode("utf-8", errors="replace") if status == 200 else None
        if status == 200 and self._metrics:
            _ANSWERED.setdefault(self.transport, {})[(self.addr, self.port)] = time.monotonic()
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
        closes = headers.get("connection", "").lower() == "close"
        if status in (204, 304) or 100 <= status < 200:
            body = b""
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            body = await _chunked(reader)
        elif "content-length" in headers:
            length = int(headers["content-length"])
            if length > MAX_BODY:
                raise too_large(length)
            if length < 0:
                raise BadAnswer(f"Content-Length {length}")
            body = await reader.readexactly(length) if length else b""
        else:   # neither: HTTP/1.1 says the body runs to the end of the connection
            body, closes = await _to_end(reader), True
        if closes:
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
            raise too_large()
        body += await reader.readexactly(size)
        await reader.readexactly(2)


async def _to_end(reader: Any) -> bytes:
    body = bytearray()
    while block := await reader.read(_READ):
        body += block
        if len(body) > MAX_BODY:
            raise too_large()
    return bytes(body)
