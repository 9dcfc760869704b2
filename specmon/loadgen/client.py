"""One streaming request at a time per task: aiohttp under httpx's aiohttp transport, SSE framed at the byte level.

Why it is built this way (figures in /work/shared/reference/loadgen.md §1, §6):
- httpx's default transport costs 20-95 us of CPU per chunk and grows with concurrency; the httpx-aiohttp
  transport stays near 6 us, so the client does not measure itself.
- The client is httpx with the httpx-aiohttp transport (preconnect goes through it), but streaming requests, the
  hot path, go to that transport's aiohttp session directly, once-parsed (URL, headers, timeouts): httpx's client
  pipeline (auth, redirects, cookies, hooks) was half the per-request CPU, and the httpx-aiohttp layer (an httpx
  Request and Response around aiohttp's, its exception mapping) ~0.17 ms a request more, which an open loop at
  1,000 req/s cannot spend. The same session means the same connection pool and the same stamping protocol. Below
  the session too: a request is aiohttp's request object sent on a connection from the pool (StreamClient._post),
  without the session's per-request layers (cookies, redirects, auth, proxies, traces, retries, a total timer):
  ~20 us a request that do nothing here.
- The connection pool is sized to the concurrency (the 100-connection defaults silently cap C=250).
- Reads are whatever the socket has (no line iteration: aiohttp's line reader fails on 128 KB+ lines) with a
  10 MB read buffer; SSE events are split on bytes.
- Each chunk's time is when its bytes came in: aiohttp's protocol stamps every socket read before the HTTP parser
  runs (_StampingProtocol) with the first time the generator's own look at its sockets found those bytes
  (ArrivalWatch; a read holding bytes that came in at different times is cut where they did), and each SSE event
  takes the stamp of the read piece holding its last byte.
- Per event the hot path is one C-level regex search: only non-text events (the role chunk, the finish chunk,
  the final usage chunk, errors) are parsed as JSON.
- A request's start (the origin of its TTFT and E2E, and what an open loop's lateness counts to) is the moment its
  bytes are handed to the socket (the end of aiohttp's body write, _StampedRequest), not the call into aiohttp.
- Every request ends by its own deadlines whatever the server sends: a watchdog timer (one per request, re-armed
  at most once per silence period) cuts a stream that has been silent for `timeout_s` or has run `deadline_s`.
  aiohttp's own read timeout is off: it is not enough (it never fires on a stream of endless small chunks, and a
  broken chunked encoding after the first chunk leaves its reader waiting forever), and it re-arms a timer on every
  socket read (1.9 us a chunk, measured).
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import contextvars
import functools
import json
import re
import select
import socket
import struct
import sys
import termios
from collections import deque
from collections.abc import Callable, Coroutine
from fcntl import ioctl
from time import perf_counter_ns, time_ns
from typing import Any

import aiohttp
import httpx
import yarl
from aiohttp.abc import AbstractStreamWriter
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ClientRequest
from aiohttp.connector import BaseConnector, Connection
from aiohttp.helpers import TimerNoop
from httpx_aiohttp import AiohttpTransport

READ_BUFSIZE = 10 * 1024 * 1024
DEADLINE_FACTOR = 10   # a request's default end-to-end deadline, in silence timeouts
USAGE_MAX = 10**8      # tokens one response can plausibly report (100 M: well past any context length)
_DETAIL_MAX = 200
SSE_EVENT_MAX = 4 << 20   # one SSE event (a chunk is a few hundred bytes): a stream past it is malformed, not buffered
_TOO_LONG = f"one SSE event is longer than {SSE_EVENT_MAX >> 20} MiB"
ARRIVALS_KEPT = 128       # socket-read stamps a connection keeps for its stream to consume
LOOK_NS = 50_000          # the most often ArrivalWatch asks the kernel which sockets got bytes (~1 us a look)
PEEK_AFTER_NS = 200_000   # a look this long after the last one takes the kernel's receive times (a syscall a socket)
PEEK_BYTES = 64 << 10     # a peek copies up to this much of a socket's unread bytes (its stamp is of the last)

# A chunk carries generated text when one of these keys holds a non-empty string (the pattern), which a chunk as
# servers write it shows as the plain key and quote (the first test: a bytes search, ~0.25 us less a chunk).
_TEXT = {
    "chat": (b'"content":"', re.compile(rb'"(?:content|reasoning_content|reasoning)"\s*:\s*"[^"]')),
    "completions": (b'"text":"', re.compile(rb'"text"\s*:\s*"[^"]')),
}
_QUOTE = ord('"')
_CR = ord("\r")


class Stream:
    """The state of one in-flight request; `times` (ns) grows by one per text-carrying chunk."""

    __slots__ = ("start_ns", "sent_ns", "times", "output_tokens", "prompt_tokens", "done", "error", "detail", "status",
                 "end_ns", "last", "heard_ns", "handled_max_ns")

    def __init__(self) -> None:
        self.start_ns = 0
        self.sent_ns = 0   # when the request's bytes were handed to the socket (0: they never were)
        self.times: list[int] = []
        self.output_tokens: int | None = None
        self.prompt_tokens: int | None = None
        self.done = False
        self.error: str | None = None
        self.detail: str | None = None
        self.status: int | None = None
        self.end_ns = 0
        self.last: bytes | None = None   # the last data payload: tells a finished stream from a cut one
        self.heard_ns = 0                # when the server last sent anything (the watchdog's silence clock)
        self.handled_max_ns = 0          # longest a chunk waited between its arrival and this stream's code seeing it

    @property
    def sent_at(self) -> int:
        """When the request was sent: its bytes handed to the socket, or (never sent) the call into the client. A
        record's start, the origin of its TTFT and E2E, and the moment an open loop's lateness counts to."""
        return self.sent_ns or self.start_ns

    def fail(self, kind: str, detail: str) -> None:
        if self.error is None:
            self.error, self.detail = kind, detail[:_DETAIL_MAX]


class StreamClient:
    """Sends OpenAI-compatible streaming requests and times their chunks. Use inside a running event loop."""

    def __init__(self, base_url: str, api: str, max_connections: int, timeout_s: float, api_key: str | None = None,
                 deadline_s: float | None = None) -> None:
        self._silence_s = timeout_s
        self.deadline_s = deadline_s if deadline_s is not None else DEADLINE_FACTOR * timeout_s
        self.url = base_url.rstrip("/") + ("/v1/chat/completions" if api == "chat" else "/v1/completions")
        self._plain, self._text = _TEXT[api]
        self._plain_len = len(self._plain)
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"

        self._loop = asyncio.get_running_loop()
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=60)
        if isinstance(getattr(connector, "_factory", None), functools.partial):
            # aiohttp's own protocol, stamping each socket read (see _StampingProtocol)
            connector._factory = functools.partial(_StampingProtocol, loop=self._loop)  # type: ignore[assignment]
        self._connector: BaseConnector = connector
        connect_s = min(10.0, timeout_s)
        self._session = aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE,
                                              request_class=_StampedRequest)
        self._client = httpx.AsyncClient(transport=AiohttpTransport(client=self._session), headers=headers,
                                         timeout=httpx.Timeout(timeout_s, connect=connect_s, pool=None))
        # Streaming requests go to the aiohttp connection pool under httpx directly (_post), with a pre-parsed URL,
        # headers and timeouts: httpx's client pipeline (URL parsing, header merging, auth/redirect/cookie hooks) was
        # ~40 % of the per-request CPU, and the httpx-aiohttp layer (an httpx Request, its exception mapping, an httpx
        # Response around aiohttp's) a further ~0.17 ms per request.
        self._url = yarl.URL(self.url)
        self._headers = headers
        self._timeout = aiohttp.ClientTimeout(sock_connect=connect_s, sock_read=None, connect=None)   # the watchdog reads

    async def aclose(self) -> None:
        await self._client.aclose()

    async def preconnect(self, n: int) -> None:
        """Open up to n keep-alive connections (GET /v1/models) so a level's start does not pay TCP setup."""
        models = self.url.rsplit("/v1/", 1)[0] + "/v1/models"

        async def one() -> None:
            try:
                await self._client.get(models)
            except httpx.HTTPError:
                pass  # a refused or failing server shows up in the level's own requests

        await asyncio.gather(*(one() for _ in range(n)))

    async def send(self, body: bytes, s: Stream) -> Stream:
        """Run one request to completion; never raises for server or network faults (they land in s.error).

        It returns within about timeout_s of the server's last byte and within deadline_s of its start.
        """
        s.start_ns = s.heard_ns = perf_counter_ns()
        _SENDING.set(s)
        WATCH.look(s.start_ns)
        watchdog = _Watchdog(s, self._silence_s, self.deadline_s)
        try:
            resp = await self._post(body)
            try:
                s.status = resp.status
                if resp.status >= 400:
                    text = (await resp.read())[:_DETAIL_MAX].decode("utf-8", "replace")
                    s.fail("http_4xx" if resp.status < 500 else "http_5xx", f"HTTP {resp.status}: {text}")
                elif "event-stream" not in resp.headers.get("content-type", ""):
                    s.fail("malformed_sse", f"content-type {resp.headers.get('content-type')!r}, not text/event-stream")
                else:
                    await self._read_events(resp, s)
            finally:
                watchdog.disarm()
                if s.done and s.error is None:
                    resp.release()   # back to the pool
                else:
                    resp.close()     # a cut or broken stream: its connection is not reused
        except asyncio.CancelledError:
            if not watchdog.take_cancel():
                raise
            s.fail("timeout", watchdog.reason)
        except Exception as exc:  # noqa: BLE001 - every fault is counted by kind, none may end the sweep
            kind, detail = classify(exc)
            s.fail(kind, detail)
        finally:
            watchdog.disarm()
        if not s.end_ns:
            s.end_ns = perf_counter_ns()
        return s

    async def _post(self, body: bytes) -> aiohttp.ClientResponse:
        """What `session.post(url, data=body, ...)` does for this client's requests, without the session's layers that
        do nothing for them (~20 us a request, measured): no cookies, redirects, auth, proxies, trace hooks, retries
        (a POST is never retried) or total timeout. The same request class, connection pool and response. Each request
        is a new user's: a cookie an earlier response set (a load balancer's sticky route) is not sent back."""
        req = _StampedRequest("POST", self._url, headers=self._headers, data=body, loop=self._loop,
                              response_class=aiohttp.ClientResponse, timer=_NO_TIMER, session=self._session)
        connector = self._connector
        try:
            conn = await connector.connect(req, traces=[], timeout=self._timeout)
        except asyncio.TimeoutError as exc:
            raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {req.url}") from exc
        protocol = conn.protocol
        assert protocol is not None
        protocol.set_response_params(timer=_NO_TIMER, read_until_eof=True, auto_decompress=False, read_timeout=None,
                                     read_bufsize=READ_BUFSIZE, timeout_ceil_threshold=connector._timeout_ceil_threshold)
        try:
            resp = await req.send(conn)
            try:
                await resp.start(conn)
            except BaseException:
                resp.close()
                raise
        except BaseException:
            conn.close()
            raise
        return resp

    async def _read_events(self, resp: aiohttp.ClientResponse, s: Stream) -> None:
        content = resp.content
        arrivals = _arrivals_of(resp)
        readany = content.readany
        buf = b""
        end = 0   # payload bytes read so far: buf holds the last len(buf) of them
        t = 0
        watch = WATCH
        while True:
            # Before waiting (the end of this stream's step): what came in while the client ran, still unread by the
            # event loop, so a look after a long step can still ask the kernel when it came in.
            now = perf_counter_ns()
            if now - watch.looked_ns >= LOOK_NS:   # (the look's own first test, without the call: once a chunk)
                watch.look(now)
            raw = await readany()
            if not raw:
                break
            t = s.heard_ns = perf_counter_ns()
            end += len(raw)
            buf = buf + raw if buf else raw
            # (A byte value's search and .find: `bytes in bytes` costs 0.1-0.3 us more a chunk, measured.)
            cr = _CR in buf
            cut = buf.find(b"\n\n")
            if cut < 0 and (not cr or b"\r\n\r\n" not in buf):
                if len(buf) > SSE_EVENT_MAX:   # one endless line must not take the memory
                    s.fail("malformed_sse", _TOO_LONG)
                    return
                continue
            if cr:
                buf = buf.replace(b"\r\n", b"\n")   # offsets shift: the whole read shares its last arrival
                at = t if arrivals is None else _arrival(arrivals, content, end, t)
                events = buf.split(b"\n\n")
                buf = events.pop()
                for ev in events:
                    if self._event(ev, s, at):
                        return
                continue
            pos = end - len(buf)     # where the first event starts in the payload
            if cut == len(buf) - 2:   # the usual read: one whole event
                events = [buf[:cut]]
                buf = b""
            else:
                events = buf.split(b"\n\n")
                buf = events.pop()
            for ev in events:
                pos += len(ev) + 2
                # The event's time: when the socket read holding its last byte came in (before any parsing).
                if arrivals is None:
                    at = t
                else:
                    at = _arrival(arrivals, content, pos, t)
                    if t - at > s.handled_max_ns:
                        s.handled_max_ns = t - at
                if self._event(ev, s, at):
                    return
        last = buf.strip()
        if last:   # a last event without its blank line, or one the stream was cut inside of
            data = _data_of(last)
            if data is not None and data != b"[DONE]" and not _is_json(data):
                s.fail("truncated", f"stream ended inside an event after {len(s.times)} text chunks: {data[:80]!r}")
            else:
                self._event(last, s, t)
        if s.error is None and not s.done:
            # Some servers (transformers serve) end with the usage/finish chunk and no [DONE]: complete.
            if s.last is None:
                s.fail("malformed_sse", "no SSE data events in the response")
            elif s.output_tokens is not None or _has_finish_reason(s.last):
                s.done = True
            else:
                s.fail("truncated", f"stream ended after {len(s.times)} text chunks, without a finish reason or [DONE]")

    def _event(self, ev: bytes, s: Stream, t: int) -> bool:
        """Handle one SSE event read at time t; True when the stream must stop (an error event, or one past the
        cap: its end may come in the same read as the bytes that took it past)."""
        if len(ev) > SSE_EVENT_MAX:
            s.fail("malformed_sse", _TOO_LONG)
            return True
        if ev.startswith(b"data: "):
            payload = ev[6:]
        elif ev.startswith(b"data:"):
            payload = ev[5:]
        else:
            data = _data_of(ev)
            if data is None:
                return False   # a comment (keep-alive) or another field
            payload = data
        s.last = payload
        # Fast path: a text chunk that is a JSON object. Only its arrival time matters. (The plain key, found, is
        # followed by a byte: the payload ends with "}".)
        if payload[:1] == b"{" and payload[-1:] == b"}" and (
                (at := payload.find(self._plain)) >= 0 and payload[at + self._plain_len] != _QUOTE
                or self._text.search(payload) is not None):
            s.times.append(t)
            if payload.find(b'"usage":') >= 0 and (b'"usage":{' in payload or b'"usage": {' in payload):
                self._other_event(payload, s)  # servers that put usage in every chunk
            return False
        if payload == b"[DONE]":
            s.done = True
            s.end_ns = t
            return False
        self._other_event(payload, s)
        return s.error is not None

    @staticmethod
    def _other_event(payload: bytes, s: Stream) -> None:
        """A non-text event: role/finish chunk, usage chunk, or an error object."""
        try:
            obj = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            s.fail("malformed_sse", f"data is not JSON: {payload[:80]!r}")
            return
        if not isinstance(obj, dict):
            s.fail("malformed_sse", f"data is not a JSON object: {payload[:80]!r}")
            return
        err = obj.get("error")
        if err:
            code = err.get("code") if isinstance(err, dict) else None
            msg = err.get("message") if isinstance(err, dict) else err
            kind = "http_4xx" if isinstance(code, int) and 400 <= code < 500 else "http_5xx"
            s.fail(kind, f"error in stream: {msg}")
            return
        usage = obj.get("usage")
        if isinstance(usage, dict):
            for key in ("completion_tokens", "prompt_tokens"):
                v = usage.get(key)
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= USAGE_MAX:
                    # 10**400 or -5 would become an absurd (or crashing) throughput: the response is unusable.
                    shown = "a huge number" if isinstance(v, int) and abs(v) > 10**12 else repr(v)[:40]
                    s.fail("bad_usage", f"usage.{key} is {shown}, not a token count in 0..{USAGE_MAX}")
                    return
                if key == "completion_tokens":
                    s.output_tokens = v
                else:
                    s.prompt_tokens = v


