"""SSHTransport: the Transport for a host reached over SSH (asyncssh), one shared connection per host.

What it promises on top of the Transport contract:
  - Host aliases come from the OpenSSH config file ([ssh] config): HostName, User, Port, IdentityFile and
    ProxyJump with any number of hops (each hop is connected here, so every hop's host key is checked against
    the same known_hosts file and a refusal names the hop).
  - Host keys are always verified against [ssh] known_hosts. An unknown key, a changed key and a refused
    login end in ONE permanent TransportError (HostKeyUnknown, HostKeyChanged, AuthRefused) with a one-line
    message (fingerprint and the `specmon trust` command where that helps); nothing is retried after that.
  - Keepalives make a dead link (reset or silently dropped packets) visible within about 3 x keepalive_s. A
    supervisor then reconnects with capped exponential backoff and jitter; `link` and `watch_link` say where
    it stands. Commands issued while the link is down wait for it (bounded) instead of failing at once.
  - Exec sessions (run and stream) are bounded by a semaphore below OpenSSH's MaxSessions (10); TCP channels
    (HTTP probes, the port forward) have their own bound.
  - The remote command line is `exec /bin/sh -c <quoted>` behind a one-line preamble that reports the
    command's process group, so a timeout, a cancellation or a closed stream ends the command on the host
    with an explicit `kill` (SSH signals are refused for root by OpenSSH and ignored by old servers). The
    preamble frames what it says with a random marker on stdout and stderr: whatever the remote shell's
    start-up files print (a banner, a number) is skipped, never taken for the pid or for the command's output.
    A process group that could not be ended because the link was down is ended as soon as the link is back.
  - Cipher: AES-GCM is preferred to asyncssh's first choice, chacha20-poly1305 (which asyncssh computes with three
    cipher objects made per packet: about five times the CPU of a GCM packet; an idle TUI reading a fleet's
    /metrics over SSH spends most of its CPU on packets). A config file's own `Ciphers` is used as it is.
  - The packets written at one moment (a fleet's /metrics requests on the shared second) leave in one write to the
    socket, not one send each (`sshwrites`), none later than alone.
  - Agent forwarding is off. The environment of the exec channel is never relied on (sshd drops it without
    AcceptEnv); launch scripts carry their environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import shlex
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specmon.model.config import SshSettings, parse_host
from specmon.sources import timelimit
from specmon.sources.sshlib import asyncssh
from specmon.sources.sshwrites import join_writes
from specmon.sources.transport import (
    MAX_OUTPUT_BYTES,
    CommandResult,
    LinkState,
    OutputStream,
    OutputTooLarge,
    Transport,
    TransportError,
    read_output,
)

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

KEEPALIVE_COUNT = 3
MAX_SESSIONS = 8            # OpenSSH's MaxSessions defaults to 10; keep two for a user's own shell or scp
SESSION_RETRIES = 6          # ~3 s in all, for a session refused while sshd still frees closed ones
MAX_TCP_CHANNELS = 64
MAX_HOPS = 8
# How long a command waits for a link that is down before it fails (the caller's timeout, if any, is shorter).
LINK_WAIT_S = 60.0
# Says "MARKER PID" on stdout and "MARKER" on stderr, then becomes the command. The marker is random per command:
# what the remote shell's start-up files print before it (a banner, a number) is never taken for the pid.
# The command waits for the client's go-ahead (a newline on stdin, sent once its pid has arrived): a command whose pid
# line the link lost never starts, and its waiting preamble still carries the marker, for `pkill -f` to find.
_PREAMBLE = 'printf "%s %s\\n" "$2" $$; printf "%s\\n" "$2" >&2; read -r _ || exit 111; exec /bin/sh -c "$1"'
# Put first (the rest of asyncssh's defaults follow) unless the config file says `Ciphers`.
PREFERRED_CIPHERS = "^aes128-gcm@openssh.com,aes256-gcm@openssh.com"
START_NOISE_MAX = 1 << 20   # what a remote shell may print at start-up before the command starts


class HostKeyRefused(TransportError):
    """The host's key could not be verified; `key` is what it presented (None if it could not be read)."""

    permanent = True

    def __init__(self, message: str, key: HostKey | None = None) -> None:
        super().__init__(message)
        self.key = key


class HostKeyUnknown(HostKeyRefused):
    """The host presented a key that known_hosts does not list."""


class HostKeyChanged(HostKeyRefused):
    """The host presented a key other than the one known_hosts lists for it."""


class HostKeyRevoked(HostKeyRefused):
    """The host presented a key that known_hosts marks `@revoked`."""


