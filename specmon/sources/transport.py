"""The shell-level transport: how specmon reaches a host (this machine or one over SSH).

The lifecycle engine talks to a host ONLY through this interface: it runs shell command strings built with
`shlex.quote` and streams a command's output. It never touches host paths with Python `os` calls, so the SSH
transport slots in without engine changes.

    class Transport:
        host: str                                            # for messages: "local", an ssh alias, ...
        async run(command, *, input=None, timeout=None, limit=MAX_OUTPUT_BYTES) -> CommandResult
        stream(command) -> OutputStream                      # async context manager + async iterator of bytes
        async write_file(path, data, mode=0o600)             # default: `cat > path` through run()
        async read_files(paths) -> list[bytes | None]        # small files in one round trip; None: missing
        async look(path, start, length) -> FileLook | None   # a followed file's inode, size and bytes at start
        async local_url(port, addr) -> str                   # addr:port as the host reaches it, from here
        async open_tcp(host, port) -> (reader, writer)       # a TCP connection started ON the host
        http_transport() -> httpx.AsyncBaseTransport | None  # HTTP whose TCP connections start ON the host
        link: LinkState                                      # connected / reconnecting / refused (SSH)
        watch_link(callback) -> unsubscribe
        async close()

`command` is a POSIX shell command line (run by /bin/sh locally; by the login shell over SSH, so keep it
plain POSIX). Link problems raise TransportError; a non-zero exit is a normal CommandResult. A command that prints
more than `limit` bytes on stdout or on stderr is ended and raises OutputTooLarge (nothing reads output without
bound: an endless answer must not grow specmon without end). A TransportError
with `permanent` set (host key refused, authentication refused) will not go away by retrying: callers stop
trying and show it.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import shlex
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:   # httpx is imported only where HTTP is spoken (`specmon status` speaks none)
    import httpx


def url_host(addr: str) -> str:
    """An address as a URL's host part (an IPv6 address in brackets)."""
    return f"[{addr}]" if ":" in addr else addr


class TransportError(Exception):
    """The host could not be reached, or the link dropped while a command ran."""

    permanent = False   # True: retrying cannot help (e.g. a refused host key); say so once, never retry


class OutputTooLarge(TransportError):
    """A command printed more than its caller reads (`limit`); it was ended."""


SMALL_FILE_BYTES = 1 << 20   # read_files is for status files: more than this is not one
MAX_OUTPUT_BYTES = 64 << 20  # what `run` reads of a command's stdout (and of its stderr) unless told less
LINK_STATES = ("connected", "connecting", "reconnecting", "host key unknown", "host key changed", "auth failed",
               "bad ssh config")


