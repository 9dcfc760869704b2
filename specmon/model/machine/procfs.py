"""What a host's /proc says about processes and ports: pure parsers of `/proc/PID/stat` and `/proc/net/tcp` text.

The text is read on the host by `sources/hostshell.py` (through a transport, so the same locally and over SSH); these
functions only turn it into values, and are tested on captured text (tests/fixtures/procfs/).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

_LISTEN = "0A"   # the TCP state column of /proc/net/tcp for LISTEN


@dataclass(frozen=True)
class ProcInfo:
    """The fields of /proc/PID/stat the engine needs."""

    pid: int
    state: str          # R, S, D, Z, T, ...
    pgid: int
    sid: int
    starttime: int      # clock ticks after boot (field 22)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def parse_stat(line: str) -> ProcInfo | None:
    """Parse one /proc/PID/stat line (the command name may hold spaces and parentheses)."""
    head, sep, rest = line.rpartition(")")
    if not sep:
        return None
    pid_text = head.split("(", 1)[0].strip()
    fields = rest.split()
    # rest starts at field 3 (state); pgid is field 5, sid field 6, starttime field 22.
    if not pid_text.isdigit() or len(fields) < 20:
        return None
    try:
        return ProcInfo(int(pid_text), fields[0], int(fields[2]), int(fields[3]), int(fields[19]))
    except ValueError:
        return None


def _listeners(proc_net_tcp: str) -> Iterable[tuple[int, str]]:
    """(port, socket inode) of each LISTEN line of /proc/net/tcp{,6} text (field 10 is the inode)."""
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 9 and fields[3] == _LISTEN and ":" in fields[1]:
            try:
                yield int(fields[1].rsplit(":", 1)[1], 16), fields[9]
            except ValueError:
                continue


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports with a TCP listener, from the text of /proc/net/tcp and /proc/net/tcp6."""
    return {port for port, _ in _listeners(proc_net_tcp)}


def listener_inodes(proc_net_tcp: str, port: int) -> set[str]:
    """Socket inodes of the TCP listeners on `port`, from /proc/net/tcp{,6} text."""
    return {inode for found, inode in _listeners(proc_net_tcp) if found == port}


def free_ports_near(port: int, listening: set[int], count: int = 2, avoid: Iterable[int] = ()) -> list[int]:
    """The first `count` ports above `port` with no listener (and not in `avoid`): what to suggest instead."""
    taken = set(listening) | set(avoid)
    found: list[int] = []
    candidate = port + 1
    while len(found) < count and candidate <= 65535:
        if candidate not in taken:
            found.append(candidate)
        candidate += 1
    return found


@dataclass(frozen=True)
class BusyPort:
    """Who holds a port a launch wanted ("pid N (command)", None when its owner cannot be seen) and the free ports
    nearest above it: what a refused launch and a server's own bind error ("[Errno 98]") both say."""

    port: int
    holder: str | None
    free: tuple[int, ...]

    @property
    def by(self) -> str:
        return f"by {self.holder}" if self.holder else "by a process specmon cannot see"

    @property
    def advice(self) -> str:
        return f"stop it or choose another port (free: {', '.join(map(str, self.free))})"

    @property
    def text(self) -> str:
        """`port N is already in use by pid M (command); stop it or choose another port (free: A, B)`."""
        return f"port {self.port} is already in use {self.by}; {self.advice}"


def pid_of_path(path: str) -> int | None:
    """The pid in a `/proc/PID/...` path (what `find` and `grep -l` print), or None for any other path."""
    parts = path.strip().split("/")
    return int(parts[2]) if len(parts) >= 3 and parts[0] == "" and parts[1] == "proc" and parts[2].isdigit() else None


def describe_process(pid: int, cmdline: str, width: int = 60) -> str:
    """"pid N (command line)" from the NUL-separated text of /proc/PID/cmdline, cut to `width` characters."""
    command = " ".join(cmdline.replace("\0", " ").split())
    return f"pid {pid} ({command[:width] + '…' if len(command) > width else command or '?'})"
