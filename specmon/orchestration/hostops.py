"""Host-side operations of the lifecycle engine, as shell commands run through a Transport.

Everything here reaches the host only with `transport.run()` and `shlex.quote`d arguments, so it works the same
locally and over SSH. The parsers of /proc text are pure functions.

Run directory layout (`~/.specmon/runs/<run_id>/` on the host):
    meta.json        run id, profile, argv, port, launched_at
    launch.sh        the wrapper: exports the env, records `$$` in `pid`, runs the server as a child,
                     records its exit code in `exit_code` (tmp + rename)
    server.log       the server's stdout + stderr
    pid, exit_code, stop_requested
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specmon.errors import UserError
from specmon.model.gpu import APPS_FIELDS, SmiError, parse_apps
from specmon.sources.transport import Transport, TransportError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RUN_ID = re.compile(r"^[0-9A-Za-z_.-]+$")
RUNS_SUBDIR = ".specmon/runs"


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


def listening_ports(proc_net_tcp: str) -> set[int]:
    """Ports with a TCP listener, from the text of /proc/net/tcp and /proc/net/tcp6."""
    ports: set[int] = set()
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[3] == "0A" and ":" in fields[1]:   # 0A = LISTEN
            try:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
            except ValueError:
                continue
    return ports


def listener_inodes(proc_net_tcp: str, port: int) -> set[str]:
    """Socket inodes of the TCP listeners on `port`, from /proc/net/tcp{,6} text (field 10 is the inode)."""
    inodes: set[str] = set()
    for line in proc_net_tcp.splitlines():
        fields = line.split()
        if len(fields) > 9 and fields[3] == "0A" and fields[1].rsplit(":", 1)[-1] == f"{port:04X}":
            inodes.add(fields[9])
    return inodes


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


def check_env(env: Iterable[tuple[str, str]], where: str) -> None:
    """UserError naming the first env variable whose name is not a plain shell name."""
    for name, _ in env:
        if not ENV_NAME.match(name):
            raise UserError(f"{where}: env: invalid variable name {name!r} (letters, digits and _ only)")


def wrapper_script(run_dir: str, argv: Sequence[str], env: Iterable[tuple[str, str]], workdir: str | None,
                   run_id: str) -> str:
    """The launch.sh that runs inside the new session (its `$$` is pid = pgid = sid)."""
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# specmon run {run_id}",
        f"echo $$ > {q(run_dir + '/pid')}",
    ]
    lines += [f"export {name}={q(value)}" for name, value in env]
    lines += [
        f"export SPECMON_RUN_ID={q(run_id)}",
        "export PYTHONUNBUFFERED=1",
    ]
    if workdir:
        lines.append(f"cd {q(workdir)} || exit 126")
    # A no-op handler (not `trap ''`, which children would inherit) lets the wrapper outlive the group's
    # SIGTERM and still record the server's exit code.
    lines += [
        "trap : TERM INT HUP",
        shlex.join(argv),
        "code=$?",
        f"echo \"$code\" > {q(run_dir + '/exit_code.tmp')} && mv -f {q(run_dir + '/exit_code.tmp')} "
        f"{q(run_dir + '/exit_code')}",
        "",
    ]
    return "\n".join(lines)


class HostOps:
    """Lifecycle primitives on one host."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._home: str | None = None

    @property
    def host(self) -> str:
        return self.transport.host

    async def sh(self, command: str, timeout: float = 30) -> tuple[int, str, str]:
        r = await self.transport.run(command, timeout=timeout)
        return r.exit_code, r.out, r.err

    async def runs_root(self) -> str:
        """Absolute `$HOME/.specmon/runs` on the host."""
        if self._home is None:
            code, out, err = await self.sh('printf %s "$HOME"')
            if code != 0 or not out.startswith("/"):
                raise TransportError(f"{self.host}: cannot resolve $HOME ({err or out!r})")
            self._home = out.rstrip("/")
        return f"{self._home}/{RUNS_SUBDIR}"

    async def boot_id(self) -> str:
        code, out, _ = await self.sh("cat /proc/sys/kernel/random/boot_id")
        return out.strip() if code == 0 else ""

    async def addresses(self) -> list[str]:
        """The host's own IP addresses (`hostname -I`), primary first; empty where the command is missing."""
        code, out, _ = await self.sh("hostname -I 2>/dev/null")
        return out.split() if code == 0 else []

    async def source_address(self, destination: str) -> str | None:
        """The address this host sends from to reach the IP `destination` (`ip route get`), or None if unknown."""
        try:
            destination = str(ipaddress.ip_address(destination))   # never an option or a shell word
        except ValueError:
            return None
        code, out, _ = await self.sh(f"ip -o route get {destination} 2>/dev/null")
        fields = out.split()
        return fields[fields.index("src") + 1] if code == 0 and "src" in fields[:-1] else None

    async def listening(self) -> set[int]:
        _, out, _ = await self.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
        return listening_ports(out)

    async def port_holder(self, port: int) -> str | None:
        """Who listens on `port`: "pid N (its command line)", or None when the socket's owner cannot be seen
        (another user's process, or it just went away)."""
        _, out, _ = await self.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
        for inode in sorted(listener_inodes(out, port)):
            if not inode.isdigit() or inode == "0":
                continue
            code, found, _ = await self.sh(
                f"find /proc/[0-9]*/fd -lname 'socket:\\[{inode}\\]' 2>/dev/null | head -n 1", timeout=10)
            pid = found.strip().split("/")[2] if found.startswith("/proc/") else ""
            if pid.isdigit():
                _, cmdline, _ = await self.sh(f"tr '\\000' ' ' < /proc/{int(pid)}/cmdline 2>/dev/null")
                command = " ".join(cmdline.split())
                return f"pid {pid} ({command[:60] + '…' if len(command) > 60 else command or '?'})"
        return None

    async def find_command(self, argv0: str, env: Iterable[tuple[str, str]], workdir: str | None) -> bool:
        """Whether argv0 resolves on the host with the profile's env (its PATH) and workdir."""
        exports = "".join(f"export {n}={shlex.quote(v)}; " for n, v in env)
        cd = f"cd {shlex.quote(workdir)} && " if workdir else ""
        code, _, _ = await self.sh(f"{exports}{cd}command -v -- {shlex.quote(argv0)} >/dev/null 2>&1")
        return code == 0

    async def workdir_exists(self, workdir: str) -> bool:
        code, _, _ = await self.sh(f"test -d {shlex.quote(workdir)}")
        return code == 0

    async def make_run_dir(self, run_dir: str) -> str | None:
        """Create the run dir (must not exist yet, so a retried launch never reuses one). None or the reason."""
        parent = run_dir.rsplit("/", 1)[0]
        q = shlex.quote
        code, _, err = await self.sh(
            f"mkdir -p -- {q(parent)} && mkdir -- {q(run_dir)} && : > {q(run_dir + '/server.log')}")
        return None if code == 0 else (err or f"exit {code}")

    async def start_detached(self, run_dir: str) -> None:
        """Start launch.sh in its own session, detached from us; returns at once."""
        q = shlex.quote
        code, _, err = await self.sh(
            f"cd {q(run_dir)} && setsid -f /bin/sh {q(run_dir + '/launch.sh')} "
            f"</dev/null >>{q(run_dir + '/server.log')} 2>&1")
        if code != 0:
            raise TransportError(f"{self.host}: cannot start {run_dir}/launch.sh: {err or f'exit {code}'}")

    async def read_file(self, path: str) -> str | None:
        code, out, _ = await self.sh(f"cat -- {shlex.quote(path)} 2>/dev/null")
        return out if code == 0 else None

    async def proc(self, pid: int) -> ProcInfo | None:
        code, out, _ = await self.sh(f"cat /proc/{int(pid)}/stat 2>/dev/null")
        return parse_stat(out) if code == 0 else None

    async def run_status(self, run_dir: str, pid: int) -> tuple[ProcInfo | None, int | None, bool]:
        """(process info of pid, exit code if recorded, stop requested) in one round trip."""
        q = shlex.quote
        code, out, _ = await self.sh(
            f"cat /proc/{int(pid)}/stat 2>/dev/null; echo '<<>>'; cat -- {q(run_dir + '/exit_code')} 2>/dev/null; "
            f"echo '<<>>'; test -e {q(run_dir + '/stop_requested')} && echo stop")
        stat, _, rest = out.partition("<<>>")
        exit_text, _, stop = rest.partition("<<>>")
        exit_code = int(exit_text.strip()) if exit_text.strip().lstrip("-").isdigit() else None
        return parse_stat(stat.strip()), exit_code, stop.strip() == "stop"

    async def members(self, sid: int, run_id: str) -> list[ProcInfo]:
        """Live processes of the run: those in its session plus those carrying its SPECMON_RUN_ID marker."""
        if not RUN_ID.match(run_id):
            raise ValueError(f"bad run id {run_id!r}")
        marker = shlex.quote(f"SPECMON_RUN_ID={run_id}")
        code, out, _ = await self.sh(
            "cat /proc/[0-9]*/stat 2>/dev/null; echo '<<>>'; "
            f"grep -lzx -- {marker} /proc/[0-9]*/environ 2>/dev/null; true")
        stats, _, marked = out.partition("<<>>")
        marked_pids = {int(p.split("/")[2]) for p in marked.split() if p.count("/") >= 3 and p.split("/")[2].isdigit()}
        found = []
        for line in stats.splitlines():
            info = parse_stat(line)
            if info and info.alive and info.pid > 1 and (info.sid == sid or info.pid in marked_pids):
                found.append(info)
        return found

    async def signal(self, sig: str, pgid: int | None, pids: Iterable[int]) -> None:
        """Send `sig` to the process group (if any) and to each pid. Pids <= 1 are never signalled."""
        if not re.fullmatch(r"[A-Z]+", sig):
            raise ValueError(f"bad signal name {sig!r}")
        targets = [f"-{int(pgid)}"] if pgid and pgid > 1 else []
        targets += [str(int(p)) for p in pids if int(p) > 1]
        if targets:
            # `kill -s SIG -- -PGID`: the POSIX spelling that dash and bash both accept for a group.
            await self.sh("; ".join(f"kill -s {sig} -- {t} 2>/dev/null" for t in targets) + "; true")

    async def compute_apps(self) -> dict[int, int] | None:
        """GPU compute processes (pid -> MiB), or None where nvidia-smi is absent."""
        code, out, _ = await self.sh(
            "command -v nvidia-smi >/dev/null 2>&1 || exit 3; "
            f"nvidia-smi --query-compute-apps={','.join(APPS_FIELDS)} --format=csv,noheader,nounits", timeout=30)
        if code == 3:
            return None
        try:
            apps = parse_apps(out) if code == 0 else []
        except SmiError:
            return {}
        held: dict[int, int] = {}
        for app in apps:   # one row per (process, GPU): a process on two GPUs holds the sum
            held[app.pid] = held.get(app.pid, 0) + int(app.used_mib or 0)
        return held

    async def write_json(self, path: str, data: object) -> None:
        await self.transport.write_file(path, (json.dumps(data, indent=2) + "\n").encode())