class _Watchdog:
    """Cancels the request's task when its stream falls silent for silence_s or runs past deadline_s.

    One timer per request: it fires at the earliest moment either limit could be reached, re-arms itself when the
    stream has been heard from since, and otherwise cancels the task. send() turns that cancellation into a
    "timeout" error; any other cancellation (the sweep stopping) still propagates.
    """

    __slots__ = ("_s", "_silence_ns", "_deadline_s", "_end_ns", "_task", "_handle", "_fired", "reason")

    def __init__(self, s: Stream, silence_s: float, deadline_s: float) -> None:
        self._s = s
        self._deadline_s = deadline_s
        self._silence_ns = int(silence_s * 1e9)
        self._end_ns = s.start_ns + int(deadline_s * 1e9)
        self._task = asyncio.current_task()
        self._fired = False
        self.reason = ""
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        due_ns = min(self._s.heard_ns + self._silence_ns, self._end_ns)
        delay = max(0.0, (due_ns - perf_counter_ns()) / 1e9)
        self._handle = asyncio.get_running_loop().call_later(delay, self._check)

    def _check(self) -> None:
        now = perf_counter_ns()
        if now >= self._end_ns:
            self.reason = f"request still running after its {self._deadline_s:g} s deadline"
        elif now - self._s.heard_ns >= self._silence_ns:
            self.reason = f"no data from the server for {self._silence_ns / 1e9:g} s"
        else:
            self._arm()
            return
        self._handle = None
        if self._task is not None:
            self._fired = True
            self._task.cancel()

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def take_cancel(self) -> bool:
        """Whether the cancellation being handled is this watchdog's (then it is consumed), not the caller's."""
        if not self._fired:
            return False
        self._fired = False
        task = self._task
        if sys.version_info >= (3, 11) and task is not None:   # count our cancel as handled
            task.uncancel()
            return task.cancelling() == 0
        return True


