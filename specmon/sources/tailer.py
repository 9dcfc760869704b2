"""Follow a run's log on its host through a Transport, resumable from a byte offset.

`LogTailer.follow()` yields `TailBatch`es of COMPLETE lines only; `offset` moves past a line only once its `\\n`
has arrived, so a follower that saves `batch.end` after handling a batch and later resumes from it neither loses
nor repeats a line.

How the bytes come depends on the transport (`Transport.polls_logs`):
  - streamed: `tail -c +OFFSET -f` (by descriptor: every byte streamed is the attached file's, at a known offset),
    one command held per followed log (locally: a process; inotify makes a line arrive at once);
  - polled (over SSH, where a connection carries at most MaxSessions commands at once, so one held per run left
    every run past the eighth on a host unfollowed): every `poll_s`, on a clock shared by every tailer, one
    `Transport.look` per log reads its inode, its size and the bytes from the last ones read on; the looks of a
    host's tailers go out together as one command, so a host's logs cost one command a tick however many runs it
    has. A rotated log's old file is looked for by its inode in the log's directory and read to its end first.
    A log that stays quiet is looked at less and less often, up to every `quiet_poll_s` (0: never less often
    than `poll_s`); any new bytes bring it back to `poll_s` at once, except whole lines that `idle_lines` calls idle
    (a ready server's access lines of the reads that watch it: its log grows by one every second it is read). The
    periods double from `poll_s`, so the looks of a host's tailers still fall on common ticks.

The file is checked by the one rule of specmon.sources.follow (its inode, its size, and the
last bytes this tailer read before the offset) at every (re)attach, before every chunk of the stream is handed
out, and after `check_s` of quiet: a log truncated or rewritten in place restarts at byte 0 at once (the chunk
that came from the new content is dropped, not handed out); a log replaced by a new file (rotation) is read
by its old descriptor until it has been quiet for one check, then the new file from byte 0. A backlog over
`max_backlog` bytes is skipped with a note instead of replayed. `drain()` reads what is left once the writer
has exited, including a last line without a newline.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from specmon.sources.follow import REPLACED, TAIL_CHECK_BYTES, restart_reason
from specmon.sources.transport import CommandResult, LinkState, OutputStream, Transport, TransportError, until_tick

MAX_BACKLOG = 4 * 1024 * 1024
MAX_LINE = 64 * 1024          # a partial line longer than this is emitted anyway (and committed)
POLL_S = 0.5                  # a polled log is read this often (on a clock shared by every tailer)
POLL_BYTES = 256 * 1024       # what one poll reads of a log at most (more waiting: polled again at once)
LINK_LOST = "log link lost; resuming"


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
        check_s: float = 1.0,
        poll_s: float = POLL_S,
        quiet_poll_s: float = 0.0,
        idle_lines: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.transport = transport
        self.path = path
        self.offset = offset
        self.inode = inode
        self.max_backlog = max_backlog
        self.retry_s = retry_s
        self.check_s = check_s   # a quiet stream checks the file this often (a rotation shows only at the name)
        self.poll_s = poll_s     # a polled log is read this often
        self.quiet_poll_s = quiet_poll_s   # ... and, while it stays quiet, less often up to this (0: never less)
        self.idle_lines = idle_lines   # whole lines that leave a log quiet (None: none)
        self._resync = False     # after a skip: drop bytes up to the first newline
        self._partial = b""      # bytes after `offset` already handed out as `fresh`
        self._seen = b""         # the last bytes before `offset` read by this tailer (a rewrite check on re-attach)

    async def _attach(self) -> TailBatch | None:
        """Check the file before reading (follow.restart_reason: replaced, truncated, or its last-read bytes
        rewritten in place); returns a batch (with a note when the offset had to move)."""
        looked = await self._look(self.offset + len(self._partial))
        if looked is None:
            return None
        why, inode, size = looked
        note = None if why is None else self._restart(why)
        self.inode = inode
        if size - self.offset > self.max_backlog:
            old_offset = self.offset
            # Start one byte early and drop through the first newline: lands on a whole line even when
            # the cut falls exactly on a line boundary.
            self.offset, self._partial, self._seen = size - self.max_backlog - 1, b"", b""
            self._resync = True
            note = f"skipped {self.offset - old_offset} bytes of log"
        return TailBatch(b"", self.offset, self.offset, note)

    async def _look(self, upto: int) -> tuple[str | None, int, int] | None:
        """(follow.restart_reason for the file now at the name having been read up to `upto`, its inode, its
        size), or None if there is no file (yet). The bytes where the last ones read should be are compared
        (unreadable: not judged, the next look checks again)."""
        looked = await self.transport.look(self.path, self.offset - len(self._seen), len(self._seen))
        if looked is None:
            return None
        same_tail = not self._seen or looked.data is None or looked.data == self._seen
        return restart_reason(self.inode, upto, looked.inode, looked.size, same_tail), looked.inode, looked.size

    def _restart(self, why: str) -> str:
        """Read the log again from its start; the note that says why."""
        self.offset, self._partial, self._seen, self._resync = 0, b"", b"", False
        return f"log {why}"

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
        """Yield batches forever (until cancelled or closed), re-attaching after a lost link or a restart."""
        follow = self._poll() if self.transport.polls_logs else self._stream()
        async with contextlib.aclosing(follow) as batches:
            async for batch in batches:
                yield batch

    async def _poll(self) -> AsyncGenerator[TailBatch, None]:
        """Follow by polling (see the module docstring): one look a tick, or at once while more is waiting."""
        attached = False   # polled since the start or the last lost link (the backlog rule applies on attaching)
        dropped = False    # the link went down since the last poll (it may be back already: a reconnect is quick)

        def on_link(link: LinkState) -> None:
            nonlocal dropped
            dropped = dropped or not link.up

        unwatch = self.transport.watch_link(on_link)
        period = self.poll_s
        try:
            while True:
                try:
                    batches, more = await self._poll_once(attached and not dropped)
                except (TransportError, TimeoutError):
                    batches, more = [], False
                    dropped = True
                if dropped:
                    if attached:
                        yield TailBatch(b"", self.offset, self.offset, LINK_LOST)
                    attached = dropped = False
                    if not batches:
                        await asyncio.sleep(self.retry_s)
                        continue
                attached = True
                for batch in batches:
                    yield batch
                busy = any(not self._idle(batch) for batch in batches)
                period = self.poll_s if busy else min(2 * period, max(self.poll_s, self.quiet_poll_s))
                if not more:
                    await asyncio.sleep(until_tick(period, 0.5))
        finally:
            unwatch()

    def _idle(self, batch: TailBatch) -> bool:
        """Whether `batch` leaves the log quiet: no note, and whole lines that `idle_lines` calls idle."""
        return (batch.note is None and self.idle_lines is not None and batch.fresh.endswith(b"\n")
                and self.idle_lines(batch.fresh))

    async def _poll_once(self, attached: bool) -> tuple[list[TailBatch], bool]:
        """One look at the log: the batches it gives, and whether to look again at once (more bytes are waiting, or
        the log is read again from its start)."""
        known = self._seen + self._partial   # the bytes before the read position, compared in place
        at = self.offset + len(self._partial)
        looked = await self.transport.look(self.path, at - len(known), len(known) + POLL_BYTES)
        if looked is None:
            return [], False
        same = looked.data is None or looked.data[:len(known)] == known
        why = restart_reason(self.inode, at, looked.inode, looked.size, same)
        if why is not None:
            batches = []
            if why == REPLACED and attached:   # what the old file gained since the last look
                batch = self._take(await self._old_file_rest(at, known))
                if batch is not None:
                    batches.append(batch)
            self.inode = looked.inode
            return [*batches, TailBatch(b"", 0, 0, self._restart(why))], True
        self.inode = looked.inode
        if not attached and looked.size - self.offset > self.max_backlog:
            attach = await self._attach()   # the backlog skip, as a stream's attach makes it
            return [attach] if attach is not None and attach.note else [], True
        fresh = b"" if looked.data is None else looked.data[len(known):]
        batch = self._take(fresh) if fresh else None
        return [batch] if batch is not None else [], len(fresh) >= POLL_BYTES

    async def _old_file_rest(self, at: int, known: bytes) -> bytes:
        """The bytes from `at` to its end of the file this tailer read before the log was replaced, found by its inode
        in the log's directory (a rotation renames it there); b"" when it is gone or no longer what was read."""
        folder, _, _ = self.path.rpartition("/")
        q = shlex.quote
        result = await self.transport.run(
            f"f=$(find {q(folder or '.')} -maxdepth 1 -inum {int(self.inode or 0)} -type f 2>/dev/null | head -n 1) && "
            f"[ -n \"$f\" ] && tail -c +{at - len(known) + 1} -- \"$f\" | head -c {self.max_backlog}", timeout=30)
        if not result.ok or not result.stdout.startswith(known):
            return b""
        return result.stdout[len(known):]

    async def _stream(self) -> AsyncGenerator[TailBatch, None]:
        """Follow by one streamed `tail -f` (see the module docstring)."""
        while True:
            try:
                attached = await self._attach()
            except (TransportError, TimeoutError):
                attached = None
            if attached is None:
                await asyncio.sleep(self.retry_s)
                continue
            if attached.note:
                yield attached
            cmd = f"{_not_special(self.path)} && exec tail -c +{self.offset + 1} -f -- {shlex.quote(self.path)} 2>/dev/null"
            skip = len(self._partial)   # already handed out before the link dropped
            note: str | None = LINK_LOST
            try:
                async with self.transport.stream(cmd) as out:
                    replaced = False    # the name is a new file: this one is read until a quiet check
                    async for chunk in _quiet_or_chunks(out, self.check_s):
                        if skip and chunk:
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                        if chunk is None and replaced:
                            note = None   # the re-attach says why
                            break
                        looked = await self._look(self.offset + len(self._partial) + len(chunk or b""))
                        why = None if looked is None else looked[0]
                        if why == REPLACED:
                            replaced = True
                        elif why is not None:   # the chunk came from the new content: dropped
                            note = None
                            yield TailBatch(b"", 0, 0, self._restart(why))
                            break
                        batch = self._take(chunk) if chunk else None
                        if batch is not None:
                            yield batch
            except (TransportError, TimeoutError):   # a check that got no answer in time: as a lost link
                pass
            if note is not None:
                yield TailBatch(b"", self.offset, self.offset, note)
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


