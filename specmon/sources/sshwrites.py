"""An SSH connection's packets of one moment sent in one write to its socket.

asyncssh hands every packet to its socket at once: one `send()` a packet, and an MSG_IGNORE goes before each
packet of data. An idle app watching a fleet writes many small packets at the same moment on each host's connection
(every run's /metrics request on the shared second, the batched reads of its logs and processes a moment later):
each a system call, which on a busy box also gives the CPU away to the receiving end (at 64 runs on 16 hosts about
140 sends a second, 36 joined).

`join_writes` puts the connection's writes behind `JoinedWrites`: what is written in one turn of the event loop goes
to the socket as one write at the end of that turn (sooner once `JOIN_BYTES` are pending). Nothing waits for a later
moment: a sweep's requests through a port forward over this link leave as soon as before (a timer of even 1 ms
would add that to every TTFT measured through the link). Nothing is dropped, reordered or changed: the bytes are
those asyncssh wrote, encrypted and authenticated as it made them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

JOIN_BYTES = 64 * 1024  # a pending packet waits for the end of the loop's turn, not once this much is pending


class JoinedWrites(asyncio.Transport):
    """A socket transport whose writes of one loop turn are sent together (see the module docstring)."""

    def __init__(self, inner: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.inner = inner
        self._loop = loop
        self._pending: list[bytes] = []
        self._size = 0
        self._timer: asyncio.Handle | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self._pending.append(bytes(data))
        self._size += len(data)
        if self._size >= JOIN_BYTES:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Send what is pending now."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending, self._size = [], 0
        if not self.inner.is_closing():
            with contextlib.suppress(ConnectionError):   # as asyncssh's own write: the loss is seen on the read side
                self.inner.write(data)

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def get_write_buffer_size(self) -> int:
        return self._size + self.inner.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.inner.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.inner.set_write_buffer_limits(high, low)

    def can_write_eof(self) -> bool:
        return self.inner.can_write_eof()

    def write_eof(self) -> None:
        self.flush()
        self.inner.write_eof()

    def close(self) -> None:
        self.flush()
        self.inner.close()

    def abort(self) -> None:
        self.flush()   # what asyncssh wrote before (its goodbye) had left at once without the joining
        self.inner.abort()

    def is_closing(self) -> bool:
        return self.inner.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.inner.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self.inner.pause_reading()

    def resume_reading(self) -> None:
        self.inner.resume_reading()

    def is_reading(self) -> bool:
        return self.inner.is_reading()

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.inner.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.inner.get_protocol()


def join_writes(conn: Any) -> None:
    """Put an open asyncssh connection's socket writes behind `JoinedWrites` (a connection tunnelled through another,
    whose packets are that one's channel data, is left as it is: the outer connection's writes are joined)."""
    inner = getattr(conn, "_transport", None)   # asyncssh keeps its socket transport here (2.x)
    if isinstance(inner, asyncio.Transport) and not isinstance(inner, JoinedWrites):
        conn._transport = JoinedWrites(inner, asyncio.get_running_loop())