class AuthRefused(TransportError):
    """The host refused every key we offered."""

    permanent = True


@dataclass(frozen=True)
class HostKey:
    """A host key as presented by a host: where (known_hosts entry name) and what (algorithm, fingerprint)."""

    alias: str              # the name it was reached as (the profile's alias or a jump host)
    entry: str              # the known_hosts host field: `host` or `[host]:port`
    algorithm: str
    fingerprint: str        # SHA256:...
    public_key: str         # "ssh-ed25519 AAAA..." as known_hosts wants it

    @property
    def line(self) -> str:
        return f"{self.entry} {self.public_key}"


@dataclass(frozen=True)
class _Hop:
    """One SSH hop resolved from the config: what to connect to, and how it is named in known_hosts."""

    alias: str              # as written: `[user@]name[:port]`
    name: str               # the name looked up in the config (a Host pattern or a real host name)
    given_user: str | None  # user and port written in the alias itself (they beat the config)
    given_port: int | None
    host: str               # resolved: HostName
    port: int
    user: str
    key_name: str           # HostKeyAlias, else the host name
    tunnel: str | None      # its own ProxyJump (honoured only for the first hop of a chain)
    ciphers: str | tuple[()] = ()   # the encryption preference to ask for: () where the config chose

    @property
    def entry(self) -> str:
        return self.key_name if self.port == 22 else f"[{self.key_name}]:{self.port}"


class BadProxyJump(TransportError):
    """The config's ProxyJump chain cannot be followed (a malformed entry, a loop): retrying cannot help."""

    permanent = True


def _refuse_loop(host: str, config: str, hops: list[_Hop]) -> None:
    """TransportError when a ProxyJump chain passes a host twice (`Host loop` / `ProxyJump loop`): asyncssh would
    follow it for ever. The first hop's own ProxyJump is followed by asyncssh, so it counts too."""
    names = [hop.name for hop in hops]
    if hops and hops[0].tunnel:
        names[:0] = [n.strip() for n in hops[0].tunnel.split(",") if n.strip()]
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise BadProxyJump(f"{host}: {config}: ProxyJump loop: {' -> '.join(names)} reaches {name} twice")
        seen.add(name)


def expand(path: str) -> str:
    """`~` expanded with $HOME (the one tests and users set), not the password database."""
    return os.path.expanduser(path)


def _resolve(alias: str, settings: SshSettings) -> _Hop:
    """Read the config file for one `[user@]host[:port]` name (blocking: `Match exec` may run commands)."""
    target = parse_host(alias)
    config_file = expand(settings.config)
    options = asyncssh.SSHClientConnectionOptions(
        config=[config_file] if os.path.exists(config_file) else None, host=target.hostname,
        port=target.port or (), username=target.user or ())
    tunnel = options.tunnel if isinstance(options.tunnel, str) and options.tunnel.lower() != "none" else None
    host = str(options.host)
    configured = list(options.encryption_algs) != asyncssh.encryption.get_default_encryption_algs()
    return _Hop(alias=alias, name=target.hostname, given_user=target.user, given_port=target.port,
                host=host, port=int(options.port), user=str(options.username),
                key_name=str(options.host_key_alias or host), tunnel=tunnel,
                ciphers=() if configured else PREFERRED_CIPHERS)


def read_known_hosts(path: str) -> asyncssh.SSHKnownHosts:
    """The known_hosts file (an empty list when it does not exist yet)."""
    try:
        text = Path(expand(path)).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    except OSError as exc:
        raise TransportError(f"{path}: cannot read known_hosts: {exc.strerror or exc}") from None
    return asyncssh.import_known_hosts(text)


