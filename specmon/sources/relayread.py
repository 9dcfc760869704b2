"""The serving view's /metrics reads of an SSH host's runs, all of one moment in one batch, through one program kept
running on that host (`metricsrelay`, run by the host's python3 on a session of the host's one SSH connection).

Read directly, a host with k runs costs the idle app k request packets and k or more answer packets a second, each
with asyncssh's Python-level channel work (py-spy at 64 runs: a third of the app's CPU). Through the relay it costs
one write and mostly one answer: the reads asked in one loop turn (the readers wake on a shared clock) leave
together, and the answers that are ready together come back together.

A host that cannot run the relay (no python3, or one older than 3.6: the program ends before its first line) is
read directly, as before, until its link is made again. A relay that ends (its link died, it crashed) fails the
reads it had been asked ("link down"), and one that said nothing past its own time limit for a read is ended; the
next read starts another.

A reader that parses only some lines (the serving view: `read_sample`'s families) names their starts: the relay sends
only those lines of each answer (a real server's is tens of kB, a few hundred bytes of it read), so the link and the
app's SSH decryption carry a few hundred bytes a run a second, not the whole answer.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import shlex
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from specmon.sources import timelimit
from specmon.sources.local import LocalTransport
from specmon.sources.scrape import MAX_BODY, BadAnswer, MetricsScraper, too_large
from specmon.sources.transport import Transport, TransportError, run_held

if TYPE_CHECKING:   # at run time imported only where a host is reached over SSH (see `_relay_of`)
    from specmon.sources.ssh import SSHTransport, _SshStream

PROGRAM = (Path(__file__).parent / "metricsrelay.py").read_text(encoding="utf-8")
HELLO = b"specmon-relay 2\n"
RELAY_PYTHON = "python3"   # the host's interpreter, found on its PATH
START_S = 10.0             # a relay that has not said hello by then is taken for gone (the reads waiting time out)
# What a relay asks for is never interpreted by a shell; still, only plain addresses and paths go into its lines.
_ADDR = re.compile(r"[A-Za-z0-9._:-]{1,253}")
_PATH = re.compile(r"/[!-~]{0,2000}")
_NAME = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]{0,199}")   # a metric family's name, as Prometheus allows it

Answer = tuple[str, int, bytes]   # the relay's kind ("ok", "refused", ...), status, body
RELAY_SHARE = 0.9                 # of a read's time limit, the relay's own: its "timeout" comes before the caller's


class _Ask(NamedTuple):
    ask_id: int
    line: bytes
    answer: asyncio.Future[Answer]
    keep: frozenset[str] | None   # the starts of the only lines to send back; None: the whole answer


class _Sent(NamedTuple):
    answer: asyncio.Future[Answer]
    at: float              # when it was sent (monotonic)
    session: _SshStream    # the relay it was sent to


class RelayMissing(Exception):
    """The host cannot run the relay: its reads go directly."""


class MetricsRelay:
    """One SSH host's relay: started on the first read, again after it ended."""

    def __init__(self, transport: SSHTransport) -> None:
        self._transport = weakref.ref(transport)   # not a strong one: the relays are kept by their transport, weakly
        self.host = transport.host
        self._ids = itertools.count(1)
        self._asks: list[_Ask] = []                  # this loop turn's, not yet sent
        self._waiting: dict[int, _Sent] = {}         # sent to the running relay
        self._keeps: dict[frozenset[str], str] = {}   # each set of line starts asked with, by its name in the lines
        self._told: set[str] = set()                  # the sets the running relay was told of
        self._heard_at = 0.0   # when the running relay last said something (monotonic)
        self._session: _SshStream | None = None
        self._starting = asyncio.Lock()
        self._missing_at: int | None = None   # the transport's connect count when the host could not run it

    @property
    def transport(self) -> SSHTransport:
        transport = self._transport()
        if transport is None:
            raise TransportError("transport closed")
        return transport

    @property
    def usable(self) -> bool:
        """False while the host is known not to run the relay (found on this connection; tried again on the next)."""
        return self._missing_at != self.transport.connects

    async def get(self, addr: str, port: int, path: str, timeout_s: float,
                  keep: frozenset[str] | None = None) -> Answer:
        """`addr`:`port` `path` as the host reaches it, asked with the other reads of this loop turn; an ok body only
        its lines that start with one of `keep` (names that fit _NAME). The relay gives up a little before
        `timeout_s`, so that its "timeout" is what the caller sees. RelayMissing: read directly."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        ask_id = next(self._ids)
        if not self._asks:
            loop.call_soon(self._send_asks)
        named = "" if keep is None else " " + self._keeps.setdefault(keep, f"k{len(self._keeps) + 1}")
        line = f"{ask_id} {addr} {port} {int(timeout_s * RELAY_SHARE * 1000)} {path}{named}\n"
        self._asks.append(_Ask(ask_id, line.encode(), answer, keep))
        try:
            return await answer
        except asyncio.CancelledError:   # the caller's time ran out (or it stopped reading)
            sent = self._waiting.get(ask_id)
            if sent is not None and self._heard_at < sent.at and time.monotonic() > sent.at + timeout_s * RELAY_SHARE:
                self._end_silent()
            raise
        finally:
            self._waiting.pop(ask_id, None)

    def _end_silent(self) -> None:
        """The relay said nothing past its own time limit for a read (a host stalled, a relay stuck): end it, and let
        the next read start another."""
        session, self._session = self._session, None
        if session is not None:
            run_held(session.aclose())

    def _send_asks(self) -> None:
        asks, self._asks = self._asks, []
        run_held(self._deliver(asks))

    async def _deliver(self, asks: list[_Ask]) -> None:
        try:
            session = await self._started()
            session.send(b"".join([*self._tell_keeps(asks), *(ask.line for ask in asks)]))
        except Exception as exc:   # RelayMissing or TransportError: each read says so
            for ask in asks:
                if not ask.answer.done():
                    ask.answer.set_exception(exc)
            return
        now = time.monotonic()
        self._waiting.update((ask.ask_id, _Sent(ask.answer, now, session)) for ask in asks if not ask.answer.done())

    def _tell_keeps(self, asks: list[_Ask]) -> list[bytes]:
        """The `keep` lines of the sets these asks name that the running relay was not told of yet."""
        lines = []
        for keep in {ask.keep for ask in asks if ask.keep is not None}:
            name = self._keeps[keep]
            if name not in self._told:
                self._told.add(name)
                lines.append(f"keep {name} {' '.join(sorted(keep))}\n".encode())
        return lines

    async def _started(self) -> _SshStream:
        async with self._starting:
            if not self.usable:
                raise RelayMissing(self.host)
            if self._session is None:
                session = self.transport.session(f"exec {RELAY_PYTHON} -I -c {shlex.quote(PROGRAM)} {MAX_BODY}", START_S)
                try:
                    async with timelimit.timeout(START_S):
                        await session.start()
                        rest = await self._hello(session)
                except BaseException:
                    await session.aclose()
                    raise
                self._session, self._told = session, set()
                run_held(self._read(session, bytearray(rest)))
            return self._session

    async def _hello(self, session: _SshStream) -> bytes:
        """What followed the relay's first line; RelayMissing when it ended (or said something else) before it."""
        said = b""
        while len(said) < len(HELLO):
            chunk = await session.read_chunk()
            if not chunk:
                if session.exit_code is None:
                    raise TransportError(f"{self.host}: link lost while the metrics relay started")
                break
            said += chunk
        if not said.startswith(HELLO):
            self._missing_at = self.transport.connects
            raise RelayMissing(self.host)
        return said[len(HELLO):]

    async def _read(self, session: _SshStream, buffer: bytearray) -> None:
        """Hand each answer to its read, until the relay ends; then the reads it was asked fail (link down)."""
        try:
            self._answer(buffer)
            while chunk := await session.read_chunk():
                self._heard_at = time.monotonic()
                buffer += chunk
                self._answer(buffer)
        except ValueError:   # not a frame: a relay that does not speak its protocol is ended
            pass
        finally:
            if self._session is session:
                self._session = None
            await session.aclose()
            gone = TransportError(f"{self.host}: the metrics relay ended")
            for ask_id, sent in list(self._waiting.items()):
                if sent.session is session:
                    del self._waiting[ask_id]
                    if not sent.answer.done():
                        sent.answer.set_exception(gone)

    def _answer(self, buffer: bytearray) -> None:
        while (end := buffer.find(b"\n")) >= 0:
            ask_id, kind, status, length = bytes(buffer[:end]).split()
            size = end + 1 + int(length)
            if len(buffer) < size:
                return
            sent = self._waiting.pop(int(ask_id), None)
            if sent is not None and not sent.answer.done():
                sent.answer.set_result((kind.decode("ascii"), int(status), bytes(buffer[end + 1:size])))
            del buffer[:size]


