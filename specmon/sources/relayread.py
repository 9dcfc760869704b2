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

A reader that reads on a period (the serving view's) asks once, a standing ask: the relay reads on its host's clock and
sends each answer as it comes, so an idle app writes nothing to the host (py-spy at 64 runs: the socket writes of the
asks were a sixth of its CPU, a loopback write doing the receiving end's work too), and its readers wake when the
answers come rather than on a clock of their own (`MetricsScraper.paced`).
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
HELLO = b"specmon-relay 3\n"
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


class Standing:
    """A standing ask's answers as they come: the latest one not yet taken, or why none will come (its relay ended)."""

    def __init__(self, ask_id: int, session: _SshStream) -> None:
        self.ask_id = ask_id
        self.session = session
        self._latest: Answer | None = None
        self._ended: Exception | None = None
        self._arrived = asyncio.Event()

    def put(self, answer: Answer) -> None:
        self._latest = answer
        self._arrived.set()

    def end(self, why: Exception) -> None:
        self._ended = why
        self._arrived.set()

    @property
    def ended(self) -> bool:
        return self._ended is not None

    async def next(self) -> Answer:
        """The answer that came since the last one taken; waits for it."""
        await self._arrived.wait()
        if self._latest is None:
            assert self._ended is not None
            raise self._ended
        answer, self._latest = self._latest, None
        self._arrived.clear()
        return answer


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
        self._standing: dict[int, Standing] = {}     # standing asks of the running relay
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
        self._asks.append(_Ask(ask_id, self._line(ask_id, addr, port, path, timeout_s, keep), answer, keep))
        try:
            return await answer
        except asyncio.CancelledError:   # the caller's time ran out (or it stopped reading)
            sent = self._waiting.get(ask_id)
            if sent is not None:
                self.watch_silence(sent.at, timeout_s)
            raise
        finally:
            self._waiting.pop(ask_id, None)

    async def stand(self, addr: str, port: int, path: str, timeout_s: float, period_s: float,
                    keep: frozenset[str] | None = None) -> Standing:
        """A standing ask: `get`'s read, done now and then at every multiple of `period_s` on the host's clock until
        `sit`. RelayMissing: read directly."""
        session = await self._started()
        ask_id = next(self._ids)
        line = b"every %d " % max(1, round(period_s * 1000)) + self._line(ask_id, addr, port, path, timeout_s, keep)
        standing = self._standing[ask_id] = Standing(ask_id, session)
        session.send(b"".join([*self._tell_keeps([keep]), line]))
        return standing

    def _line(self, ask_id: int, addr: str, port: int, path: str, timeout_s: float, keep: frozenset[str] | None
              ) -> bytes:
        """An ask's line: `ID ADDR PORT TIMEOUT_MS PATH [KEEP]` (the relay gives up a little before `timeout_s`)."""
        named = "" if keep is None else " " + self._keeps.setdefault(keep, f"k{len(self._keeps) + 1}")
        return f"{ask_id} {addr} {port} {int(timeout_s * RELAY_SHARE * 1000)} {path}{named}\n".encode()

    def sit(self, standing: Standing) -> None:
        """The standing ask is over: the relay reads for it no more."""
        if self._standing.pop(standing.ask_id, None) is not None and self._session is standing.session:
            standing.session.send(b"stop %d\n" % standing.ask_id)

    def watch_silence(self, since: float, timeout_s: float) -> None:
        """A read waited from `since` and its time ran out: the relay is ended if it said nothing meanwhile, past its
        own time limit for the read."""
        if self._heard_at < since and time.monotonic() > since + timeout_s * RELAY_SHARE:
            self._end_silent()

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
            session.send(b"".join([*self._tell_keeps([ask.keep for ask in asks]), *(ask.line for ask in asks)]))
        except Exception as exc:   # RelayMissing or TransportError: each read says so
            for ask in asks:
                if not ask.answer.done():
                    ask.answer.set_exception(exc)
            return
        now = time.monotonic()
        self._waiting.update((ask.ask_id, _Sent(ask.answer, now, session)) for ask in asks if not ask.answer.done())

    def _tell_keeps(self, keeps: list[frozenset[str] | None]) -> list[bytes]:
        """The `keep` lines of these sets that the running relay was not told of yet."""
        lines = []
        for keep in {keep for keep in keeps if keep is not None}:
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
            for ask_id, standing in list(self._standing.items()):
                if standing.session is session:
                    del self._standing[ask_id]
                    standing.end(gone)

    def _answer(self, buffer: bytearray) -> None:
        while (end := buffer.find(b"\n")) >= 0:
            ask_id, kind, status, length = bytes(buffer[:end]).split()
            size = end + 1 + int(length)
            if len(buffer) < size:
                return
            answer = (kind.decode("ascii"), int(status), bytes(buffer[end + 1:size]))
            standing = self._standing.get(int(ask_id))
            if standing is not None:
                standing.put(answer)
            else:
                sent = self._waiting.pop(int(ask_id), None)
                if sent is not None and not sent.answer.done():
                    sent.answer.set_result(answer)
            del buffer[:size]


_RELAYS: weakref.WeakKeyDictionary[SSHTransport, MetricsRelay] = weakref.WeakKeyDictionary()


class RelayedScraper(MetricsScraper):
    """A MetricsScraper whose reads go through its host's relay while the host runs one (else directly): the same
    answers and the same failures ("connection refused", "timed out", "link down", a BadAnswer's text). With a
    `period_s` its reads are a standing ask's answers: each read waits for the next one (`paced`)."""

    def __init__(self, relay: MetricsRelay, port: int, timeout_s: float, addr: str, path: str,
                 keep: frozenset[str] | None, period_s: float | None = None) -> None:
        super().__init__(relay.transport, port, timeout_s, path, addr)
        self.relay = relay
        self._relayed = bool(_ADDR.fullmatch(addr) and _PATH.fullmatch(self.path)) and 0 < port < 65536
        self._keep = keep if keep and all(_NAME.fullmatch(name) for name in keep) else None
        self._period_s = period_s
        self._standing: Standing | None = None
        self._answered = False   # the last read was its standing ask's answer

    @property
    def paced(self) -> bool:
        """Only after a standing ask's answer: after a failure (a link down fails at once) the caller waits."""
        return self._answered

    async def _exchange(self) -> tuple[int, bytes]:
        self._answered = False
        if not (self._relayed and self.relay.usable):
            return await super()._exchange()
        try:
            if self._period_s is None:
                return self._taken(await self.relay.get(self.addr, self.port, self.path, self.timeout_s, self._keep))
            return self._taken(await self._next())
        except RelayMissing:
            return await super()._exchange()

    async def _next(self) -> Answer:
        assert self._period_s is not None
        if self._standing is None or self._standing.ended:
            self._standing = await self.relay.stand(self.addr, self.port, self.path, self.timeout_s, self._period_s,
                                                    self._keep)
        since = time.monotonic()
        try:
            answer = await self._standing.next()
        except asyncio.CancelledError:   # the read's time ran out: a relay silent all along is ended
            self.relay.watch_silence(since, self.timeout_s)
            raise
        self._answered = True
        return answer

    def _taken(self, answer: Answer) -> tuple[int, bytes]:
        kind, status, body = answer
        if kind == "ok":
            return status, body
        if kind == "refused":
            raise ConnectionRefusedError(f"{self.addr}:{self.port}")
        if kind == "timeout":
            raise asyncio.TimeoutError
        if kind == "large":
            raise too_large(status if status >= 0 else None)
        raise BadAnswer(body.decode("utf-8", errors="replace"))

    async def aclose(self) -> None:
        self._answered = False
        if self._standing is not None:
            self.relay.sit(self._standing)
            self._standing = None
        await super().aclose()


def metrics_scraper(transport: Transport, port: int, timeout_s: float, addr: str, path: str = "/metrics",
                    keep: frozenset[str] | None = None, period_s: float | None = None) -> MetricsScraper:
    """The reader of a server's /metrics (or its health `path`) as its host reaches it: through the host's relay over
    SSH, else directly. `keep`: the starts of the only lines its reader parses (`parse_metrics`' `only`); through the
    relay an answer's text is cut to those lines on the host, read directly it is whole. `period_s`: it is read every
    so often (the serving view): through the relay each read waits for the host's next answer (`paced`)."""
    relay = _relay_of(transport)
    if relay is None:
        return MetricsScraper(transport, port, timeout_s, path, addr)
    return RelayedScraper(relay, port, timeout_s, addr, path, keep, period_s)


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