class ArrivalWatch:
    """When each connection's bytes came in, seen from outside the event loop's own reading.

    The loop reads a socket only when it polls, and it polls only after running every callback that is ready: at
    C=256 a burst of chunks is handled one stream after another for 10-20 ms, and a chunk that arrives meanwhile
    waits all that time unread. A stamp taken when the loop reads it (or at the start of that loop pass) is late by
    that handling. So the connections are also registered, edge-triggered, in an epoll of their own that nobody
    waits on: `look()` asks it (without blocking) which sockets got new bytes since the last look and notes the
    time for each. It is called at every socket read and at every step of a stream's code, at most every LOOK_NS,
    so a chunk's stamp is at most LOOK_NS (or one step of the client's code) after its bytes came in, however long
    the burst takes to handle. The edge-triggered epoll reports a socket only while it has unread bytes.

    Each sighting also notes how many bytes the socket then held unread (FIONREAD, ~0.3 us). A client behind its
    sockets reads two chunks in one go when the second came before the loop read the first; the read is then cut
    where the sightings say (`arrived`), so each chunk keeps the time its own bytes came in.

    A look that comes more than PEEK_AFTER_NS after the one before (a long step of the client's code, or the OS
    running something else on its CPU) takes the kernel's own receive time instead: each socket has SO_TIMESTAMPNS
    on, and a peek (recvmsg with MSG_PEEK: the bytes stay for the loop to read) at the sockets that look found
    gives the time their last bytes came in. That costs a system call per socket, so only after a gap.

    `largest`: the most sockets one look found with new bytes (with the one being read) since it was last reset (the
    burst size). One per process, as the event loop is. Without epoll (not Linux) there is no look: reads are stamped
    when read.
    """

    __slots__ = ("_epoll", "_seen", "_owners", "_peekers", "looked_ns", "_maxevents", "_peek_into", "_unread",
                 "largest")

    def __init__(self) -> None:
        self._epoll = select.epoll() if hasattr(select, "epoll") else None
        self._seen: dict[int, list[tuple[int, int]]] = {}   # fd -> since its last read, when looks found new bytes
                                                            # on it (ns) and how many it then held unread
        self._owners: dict[int, object] = {}   # fd -> the protocol that registered it (fds are reused)
        self._peekers: dict[int, socket.socket] = {}   # fd -> a socket object on it (not owning it) for peeks
        self.looked_ns = 0   # when the last look was (perf_counter_ns)
        self._maxevents = 1024
        self._peek_into = [memoryview(bytearray(PEEK_BYTES))]
        self._unread = array.array("i", [0])   # FIONREAD's answer
        self.largest = 0

    def watch(self, fd: int, owner: object) -> None:
        if self._epoll is None:
            return
        try:
            self._epoll.register(fd, _EDGE_IN)
        except FileExistsError:   # the fd of a closed connection, reused before its owner said goodbye
            self._epoll.modify(fd, _EDGE_IN)
        except OSError:
            return
        self._owners[fd] = owner
        self._seen.pop(fd, None)
        self._maxevents = max(self._maxevents, len(self._owners))
        old = self._peekers.pop(fd, None)
        if old is not None:
            old.detach()
        try:
            peeker = socket.socket(fileno=fd)   # detached in unwatch: the fd stays the loop's
        except OSError:
            return
        try:
            peeker.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            peeker.detach()
            return
        self._peekers[fd] = peeker

    def unwatch(self, fd: int, owner: object) -> None:
        if self._epoll is None or self._owners.get(fd) is not owner:
            return
        del self._owners[fd]
        self._seen.pop(fd, None)
        peeker = self._peekers.pop(fd, None)
        if peeker is not None:
            peeker.detach()
        with contextlib.suppress(OSError):   # already closed (the kernel dropped it) or never registered
            self._epoll.unregister(fd)

    def look(self, now: int, reading: int = 0) -> None:
        """Note when every socket that got new bytes since the last look got them, at most every LOOK_NS.
        `reading`: sockets the event loop has just read, not there to be found (they count in the burst size)."""
        since = self.looked_ns
        if now - since < LOOK_NS or self._epoll is None:
            return
        self.looked_ns = now
        ready = self._epoll.poll(0, self._maxevents)
        if len(ready) + reading > self.largest:
            self.largest = len(ready) + reading
        if not ready:
            return
        seen, unread = self._seen, self._unread
        peek = now - since >= PEEK_AFTER_NS
        offset = time_ns() - perf_counter_ns() if peek else 0   # the kernel stamps in CLOCK_REALTIME
        for fd, _ in ready:
            try:
                ioctl(fd, _FIONREAD, unread, True)
            except OSError:   # closed under us: its owner says goodbye next
                continue
            if not unread[0]:
                # The loop has read it all already (the socket being read, or one read since the last look): a
                # sighting of nothing cuts no read, and a peek at an empty socket fails (a raised OSError).
                continue
            t = now
            if peek:
                t = self._kernel_time(fd) - offset
                if not since <= t <= now:
                    t = now
            got = seen.get(fd)
            if got is None:
                seen[fd] = [(t, unread[0])]
            else:
                got.append((t, unread[0]))

    def _kernel_time(self, fd: int) -> int:
        """When the socket's last unread bytes came in (CLOCK_REALTIME ns), 0 when the kernel does not say."""
        peeker = self._peekers.get(fd)
        if peeker is None:
            return 0
        try:
            _, ancillary, _, _ = peeker.recvmsg_into(self._peek_into, _STAMP_SPACE, _PEEK_FLAGS)
        except OSError:   # nothing left to read (the loop took it) or a closing socket
            return 0
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(data)
                return int(sec * 1_000_000_000 + nsec)
        return 0

    def arrived(self, fd: int, length: int, now: int) -> list[tuple[int, int]]:
        """When the `length` bytes a read of fd just took came in, as pieces (ns, end offset in the read), in order:
        bytes a look found unread came in by that look; bytes no look found, since the last one (now). Sightings
        that reach past this read are kept for the next."""
        sightings = self._seen.pop(fd, None)
        if not sightings:
            return [(now, length)]
        if len(sightings) == 1 and sightings[0][1] == length:   # the usual: one look found just what was read
            return sightings
        pieces: list[tuple[int, int]] = []
        end = 0
        for i, (t, unread) in enumerate(sightings):
            if unread >= length:
                rest = [(t2, u - length) for t2, u in sightings[i:] if u > length]
                if rest:
                    self._seen[fd] = rest
                pieces.append((t, length))
                return pieces
            if unread > end:
                pieces.append((t, unread))
                end = unread
        pieces.append((now, length))
        return pieces


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)   # Linux's value; Python does not name it
_PEEK_FLAGS = int(socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0))   # a plain int: OR-ing the flag enums
                                                                            # at each peek cost ~0.6 us (enum.__or__)