END_UNENDED_TRIES = 4   # kills of process groups left by a dropped link, tried on each new connection


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Delay before reconnect attempt `attempt` (1, 2, ...): base * 2^(n-1), capped, plus up to base of jitter
    so that many specmon instances never reconnect in lockstep."""
    return min(base_s * 2 ** (attempt - 1), cap_s) + random.uniform(0, base_s)


class SSHTransport(Transport):
    """Runs commands on `alias` over one shared SSH connection. See the module docstring."""

    polls_logs = True   # a `tail -f` held per run would take every session of the connection past eight runs

    def __init__(self, alias: str, settings: SshSettings, *, keepalive_count: int = KEEPALIVE_COUNT,
                 max_sessions: int = MAX_SESSIONS, backoff_base_s: float = 1.0, backoff_cap_s: float = 30.0,
                 link_wait_s: float = LINK_WAIT_S) -> None:
        self.host = alias
        self.settings = settings
        self.keepalive_count = keepalive_count
        self.backoff_base_s = backoff_base_s
        self.backoff_cap_s = backoff_cap_s
        self.link_wait_s = link_wait_s
        self.link = LinkState("connecting")
        self.connects = 0                      # connection attempts made (for tests and benches)
        self._conn: asyncssh.SSHClientConnection | None = None
        self._hops: list[asyncssh.SSHClientConnection] = []
        self._ever_connected = False
        self._fatal: TransportError | None = None
        self._changed = asyncio.Event()        # set (and replaced) on every link change
        self._supervisor: asyncio.Task[None] | None = None
        self._watchers: list[Callable[[LinkState], None]] = []
        self._sessions = asyncio.Semaphore(max_sessions)
        self._tcp = asyncio.Semaphore(MAX_TCP_CHANNELS)
        self._forwards: dict[tuple[str, int], _PortForward] = {}
        self._closed = False
        self.unended: set[int] = set()         # process groups on the host still to end once the link is back
        self.unstarted: set[str] = set()       # markers of commands cut before their pid arrived, ditto
        self._ending: asyncio.Task[None] | None = None
        self._helper: _HelperShell | None = None   # the shell that runs the batched reads (made on first use)

    # ---- link --------------------------------------------------------------------------------------------
    def watch_link(self, callback: Callable[[LinkState], None]) -> Callable[[], None]:
        self._watchers.append(callback)
        return lambda: self._watchers.remove(callback) if callback in self._watchers else None

    def _set_link(self, link: LinkState) -> None:
        self.link = link
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for callback in list(self._watchers):
            try:
                callback(link)
            except Exception:   # a front end's bug must not stop the reconnects
                log.exception("link watcher failed")

    async def _supervise(self) -> None:
        """Connect, wait for the connection to die, reconnect with backoff; stop for good on a refusal."""
        attempt = 0
        while not self._closed:
            self._set_link(LinkState("connecting" if not self._ever_connected else "reconnecting", self.link.detail))
            try:
                conn, hops = await self._open()
            except TransportError as exc:
                if exc.permanent:
                    self._fatal = exc
                    state = "host key changed" if isinstance(exc, HostKeyChanged) else \
                        "host key unknown" if isinstance(exc, HostKeyRefused) else \
                        "bad ssh config" if isinstance(exc, BadProxyJump) else "auth failed"
                    self._set_link(LinkState(state, str(exc)))
                    return
                attempt += 1
                delay = backoff_s(attempt, self.backoff_base_s, self.backoff_cap_s)
                self._set_link(LinkState("reconnecting", str(exc), time.time() + delay))
                await asyncio.sleep(delay)
                continue
            attempt = 0
            self._conn, self._hops = conn, hops
            self._ever_connected = True
            self._set_link(LinkState("connected"))
            if (self.unended or self.unstarted) and (self._ending is None or self._ending.done()):
                self._ending = asyncio.create_task(self._end_unended(), name=f"ssh {self.host} end groups")
            await conn.wait_closed()
            self._conn = None
            for hop in reversed(hops):
                hop.close()
            # Reconnect at once the first time: a reset link is often back immediately.
            self._set_link(LinkState("reconnecting", f"{self.host}: link lost", time.time()))

    async def _connection(self, wait_s: float | None) -> asyncssh.SSHClientConnection:
        """The live connection, waiting up to `wait_s` (None: LINK_WAIT_S) for a reconnect.

        Before the first successful connect, a failed attempt is reported at once (a CLI must not hang on a
        host that is down); later, a link being re-established is waited for.
        """
        if self._closed:
            raise TransportError(f"{self.host}: transport closed")
        if self._supervisor is None:
            self._supervisor = asyncio.create_task(self._supervise(), name=f"ssh {self.host}")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.link_wait_s if wait_s is None else wait_s)
        while True:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            if self._fatal is not None:
                raise self._fatal.with_traceback(None)
            if not self._ever_connected and self.link.state == "reconnecting":
                raise TransportError(self.link.detail)
            if self.link.state == "connecting":
                # A first connect is bounded by its own timeouts; a caller's timeout is for its command.
                await self._changed.wait()
                continue
            left = deadline - loop.time()
            if left <= 0:
                raise TransportError(f"{self.host}: link down ({self.link.detail or self.link.state})")
            with contextlib.suppress(asyncio.TimeoutError):
                await timelimit.wait_for(self._changed.wait(), left)

    def _connect_kwargs(self, known: asyncssh.SSHKnownHosts) -> dict[str, object]:
        config_file = expand(self.settings.config)
        return {
            "config": [config_file] if os.path.exists(config_file) else None,
            "known_hosts": known,
            "agent_forwarding": False,
            "keepalive_interval": self.settings.keepalive_s,
            "keepalive_count_max": self.keepalive_count,
            "connect_timeout": self.settings.connect_timeout_s,
            "login_timeout": self.settings.connect_timeout_s,
        }

    async def _open(self) -> tuple[asyncssh.SSHClientConnection, list[asyncssh.SSHClientConnection]]:
        """One connection to the host, through its jump hosts; TransportError (permanent or not) on failure."""
        self.connects += 1
        loop = asyncio.get_running_loop()
        known = read_known_hosts(self.settings.known_hosts)
        hops: list[asyncssh.SSHClientConnection] = []
        try:
            final = await loop.run_in_executor(None, _resolve, self.host, self.settings)
            chain: list[_Hop] = []
            if final.tunnel:
                names = [n.strip() for n in final.tunnel.split(",") if n.strip()]
                first = await loop.run_in_executor(None, _resolve, names[0], self.settings)
                if first.tunnel:   # the first jump host may have its own ProxyJump (as with ssh -J)
                    for name in first.tunnel.split(","):
                        chain.append(await loop.run_in_executor(None, _resolve, name.strip(), self.settings))
                chain.append(first)
                for name in names[1:]:
                    chain.append(await loop.run_in_executor(None, _resolve, name, self.settings))
            if len(chain) > MAX_HOPS:
                raise TransportError(f"{self.host}: more than {MAX_HOPS} jump hosts in the ProxyJump chain")
            _refuse_loop(self.host, self.settings.config, [*chain, final])
            via: asyncssh.SSHClientConnection | None = None
            for hop in [*chain, final]:
                via = await self._open_hop(hop, via, known)
                hops.append(via)
        except ValueError as exc:   # a malformed jump host name in the config
            self._close_all(hops)
            raise BadProxyJump(f"{self.host}: {self.settings.config}: bad ProxyJump entry: {exc}") from None
        except BaseException:
            self._close_all(hops)
            raise
        return hops[-1], hops[:-1]

    @staticmethod
    def _close_all(conns: list[asyncssh.SSHClientConnection]) -> None:
        for conn in reversed(conns):
            conn.close()

    async def _open_hop(self, hop: _Hop, via: asyncssh.SSHClientConnection | None,
                        known: asyncssh.SSHKnownHosts) -> asyncssh.SSHClientConnection:
        name = hop.alias if hop.alias == self.host else f"{hop.alias} (jump host for {self.host})"
        try:
            # Connect by the config name so IdentityFile & co. apply; the resolved HostName is what is dialled.
            conn = await asyncssh.connect(hop.name, hop.given_port or (), username=hop.given_user or (),
                                          tunnel=via or (), encryption_algs=hop.ciphers,
                                          **self._connect_kwargs(known))
        except asyncssh.HostKeyNotVerifiable:
            raise await self._host_key_error(name, hop, via, known) from None
        except asyncssh.PermissionDenied:
            raise AuthRefused(
                f"{name}: authentication refused for user {hop.user} at {hop.entry} (no key from the agent or "
                f"IdentityFile was accepted; check {self.settings.config} and the host's authorized_keys)") from None
        except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
            reason = str(exc) or type(exc).__name__
            if isinstance(exc, asyncio.TimeoutError):
                reason = f"no answer within {self.settings.connect_timeout_s:g} s"
            raise TransportError(f"{name}: cannot connect to {hop.entry}: {reason}") from None
        join_writes(conn)
        return conn

    async def _host_key_error(self, name: str, hop: _Hop, via: asyncssh.SSHClientConnection | None,
                              known: asyncssh.SSHKnownHosts) -> HostKeyRefused:
        """HostKeyRevoked when known_hosts marks the presented key @revoked, HostKeyChanged when it lists other keys
        for the host, else HostKeyUnknown (with the key)."""
        listed, _, revoked = known.match(hop.key_name, "", hop.port)[:3]
        key: HostKey | None = None
        try:
            key = await fetch_host_key(hop, via, self.settings.connect_timeout_s)
            shown = f"{key.algorithm} {key.fingerprint}"
        except TransportError:
            shown = "its key"
        kh = self.settings.known_hosts
        if key is not None and any(k.get_fingerprint("sha256") == key.fingerprint for k in revoked):
            return HostKeyRevoked(f"{name}: the host key of {hop.entry} ({shown}) is marked @revoked in {kh}; "
                                  "not connecting", key)
        if listed:
            return HostKeyChanged(
                f"{name}: HOST KEY CHANGED for {hop.entry}: it now presents {shown}, which {kh} does not list for "
                f"it; not connecting (possible man-in-the-middle). If the host was reinstalled, delete its line "
                f"from {kh}, then run: specmon trust {self.host}", key)
        return HostKeyUnknown(f"{name}: unknown host key for {hop.entry} ({shown}, not in {kh}); if that is the "
                              f"host's key, run: specmon trust {self.host}", key)

    # ---- commands ----------------------------------------------------------------------------------------
    async def _process(self, command: str, wait_s: float | None
                       ) -> tuple[asyncssh.SSHClientProcess[bytes], int, bytes]:
        """Start `command` under the pid preamble; returns the process, its process group on the host and the
        marker line that ends the remote shell's start-up output on stderr."""
        conn = await self._connection(wait_s)
        marker = f"specmon-{secrets.token_hex(12)}"
        wrapped = f"exec /bin/sh -c {shlex.quote(_PREAMBLE)} specmon {shlex.quote(command)} {marker}"
        for attempt in range(SESSION_RETRIES + 1):
            try:
                proc = await conn.create_process(wrapped, encoding=None)
                break
            except asyncssh.ChannelOpenError as exc:
                # sshd frees a closed session slot a moment after the close is exchanged, so a burst of short
                # commands can briefly meet MaxSessions even below the semaphore: wait a little and retry.
                if conn.is_closed() or attempt == SESSION_RETRIES:
                    raise TransportError(f"{self.host}: cannot open a session: {exc.reason}") from None
                await asyncio.sleep(0.05 * 2 ** attempt)
            except (OSError, asyncssh.Error) as exc:
                raise TransportError(f"{self.host}: link lost: {exc}") from None
        try:
            pid = await self._read_pid(proc, marker.encode())
        except TransportError:
            proc.close()
            self.unstarted.add(marker)   # its preamble may wait on the host: found by its marker once the link is back
            raise
        except BaseException:
            proc.close()
            raise
        try:
            proc.stdin.write(b"\n")   # the go-ahead
        except (OSError, asyncssh.Error) as exc:
            proc.close()
            self.unstarted.add(marker)
            self.unended.add(pid)
            raise TransportError(f"{self.host}: link lost: {exc}") from None
        return proc, pid, marker.encode() + b"\n"

    async def _read_pid(self, proc: asyncssh.SSHClientProcess[bytes], marker: bytes) -> int:
        """The command's pid (its process group) from the preamble's framed line; lines before it (the remote
        shell's start-up output) are skipped, up to START_NOISE_MAX bytes."""
        noise = 0
        while True:
            try:
                line = await proc.stdout.readline()
            except (OSError, asyncssh.Error) as exc:
                raise TransportError(f"{self.host}: link lost: {exc}") from None
            if not line:
                raise TransportError(f"{self.host}: link lost while starting a command")
            _, found, pid = line.rstrip(b"\n").rpartition(marker + b" ")
            if found and pid.isdigit():
                # Start-up output not ended by a newline shares the framed line; it is noise, like the rest.
                return int(pid)
            noise += len(line)
            if noise > START_NOISE_MAX:
                raise TransportError(f"{self.host}: the remote shell printed over {START_NOISE_MAX >> 20} MiB at "
                                     "start-up (a ~/.bashrc or profile script?); no command could start")

    async def _end_group(self, pgid: int, wait_s: float = 5.0) -> None:
        """End a command's process group on the host (detached servers have their own session: untouched). When
        the link is not back within `wait_s` it is ended once it is (see `unended`)."""
        if pgid <= 1:
            return
        self.unended.add(pgid)
        with contextlib.suppress(TransportError, OSError, asyncssh.Error, asyncio.TimeoutError):
            conn = await self._connection(wait_s)
            await self._kill_groups(conn, [pgid])

    async def _kill_groups(self, conn: asyncssh.SSHClientConnection, groups: list[int],
                           markers: Sequence[str] = ()) -> None:
        """SIGKILL these process groups (and the preambles of commands started with these markers, still waiting
        for their go-ahead) on the host; those the host was told about leave `unended` (`unstarted`)."""
        script = "".join(f"kill -s KILL -- -{int(pgid)} 2>/dev/null; " for pgid in groups)
        # `[s]pecmon-…` matches the waiting preamble's argv, never this kill command's own.
        script += "".join(f"pkill -KILL -f -- {shlex.quote('[s]' + m[1:])}; " for m in markers)
        async with self._sessions:
            await timelimit.wait_for(conn.run(script + "true", check=True), 10)
        self.unended.difference_update(groups)
        self.unstarted.difference_update(markers)

    async def _end_unended(self) -> None:
        """After a reconnect: end the process groups that could not be ended while the link was down. A kill that
        fails on the new connection (a session refused or late on a busy host) is tried again while the link holds;
        should it drop once more, the next reconnect starts this again."""
        for attempt in range(1, END_UNENDED_TRIES + 1):
            try:
                await self._kill_groups(await self._connection(5.0), sorted(self.unended), sorted(self.unstarted))
                return
            except (TransportError, OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
                log.debug("%s: ending process groups %s failed (%s)", self.host, sorted(self.unended), exc)
            if self.link.state != "connected" or attempt == END_UNENDED_TRIES:
                return
            await asyncio.sleep(backoff_s(attempt, 0.5, self.backoff_cap_s))

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None,
                  limit: int = MAX_OUTPUT_BYTES) -> CommandResult:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        pgid = 0
        try:
            async with self._sessions:
                proc, pgid, marker = await self._process(command, timeout)
                try:
                    try:
                        if input:
                            proc.stdin.write(input)
                        proc.stdin.write_eof()
                    except (OSError, asyncssh.Error):
                        pass   # the command ended without reading its input: its exit status says why
                    left = None if deadline is None else max(0.0, deadline - loop.time())
                    async with timelimit.timeout(left):
                        stdout, stderr = await read_output(proc.stdout, proc.stderr, limit, self.host)
                        await proc.wait_closed()
                finally:
                    proc.close()
        except asyncio.TimeoutError:
            await self._end_group(pgid)
            # The builtin TimeoutError (asyncio's is a different class before Python 3.11).
            raise TimeoutError(f"{self.host}: command ran past {timeout} s") from None
        except OutputTooLarge:
            await self._end_group(pgid)
            raise
        except (OSError, asyncssh.Error) as exc:
            await self._end_group(pgid, 0.0)   # the command may run on: ended once the link is back
            raise TransportError(f"{self.host}: link lost: {exc}") from None
        except BaseException:
            if pgid:   # cancelled: never leave the command running behind us
                await asyncio.shield(self._end_group(pgid))
            raise
        if proc.exit_status is None and proc.exit_signal is None:
            await self._end_group(pgid, 0.0)
            raise TransportError(f"{self.host}: link lost while a command ran")
        code = proc.exit_status if proc.exit_status is not None and proc.exit_status >= 0 else 255
        return CommandResult(code, stdout or b"", _after_marker(stderr or b"", marker))

    def stream(self, command: str) -> OutputStream:
        return _SshStream(self, command)

    def session(self, command: str, wait_s: float | None = None) -> _SshStream:
        """A not-yet-started stream of `command` whose stdin stays open for `send` (a program kept running on the
        host, as the metrics relay); its start waits up to `wait_s` (None: LINK_WAIT_S) for a link that is down."""
        return _SshStream(self, command, keep_stdin=True, wait_s=wait_s)

    async def batch_run(self, script: str, timeout: float) -> bytes:
        """Through the host's helper shell (one session held for them: see `_HelperShell`), not a session each."""
        if self._helper is None:
            self._helper = _HelperShell(self)
        return await self._helper.query(script, timeout)

    # ---- TCP on the host ---------------------------------------------------------------------------------
    async def open_tcp(self, host: str, port: int,
                       wait_s: float | None = None) -> tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]]:
        """A direct-tcpip channel to `host:port` as seen from the host. ConnectionRefusedError when nothing
        listens there; TransportError when the link is down."""
        conn = await self._connection(wait_s)
        async with self._tcp:
            try:
                return await conn.open_connection(host, port)
            except asyncssh.ChannelOpenError as exc:
                if "refused" in exc.reason.lower():
                    raise ConnectionRefusedError(f"{self.host}: {host}:{port}: connection refused") from None
                raise TransportError(f"{self.host}: cannot open a channel to {host}:{port}: {exc.reason}") from None
            except (OSError, asyncssh.Error) as exc:
                raise TransportError(f"{self.host}: link lost: {exc}") from None

    def http_transport(self) -> httpx.AsyncBaseTransport | None:
        from specmon.sources.sshhttp import TunnelHTTPTransport  # httpx: imported by the first HTTP probe

        return TunnelHTTPTransport(self)

    async def local_url(self, port: int, addr: str = "127.0.0.1") -> str:
        """A forward of `addr`:`port` as the host reaches it (its own 127.0.0.1 unless told), listening on
        127.0.0.1 here, on the same local port for as long as this transport lives (reconnects included)."""
        forward = self._forwards.get((addr, port))
        if forward is None:
            forward = _PortForward(self, port, addr)
            await forward.start()
            self._forwards[(addr, port)] = forward
        return f"http://127.0.0.1:{forward.local_port}"

    async def close(self) -> None:
        """Close the forwards and the connection. Nothing started on the host is stopped (but the commands that
        `run` and `stream` started, which end with them)."""
        if self._ending is not None:
            await asyncio.gather(self._ending, return_exceptions=True)
        self._closed = True
        if self._helper is not None:
            await self._helper.close()
        for forward in self._forwards.values():
            await forward.close()
        self._forwards.clear()
        if self._supervisor is not None:
            self._supervisor.cancel()
            await asyncio.gather(self._supervisor, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()
            with contextlib.suppress(Exception):
                await timelimit.wait_for(self._conn.wait_closed(), 5)
        self._close_all(self._hops)
        self._conn, self._hops = None, []


class _SshStream(OutputStream):
    """`command`'s stdout over one exec session, held for the stream's life."""

    def __init__(self, transport: SSHTransport, command: str, keep_stdin: bool = False,
                 wait_s: float | None = None) -> None:
        self._t = transport
        self._command = command
        self._keep_stdin = keep_stdin   # the command reads what `send` writes (else its stdin ends at once)
        self._wait_s = wait_s
        self._proc: asyncssh.SSHClientProcess[bytes] | None = None
        self._pgid = 0
        self._holding = False

    async def start(self) -> None:
        await self._t._sessions.acquire()
        self._holding = True
        try:
            self._proc, self._pgid, _ = await self._t._process(self._command, self._wait_s)
            if not self._keep_stdin:
                self._proc.stdin.write_eof()
        except BaseException:
            self._release()
            raise

    def send(self, data: bytes) -> None:
        """Write to the command's stdin (a stream started with `keep_stdin`)."""
        assert self._proc is not None, "stream not started"
        try:
            self._proc.stdin.write(data)
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"{self._t.host}: link lost: {exc}") from None

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            self._t._sessions.release()

    async def read_chunk(self) -> bytes:
        assert self._proc is not None, "stream not started"
        try:
            chunk = await self._proc.stdout.read(65536)
        except (OSError, asyncssh.Error):
            chunk = b""
        if not chunk:
            with contextlib.suppress(Exception):
                await timelimit.wait_for(self._proc.wait_closed(), 5)
            # EOF without an exit status: the link was lost, the command may still run.
            self.exit_code = self._proc.exit_status
        return chunk

    async def aclose(self) -> None:
        proc = self._proc
        if proc is not None:
            proc.close()
            self._release()
            if proc.exit_status is None and self._pgid:
                await asyncio.shield(self._t._end_group(self._pgid))
            self._proc = None
        self._release()


