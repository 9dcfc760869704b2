"""Follow a run's log on its host through a Transport, resumable from a byte offset.

`LogTailer.follow()` streams `tail -c +OFFSET -F` and yields `TailBatch`es of COMPLETE lines only; `offset`
moves past a line only once its `\\n` has arrived, so a follower that saves `batch.end` after handling a batch
and later resumes from it neither loses nor repeats a line. Before every (re)attach it checks the file by the
rule of specmon.sources.follow (its inode, its size, and the last bytes this tailer read before the offset): a
replaced, truncated or rewritten log restarts at byte 0, and a backlog over `max_backlog` bytes is skipped
with a note instead of replayed. While a stream runs, `tail -F` itself follows a rotation or a truncation; the
rule applies at the next attach. `drain()` reads what is left once the writer has exited, including a last
line without a newline.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from specmon.sources.follow import TAIL_CHECK_BYTES, restart_reason
from specmon.sources.transport import CommandResult, Transport, TransportError

MAX_BACKLOG = 4 * 1024 * 1024
MAX_LINE = 64 * 1024          # a partial line longer than this is emitted anyway (and committed)


@dataclass(frozen=True)
class TailBatch:
    """Bytes [start, end) of the log as whole lines ending in b"\\n" (`data`, for readers and the saved offset),
    plus `fresh`: every byte that arrived since the previous batch, an unfinished line included (for a parser
    that shows progress redrawn with `\\r` before the line ends). Each byte is in `fresh` once per tailer.
    A batch may be empty with a `note` for the reader."""

    data: bytes
    start: int
    end: int
    note: str | None = None
    fresh: bytes = b""


class LogTailer:
    """Follows one log file. `offset` is the end of the last complete line handed out."""

    def __init__(
        self,
        transport: Transport,
        path: str,
        offset: int = 0,
        inode: int | None = None,
        *,
        max_backlog: int = MAX_BACKLOG,
        retry_s: float = 0.5,
    ) -> None:
        self.transport = transport
        self.path = path
        self.offset = offset
        self.inode = inode
        self.max_backlog = max_backlog
        self.retry_s = retry_s
        self._resync = False     # after a skip: drop bytes up to the first newline
        self._partial = b""      # bytes after `offset` already handed out as `fresh`
        self._seen = b""         # the last bytes before `offset` read by this tailer (a rewrite check on re-attach)

    async def stat(self) -> tuple[int, int] | None:
        """(inode, size) of the log, or None if it does not exist (yet)."""
        result = await self.transport.run(f"stat -c '%i %s' -- {shlex.quote(self.path)} 2>/dev/null", timeout=15)
        fields = result.out.split()
        if not result.ok or len(fields) != 2:
            return None
        return int(fields[0]), int(fields[1])

    async def _attach(self) -> TailBatch | None:
        """Check the file before reading (follow.restart_reason: replaced, truncated, or its last-read bytes
        rewritten in place); returns a batch (with a note when the offset had to move)."""
        st = await self.stat()
        if st is None:
            return None
        inode, size = st
        note = None
        same_tail = True
        if self._seen:   # read here before a lost link: are they still the bytes before the offset?
            now = await _range(self.transport, self.path, self.offset - len(self._seen), self.offset)
            same_tail = not now.ok or now.stdout == self._seen   # unreadable: the next attach checks again
        why = restart_reason(self.inode, self.offset + len(self._partial), inode, size, same_tail)
        if why is not None:
            note = f"log {why}"
            self.offset, self._partial, self._seen = 0, b"", b""
        self.inode = inode
        if size - self.offset > self.max_backlog:
            old_offset = self.offset
            # Start one byte early and drop through the first newline: lands on a whole line even when
            # the cut falls exactly on a line boundary.
            self.offset, self._partial, self._seen = size - self.max_backlog - 1, b"", b""
            self._resync = True
            note = f"skipped {self.offset - old_offset} bytes of log"
        return TailBatch(b"", self.offset, self.offset, note)

    def _take(self, chunk: bytes) -> TailBatch | None:
        """Account for newly arrived bytes; returns the batch to hand out (None when nothing is new)."""
        if self._resync:
            nl = chunk.find(b"\n")
            if nl < 0:
                self.offset += len(chunk)
                return None
            self.offset += nl + 1
            chunk = chunk[nl + 1:]
            self._resync = False
        if not chunk:
            return None
        start = self.offset
        buf = self._partial + chunk
        cut = buf.rfind(b"\n") + 1
        if cut == 0 and len(buf) > MAX_LINE:
            self.offset += len(buf)
            self._partial = b""
            self._seen = buf[-TAIL_CHECK_BYTES:]
            return TailBatch(buf + b"\n", start, self.offset, fresh=chunk + b"\n")
        self.offset += cut
        self._partial = buf[cut:]
        self._seen = (self._seen + buf[:cut])[-TAIL_CHECK_BYTES:]
        return TailBatch(buf[:cut], start, self.offset, fresh=chunk)

    async def follow(self) -> AsyncGenerator[TailBatch, None]:
        """Yield batches forever (until cancelled or closed), re-attaching after a lost link."""
        while True:
            try:
                attached = await self._attach()
            except TransportError:
                attached = None
            if attached is None:
                await asyncio.sleep(self.retry_s)
                continue
            if attached.note:
                yield attached
            cmd = f"{_not_special(self.path)} && exec tail -c +{self.offset + 1} -F -- {shlex.quote(self.path)} 2>/dev/null"
            skip = len(self._partial)   # already handed out before the link dropped
            try:
                async with self.transport.stream(cmd) as out:
                    async for chunk in out:
                        if skip:
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                        batch = self._take(chunk)
                        if batch is not None:
                            yield batch
            except TransportError:
                pass
            yield TailBatch(b"", self.offset, self.offset, "log link lost; resuming")
            await asyncio.sleep(self.retry_s)

    async def drain(self) -> TailBatch:
        """Everything after `offset` up to the current end, final unterminated line included."""
        result = await self.transport.run(
            f"{_not_special(self.path)} && tail -c +{self.offset + 1} -- {shlex.quote(self.path)}", timeout=60)
        if not result.ok:
            return TailBatch(b"", self.offset, self.offset)
        start, seen = self.offset, len(self._partial)
        data = result.stdout
        if data and not data.endswith(b"\n"):
            data += b"\n"
        self.offset += len(result.stdout)
        self._partial = b""
        self._seen = (self._seen + result.stdout)[-TAIL_CHECK_BYTES:]
        return TailBatch(data, start, self.offset, fresh=data[seen:])


def _not_special(path: str) -> str:
    """A shell test that fails, saying so on stderr, when `path` exists but is not a regular file: a FIFO would
    hang the reader (and leave it on the host), a device never end."""
    q = shlex.quote(path)
    return f"{{ [ ! -e {q} ] || [ -f {q} ] || {{ echo 'not a regular file (a FIFO or a device): refused' >&2; false; }}; }}"


async def read_range(transport: Transport, path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file on the host (b"" if it cannot be read)."""
    if end <= start:
        return b""
    result = await _range(transport, path, start, end)
    return result.stdout if result.ok else b""


async def _range(transport: Transport, path: str, start: int, end: int) -> CommandResult:
    q = shlex.quote(path)
    return await transport.run(f"{_not_special(path)} && tail -c +{start + 1} -- {q} | head -c {end - start}",
                               timeout=60)


async def last_lines(transport: Transport, path: str, n: int) -> tuple[bytes, int]:
    """The last `n` complete lines of the file and the file size when read (the offset to follow from)."""
    q = shlex.quote(path)
    result = await transport.run(
        f"{_not_special(path)} && s=$(stat -c %s -- {q}) && echo \"$s\" && head -c \"$s\" -- {q} | tail -n {int(n) + 1}",
        timeout=60)
    if not result.ok:
        raise TransportError(f"{transport.host}: cannot read {path}: {result.err.strip() or 'missing'}")
    head, _, body = result.stdout.partition(b"\n")
    size = int(head)
    # An unfinished last line is left for the follower, which resumes at the end of the last whole line.
    cut = body.rfind(b"\n") + 1
    complete = body[:cut].splitlines(keepends=True)[-n:] if n > 0 else []
    return b"".join(complete), size - (len(body) - cut)
