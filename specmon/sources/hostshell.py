"""One host's shell as the run engine uses it (HostOps): its operations on that host, as shell commands run through
the host's Transport.

Everything here reaches the host only with `transport.run()` and `shlex.quote`d arguments, so it works the same
locally and over SSH. What the host prints is turned into values by the pure parsers of `model/machine/procfs.py` (/proc)
and `model/machine/gpu.py` (nvidia-smi); the GPU probe is `sources/gpu.py`, the environment probe `sources/env.py`.

Run directory layout (`$XDG_STATE_HOME/specmon/runs/<run_id>/` on the host, default
`~/.local/state/specmon/runs/`; runs made before that lived in `~/.specmon/runs/` and are still read):
    meta.json        run id, profile, config file, argv, port, launched_at
    launch.sh        the wrapper: exports the env, records `$$` in `pid`, runs the server as a child,
                     records its exit code in `exit_code` (tmp + rename)
    server.log       the server's stdout + stderr
    pid, exit_code, stop_requested
The directory is 0700 and every file in it 0600 whatever the umask: argv and logs often hold API keys.
`.launch.lock/` next to the run directories is the host-wide launch lock (see `launch_lock`).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from specmon.errors import UserError
from specmon.model.config import ENV_NAME
from specmon.model.machine.gpu import APPS_FIELDS, SmiError, memory_by_pid, parse_apps
from specmon.model.machine.procfs import (
    BusyPort,
    ProcInfo,
    describe_process,
    free_ports_near,
    listener_inodes,
    listening_ports,
    parse_stat,
    pid_of_path,
)
from specmon.sources.slurm import SlurmHost
from specmon.sources.transport import Transport, TransportError

RUN_ID = re.compile(r"^[0-9A-Za-z_.-]+$")
LEGACY_RUNS_SUBDIR = ".specmon/runs"   # where run directories lived before the XDG layout
LOCK_STALE_S = 120.0   # a launch lock older than this was left by a killed launch (a launch holds it ~1-10 s)


def check_env(env: Iterable[tuple[str, str]], where: str) -> None:
    """UserError naming the first env variable whose name is not a plain shell name."""
    for name, _ in env:
        if not ENV_NAME.fullmatch(name):
            raise UserError(f"{where}: env: invalid variable name {name!r} (letters, digits and _ only)")


def _shell_word(arg: str, runtime: Mapping[str, str]) -> str:
    """`arg` as one shell word, quoted, except that each placeholder in `runtime` becomes its variable ("$VAR")."""
    for placeholder, var in runtime.items():
        if placeholder in arg:
            return f'"${var}"'.join(_shell_word(part, runtime) for part in arg.split(placeholder))
    return shlex.quote(arg)


def wrapper_script(run_dir: str, argv: Sequence[str], env: Iterable[tuple[str, str]], workdir: str | None,
                   run_id: str, runtime: Mapping[str, str] | None = None) -> str:
    """The launch.sh that runs inside the new session (its `$$` is pid = pgid = sid). `runtime`: placeholders of
    the command that become a variable of the environment the script runs in (a multi-node Slurm job's master
    address: `{master_addr}` -> SPECMON_MASTER_ADDR)."""
    q = shlex.quote
    # The wrapper's own files are private (umask 077 around their writes only: the server keeps the user's umask).
    lines = [
        "#!/bin/sh",
        f"# specmon run {run_id}",
        f"_u=$(umask); umask 077; echo $$ > {q(run_dir + '/pid')}; umask \"$_u\"",
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
        " ".join(_shell_word(arg, runtime or {}) for arg in argv),
        "code=$?",
        "umask 077",
        f"echo \"$code\" > {q(run_dir + '/exit_code.tmp')} && mv -f {q(run_dir + '/exit_code.tmp')} "
        f"{q(run_dir + '/exit_code')}",
        "",
    ]
    return "\n".join(lines)


def _stat_of(text: str | None) -> ProcInfo | None:
    return parse_stat(text.strip()) if text else None


class HostOps:
    """Lifecycle primitives on one host."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.slurm = SlurmHost(transport)   # Slurm's commands here; the jobs watched on this host are polled together
        self._home: str | None = None
        self._state_base = ""

    @property
    def host(self) -> str:
        return self.transport.host

    async def sh(self, command: str, timeout: float = 30) -> tuple[int, str, str]:
        r = await self.transport.run(command, timeout=timeout)
        return r.exit_code, r.out, r.err

    async def _homes(self) -> tuple[str, str]:
        """($HOME, the state base: $XDG_STATE_HOME when absolute, else $HOME/.local/state) on the host."""
        if self._home is None:
            code, out, err = await self.sh('printf "%s\\n%s" "$HOME" "${XDG_STATE_HOME:-}"')
            home, _, xdg = out.partition("\n")
            if code != 0 or not home.startswith("/"):
                raise TransportError(f"{self.host}: cannot resolve $HOME ({err or out!r})")
            self._home = home.rstrip("/")
            # The XDG spec says a relative $XDG_STATE_HOME is to be ignored.
            self._state_base = xdg.rstrip("/") if xdg.startswith("/") else f"{self._home}/.local/state"
        return self._home, self._state_base

    async def runs_root(self) -> str:
        """Absolute `$XDG_STATE_HOME/specmon/runs` on the host (default `~/.local/state/specmon/runs`)."""
        _, base = await self._homes()
        return f"{base}/specmon/runs"

    async def run_roots(self) -> tuple[str, str]:
        """The runs root and the legacy `~/.specmon/runs`, both of which may hold run directories."""
        home, _ = await self._homes()
        return await self.runs_root(), f"{home}/{LEGACY_RUNS_SUBDIR}"

    async def boot_id(self) -> str:
        return (await self.read_file("/proc/sys/kernel/random/boot_id") or "").strip()

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

    async def _tcp_sockets(self) -> str:
        """The host's TCP socket tables (IPv4, then IPv6 where the kernel has it), as one text. Read whole by `cat`:
        a busy host's table can outgrow what `read_files` takes."""
        _, out, _ = await self.sh("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
        return out

    async def listening(self) -> set[int]:
        return listening_ports(await self._tcp_sockets())

    async def port_holder(self, port: int) -> str | None:
        """Who listens on `port`: "pid N (its command line)", or None when the socket's owner cannot be seen
        (another user's process, or it just went away)."""
        for inode in sorted(listener_inodes(await self._tcp_sockets(), port)):
            if not inode.isdigit() or inode == "0":
                continue
            code, found, _ = await self.sh(
                f"find /proc/[0-9]*/fd -lname 'socket:\\[{inode}\\]' 2>/dev/null | head -n 1", timeout=10)
            pid = pid_of_path(found)
            if pid is not None:
                return describe_process(pid, await self.read_file(f"/proc/{pid}/cmdline") or "")
        return None

    async def busy_port(self, port: int, avoid: Iterable[int] = ()) -> BusyPort:
        """Who holds `port` and the free ports nearest above it (none of `avoid`: other profiles' ports)."""
        listening = await self.listening()
        return BusyPort(port, await self.port_holder(port), tuple(free_ports_near(port, listening, avoid=avoid)))

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
        """Create the run dir, 0700, with an empty 0600 server.log (the dir must not exist yet, so a retried
        launch never reuses one). None, or the host's one-line reason (after removing what was made)."""
        parent = run_dir.rsplit("/", 1)[0]
        q = shlex.quote
        code, _, err = await self.sh(
            f"umask 077 && mkdir -p -- {q(parent)} && mkdir -m 700 -- {q(run_dir)} || exit 1; "
            f": > {q(run_dir + '/server.log')} || {{ rm -rf -- {q(run_dir)}; exit 1; }}")
        return None if code == 0 else (err or f"exit {code}")

    async def remove_run_dir(self, run_dir: str) -> None:
        """Remove a run directory a failed launch made (only one directly under a runs root)."""
        parent, _, name = run_dir.rpartition("/")
        if parent not in await self.run_roots() or not RUN_ID.match(name):
            raise ValueError(f"refusing to remove {run_dir!r}: not a run directory")
        await self.sh(f"rm -rf -- {shlex.quote(run_dir)}")

    async def start_detached(self, run_dir: str, run_id: str) -> None:
        """Start launch.sh in its own session, detached from us; returns at once.

        The wrapper itself carries the `SPECMON_RUN_ID` marker in its environment, so `owns` can tell it from
        an unrelated process that later got the same pid.
        """
        q = shlex.quote
        code, _, err = await self.sh(
            f"cd {q(run_dir)} && SPECMON_RUN_ID={q(run_id)} setsid -f /bin/sh {q(run_dir + '/launch.sh')} "
            f"</dev/null >>{q(run_dir + '/server.log')} 2>&1")
        if code != 0:
            raise TransportError(f"{self.host}: cannot start {run_dir}/launch.sh: {err or f'exit {code}'}")

    async def try_lock(self, token: str) -> str | None:
        """Take the host-wide launch lock (`<runs root>/.launch.lock`, made with an atomic mkdir): None when
        taken, else who holds it. A lock older than LOCK_STALE_S was left by a killed launch and is broken."""
        q = shlex.quote
        root = await self.runs_root()
        lock = q(f"{root}/.launch.lock")
        owner = q(token)
        code, out, err = await self.sh(
            f"umask 077 && mkdir -p -- {q(root)} || exit 2; "
            # `env printf`, not the builtin: dash's builtins report ENOSPC as "I/O error".
            f"if mkdir -- {lock} 2>/dev/null; then env printf '%s\\n' {owner} > {lock}/owner && exit 0; "
            f"rm -rf -- {lock}; exit 3; fi; "
            f"now=$(date +%s); made=$(stat -c %Y -- {lock} 2>/dev/null || echo \"$now\"); "
            f"if [ $((now - made)) -gt {int(LOCK_STALE_S)} ] && mv -- {lock} {lock}.stale.$$ 2>/dev/null; then "
            f"rm -rf -- {lock}.stale.$$; mkdir -- {lock} 2>/dev/null && env printf '%s\\n' {owner} > {lock}/owner && exit 0; fi; "
            f"cat -- {lock}/owner 2>/dev/null; exit 1")
        if code == 2:
            raise TransportError(f"{self.host}: cannot create run directory root {root}: {err or 'exit 2'}")
        if code == 3:
            raise TransportError(f"{self.host}: cannot take the launch lock in {root}: {err or 'exit 3'}")
        return None if code == 0 else (out.strip() or "another launch")

    async def unlock(self, token: str) -> None:
        """Release the launch lock if `token` still holds it."""
        lock = shlex.quote(f"{await self.runs_root()}/.launch.lock")
        await self.sh(f"[ \"$(cat -- {lock}/owner 2>/dev/null)\" = {shlex.quote(token)} ] && rm -rf -- {lock}; true")

    async def live_runs_on_port(self, port: int) -> list[str]:
        """Run directories on the host whose server (pid alive and not a zombie, no exit code yet) was launched for
        `port`.

        Read from the host's run directories, not from specmon's local state, so a launch from another jump box
        or a record lost locally still counts.
        """
        roots = " ".join(shlex.quote(r) for r in await self.run_roots())
        needle = shlex.quote(f'"port": {int(port)},')
        _, out, _ = await self.sh(
            f"for d in {roots}; do for m in \"$d\"/*/meta.json; do r=${{m%/meta.json}}; "
            f"[ -f \"$m\" ] && [ ! -e \"$r/exit_code\" ] && grep -qF -- {needle} \"$m\" || continue; "
            f"p=$(cat -- \"$r/pid\" 2>/dev/null); case $p in ''|*[!0-9]*) continue;; esac; "
            # A zombie (exited, not yet reaped by an init that reaps slowly, as in containers) is not running.
            f"s=$(cat /proc/$p/stat 2>/dev/null) || continue; s=${{s##*) }}; [ \"${{s%% *}}\" != Z ] && echo \"$r\"; "
            f"done; done; true")
        return [line for line in out.splitlines() if line.startswith("/")]

    async def read_file(self, path: str) -> str | None:
        data, = await self.transport.read_files([path])
        return None if data is None else data.decode("utf-8", errors="replace")

    async def proc(self, pid: int) -> ProcInfo | None:
        return _stat_of(await self.read_file(f"/proc/{int(pid)}/stat"))

    async def run_status(self, run_dir: str, pid: int) -> tuple[ProcInfo | None, int | None, bool]:
        """(process info of pid, exit code if recorded, stop requested) in one round trip."""
        stat, exit_text, stop = await self.transport.read_files(
            [f"/proc/{int(pid)}/stat", run_dir + "/exit_code", run_dir + "/stop_requested"])
        code = (exit_text or b"").decode("ascii", errors="replace").strip()
        exit_code = int(code) if code.lstrip("-").isdigit() else None
        return _stat_of(None if stat is None else stat.decode("utf-8", errors="replace")), exit_code, stop is not None

    async def _scan(self, run_id: str) -> tuple[list[ProcInfo], set[int]]:
        """Every live process's stat, and the pids whose environment carries the run's marker."""
        if not RUN_ID.match(run_id):
            raise ValueError(f"bad run id {run_id!r}")
        marker = shlex.quote(f"SPECMON_RUN_ID={run_id}")
        _, out, _ = await self.sh(
            "cat /proc/[0-9]*/stat 2>/dev/null; echo '<<>>'; "
            f"grep -lzx -- {marker} /proc/[0-9]*/environ 2>/dev/null; true")
        stats, _, marked = out.partition("<<>>")
        marked_pids = {pid for path in marked.split() if (pid := pid_of_path(path)) is not None}
        infos = [info for line in stats.splitlines() if (info := parse_stat(line)) and info.alive and info.pid > 1]
        return infos, marked_pids

    async def members(self, sid: int, run_id: str) -> list[ProcInfo]:
        """Live processes of the run: those in its session plus those carrying its SPECMON_RUN_ID marker."""
        infos, marked = await self._scan(run_id)
        return [info for info in infos if info.sid == sid or info.pid in marked]

    async def owns(self, pid: int, run_id: str) -> bool:
        """Whether `pid` is the run's wrapper: it, or (wrappers started before the marker moved into their own
        environment) a process of its session, carries `SPECMON_RUN_ID=<run_id>`."""
        marker = shlex.quote(f"SPECMON_RUN_ID={run_id}")
        code, _, _ = await self.sh(f"grep -qzx -- {marker} /proc/{int(pid)}/environ 2>/dev/null")
        if code == 0:
            return True
        infos, marked = await self._scan(run_id)
        return any(info.sid == pid and info.pid in marked for info in infos)

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
            return memory_by_pid(parse_apps(out)) if code == 0 else {}
        except SmiError:
            return {}

    async def write_json(self, path: str, data: object) -> None:
        await self.transport.write_file(path, (json.dumps(data, indent=2) + "\n").encode(), 0o600)