async def _quiet_or_chunks(out: OutputStream, quiet_s: float) -> AsyncGenerator[bytes | None, None]:
    """The stream's bytes, and None after each `quiet_s` (0.9 to 1.9 times it, on the shared tick) without any;
    ends with the stream. The stream is read on
    while the consumer checks the file, and everything read by then comes as one chunk (up to `MAX_BACKLOG`): one
    check covers a burst, so a log streamed at disk speed is not slowed to one check per 64 KB read."""
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=MAX_BACKLOG // 65536)   # bounded: the reader waits

    async def pump() -> None:
        while chunk := await out.read_chunk():
            await queue.put(chunk)
        await queue.put(b"")   # the end

    reader = asyncio.ensure_future(pump())
    getter: asyncio.Future[bytes] | None = None
    try:
        while True:
            if queue.empty():
                if reader.done():
                    reader.result()   # the read's error, if it failed
                    return
                getter = asyncio.ensure_future(queue.get())
                done, _ = await asyncio.wait({getter, reader}, timeout=until_tick(quiet_s),
                                             return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()   # a cancelled get takes nothing off the queue
                    if not done:
                        yield None
                    continue
                parts = [getter.result()]
            else:
                parts = [queue.get_nowait()]
            size = len(parts[0])
            while parts[-1] and size < MAX_BACKLOG and not queue.empty():
                parts.append(queue.get_nowait())
                size += len(parts[-1])
            data = b"".join(parts)
            if data:
                yield data
            if not parts[-1]:
                return
    finally:
        for task in (reader, getter):
            if task is not None:
                task.cancel()
                if task.done() and not task.cancelled():
                    task.exception()   # retrieved: a read that failed after the stream was left is no error of ours


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


async def log_end(transport: Transport, path: str, limit: int) -> tuple[bytes, float | None]:
    """The last `limit` bytes of a log and its mtime (epoch s), in one round trip (a batch of reads: over SSH through
    the host's kept shell, not a session of its own); (b"", None) when there is no such regular file."""
    q = shlex.quote(path)
    out = await transport.batch_run(f"{_not_special(path)} && stat -c %Y -- {q} && tail -c {int(limit)} -- {q}", 60)
    head, _, data = out.partition(b"\n")
    if not head.strip().isdigit():
        return b"", None
    return data, float(head)


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
