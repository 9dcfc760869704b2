"""Free TCP ports for test servers that cannot collide with one another or with anyone's outgoing connections.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range, the same range every outgoing
connection's local port comes from. Picking one, closing it and starting a server on it a second later loses that
port to a client socket of another test often enough on a busy box (CI saw ``port 35777 is already in use``).
So ports are picked below the ephemeral range, and each pytest-xdist worker picks only from its own slice of it,
so two workers never pick the same port; within a worker a port is never given twice.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from collections.abc import Iterator
from pathlib import Path

_LOW = 20000           # below the usual ephemeral ranges (Linux 32768-60999) and the well-known service ports
_given: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker_slice() -> range:
    top = max(_LOW + 1000, _ephemeral_low())
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    size = (top - _LOW) // max(workers, 1)
    start = _LOW + index * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on now, from this worker's own slice, never given before here."""
    ports = _worker_slice()
    rng = random.Random()
    for _ in range(len(ports)):
        port = rng.choice(ports)
        if port not in _given and _bindable(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port left in {ports.start}-{ports.stop - 1}")


@contextlib.contextmanager
def silent_host() -> Iterator[str]:
    """`127.0.0.1:PORT` of a host whose link hangs: the kernel completes the TCP handshake from the listener's
    backlog, and nothing ever answers (no SSH banner), until the block ends."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield f"127.0.0.1:{listener.getsockname()[1]}"