_TIMESPEC = struct.Struct("@ll")
_FIONREAD = getattr(termios, "FIONREAD", 0x541B)   # Linux's value where termios lacks it
_STAMP_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_EDGE_IN = getattr(select, "EPOLLIN", 0) | getattr(select, "EPOLLET", 0)
WATCH = ArrivalWatch()


_SENDING: contextvars.ContextVar[Stream] = contextvars.ContextVar("specmon_sending")   # the task's request in hand


class _StampedRequest(ClientRequest):
    """aiohttp's request, its bytes handed to the socket in the loop pass that sends it, and the moment noted on the
    stream being sent (StreamClient.send, in the task's context).

    aiohttp writes the request line, headers and body together in its body write, a task of its own; before Python
    3.12 (no eager tasks) that task first ran a loop pass later, after that pass's socket reads (3-5 ms late under a
    3 ms read, measured), so here its first step runs at once: a bytes body is written whole in it. A write that has
    to wait (the socket's buffer full) goes on in the task aiohttp makes."""

    def write_bytes(self, writer: AbstractStreamWriter, conn: Connection,
                    content_length: int | None = None) -> Coroutine[Any, Any, None]:
        coro = super().write_bytes(writer, conn, content_length)
        try:
            waiting = coro.send(None)
        except StopIteration:
            _note_sent()
            return _nothing()
        except BaseException as exc:  # noqa: BLE001 - raised where aiohttp expects it: from its task
            return _raise(exc)
        return _go_on(coro, waiting)