@dataclass(frozen=True)
class LinkState:
    """How a transport's link to its host stands. `retry_at` (epoch s) is when the next reconnect attempt
    starts while `state` is "reconnecting"; `detail` is the one-line reason of the last failure."""

    state: str = "connected"          # one of LINK_STATES
    detail: str = ""
    retry_at: float | None = None

    @property
    def up(self) -> bool:
        return self.state == "connected"

    @property
    def refused(self) -> bool:
        """The host refused us for good (host key or authentication): no reconnect will be tried."""
        return self.state in ("host key unknown", "host key changed", "auth failed", "bad ssh config")

    def label(self, now: float | None = None) -> str:
        """What a card shows: "connected", "reconnecting in 3s", "host key refused", "auth failed"."""
        if self.state == "reconnecting" and self.retry_at is not None:
            left = self.retry_at - (time.time() if now is None else now)
            return f"reconnecting in {left:.0f}s" if left >= 0.5 else "reconnecting"
        if self.state in ("host key unknown", "host key changed"):
            return "host key refused"
        return self.state


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left behind."""

    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def out(self) -> str:
        """stdout decoded as UTF-8 (bad bytes replaced)."""
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def err(self) -> str:
        """stderr decoded, stripped, reduced to its last non-empty line (for one-line error messages)."""
        lines = [ln.strip() for ln in self.stderr.decode("utf-8", errors="replace").splitlines() if ln.strip()]
        return lines[-1] if lines else ""


@dataclass(frozen=True)
class FileLook:
    """A followed file as it is now: its inode and size, and the `length` bytes from `start` (fewer at its end;
    None when it is not a regular file or could not be read, so nothing is judged from them)."""

    inode: int
    size: int
    data: bytes | None


class _Reader(Protocol):
    async def read(self, n: int = -1, /) -> bytes: ...


async def _read_capped(stream: _Reader, limit: int, host: str, what: str) -> bytes:
    parts: list[bytes] = []
    size = 0
    while chunk := await stream.read(65536):
        size += len(chunk)
        if size > limit:
            raise OutputTooLarge(f"{host}: a command printed over {limit:,} bytes on {what}; it was ended")
        parts.append(chunk)
    return b"".join(parts)


async def read_output(stdout: _Reader, stderr: _Reader, limit: int, host: str) -> tuple[bytes, bytes]:
    """A command's stdout and stderr to their ends, read together (neither pipe may fill while the other is read);
    OutputTooLarge as soon as either passes `limit` bytes (the caller ends the command)."""
    reads = [asyncio.ensure_future(_read_capped(stream, limit, host, what))
             for stream, what in ((stdout, "stdout"), (stderr, "stderr"))]
    try:
        out, err = await asyncio.gather(*reads)
    finally:
        for read in reads:
            read.cancel()
        await asyncio.gather(*reads, return_exceptions=True)
    return out, err


class OutputStream(ABC):
    """A running command whose stdout arrives as byte chunks.

    Use as `async with transport.stream(cmd) as out: async for chunk in out: ...`. Leaving the block ends the
    command. After the iteration ends, `exit_code` is the command's status, or None when the link was lost
    (EOF without an exit status).
    """

    exit_code: int | None = None

    @abstractmethod
    async def start(self) -> None:
        """Start the command (called by `__aenter__`)."""

    @abstractmethod
    async def read_chunk(self) -> bytes:
        """The next chunk of stdout; b"" at EOF."""

    @abstractmethod
    async def aclose(self) -> None:
        """End the command if it still runs and release its resources."""

    async def __aenter__(self) -> OutputStream:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._chunks()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while True:
            chunk = await self.read_chunk()
            if not chunk:
                return
            yield chunk


_RUNNING: set[asyncio.Task[None]] = set()


def run_held(work: Coroutine[Any, Any, None]) -> None:
    """Run `work` as a task held until it is done (the loop keeps only weak references to its tasks)."""
    task = asyncio.get_running_loop().create_task(work)
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)


def until_tick(period: float, least: float = 0.9) -> float:
    """Seconds to the next tick of a clock shared by every poller (a multiple of `period` on the wall clock) at least
    `least` times `period` away. Pollers of the same host that sleep so wake together, so what they ask (`look`,
    `read_files`) goes out as one command instead of one each; and on the wall clock, which the hosts keep too, they
    wake with the metrics relays that read on it there (`metricsrelay`): the app's whole second is one moment."""
    wall = time.time()
    return math.ceil((wall + least * period) / period) * period - wall


def tick_passed(period: float, since: float) -> bool:
    """Whether a tick of the clock `period` (as `until_tick`'s) has passed since `since` (loop time, -inf: never).
    Pollers that ask only every `period` and wake together ask together, on the first wake after each tick; one
    that wakes late asks late, and misses none."""
    now, wall = asyncio.get_running_loop().time(), time.time()
    return since < now - (wall - math.floor(wall / period) * period)


_Look = tuple[str, int, int, asyncio.Future[FileLook | None]]   # path, start, length, its answer
_Read = tuple[list[str], asyncio.Future[list[bytes | None]]]     # paths, their contents


@dataclass
class _Asks:
    """The reads of a host asked at one moment (the tailers' looks and the process checks fall on a shared tick),
    answered by one command for all of them."""

    looks: list[_Look]
    reads: list[_Read]