_RELAYS: weakref.WeakKeyDictionary[SSHTransport, MetricsRelay] = weakref.WeakKeyDictionary()


class RelayedScraper(MetricsScraper):
    """A MetricsScraper whose reads go through its host's relay while the host runs one (else directly): the same
    answers and the same failures ("connection refused", "timed out", "link down", a BadAnswer's text)."""

    def __init__(self, relay: MetricsRelay, port: int, timeout_s: float, addr: str, path: str,
                 keep: frozenset[str] | None) -> None:
        super().__init__(relay.transport, port, timeout_s, path, addr)
        self.relay = relay
        self._relayed = bool(_ADDR.fullmatch(addr) and _PATH.fullmatch(self.path)) and 0 < port < 65536
        self._keep = keep if keep and all(_NAME.fullmatch(name) for name in keep) else None

    async def _exchange(self) -> tuple[int, bytes]:
        if self._relayed and self.relay.usable:
            try:
                kind, status, body = await self.relay.get(self.addr, self.port, self.path, self.timeout_s, self._keep)
            except RelayMissing:
                return await super()._exchange()
            if kind == "ok":
                return status, body
            if kind == "refused":
                raise ConnectionRefusedError(f"{self.addr}:{self.port}")
            if kind == "timeout":
                raise asyncio.TimeoutError
            if kind == "large":
                raise too_large(status if status >= 0 else None)
            raise BadAnswer(body.decode("utf-8", errors="replace"))
        return await super()._exchange()


def metrics_scraper(transport: Transport, port: int, timeout_s: float, addr: str, path: str = "/metrics",
                    keep: frozenset[str] | None = None) -> MetricsScraper:
    """The reader of a server's /metrics (or its health `path`) as its host reaches it: through the host's relay over
    SSH, else directly. `keep`: the starts of the only lines its reader parses (`parse_metrics`' `only`); through the
    relay an answer's text is cut to those lines on the host, read directly it is whole."""
    relay = _relay_of(transport)
    if relay is None:
        return MetricsScraper(transport, port, timeout_s, path, addr)
    return RelayedScraper(relay, port, timeout_s, addr, path, keep)


def _relay_of(transport: Transport) -> MetricsRelay | None:
    """The relay of an SSH host's transport; None for any other. The SSH module (and asyncssh, a large import) is
    loaded here, for a transport that is not local, never with this module: a command that reads no server over SSH
    (`specmon profiles`, the TUI on local runs) must not pay for it."""
    if isinstance(transport, LocalTransport):
        return None
    from specmon.sources.ssh import SSHTransport
    if not isinstance(transport, SSHTransport):
        return None
    relay = _RELAYS.get(transport)
    if relay is None:
        relay = _RELAYS[transport] = MetricsRelay(transport)
    return relay