async def _nothing() -> None:
    return None


async def _raise(exc: BaseException) -> None:
    raise exc


async def _go_on(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Run the rest of a coroutine whose first step has run and is waiting on `waiting` (a future, or None for a
    bare yield), as its own task would."""
    while True:
        try:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting,))
        except asyncio.CancelledError as exc:
            step: Callable[[], Any] = functools.partial(coro.throw, exc)
        else:
            step = functools.partial(coro.send, None)
        try:
            waiting = step()
        except StopIteration:
            _note_sent()
            return


def _note_sent() -> None:
    """The request of the stream this task sends is in the socket now."""
    s = _SENDING.get(None)
    if s is not None and not s.sent_ns:
        s.sent_ns = perf_counter_ns()


class _StampingProtocol(ResponseHandler):
    """aiohttp's connection protocol, noting when each socket read's bytes came in, before the HTTP parser runs.

    A burst of C streams' chunks arriving together is handed to the streams' code one coroutine after another; a
    time taken there would be late by the handling of every stream ahead in the burst. Here each read (or each
    piece of it that came in at its own time) is stamped, before the HTTP parser runs, with when its bytes came in
    (ArrivalWatch): `arrivals` holds (ns, payload, payload bytes after this piece), consumed by the reading stream
    (_arrival), a bounded few per connection when nobody reads them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self.arrivals: deque[tuple[int, aiohttp.StreamReader, int]] = deque(maxlen=ARRIVALS_KEPT)
        self._fd = -1

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            self._fd = sock.fileno()
            WATCH.watch(self._fd, self)

    def connection_lost(self, exc: BaseException | None) -> None:
        WATCH.unwatch(self._fd, self)
        super().connection_lost(exc)

    def resume_reading(self, resume_parser: bool = True) -> None:
        """aiohttp calls this each time a stream takes data from its buffer below the low-water mark, paused or not
        (once a chunk: a parser call on no bytes and a transport call, 3-5 % of an open loop's CPU, measured). With
        nothing paused (neither the parser nor the transport: both only ever pause through this protocol) there is
        nothing to resume; a real pause still resumes through aiohttp's own code (`_buffer_paused`: 3.14's)."""
        if self._reading_paused or getattr(self, "_buffer_paused", False):
            super().resume_reading(resume_parser)

    def data_received(self, data: bytes) -> None:
        # (aiohttp's own data_received and the stamp called directly, not through super() and a method: this runs
        # at every socket read)
        if not data:
            # Not a socket read: aiohttp (3.14) calls data_received(b"") to resume its parser each time a stream
            # takes data from its buffer. Stamping it would take the arrival time a look noted for bytes still in
            # the socket, and their real read would then be stamped when read: late by the client's backlog.
            _parse(self, data)
            return
        now = perf_counter_ns()
        watch = WATCH
        if self._fd not in watch._seen:   # no look saw these bytes come in: they came in now (ArrivalWatch.arrived)
            if now - watch.looked_ns >= LOOK_NS:
                watch.look(now, 1)   # after: what it finds on this socket came in after this read, counts for the next
            _parse(self, data)
            payload = self._payload
            if payload is not None:
                self.arrivals.append((now, payload, payload.total_bytes))
            return
        pieces = watch.arrived(self._fd, len(data), now)
        watch.look(now, 1)
        start = 0   # a read holding bytes that came in at different times: parsed piece by piece, each stamped
        for t, end in pieces:
            _parse(self, data[start:end])
            payload = self._payload
            if payload is not None:
                self.arrivals.append((t, payload, payload.total_bytes))
            start = end


_NO_TIMER = TimerNoop()   # a request's total-time timer: none (the watchdog keeps the time)
_parse = ResponseHandler.data_received   # aiohttp's protocol: the HTTP parser, feeding the response's stream


def _arrival(arrivals: deque[tuple[int, aiohttp.StreamReader, int]], content: aiohttp.StreamReader | None,
             offset: int, default: int) -> int:
    """When the payload's byte `offset` came off the socket; `default` when that was not recorded.

    Offsets asked for only grow, so stamps before the one asked for (and other responses' stamps) are dropped.
    """
    while arrivals:
        t, payload, total = arrivals[0]
        if payload is content and total >= offset:
            return t
        arrivals.popleft()
    return default


def _arrivals_of(resp: aiohttp.ClientResponse) -> deque[tuple[int, aiohttp.StreamReader, int]] | None:
    """The arrival stamps of a response's connection; None where its protocol is not ours (aiohttp changed)."""
    protocol = getattr(resp.connection, "protocol", None)
    return protocol.arrivals if isinstance(protocol, _StampingProtocol) else None


def _has_finish_reason(payload: bytes) -> bool:
    """Whether a chunk says its choice finished (finish_reason set)."""
    try:
        obj = json.loads(payload)
    except (ValueError, UnicodeDecodeError):
        return False
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    return bool(choices[0].get("finish_reason"))


def _is_json(data: bytes) -> bool:
    try:
        json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return False
    return True


def _data_of(event: bytes) -> bytes | None:
    """The data of a multi-line SSE event (data lines joined by newlines), None for comments/other fields."""
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            v = line[5:]
            parts.append(v[1:] if v[:1] == b" " else v)
    return b"\n".join(parts) if parts else None


def classify(exc: BaseException) -> tuple[str, str]:
    """An error kind (results.ERROR_KINDS) and a short detail for a failed request.

    httpx-aiohttp maps aiohttp errors onto httpx ones loosely (a server disconnect becomes ConnectTimeout),
    so the original aiohttp exception, kept as __cause__, decides (streaming requests raise aiohttp's own).
    """
    cause: Any = (exc.__cause__ or exc) if isinstance(exc, httpx.HTTPError) else exc
    detail = f"{type(cause).__name__}: {cause}".strip()
    if isinstance(cause, aiohttp.ClientConnectorError) or isinstance(cause, ConnectionRefusedError):
        return "refused", detail
    if isinstance(cause, (asyncio.TimeoutError, TimeoutError)) or isinstance(exc, httpx.ReadTimeout):
        return "timeout", detail
    if isinstance(cause, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                          ConnectionError, httpx.ReadError, httpx.RemoteProtocolError)):
        return "truncated", detail
    if isinstance(exc, httpx.ConnectError):
        return "refused", detail
    return "truncated", detail