def _answer_reads(reads: list[_Read], contents: list[bytes | None]) -> None:
    """Each read gets its files' contents (`contents`: every file of `reads`, in order)."""
    for wanted, answer in reads:
        if not answer.done():
            answer.set_result(contents[:len(wanted)])
        contents = contents[len(wanted):]


def _fail_all(answers: Sequence[asyncio.Future[Any]], exc: BaseException) -> None:
    for answer in answers:
        if not answer.done():
            answer.set_exception(exc)


def _file_look(text: bytes) -> FileLook | None:
    """One look's answer: `INODE SIZE\\nBYTES STATUS` (no file: no stat line)."""
    body, _, status = text.rpartition(b" ")
    head, _, data = body.partition(b"\n")
    fields = head.split()
    if len(fields) != 2 or not all(field.isdigit() for field in fields):
        return None
    return FileLook(int(fields[0]), int(fields[1]), data if status.strip() == b"0" else None)


class Transport(ABC):
    """Runs shell commands on one host. See the module docstring."""

    host: str = "local"
    link: LinkState = LinkState()
    # Logs are followed by polling `look` on a shared tick (one command a tick for all of a host's logs), not by one
    # streamed `tail -f` each: a transport whose commands at once are few (SSH's MaxSessions) says so.
    polls_logs: bool = False
    _asks: _Asks | None = None   # the looks and file reads asked this moment (one command for all)

    @abstractmethod
    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None,
                  limit: int = MAX_OUTPUT_BYTES) -> CommandResult:
        """Run `command` to completion. Raises TransportError if the host cannot be reached,
        TimeoutError (after ending the command) if it runs past `timeout` seconds, OutputTooLarge (after ending
        it) if it prints more than `limit` bytes on stdout or on stderr."""

    @abstractmethod
    def stream(self, command: str) -> OutputStream:
        """A not-yet-started stream of `command`'s stdout (stderr is discarded)."""

    async def write_file(self, path: str, data: bytes, mode: int = 0o600) -> None:
        """Write `data` to `path` on the host (created or replaced, never readable by others meanwhile), then
        chmod it.

        Raises TransportError carrying the host's one-line reason if it cannot be written.
        """
        q = shlex.quote(path)
        result = await self.run(f"umask 077 && cat > {q} && chmod {mode:o} {q}", input=data, timeout=30)
        if not result.ok:
            raise TransportError(f"{self.host}: cannot write {path}: {result.err or f'exit {result.exit_code}'}")

    async def read_files(self, paths: Sequence[str]) -> list[bytes | None]:
        """The contents of small files (a status file, `/proc/PID/stat`) in one round trip, in order, each cut at
        SMALL_FILE_BYTES; None for a file that is missing, unreadable or not a regular file (a FIFO, a device).
        Default: one shell command, the files told apart by a random token; the reads asked for at the same moment
        (the process checks of a host's runs fall on a shared tick, `until_tick`) go out together as one command,
        with the looks of that moment (`look`).

        Raises TransportError if the host cannot be reached.
        """
        answer: asyncio.Future[list[bytes | None]] = asyncio.get_running_loop().create_future()
        self._asked().reads.append((list(paths), answer))
        return await answer

    def _asked(self) -> _Asks:
        """The reads asked this moment, sent together as soon as the moment's other tasks have asked theirs."""
        if self._asks is None:
            self._asks = _Asks([], [])
            asyncio.get_running_loop().call_soon(self._send_asks)
        return self._asks

    def _send_asks(self) -> None:
        asks, self._asks = self._asks, None
        if asks is not None:
            run_held(self._ask_all(asks))

    async def _ask_all(self, asks: _Asks) -> None:
        """One command for every look and file read of `asks`, each answer told apart by a random token (a look's
        ended by its status, a missing file's by a second token)."""
        paths = [path for wanted, _ in asks.reads for path in wanted]
        if not asks.looks and not paths:
            _answer_reads(asks.reads, [])
            return
        token, missing = (f"<<{secrets.token_hex(8)}>>" for _ in range(2))
        q = shlex.quote
        parts = []
        for path, start, length, _ in asks.looks:
            parts.append(f"printf %s {q(token)}; {{ stat -c '%i %s' -- {q(path)} 2>/dev/null && [ -f {q(path)} ] && "
                         f"tail -c +{start + 1} -- {q(path)} | head -c {length}; }}; printf ' %s' $?")
        # Regular files only (a FIFO never ends), at most SMALL_FILE_BYTES each (a 300 MB meta.json is not one).
        parts += [f"printf %s {q(token)}; {{ [ -f {q(path)} ] && head -c {SMALL_FILE_BYTES} -- {q(path)}; }} 2>/dev/null "
                  f"|| printf %s {q(missing)}" for path in paths]
        answers: list[asyncio.Future[Any]] = [answer for *_, answer in asks.looks] + [answer for _, answer in asks.reads]
        try:
            # A look waits 15 s at most (a tailer then resumes as after a lost link), a process check 30 s.
            out = (await self.batch_run("; ".join(parts), 15 if asks.looks else 30)).split(token.encode())[1:]
            if len(out) != len(parts):
                raise TransportError(f"{self.host}: {len(parts)} reads gave {len(out)} answers")
        except BaseException as exc:
            _fail_all(answers, exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (*_, answer), text in zip(asks.looks, out):
            if not answer.done():
                answer.set_result(_file_look(text))
        _answer_reads(asks.reads, [None if part.endswith(missing.encode()) else part for part in out[len(asks.looks):]])

    async def batch_run(self, script: str, timeout: float) -> bytes:
        """The stdout of `script`, a batch of reads that prints what it found (`look`, `read_files`), whatever its
        status. Default: `run`; a transport where starting a command is dear (SSH) keeps a shell for them."""
        return (await self.run(script, timeout=timeout)).stdout

    async def look(self, path: str, start: int, length: int) -> FileLook | None:
        """`path`'s inode and size and its bytes [start, start+length) in one round trip; None if there is no such
        file. Default: one shell command (a log tailer asks this for every chunk and every quiet second); the looks
        asked for at the same moment (the tailers of a host's runs check their quiet logs on a shared clock) go out
        together as one command, with the file reads of that moment (`read_files`).

        Raises TransportError if the host cannot be reached, TimeoutError if it does not answer in 15 s.
        """
        answer: asyncio.Future[FileLook | None] = asyncio.get_running_loop().create_future()
        self._asked().looks.append((path, start, length, answer))
        return await answer

    async def local_url(self, port: int, addr: str = "127.0.0.1") -> str:
        """A base URL, reachable from where specmon runs, for `addr`:`port` as the host reaches it (by default the
        host's own 127.0.0.1; a Slurm job's compute node as its login node reaches it).

        Locally that is the address itself; a remote transport forwards it (listening on 127.0.0.1 here).
        """
        return f"http://{url_host(addr)}:{port}"

    async def open_tcp(self, host: str, port: int, wait_s: float | None = None) -> tuple[Any, Any]:
        """A TCP connection to `host:port` as seen FROM the host, as (reader, writer) streams (asyncio's locally,
        a direct-tcpip channel of the one connection over SSH). ConnectionRefusedError when nothing listens
        there; TransportError when the link is down."""
        return await asyncio.open_connection(host, port)

    def http_transport(self) -> httpx.AsyncBaseTransport | None:
        """An httpx transport whose TCP connections are opened FROM the host (so `http://127.0.0.1:PORT` means the
        host's own port, and "connection refused" means nothing listens there yet); None: connect from here."""
        return None

    def watch_link(self, callback: Callable[[LinkState], None]) -> Callable[[], None]:
        """Call `callback(link)` whenever the link state changes; returns the unsubscribe function. A local
        transport's link never changes."""
        return lambda: None

    async def close(self) -> None:  # noqa: B027 - optional hook: most transports hold nothing to release
        """Release connections. Never stops anything started on the host."""
