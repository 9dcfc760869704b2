"""Process entry of the load generator: `python -m specmon.loadgen`, started by specmon.orchestration.measure.sweep.

It reads a ChildSpec on stdin and writes its messages on stdout (specmon.loadgen.protocol says which, and is the
only reader and writer of those lines). After the spec stdin stays open; end-of-file (the parent went away) or
SIGTERM/SIGINT stops the sweep: the level in progress is abandoned, finished levels have already been reported.
A workload with `processes` > 1 is sent by that many parts, this process coordinating them (loadgen.shards); a
part (`--part k/N`) also writes Ready and its request records on stdout, and takes Start lines on stdin.
The event loop is uvloop where available; nothing else runs in this process, so no UI work can shift a timestamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from specmon.errors import UserError
from specmon.loadgen.protocol import ChildSpec, Done, Fatal, Message, ProtocolError, Ready, Start, Stopped, decode, encode
from specmon.loadgen.runner import Part, SweepRunner
from specmon.loadgen.shards import ShardedSweep, part_of

EXIT_GRACE_S = 3.0   # after a stop, how long the sweep has to end in order before the process just exits
EXIT_STOPPED = 3


def _emit(msg: Message) -> None:
    sys.stdout.buffer.write(encode(msg))
    sys.stdout.buffer.flush()


class _Stopper:
    """Stops the sweep on SIGTERM/SIGINT or end of stdin, whatever the process is doing at that moment.

    The signal handler is a plain Python one (it runs between two bytecodes even while the loop is busy building a
    level) and stdin is watched from a thread (it sees the parent go away without the loop's help). Either asks the
    loop to cancel the sweep, and arms a last-resort exit EXIT_GRACE_S later, in case the loop never gets to it:
    the generator never outlives the specmon that started it.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, main: asyncio.Task[Any],
                 on_line: Callable[[bytes], None] | None = None) -> None:
        self._loop, self._main, self._on_line = loop, main, on_line
        self._armed = threading.Lock()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda _sig, _frame: self.stop())
        threading.Thread(target=self._watch_stdin, name="stdin-eof", daemon=True).start()

    def stop(self) -> None:
        if not self._armed.acquire(blocking=False):
            return
        timer = threading.Timer(EXIT_GRACE_S, os._exit, (EXIT_STOPPED,))
        timer.daemon = True
        timer.start()
        with contextlib.suppress(RuntimeError):   # the loop has closed: the process is ending anyway
            self._loop.call_soon_threadsafe(self._main.cancel)

    def _watch_stdin(self) -> None:
        # os.read, not sys.stdin: a daemon thread blocked inside a buffered reader's lock aborts the interpreter's
        # exit. The parent sends nothing after the spec line (a coordinator sends its parts their start lines, handed
        # to the loop); anything else is read and dropped.
        pending = b""
        with contextlib.suppress(OSError, RuntimeError):   # RuntimeError: the loop has closed
            while data := os.read(0, 4096):
                if self._on_line is None:
                    continue
                *lines, pending = (pending + data).split(b"\n")
                for line in lines:
                    self._loop.call_soon_threadsafe(self._on_line, line)
        self.stop()


async def _main(spec: ChildSpec, part: tuple[int, int] | None) -> int:
    loop = asyncio.get_running_loop()
    starts: asyncio.Queue[Message | ProtocolError] = asyncio.Queue()
    main = loop.create_task(_sweep(spec, part, starts))
    _Stopper(loop, main, None if part is None else lambda line: starts.put_nowait(_decoded(line)))
    try:
        await main
    except asyncio.CancelledError:
        _emit(Stopped())
        return 0
    _emit(Done())
    return 0


def _decoded(line: bytes) -> Message | ProtocolError:
    try:
        return decode(line)
    except ProtocolError as exc:
        return exc


async def _sweep(spec: ChildSpec, part: tuple[int, int] | None, starts: asyncio.Queue[Message | ProtocolError]) -> None:
    await asyncio.sleep(0)   # the stop handlers are in place before any work is built
    workload = spec.workload
    if workload.processes > 1 and part is None:
        await ShardedSweep(spec, _emit).run()
        return
    dataset = workload.load_dataset()
    key_env = spec.api_key_env

    async def start_together(level: int) -> int:
        _emit(Ready(level))
        while True:
            msg = await starts.get()
            if isinstance(msg, ProtocolError):
                raise UserError(f"the load generator's coordinator wrote {msg}")
            if isinstance(msg, Start) and msg.level == level:
                return msg.at_ns

    runner = SweepRunner(spec.url, spec.model, workload, _emit, spec.records_path,
                         api_key=os.environ.get(key_env) if key_env else None, dataset=dataset,
                         part=None if part is None else Part(part[0], part[1], start_together),
                         records_fd=None if part is None else sys.stdout.fileno())
    await runner.run()


# A part's records go to the coordinator through its stdout pipe, one write a progress summary (every ~0.21-0.25 s),
# ~290 bytes a record: 62 kB at 1,000 req/s a part (measured), more than a pipe holds by default (64 KiB) above
# ~1,050. A write to a full pipe stops the part's whole event loop until the coordinator reads again (its own loop
# parses another part's lines meanwhile), and the sends due then go out late; a coordinator that stalls stalls them
# all (tests/integration/test_loadgen_part_pipe.py). 1 MiB (Linux's limit for any user by default) holds 3,600.
PIPE_BYTES = 1 << 20


def _widen_pipe(fd: int) -> None:
    """Let the pipe on `fd` hold PIPE_BYTES where the system allows (not a pipe, not Linux: as it is)."""
    with contextlib.suppress(OSError, AttributeError):   # AttributeError: no F_SETPIPE_SZ (not Linux)
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)


def main() -> int:
    part = None
    if sys.argv[1:2] == ["--part"] and len(sys.argv) == 3:
        part = part_of(sys.argv[2])
    line = sys.stdin.buffer.readline()
    spec = _decoded(line)
    if not isinstance(spec, ChildSpec):
        _emit(Fatal(f"bad spec line on stdin: {spec if isinstance(spec, ProtocolError) else type(spec).__name__}"))
        return 2
    if part is not None:
        _widen_pipe(sys.stdout.fileno())
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency except on Windows
        runner = asyncio.run
    else:
        runner = uvloop.run
    try:
        return runner(_main(spec, part))
    except UserError as exc:
        _emit(Fatal(str(exc)))
        return 2


if __name__ == "__main__":
    sys.exit(main())
