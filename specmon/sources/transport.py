"""The shell-level transport: how specmon reaches a host (this machine or one over SSH).

The lifecycle engine talks to a host ONLY through this interface: it runs shell command strings built with
`shlex.quote` and streams a command's output. It never touches host paths with Python `os` calls, so the SSH
transport slots in without engine changes.

    class Transport:
        host: str                                            # for messages: "local", an ssh alias, ...
        async run(command, *, input=None, timeout=None) -> CommandResult
        stream(command) -> OutputStream                      # async context manager + async iterator of bytes
        async write_file(path, data, mode=0o644)             # default: `cat > path` through run()
        async close()

`command` is a POSIX shell command line (run by /bin/sh locally; by the login shell over SSH, so keep it
plain POSIX). Link problems raise TransportError; a non-zero exit is a normal CommandResult.
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType


class TransportError(Exception):
    """The host could not be reached, or the link dropped while a command ran."""


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


class Transport(ABC):
    """Runs shell commands on one host. See the module docstring."""

    host: str = "local"

    @abstractmethod
    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None) -> CommandResult:
        """Run `command` to completion. Raises TransportError if the host cannot be reached,
        TimeoutError (after ending the command) if it runs past `timeout` seconds."""

    @abstractmethod
    def stream(self, command: str) -> OutputStream:
        """A not-yet-started stream of `command`'s stdout (stderr is discarded)."""

    async def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write `data` to `path` on the host (created or replaced), then chmod it.

        Raises TransportError carrying the host's one-line reason if it cannot be written.
        """
        q = shlex.quote(path)
        result = await self.run(f"cat > {q} && chmod {mode:o} {q}", input=data, timeout=30)
        if not result.ok:
            raise TransportError(f"{self.host}: cannot write {path}: {result.err or f'exit {result.exit_code}'}")

    async def local_url(self, port: int) -> str:
        """A base URL, reachable from where specmon runs, for the host's 127.0.0.1:`port`.

        Locally that is the port itself; a remote transport forwards it (on 127.0.0.1 only).
        """
        return f"http://127.0.0.1:{port}"

    async def close(self) -> None:  # noqa: B027 - optional hook: most transports hold nothing to release
        """Release connections. Never stops anything started on the host."""
