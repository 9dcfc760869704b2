"""Remote runs end to end: `specmon sim` launched, watched, swept, stopped and reattached on an SSH alias of the
loopback sshd (tests/support/sshd_support.py), directly and through ProxyJump, with links that reset or drop packets."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lifecycle_support import cmdline, marked_pids, port_listening, stop_everything, topmost_marked
from process_support import alive
from sshd_support import Relay, Sshd
from test_lifecycle import Recorder

from specmon.errors import UserError
from specmon.loadgen.workload import Workload
from specmon.model.config import Config, Profile, SshSettings
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import LogLine, RunView

pytestmark = pytest.mark.slow

# Lines the server prints before the sim starts loading: numbered, so a lost or repeated line is obvious.
SEQ = 'i=1; while [ "$i" -le "$1" ]; do echo "specmon-seq $i"; i=$((i+1)); sleep "$2"; done; shift 2; exec "$@"'


def remote_profile(alias: str, port: int, *, name: str = "sim", seq_lines: int = 0, seq_gap_s: float = 0.01,
                   load_seconds: float = 4.0, env: tuple[tuple[str, str], ...] = (),
                   stall_timeout_s: float = 30.0) -> Profile:
    sim = (sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", "0.05", "--shards", "4",
           "--load-seconds", str(load_seconds), "--model", "test/Remote-7B")
    command = ("/bin/sh", "-c", SEQ, "seq", str(seq_lines), str(seq_gap_s), *sim) if seq_lines else sim
    return Profile(name=name, command=command, host=alias, port=port, env=env, stall_timeout_s=stall_timeout_s)


@pytest.fixture
async def remote(sshd: Sshd) -> AsyncIterator[Callable[..., tuple[RunManager, Recorder]]]:
    """Makes RunManagers whose profiles run on the loopback sshd; stops every run they launched at the end."""
    made: list[RunManager] = []

    def make(*profiles: Profile, settings: SshSettings | None = None) -> tuple[RunManager, Recorder]:
        config = Config(source="test profiles", profiles={p.name: p for p in profiles},
                        ssh=settings or sshd.settings())
        manager = RunManager(config, stop_timings=StopTimings(grace_s=3.0, port_wait_s=10))
        made.append(manager)
        return manager, Recorder(manager)

    yield make
    await stop_everything(made)


class Reader:
    """Collects a run's log lines as a front end would (committing the offset of what it was handed)."""

    def __init__(self, manager: RunManager, run_id: str, *, history: bool = False) -> None:
        self.lines: list[LogLine] = []
        self._task = asyncio.create_task(self._read(manager, run_id, history))

    async def _read(self, manager: RunManager, run_id: str, history: bool) -> None:
        async for line in manager.log_lines(run_id, commit=True, history=history):
            self.lines.append(line)

    @property
    def text(self) -> list[str]:
        return [line.text for line in self.lines if line.kind == "line"]

    @property
    def end(self) -> int:
        ends = [line.end for line in self.lines if line.kind == "line"]
        return ends[-1] if ends else 0

    async def until_end_of(self, log: Path, timeout: float = 30.0) -> None:
        """Wait until every complete line now in `log` has been read."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = log.read_bytes()
            if self.end >= data.rfind(b"\n") + 1:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"reader stuck at byte {self.end} of {log.stat().st_size}")

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def file_lines(log: Path, end: int | None = None) -> list[str]:
    data = log.read_bytes()
    data = data[: data.rfind(b"\n") + 1] if end is None else data[:end]
    return data.decode("utf-8", errors="replace").split("\n")[:-1]


@pytest.mark.parametrize("alias", ["gpu1", "gpu2"])
async def test_remote_launch_ready_sweep_reattach_and_stop(sshd: Sshd, remote, free_port_factory,
                                                           tmp_path: Path, alias: str) -> None:
    port = free_port_factory()
    profile = remote_profile(alias, port)
    manager, rec = remote(profile)
    view = await manager.launch("sim")
    assert view.host == alias and view.pid
    assert view.run_dir.startswith(str(sshd.home / ".local" / "state" / "specmon" / "runs") + "/")   # the HOST's home, over SSH
    reader = Reader(manager, view.run_id)
    _, ready = await rec.until(lambda v: v.state == "ready", timeout=60)
    assert ready.link is not None and ready.link.state == "connected"
    assert ready.shards == (4, 4)
    await rec.until(lambda v: v.health == "200", timeout=30)   # /health answered through the SSH channel
    # The sweep goes through a forward on 127.0.0.1 here, not to the server's own port.
    assert ready.url.startswith("http://127.0.0.1:") and not ready.url.endswith(f":{port}")
    result = await run_sweep(SweepSpec(
        url=ready.url, out_path=tmp_path / "sweep.jsonl",
        workload=Workload(levels=(1, 2), requests_per_level=4, output_len=8, input_len=8, warmup_requests=1,
                          timeout_s=30.0)))
    assert [lv.concurrency for lv in result.levels] == [1, 2]
    assert all(lv.requests_ok == 4 and not lv.errors for lv in result.levels), result.levels
    assert result.meta.model == "test/Remote-7B"

    log = Path(view.log_path)
    await reader.until_end_of(log)
    await reader.close()
    first = reader.text
    assert first == file_lines(log, reader.end)
    await manager.close()                     # specmon goes away; the server must not
    assert alive(view.pid) and marked_pids(view.run_id) and port_listening(port)

    # A new specmon process (new connection) reattaches: same run, ready, and the log resumes where it stopped.
    again, rec2 = remote(profile)
    reattached = await again.attach(view.run_id)
    assert reattached.state == "ready" and reattached.pid == view.pid
    reader2 = Reader(again, view.run_id)
    await asyncio.sleep(1.5)                  # the sim keeps logging (health polls, metrics)
    await reader2.until_end_of(log)
    await reader2.close()
    assert first + reader2.text == file_lines(log, reader2.end), "a line was lost or repeated across reattach"

    report = await again.stop(view.run_id)
    assert report.stopped and view.pid in report.pids
    assert marked_pids(view.run_id) == [] and not port_listening(port)
    assert again.index.store.load(view.run_id).state == "stopped"


async def test_profile_env_reaches_the_remote_server_intact(sshd: Sshd, remote, free_port_factory) -> None:
    env = (("WITH_SPACES", "a b  c "), ("QUOTES", "it's \"quoted\" \\ back"), ("DOLLAR", "$HOME `id` $(id) ${X}"),
           ("NEWLINES", "line 1\nline 2\n"), ("GLOB", "* ? [a]"), ("EMPTY", ""))
    port = free_port_factory()
    manager, rec = remote(remote_profile("gpu1", port, env=env))
    view = await manager.launch("sim")
    await rec.until(lambda v: v.state == "ready", timeout=60)
    sim_pids = [p for p in marked_pids(view.run_id)
                if b"specmon.sim" in cmdline(p)]
    assert sim_pids, "the sim process was not found by its marker"
    environ = dict(item.split(b"=", 1) for item in Path(f"/proc/{sim_pids[0]}/environ").read_bytes().split(b"\0")
                   if b"=" in item)
    for name, value in env:
        assert environ[name.encode()].decode() == value, name
    assert environ[b"SPECMON_RUN_ID"].decode() == view.run_id


async def test_a_bad_env_name_is_refused_before_anything_runs_on_the_host(sshd: Sshd, remote,
                                                                         free_port_factory) -> None:
    relay = await Relay(sshd.port).start()
    sshd.add_alias("counted", relay.port)
    try:
        manager, _ = remote(remote_profile("counted", free_port_factory(), env=(("FOO;rm", "-rf /"),)))
        runs_before = sorted((sshd.home / ".local" / "state" / "specmon" / "runs").glob("*"))
        with pytest.raises(UserError, match=r"FOO;rm"):
            await manager.launch("sim")
        assert relay.accepted == 0, "specmon connected to the host before refusing the profile"
        assert sorted((sshd.home / ".local" / "state" / "specmon" / "runs").glob("*")) == runs_before
    finally:
        await relay.close()


def _bad(view: RunView) -> bool:
    return view.state in ("failed", "lost", "exited", "stopped") or view.stalled


@pytest.mark.parametrize("how", ["reset", "blackhole"])
async def test_a_dropped_link_mid_load_costs_nothing(sshd: Sshd, remote, free_port_factory, how: str) -> None:
    """The link dies while the server prints numbered lines and then loads: the card shows the link lost within
    the keepalive window and back after; the server never stops; the log shown equals the file on the host."""
    relay = await Relay(sshd.port).start()
    alias = f"chaos-{how}"
    sshd.add_alias(alias, relay.port)
    port = free_port_factory()
    # Stall time shorter than the outage: a dropped link must still never read as a stall.
    profile = remote_profile(alias, port, seq_lines=800, seq_gap_s=0.01, load_seconds=40, stall_timeout_s=4.0)
    manager, rec = remote(profile, settings=sshd.settings(keepalive_s=1.0, connect_timeout_s=3.0))
    try:
        view = await manager.launch("sim")
        reader = Reader(manager, view.run_id)
        log = Path(view.log_path)
        await rec.until(lambda v: v.state == "loading", timeout=30)
        deadline = time.monotonic() + 60
        while len(reader.text) < 100 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(reader.text) >= 100, f"only {len(reader.text)} log lines arrived"
        # The shell printing the numbered lines, then (exec) the sim: found by its script, not by the lowest pid
        # (its `sleep` children are marked too, and take a lower pid once the pid counter wraps; one of them may be
        # caught between fork and exec, still showing the shell's command line).
        sim_pid, = topmost_marked(view.run_id, b"specmon-seq")
        t0 = time.time()
        relay.reset() if how == "reset" else relay.blackhole()
        at_down, down = await rec.until(lambda v: v.link is not None and not v.link.up, timeout=30)
        # keepalive 1 s x 3 unanswered => about 3-4 s for a blackhole; a reset is seen at once
        assert at_down - t0 < 12, f"link loss shown after {at_down - t0:.1f} s"
        assert down.state == "loading" and not down.stalled
        if how == "blackhole":
            await asyncio.sleep(5)            # longer than the stall time: must not count as a stall
            relay.restore()
        await rec.until(lambda v: v.link is not None and v.link.up, timeout=60)
        _, ready = await rec.until(lambda v: v.state == "ready" or _bad(v), timeout=90)
        assert ready.state == "ready", ready
        await reader.until_end_of(log)
        await reader.close()
        shown = reader.text
        assert shown == file_lines(log, reader.end), "the log shown differs from the file on the host"
        seq = [int(line.split()[1]) for line in shown if line.startswith("specmon-seq ")]
        assert seq == list(range(1, 801)), "a numbered line was lost or repeated"
        seen = [v for _, v in rec.views if v.run_id == view.run_id]
        assert not any(_bad(v) for v in seen), "the link outage turned into a verdict"
        assert any(line.kind == "note" and "lost" in line.text for line in reader.lines)
        assert alive(view.pid) and sim_pid in marked_pids(view.run_id), "the server stopped"
        assert b"specmon.sim" in cmdline(sim_pid), "the shell did not become the sim"
        report = await manager.stop(view.run_id)      # and the link that came back can stop it
        assert report.stopped and marked_pids(view.run_id) == []
    finally:
        await relay.close()