class _HelperShell:
    """A shell kept running on the host (one session, held while it lives) that runs the batched reads of `look` and
    `read_files`, one at a time: each is written to its stdin and answered on its stdout up to a random end marker.
    Starting a command costs a session's open, its preamble and its close (most of the idle app's SSH cost with one
    read a second per host); a read through this shell costs one write and one answer. A read that fails or runs
    past its time ends the shell (the next read starts another)."""

    def __init__(self, transport: SSHTransport) -> None:
        self._t = transport
        self._lock = asyncio.Lock()
        self._stream: _SshStream | None = None
        self._buffer = b""

    async def query(self, script: str, timeout: float) -> bytes:
        async with self._lock:
            end = f"specmon-end-{secrets.token_hex(12)}"
            try:
                async with timelimit.timeout(timeout):
                    if self._stream is None:
                        stream = self._t.session("exec /bin/sh")
                        await stream.start()
                        self._stream, self._buffer = stream, b""
                    # Its input is never the script's: a command that reads stdin would eat the next ones.
                    self._stream.send(f"{{ {script}\n}} </dev/null 2>/dev/null; printf '\\n%s\\n' {end}\n".encode())
                    answer = await self._answer(f"\n{end}\n".encode())
            except BaseException as exc:
                await self.close()
                if isinstance(exc, asyncio.TimeoutError):
                    raise TimeoutError(f"{self._t.host}: a batch of reads ran past {timeout} s") from None
                raise
            return answer

    async def _answer(self, end: bytes) -> bytes:
        assert self._stream is not None
        buffer, searched = bytearray(self._buffer), 0   # grown in place and searched once: a log's 8 MiB end is
        while (at := buffer.find(end, searched)) < 0:    # 128 chunks, not 128 copies and scans of what came
            if len(buffer) > MAX_OUTPUT_BYTES:
                raise OutputTooLarge(f"{self._t.host}: a batch of reads printed over {MAX_OUTPUT_BYTES:,} bytes")
            chunk = await self._stream.read_chunk()
            if not chunk:
                raise TransportError(f"{self._t.host}: link lost while reading")
            searched = max(0, len(buffer) - len(end) + 1)
            buffer += chunk
        self._buffer = bytes(buffer[at + len(end):])
        return bytes(buffer[:at])

    async def close(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            await stream.aclose()


class _PortForward:
    """A listener on 127.0.0.1 here; each connection to it becomes a direct-tcpip channel to addr:port as the
    host reaches it (its own 127.0.0.1 by default) over whatever connection is current, so the local port survives
    reconnects."""

    def __init__(self, transport: SSHTransport, remote_port: int, remote_addr: str = "127.0.0.1") -> None:
        self._t = transport
        self.remote_port = remote_port
        self.remote_addr = remote_addr
        self.local_port = 0
        self._server: asyncio.base_events.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.local_port = int(self._server.sockets[0].getsockname()[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._pipes.add(task)
        try:
            try:
                remote_reader, remote_writer = await self._t.open_tcp(self.remote_addr, self.remote_port)
            except (OSError, TransportError):
                return
            try:
                await asyncio.gather(_copy(reader, remote_writer), _copy(remote_reader, writer))
            finally:
                remote_writer.close()
        finally:
            writer.close()
            if task is not None:
                self._pipes.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)


def _after_marker(stderr: bytes, marker: bytes) -> bytes:
    """The command's own stderr: what follows the preamble's marker line (before it: the remote shell's
    start-up output)."""
    head, found, tail = stderr.partition(marker)
    return tail if found else head


async def _copy(reader: asyncio.StreamReader | asyncssh.SSHReader[bytes],
                writer: asyncio.StreamWriter | asyncssh.SSHWriter[bytes]) -> None:
    """Copy until EOF, then pass the EOF on (half-close), so HTTP keep-alive and streaming both work."""
    with contextlib.suppress(OSError, asyncssh.Error):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()


async def fetch_host_key(hop: _Hop, via: asyncssh.SSHClientConnection | None, timeout_s: float) -> HostKey:
    """The key `hop` presents (no authentication, nothing trusted)."""
    try:
        key = await timelimit.wait_for(asyncssh.get_server_host_key(hop.host, hop.port, tunnel=via or ()), timeout_s)
    except (OSError, asyncssh.Error, asyncio.TimeoutError) as exc:
        raise TransportError(f"{hop.alias}: cannot read the host key of {hop.entry}: {exc or 'timed out'}") from None
    if key is None:
        raise TransportError(f"{hop.alias}: {hop.entry} presented no host key")
    return HostKey(alias=hop.alias, entry=hop.entry, algorithm=key.get_algorithm(),
                   fingerprint=key.get_fingerprint("sha256"), public_key=key.export_public_key().decode().strip())


def append_known_host(path: str, key: HostKey) -> None:
    """Add one `entry keytype base64` line to known_hosts (created with mode 600, its directory 700)."""
    target = Path(expand(path))
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    needs_newline = target.exists() and not target.read_bytes().endswith(b"\n") and target.stat().st_size > 0
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as fh:
        fh.write(("\n" if needs_newline else "") + key.line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


async def trust(alias: str, settings: SshSettings, confirm: Callable[[HostKey], Awaitable[bool]]) -> list[HostKey]:
    """The `specmon trust` flow: connect to `alias` (through its jump hosts); for each hop whose key is unknown,
    show the key to `confirm` and append it to known_hosts if confirmed. Returns the keys added.

    A changed key, a refusal to confirm or a failed login raises its TransportError: nothing is added then.
    """
    added: list[HostKey] = []
    for _ in range(MAX_HOPS + 1):
        transport = SSHTransport(alias, settings)
        try:
            await transport._connection(settings.connect_timeout_s * 2)
            return added
        except HostKeyUnknown as exc:
            if exc.key is None:
                raise
            if not await confirm(exc.key):
                raise HostKeyUnknown(f"{exc.key.alias}: key {exc.key.fingerprint} not trusted; nothing was added "
                                     f"to {settings.known_hosts}", exc.key) from None
            append_known_host(settings.known_hosts, exc.key)
            added.append(exc.key)
        finally:
            await transport.close()
    raise TransportError(f"{alias}: too many unknown host keys in the ProxyJump chain")
