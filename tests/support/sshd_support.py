"""A real OpenSSH sshd on 127.0.0.1 for the SSH tests, and a TCP relay that can break the link.

`Sshd.start(tmp)` generates ed25519 host and user keys in `tmp`, writes its own sshd_config (root login by
key only, no AcceptEnv, `SetEnv HOME=<tmp>/home` so remote runs land in the temp dir, never in /root), starts
`/usr/sbin/sshd -D -e` on a free port and waits for its banner. It writes an ssh_config with aliases:
    gpu1      the sshd directly
    bastion   the sshd directly (used as a jump host)
    gpu2      through `ProxyJump bastion` (two hops to the same sshd)
    gpu3      through `ProxyJump bastion,gpu1` (three hops)
and a known_hosts with the host key. Nothing touches ~/.ssh. `Relay` is an asyncio TCP proxy with modes
pass / reset / blackhole, used to drop the link mid-load.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

from specmon.model.config import SshSettings

SSHD = "/usr/sbin/sshd"


def sshd_available() -> str | None:
    """None when the tests can run sshd here, else why not."""
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        return "openssh-server is not installed (.ci/run installs it)"
    if os.geteuid() != 0:
        return "the sshd fixture logs in as root (CI runs as root)"
    return None


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "specmon-test", "-f", str(path)],
                   check=True, stdin=subprocess.DEVNULL)


def socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process `pid` holds (empty when it is gone)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def established() -> list[tuple[int, int, str]]:
    """(local port, remote port, inode) of every established TCP connection on loopback (IPv4)."""
    rows = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "01":
            rows.append((int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16), fields[9]))
    return rows


def process_tree() -> dict[int, list[int]]:
    """Every process's children, by parent pid."""
    tree: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(ppid, []).append(int(proc.name))
    return tree


