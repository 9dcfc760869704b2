"""LocalTransport: the Transport for this machine, through /bin/sh and asyncio subprocesses.

Before Python 3.12, asyncio learns that a child ended from a thread started for each child, and starting it holds
the event loop until that thread has run: 15-40 ms on a busy two-core box with the TUI's 64 runs (each Slurm
run's squeue and scontrol), in the way of the next key. Here a pidfd (Linux 5.3+) tells the loop itself, as
Python 3.12 does by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specmon.sources import timelimit
from specmon.sources.transport import (
    MAX_OUTPUT_BYTES,
    SMALL_FILE_BYTES,
    CommandResult,
    FileLook,
    OutputStream,
    OutputTooLarge,
    Transport,
    TransportError,
    read_output,
)

if TYPE_CHECKING:   # asyncio's own signature for a watcher's callback and its arguments
    from typing_extensions import TypeVarTuple, Unpack

    _Args = TypeVarTuple("_Args")

_SHELL = "/bin/sh"


class _PidfdWatch(asyncio.AbstractChildWatcher):
    """Each child's end read from its pidfd by the event loop that started it (no thread a child)."""

    def add_child_handler(self, pid: int, callback: Callable[[int, int, Unpack[_Args]], object],
                          *args: Unpack[_Args]) -> None:
        loop = asyncio.get_running_loop()
        pidfd = os.pidfd_open(pid)

        def ended() -> None:
            loop.remove_reader(pidfd)
            os.close(pidfd)
            try:
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
            except ChildProcessError:   # reaped elsewhere: asyncio's own watchers say 255 then
                code = 255
            callback(pid, code, *args)

        loop.add_reader(pidfd, ended)

    def remove_child_handler(self, pid: int) -> bool:
        return False   # asyncio never asks this of a watcher it started a child with

    def attach_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        pass   # each child's loop is the one running when it starts

    def close(self) -> None:
        pass

    def is_active(self) -> bool:
        return True

    def __enter__(self) -> _PidfdWatch:
        return self

    def __exit__(self, *_: object) -> None:
        pass


def _watch_children_by_pidfd() -> None:
    """Before Python 3.12 only, and where this kernel has pidfds: once per process (see the module's docstring)."""
    if sys.version_info >= (3, 12) or isinstance(asyncio.get_child_watcher(), _PidfdWatch):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))
    except (AttributeError, OSError):   # an older kernel: the thread a child, as before
        return
    asyncio.set_child_watcher(_PidfdWatch())


async def _end(proc: asyncio.subprocess.Process, *, drain: bool = False) -> None:
    """Kill a helper command (and anything it started in its own group) and reap it; with `drain`, the pipes that
    `run` read (nothing else reads them now) are read to their end first."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    # What is left in its pipes is read and dropped: asyncio tells a process's end only once its pipes have ended,
    # and a pipe whose reader stopped on a full buffer (output cut at a limit) would never be seen to end.
    for pipe in (proc.stdout, proc.stderr) if drain else ():
        if pipe is not None:
            with contextlib.suppress(OSError, asyncio.TimeoutError):
                async with timelimit.timeout(5):
                    while await pipe.read(65536):
                        pass
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()


class LocalTransport(Transport):
    """Runs commands with /bin/sh -c on this machine.

    Each command gets its own process group so that a timeout or a closed stream ends the whole
    command (e.g. `tail -F`), never anything the command detached with setsid.
    """

    def __init__(self, host: str = "local") -> None:
        self.host = host

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None,
                  limit: int = MAX_OUTPUT_BYTES) -> CommandResult:
        _watch_children_by_pidfd()
        try:
            proc = await asyncio.create_subprocess_exec(
                _SHELL, "-c", command,
                stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(f"{self.host}: cannot run {_SHELL}: {exc}") from exc
        assert proc.stdout is not None and proc.stderr is not None

        async def feed() -> None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):   # the command ended without reading it: its status says why
                    proc.stdin.write(input or b"")
                    await proc.stdin.drain()
                proc.stdin.close()

        try:
            async with timelimit.timeout(timeout):
                _, (stdout, stderr) = await asyncio.gather(feed(), read_output(proc.stdout, proc.stderr, limit,
                                                                              self.host))
                await proc.wait()
        except asyncio.TimeoutError:
            await _end(proc, drain=True)
            # The builtin TimeoutError (asyncio's is a different class before Python 3.11).
            raise TimeoutError(f"{self.host}: command ran past {timeout} s") from None
        except OutputTooLarge:
            await _end(proc, drain=True)
            raise
        except BaseException:
            # Cancellation: never leave the command running behind us.
            await _end(proc, drain=True)
            raise
        assert proc.returncode is not None
        return CommandResult(proc.returncode, stdout, stderr)

    def stream(self, command: str) -> OutputStream:
        return _LocalStream(self.host, command)

    async def read_files(self, paths: Sequence[str]) -> list[bytes | None]:
        """Read in-process: a status check every few seconds must not cost a fork and a shell (the idle TUI)."""
        return [_read_small(path) for path in paths]

    async def look(self, path: str, start: int, length: int) -> FileLook | None:
        """In-process (a stat and one read): a followed log is looked at every quiet second and before each chunk,
        and a fork and a shell for each was most of the idle TUI's CPU with eight runs."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return FileLook(st.st_ino, st.st_size, None)
            try:
                data: bytes | None = os.pread(fd, length, start) if length > 0 else b""
            except OSError:
                data = None
            return FileLook(st.st_ino, st.st_size, data)
        finally:
            os.close(fd)


def _read_small(path: str) -> bytes | None:
    """The first SMALL_FILE_BYTES of a regular file (as `head -c` remotely); None if missing or not a regular file
    (a FIFO would never end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        os.set_blocking(fd, True)
        parts: list[bytes] = []
        size = 0
        while size < SMALL_FILE_BYTES and (part := os.read(fd, SMALL_FILE_BYTES - size)):
            parts.append(part)
            size += len(part)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


class _LocalStream(OutputStream):
    def __init__(self, host: str, command: str) -> None:
        self._host = host
        self._command = command
        self._proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        _watch_children_by_pidfd()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                _SHELL, "-c", self._command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as exc:
            raise TransportError(f"{self._host}: cannot run {_SHELL}: {exc}") from exc

    async def read_chunk(self) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None, "stream not started"
        chunk = await self._proc.stdout.read(65536)
        if not chunk:
            self.exit_code = await self._proc.wait()
        return chunk

    async def aclose(self) -> None:
        if self._proc is not None:
            await _end(self._proc)
