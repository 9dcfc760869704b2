"""Helpers for the lifecycle tests: sim profiles, marker scans, a file watcher that timestamps log events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from ports import free_port

from specmon.model.config import Config, Profile
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView

SIM_READY = "The server is fired up and ready to roll!"


def sim_start_s(samples: int = 2) -> float:
    """Seconds this box takes right now from starting `specmon sim` to its first log line (the worst of `samples`).

    A launch is silent that long before any progress, so a stall timeout shorter than it reports a healthy start as a
    stall on a loaded box (3 s at load 9 on 2 cores, against 0.3 s idle). Stall tests derive their timeouts from it.
    """
    worst = 0.0
    for _ in range(samples):
        port = free_port()
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "specmon.sim", "--port", str(port), "--shards", "1",
                                 "--load-seconds", "60"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            assert proc.stdout is not None
            proc.stdout.readline()
            worst = max(worst, time.monotonic() - t0)
        finally:
            proc.kill()
            proc.wait()
    return worst


def stall_timeout_for_this_box(floor_s: float, factor: float = 3.0) -> float:
    """A stall timeout well above the silence of a healthy start here and now (`factor` times it), at least
    `floor_s`."""
    return max(floor_s, factor * sim_start_s())


def sim_profile(port: int, *extra: str, name: str = "sim", stall_timeout_s: float = 30.0,
                time_scale: float = 0.05, shards: int = 4, load_seconds: float = 4.0,
                notify_cmd: str | None = None, env: tuple[tuple[str, str], ...] = ()) -> Profile:
    """A profile that runs `python -m specmon.sim` with this interpreter (no PATH assumptions)."""
    command = (sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", str(time_scale),
               "--shards", str(shards), "--load-seconds", str(load_seconds), *extra)
    return Profile(name=name, command=command, port=port, stall_timeout_s=stall_timeout_s,
                   notify_cmd=notify_cmd, env=env)


def config_of(*profiles: Profile) -> Config:
    return Config(source="test profiles", profiles={p.name: p for p in profiles})


def marked_pids(run_id: str) -> list[int]:
    """Live (non-zombie) processes whose environment carries SPECMON_RUN_ID=<run_id>."""
    marker = f"SPECMON_RUN_ID={run_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if marker in env and state != "Z":
            found.append(int(entry.name))
    return found


def cmdline(pid: int) -> bytes:
    """A process's command line (NUL-separated), or b"" once it has gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def parent_pid(pid: int) -> int | None:
    """A process's parent, or None once it has gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except OSError:
        return None


def topmost_marked(run_id: str, needle: bytes) -> list[int]:
    """Marked processes whose command line holds `needle`, less those whose parent is one of them: a shell's child
    between fork and exec carries the shell's command line for a moment."""
    found = [p for p in marked_pids(run_id) if needle in cmdline(p)]
    return [p for p in found if parent_pid(p) not in found]


def tail_pids(log: Path) -> list[int]:
    """Live `tail` processes following `log` (one per follower)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if argv and argv[0].endswith(b"tail") and str(log).encode() in argv and state != "Z":
            found.append(int(entry.name))
    return found


def kill_marked(run_ids: Iterable[str]) -> None:
    """Last-resort cleanup after a test: SIGKILL whatever still carries one of these markers."""
    for run_id in run_ids:
        for pid in marked_pids(run_id):
            try:
                os.kill(pid, 9)
            except OSError:
                pass


async def stop_everything(managers: Iterable[RunManager]) -> None:
    """The end of an engine fixture: force-stop every run these managers launched that is still up (a multi-node
    run as a whole, not node by node), close them, then kill whatever still carries those runs' markers."""
    run_ids = []
    for manager in managers:
        for record in manager.index.store.all():
            run_ids.append(record.run_id)
            if not record.terminal and record.group is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(manager.stop(record.run_id, force=True), 30)
        await manager.close()
    kill_marked(run_ids)


def port_listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class FileWatch:
    """Polls a file every 5 ms in a thread and notes when a pattern (or the file) first appears.

    Gives the server-side time of an event (the moment the line hit the log), to measure detection latency.
    """

    def __init__(self, path: Path, patterns: dict[str, str]) -> None:
        self.path = path
        self.patterns = {k: re.compile(v) for k, v in patterns.items()}
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _scan(self) -> None:
        now = time.time()
        for key, rx in self.patterns.items():
            if key in self.seen:
                continue
            if key == "exists":
                if self.path.exists():
                    self.seen[key] = now
                continue
            try:
                text = self.path.read_text(errors="replace")
            except OSError:
                continue
            if rx.search(text):
                self.seen[key] = now

    def _run(self) -> None:
        while not self._stop.is_set():
            self._scan()
            time.sleep(0.005)

    def close(self) -> None:
        """Stop polling, after one last look: on a loaded machine the engine can beat this thread to a line,
        which then counts as seen now (an upper bound on when it was written, so latencies only shrink)."""
        self._stop.set()
        self._thread.join(2)
        self._scan()


def profile_toml(name: str, port: int, *sim_args: str, stall: float = 30, scale: float = 0.05, shards: int = 4,
                 load: float = 4) -> str:
    """A [profiles.NAME] table that runs `python -m specmon.sim` with this interpreter."""
    argv = [sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", str(scale),
            "--shards", str(shards), "--load-seconds", str(load), *sim_args]
    return f"[profiles.{name}]\nport = {port}\nstall_timeout_s = {stall}\ncommand = {json.dumps(argv)}\n\n"


class Cli:
    """Runs `python -m specmon --config FILE ...` with the test's private HOME/XDG dirs."""

    def __init__(self, config: Path) -> None:
        self.config = config

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "specmon", "--config", str(self.config), *args]

    def __call__(self, *args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, cwd=cwd)

    def status(self) -> list[dict[str, object]]:
        out = self("status", "--json")
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)


class Views:
    """Every view a manager publishes; `until` waits for the first that matches."""

    def __init__(self, manager: RunManager) -> None:
        self.seen: list[RunView] = []
        manager.subscribe(self.seen.append)

    async def until(self, pred: Callable[[RunView], bool], timeout: float = 60.0) -> RunView:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for view in self.seen:
                if pred(view):
                    return view
            await asyncio.sleep(0.05)
        raise AssertionError(f"no matching view within {timeout}s; last: {self.seen[-1] if self.seen else None}")