@dataclass
class Sshd:
    dir: Path
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    host_key_line: str = ""
    extra_hosts: dict[str, str] = field(default_factory=dict)   # alias -> its Host block

    @property
    def config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def user_key(self) -> Path:
        return self.dir / "user_key"

    @property
    def home(self) -> Path:
        """$HOME of every remote session (runs are under home/.local/state/specmon/runs)."""
        return self.dir / "home"

    @property
    def log(self) -> Path:
        return self.dir / "sshd.log"

    def settings(self, keepalive_s: float = 1.0, connect_timeout_s: float = 5.0) -> SshSettings:
        return SshSettings(config=str(self.config), known_hosts=str(self.known_hosts),
                           connect_timeout_s=connect_timeout_s, keepalive_s=keepalive_s)

    def ssh_table(self, keepalive_s: float = 1.0, connect_timeout_s: float = 5.0) -> str:
        """A `[ssh]` table for a profiles.toml that uses this sshd."""
        return (f'[ssh]\nconfig = "{self.config}"\nknown_hosts = "{self.known_hosts}"\n'
                f"connect_timeout_s = {connect_timeout_s}\nkeepalive_s = {keepalive_s}\n")

    @classmethod
    def start(cls, tmp: Path, set_env: dict[str, str] | None = None) -> Sshd:
        """`set_env`: more variables for every session (sshd's SetEnv overrides its default PATH too), e.g. a
        directory holding a stand-in tool first on the remote PATH. Values must not hold spaces or quotes."""
        extra = "".join(f" {name}={value}" for name, value in (set_env or {}).items())
        tmp.mkdir(parents=True, exist_ok=True)
        self = cls(tmp)
        _keygen(tmp / "host_key")
        _keygen(self.user_key)
        self.home.mkdir()
        (tmp / "authorized_keys").write_text((tmp / "user_key.pub").read_text())
        self.host_key_line = " ".join((tmp / "host_key.pub").read_text().split()[:2])
        for _ in range(5):
            self.port = free_port()
            (tmp / "sshd_config").write_text(
                f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {tmp}/host_key\nPidFile {tmp}/sshd.pid\n"
                f"AuthorizedKeysFile {tmp}/authorized_keys\nPermitRootLogin prohibit-password\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                "AllowTcpForwarding yes\nMaxStartups 100:30:200\nLogLevel VERBOSE\n"
                f"SetEnv HOME={self.home}{extra}\nSubsystem sftp internal-sftp\n")
            Path("/run/sshd").mkdir(exist_ok=True)
            log = open(self.log, "ab")   # noqa: SIM115 - handed to the child
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")],
                                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
            log.close()
            if self._wait_banner():
                break
            self.stop()
        else:
            raise RuntimeError(f"sshd did not start: {self.log.read_text()[-2000:]}")
        self.write_client_files()
        return self

    def _wait_banner(self) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                return False
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1) as s:
                s.settimeout(5)
                if s.recv(64).startswith(b"SSH-2.0-OpenSSH"):
                    return True
            time.sleep(0.05)
        return False

    def alias(self, name: str, port: int | None = None, jump: str | None = None, user_key: Path | None = None) -> str:
        """An ssh_config Host block."""
        lines = [f"Host {name}", "  HostName 127.0.0.1", f"  Port {port or self.port}", "  User root",
                 f"  IdentityFile {user_key or self.user_key}", "  IdentitiesOnly yes"]
        if jump:
            lines.append(f"  ProxyJump {jump}")
        return "\n".join(lines) + "\n"

    def write_client_files(self) -> None:
        self._write_config()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {self.host_key_line}\n")

    def _write_config(self) -> None:
        blocks = [self.alias("gpu1"), self.alias("bastion"), self.alias("gpu2", jump="bastion"),
                  self.alias("gpu3", jump="bastion,gpu1"), *self.extra_hosts.values()]
        self.config.write_text("\n".join(blocks))

    def add_alias(self, name: str, port: int, jump: str | None = None, *, trust_port: bool = True,
                  user_key: Path | None = None) -> None:
        """Another alias (e.g. through a relay on `port`); its `[127.0.0.1]:port` entry joins known_hosts. An alias
        given again replaces its block: ssh reads the first matching Host block, so a test run twice on this
        process's sshd (`--count`) would otherwise reach its first run's relay, long closed."""
        self.extra_hosts[name] = self.alias(name, port, jump, user_key)
        self._write_config()
        if trust_port:
            with open(self.known_hosts, "a") as fh:
                fh.write(f"[127.0.0.1]:{port} {self.host_key_line}\n")

    def sessions(self, tree: dict[int, list[int]] | None = None) -> tuple[list[int], set[str]]:
        """What this sshd serves now: the processes its sessions run (a command, a kept shell, the metrics relay;
        sshd's own processes left out), and the sockets sshd's own processes hold (a direct-tcpip channel's
        connection to a server is one of them)."""
        tree = process_tree() if tree is None else tree
        processes: list[int] = []
        sockets: set[str] = set()
        if self.proc is None:
            return processes, sockets
        stack = list(tree.get(self.proc.pid, []))   # listener -> one sshd per connection -> (privsep child) -> sessions
        while stack:
            pid = stack.pop()
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm.startswith("sshd"):
                stack += tree.get(pid, [])
                sockets |= socket_inodes(pid)
            else:
                processes.append(pid)
        return processes, sockets

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Relay:
    """A TCP relay 127.0.0.1:port -> 127.0.0.1:target with three modes:
    pass       forward both ways;
    reset      close every current connection with a TCP RST (and keep accepting);
    blackhole  stop forwarding in both directions but keep the sockets open (silently dropped packets);
               new connections are accepted and then starve as well.
    `accepted` counts connections, so a test can tell a reconnect (or the absence of a retry storm)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.port = 0
        self.mode = "pass"
        self.accepted = 0
        self._server: asyncio.base_events.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> Relay:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            writer.close()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self._pairs.discard(pair)
            for w in pair:
                w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()   # blackhole: hold the bytes, never deliver them
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(OSError):
            writer.close()

    def reset(self) -> None:
        """Drop every current connection with RST (SO_LINGER 0)."""
        for pair in list(self._pairs):
            for w in pair:
                sock = w.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                w.transport.abort()
        self._pairs.clear()

    def blackhole(self) -> None:
        self.mode = "blackhole"
        self._flowing.clear()

    def restore(self) -> None:
        """Back to forwarding. Connections held in the blackhole are reset (their peers gave up on them)."""
        self.reset()
        self.mode = "pass"
        self._flowing.set()

    async def close(self) -> None:
        self.reset()
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        # The reset ends every pipe: let the handlers return on their own first (a handler cancelled while its
        # pipes run makes asyncio's stream callback log a CancelledError as an "Exception in callback").
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=2)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


_SHARED: list[Sshd] = []


@contextlib.contextmanager
def bench_sshd() -> Iterator[tuple[Sshd, Path]]:
    """For a bench script: a started sshd and a temporary directory (both gone after), or exit status 2 with the
    reason where sshd cannot run here."""
    reason = sshd_available()
    if reason:
        print(f"cannot run: {reason}")
        raise SystemExit(2)
    with tempfile.TemporaryDirectory() as tmp:
        server = Sshd.start(Path(tmp) / "sshd")
        try:
            yield server, Path(tmp)
        finally:
            server.stop()


def shared_sshd() -> Sshd:
    """The one sshd of this test process (started on first use, stopped and removed at exit)."""
    if not _SHARED:
        tmp = Path(tempfile.mkdtemp(prefix="specmon-sshd-"))
        server = Sshd.start(tmp / "sshd")
        _SHARED.append(server)

        def stop() -> None:
            server.stop()
            shutil.rmtree(tmp, ignore_errors=True)

        atexit.register(stop)
    return _SHARED[0]
