"""The lifecycle engine against real processes: `specmon sim` launched detached, watched, failed, stopped.

No part of the engine is mocked: runs start through /bin/sh + setsid, logs are tailed with tail -F, health
and readiness are real HTTP requests to the sim on 127.0.0.1, stops send real signals.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lifecycle_support import (
    SIM_READY,
    FileWatch,
    config_of,
    marked_pids,
    port_listening,
    sim_profile,
    stall_timeout_for_this_box,
    stop_everything,
    tail_pids,
)
from process_support import alive

from specmon.errors import UserError
from specmon.model.config import Profile
from specmon.model.runs.record import RunRecord
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.reconciler import process_ended
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView
from specmon.sources.hostshell import HostOps
from specmon.sources.local import LocalTransport
from specmon.ui.rows import row_from_view

pytestmark = pytest.mark.slow


class Recorder:
    """Every view a manager publishes, with its arrival time."""

    def __init__(self, manager: RunManager) -> None:
        self.views: list[tuple[float, RunView]] = []
        self.pos = 0   # each `until` looks at views after the previous match
        manager.subscribe(lambda v: self.views.append((time.time(), v)))

    async def until(self, pred: Callable[[RunView], bool], timeout: float = 30.0) -> tuple[float, RunView]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i in range(self.pos, len(self.views)):
                at, view = self.views[i]
                if pred(view):
                    self.pos = i + 1
                    return at, view
            self.pos = len(self.views)
            await asyncio.sleep(0.02)
        last = self.views[-1][1] if self.views else None
        raise AssertionError(f"no matching view within {timeout}s; last: {last}")


@pytest.fixture
async def engine() -> AsyncIterator[Callable[..., tuple[RunManager, Recorder]]]:
    """Makes RunManagers over given profiles; stops every run they launched at the end."""
    made: list[RunManager] = []

    def make(*profiles: Profile, grace_s: float = 3.0, state_dir: Path | None = None,
             stop_timings: StopTimings | None = None) -> tuple[RunManager, Recorder]:
        manager = RunManager(config_of(*profiles), state_dir=state_dir,
                             stop_timings=stop_timings or StopTimings(grace_s=grace_s, port_wait_s=10))
        made.append(manager)
        return manager, Recorder(manager)

    yield make
    await stop_everything(made)


async def test_launch_detects_ready_within_a_second_and_stop_frees_the_port(free_port_factory, engine,
                                                                           tmp_path: Path) -> None:
    port = free_port_factory()
    notes = tmp_path / "notify.log"
    profile = sim_profile(port, notify_cmd=f'echo "$SPECMON_STATE|$SPECMON_PROFILE|$SPECMON_RUN_ID|$SPECMON_REASON"'
                                           f' >> {notes}')
    manager, rec = engine(profile)
    view = await manager.launch("sim")
    assert view.state == "loading" and view.pid
    watch = FileWatch(Path(view.log_path), {"ready": SIM_READY})
    try:
        at, ready = await rec.until(lambda v: v.state == "ready", timeout=40)
    finally:
        watch.close()
    assert at - watch.seen["ready"] < 1.0, "ready detected more than 1 s after the server logged it"
    assert ready.load_seconds and ready.ready_at and ready.shards == (4, 4) and ready.kv_cache_tokens
    # The run dir on the host holds what the design promises.
    run_dir = Path(view.run_dir)
    assert int((run_dir / "pid").read_text()) == view.pid
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["run_id"] == view.run_id and meta["port"] == port
    # The server runs in its own session (detached from this test process).
    stat = Path(f"/proc/{view.pid}/stat").read_text().rpartition(")")[2].split()
    assert int(stat[3]) == view.pid != os.getsid(0)
    assert manager.index.store.past_loads("sim", manager.index.config_key) == (pytest.approx(ready.load_seconds, abs=0.01),)
    for _ in range(100):
        if notes.exists() and notes.read_text():
            break
        await asyncio.sleep(0.05)
    assert notes.read_text().startswith(f"ready|sim|{view.run_id}|ready after")

    report = await manager.stop("sim")
    assert report.clean and not report.killed and view.pid in report.pids
    assert not port_listening(port) and marked_pids(view.run_id) == []
    _, final = await rec.until(lambda v: v.state == "stopped", timeout=10)
    assert final.exit_code is not None
    assert manager.index.store.load(view.run_id).state == "stopped"


async def test_the_card_and_the_eta_compare_a_load_with_the_same_past_loads(free_port_factory, engine) -> None:
    """The card's `load 0:05/~0:40` took the latest earlier run's load while the ETA took the median of the
    profile's load history: after loads of 30, 40 and 100 s the card said ~1:40 while the ETA counted from 40 s.
    Both come from the history now, through the run's view."""
    port = free_port_factory()
    manager, rec = engine(sim_profile(port, time_scale=0.5, shards=8))
    for seconds in (30.0, 40.0, 100.0):
        manager.index.store.record_load("sim", manager.index.config_key, seconds, time.time())
    view = await manager.launch("sim")
    _, loading = await rec.until(lambda v: v.run_id == view.run_id and v.state == "loading", timeout=30)
    assert loading.past_load_s == 40.0
    assert loading.eta_s is not None and loading.eta_s <= 40.0
    assert row_from_view(loading, now=time.time()).past_load_s == 40.0
    await manager.stop(view.run_id)


async def test_slow_load_of_64_shards_is_never_called_failed_or_stalled(free_port_factory, engine) -> None:
    port = free_port_factory()
    # 64 shards, time-scaled by 0.1: the load lasts at least 2.5 stall times (6 s on an idle box, ~0.1 s a shard);
    # the stall time is shorter than the whole load and much longer than one shard, and longer than a start's
    # silence on this box now (a loaded box starts python slowly).
    stall = stall_timeout_for_this_box(1.5)
    load_s = max(6.0, 2.5 * stall)
    profile = sim_profile(port, shards=64, load_seconds=load_s / 0.1, time_scale=0.1, stall_timeout_s=stall)
    manager, rec = engine(profile)
    view = await manager.launch("sim")
    _, ready = await rec.until(lambda v: v.state != "loading" or v.stalled, timeout=60 + load_s)
    assert ready.state == "ready", ready
    seen = [v for _, v in rec.views if v.run_id == view.run_id]
    assert not any(v.stalled or v.state == "failed" or v.failure for v in seen)
    done = [v.shards[0] for v in seen if v.shards]
    assert done == sorted(done) and len(set(done)) > 10 and done[-1] == 64   # progress shown shard by shard
    assert any(v.eta_s is not None and v.eta_s > 0 for v in seen if v.state == "loading")


async def test_stall_is_reported_after_the_stall_time_and_nothing_is_killed(free_port_factory, engine,
                                                                            tmp_path: Path) -> None:
    port = free_port_factory()
    notes = tmp_path / "notify.log"
    stall = stall_timeout_for_this_box(1.5)
    profile = sim_profile(port, "--stall-at-shard", "2", shards=8, load_seconds=8, time_scale=0.1,
                          stall_timeout_s=stall, notify_cmd=f'echo "$SPECMON_STATE|$SPECMON_REASON" >> {notes}')
    manager, rec = engine(profile)
    view = await manager.launch("sim")
    watch = FileWatch(Path(view.log_path), {"last": r"\| 1/8 \["})   # the last output before the stall
    try:
        at, stalled = await rec.until(lambda v: v.stalled, timeout=30 + stall)
    finally:
        watch.close()
    assert stalled.state == "loading" and "no log output" in (stalled.stall_reason or "")
    assert at - watch.seen["last"] >= stall - 0.1, "stall reported before the stall time"
    assert at - watch.seen["last"] < stall + 3.5
    await asyncio.sleep(1.0)
    assert Path(f"/proc/{view.pid}").exists() and manager.view(view.run_id).state == "loading"
    assert notes.read_text().splitlines() == [f"stalled|{stalled.stall_reason}"]


@pytest.mark.parametrize(("fault", "kind", "text"), [
    (("--crash-at-shard", "3"), "exception", "SafetensorError"),
    (("--oom-at", "kv"), "oom", "out of memory"),
    (("--nccl-timeout",), "nccl", "Watchdog caught collective operation timeout"),
])
async def test_failures_are_reported_within_2s_with_kind_and_last_lines(free_port_factory, engine, fault, kind,
                                                                        text, tmp_path: Path) -> None:
    port = free_port_factory()
    notes = tmp_path / "notify.log"
    manager, rec = engine(sim_profile(port, *fault, shards=6, load_seconds=3, time_scale=0.1,
                                      notify_cmd=f'echo "$SPECMON_STATE|$SPECMON_REASON" >> {notes}'))
    view = await manager.launch("sim")
    watch = FileWatch(Path(view.log_path), {"fault": text})
    try:
        at, failed = await rec.until(lambda v: v.state in ("failed", "exited", "lost"), timeout=40)
    finally:
        watch.close()
    assert failed.state == "failed" and failed.failure is not None and failed.failure.kind == kind, failed.failure
    assert at - watch.seen["fault"] < 2.0, f"failure reported {at - watch.seen['fault']:.2f}s after its log line"
    assert failed.failure.last_lines and any(text in line for line in failed.failure.last_lines)
    _, done = await rec.until(lambda v: v.exit_code is not None, timeout=10)
    assert done.state == "failed"
    await manager.close()   # lets the notify command finish
    assert notes.read_text().splitlines() == [f"failed|{failed.failure.message}"]   # once, with the reason


async def test_a_server_ignoring_sigterm_with_a_setsid_child_is_fully_stopped(free_port_factory, engine) -> None:
    port = free_port_factory()
    manager, rec = engine(sim_profile(port, "--ignore-sigterm", "--spawn-child"), grace_s=1.5)
    view = await manager.launch("sim")
    await rec.until(lambda v: v.state == "ready", timeout=40)
    before = marked_pids(view.run_id)
    sids = {int(Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[3]) for p in before}
    assert len(sids) >= 2, "the sim's child should sit in a session of its own"
    report = await manager.stop(view.run_id)
    assert report.killed and report.stopped and not report.blockers
    assert set(before) <= set(report.pids)
    assert marked_pids(view.run_id) == [] and not port_listening(port)
    _, final = await rec.until(lambda v: v.state == "stopped", timeout=10)
    assert final.failure is None


async def test_unasked_exit_0_is_a_failure_with_a_reason(free_port_factory, engine) -> None:
    port = free_port_factory()
    quick = Profile(name="quick", command=("/bin/sh", "-c", "echo starting; exit 0"), port=port)
    sim = sim_profile(free_port_factory(), "--exit-zero-after", "0.5")
    manager, rec = engine(quick, sim)
    view = await manager.launch("quick")
    _, failed = await rec.until(lambda v: v.run_id == view.run_id and v.state not in ("loading", "launching"))
    assert failed.state == "failed" and failed.exit_code == 0
    assert failed.failure.message == "exited unexpectedly with code 0" and "starting" in failed.failure.last_lines

    view = await manager.launch("sim")
    await rec.until(lambda v: v.run_id == view.run_id and v.state == "ready", timeout=40)
    _, gone = await rec.until(lambda v: v.run_id == view.run_id and v.state not in ("ready",), timeout=20)
    assert gone.state == "exited" and gone.exit_code == 0
    assert gone.failure.message == "exited unexpectedly with code 0"


async def test_reattach_in_a_new_manager_and_pid_reuse_is_lost(free_port_factory, engine) -> None:
    port = free_port_factory()
    profile = sim_profile(port, shards=16, load_seconds=6, time_scale=0.5)
    first, _ = engine(profile)
    view = await first.launch("sim", watch=False)
    await first.close()
    # A second manager (as a new specmon process would) finds the run still loading and follows it to ready.
    second, rec = engine(profile)
    [loading] = await second.refresh()
    assert loading.run_id == view.run_id and loading.state == "loading"
    await asyncio.gather(second.attach(view.run_id), second.attach(view.run_id))   # e.g. a view and a log pane
    await asyncio.sleep(0.3)
    assert len(tail_pids(Path(view.log_path))) == 1, "one run, one tail -F"
    await rec.until(lambda v: v.state == "ready", timeout=40)

    # PID reuse: a record whose pid is alive but started at another time (this test process) is lost.
    record = second.index.store.load(view.run_id)
    me = os.getpid()
    start = int(Path(f"/proc/{me}/stat").read_text().rpartition(")")[2].split()[19])
    fake_dir = Path(view.run_dir).parent / "20000101-000000-abcdef"
    fake_dir.mkdir()
    (fake_dir / "server.log").write_text("old\n")
    second.index.store.save(RunRecord(**{**record.__dict__, "run_id": fake_dir.name, "run_dir": str(fake_dir),
                                   "pid": me, "starttime": start + 1, "state": "loading", "ready_at": None}))
    views = {v.run_id: v for v in await second.refresh()}
    assert views[fake_dir.name].state == "lost" and "pid" in views[fake_dir.name].failure.message
    assert views[view.run_id].state == "ready"


async def test_restart_stops_the_old_run_and_launches_a_new_one(free_port_factory, engine) -> None:
    port = free_port_factory()
    manager, rec = engine(sim_profile(port))
    first = await manager.launch("sim")
    await rec.until(lambda v: v.run_id == first.run_id and v.state == "ready", timeout=40)
    second = await manager.restart("sim")
    assert second.run_id != first.run_id
    assert manager.index.store.load(first.run_id).state == "stopped"
    await rec.until(lambda v: v.run_id == second.run_id and v.state == "ready", timeout=40)


async def test_stopping_an_already_stopped_run_does_not_wait_for_the_new_runs_port(free_port_factory, engine) -> None:
    """Issue 10 #2: after a restart, quitting the TUI stopped the old run too, and that stop waited the whole port
    gate (15 s) for a listener that was the new run's, before the new run got its SIGTERM."""
    port = free_port_factory()
    manager, rec = engine(sim_profile(port))
    first = await manager.launch("sim")
    await rec.until(lambda v: v.run_id == first.run_id and v.state == "ready", timeout=40)
    second = await manager.restart("sim")
    await rec.until(lambda v: v.run_id == second.run_id and v.state == "ready", timeout=40)
    started = time.monotonic()
    report = await manager.stop(first.run_id)   # the port gate of the engine fixture is 10 s
    assert time.monotonic() - started < 5, report
    assert report.clean and not report.pids, report
    assert port in await manager.ops("local").listening()  # the new run was left alone


async def test_busy_port_missing_command_and_unwritable_run_dir_are_clear_errors(free_port_factory, engine,
                                                                                 isolated_home, monkeypatch) -> None:
    port = free_port_factory()
    listener = socket.socket()
    listener.bind(("127.0.0.1", port))
    listener.listen()
    try:
        manager, _ = engine(sim_profile(port))
        with pytest.raises(UserError, match=rf"^local: port {port} is already in use \(profile sim\) by pid "
                                            rf"{os.getpid()} \(.*\); stop it or choose another port \(free: \d+, \d+\)$"):
            await manager.launch("sim")
    finally:
        listener.close()
    runs_root = Path(os.environ["XDG_STATE_HOME"]) / "specmon" / "runs"
    assert manager.index.store.all() == [] and not (runs_root.exists() and [p for p in runs_root.iterdir() if p.is_dir()])

    missing = Profile(name="nopy", command=("/opt/nowhere/bin/python3", "-m", "specmon.sim"), port=free_port_factory())
    bare = Profile(name="bare", command=("no-such-interpreter-3.99",), port=free_port_factory())
    manager, _ = engine(missing, bare)
    with pytest.raises(UserError, match=r"^local: command not found: /opt/nowhere/bin/python3 \(profile nopy"):
        await manager.launch("nopy")
    with pytest.raises(UserError, match=r"command not found: no-such-interpreter-3.99"):
        await manager.launch("bare")

    blocked = isolated_home / "blocked-state"   # where run directories would go is a file
    blocked.mkdir()
    (blocked / "specmon").write_text("not a directory")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))
    manager, _ = engine(sim_profile(free_port_factory()), state_dir=isolated_home / "local-state")
    with pytest.raises(UserError, match=r"^local: cannot create run directory .*/specmon/runs"):
        await manager.launch("sim")
    assert manager.index.store.all() == []


async def test_env_reaches_the_server_with_quotes_and_bad_names_are_refused(free_port_factory, engine) -> None:
    value = "a 'b' \"c\" $HOME `x` ;d"
    script = 'printf "FOO=%s\\nMARK=%s\\n" "$FOO" "$SPECMON_RUN_ID"; sleep 30'
    ok = Profile(name="env", command=("/bin/sh", "-c", script), port=free_port_factory(), env=(("FOO", value),))
    bad = Profile(name="bad", command=("/bin/sh", "-c", "true"), port=free_port_factory(), env=(("FOO;rm", "x"),))
    manager, _ = engine(ok, bad)
    view = await manager.launch("env")
    log = Path(view.log_path)
    for _ in range(100):
        if "MARK=" in log.read_text():
            break
        await asyncio.sleep(0.05)
    assert log.read_text().splitlines()[:2] == [f"FOO={value}", f"MARK={view.run_id}"]
    with pytest.raises(UserError, match=r"profile bad: env: invalid variable name 'FOO;rm'"):
        await manager.launch("bad")


FAKE_NVIDIA_SMI = """#!/bin/sh
# Fake nvidia-smi: every pid listed in $0.pids is a compute app using 20480 MiB; with $0.leak, even after it died.
# Rows answer the query specmon makes (--query-compute-apps=gpu_uuid,pid,used_memory,process_name).
for p in $(cat "$0.pids" 2>/dev/null); do
  if [ -e "$0.leak" ] || { [ -r /proc/$p/stat ] && ! grep -q ') Z ' /proc/$p/stat; }; then
    echo "GPU-00000000-fake-4000-8000-000000000000, $p, 20480, sleep"
  fi
done
"""


async def test_stop_waits_for_gpu_memory_and_reports_a_holder(free_port_factory, engine, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(FAKE_NVIDIA_SMI)
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    profile = Profile(name="gpu", command=("/bin/sh", "-c", "sleep 60 & wait"), port=free_port_factory())
    manager, _ = engine(profile, stop_timings=StopTimings(grace_s=3, port_wait_s=5, gpu_wait_s=1.5))

    view = await manager.launch("gpu")
    await asyncio.sleep(0.3)
    Path(f"{fake}.pids").write_text(" ".join(map(str, marked_pids(view.run_id))))
    released = await manager.stop("gpu")
    assert released.clean, released.blockers

    view = await manager.launch("gpu")
    await asyncio.sleep(0.3)
    held = marked_pids(view.run_id)
    Path(f"{fake}.pids").write_text(" ".join(map(str, held)))
    Path(f"{fake}.leak").write_text("")
    leaked = await manager.stop("gpu")
    assert leaked.stopped and not leaked.clean
    assert sorted(leaked.blockers) == sorted(f"pid {p} still holds 20480 MiB of GPU memory" for p in held)


async def test_group_signal_reaches_every_process_of_the_group() -> None:
    """The group kill works through the host's /bin/sh (dash rejects `kill -TERM -- -PGID`)."""
    leader = subprocess.Popen(["/bin/sh", "-c", "env -i sleep 30 & env -i sleep 30 & wait"], start_new_session=True)
    try:
        await asyncio.sleep(0.3)
        group = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and
                 _pgid(int(p.name)) == leader.pid]
        assert len(group) == 3
        await HostOps(LocalTransport()).signal("TERM", leader.pid, [])
        leader.wait(5)
        await asyncio.sleep(0.3)
        assert all(not alive(p) for p in group)
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, 9)
            leader.wait()


def _pgid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])
    except (OSError, ValueError, IndexError):
        return None


async def test_server_other_is_ready_on_health_200_plus_a_completion(free_port_factory, engine) -> None:
    # A vLLM-flavoured sim declared as server "other": readiness may come only from /health + a completion.
    profile = dataclasses.replace(sim_profile(free_port_factory(), "--flavor", "vllm"), server="other")
    manager, rec = engine(profile)
    view = await manager.launch("sim")
    _, ready = await rec.until(lambda v: v.state == "ready", timeout=40)
    assert ready.run_id == view.run_id and ready.load_seconds


async def test_stall_warning_clears_when_output_resumes(free_port_factory, engine) -> None:
    script = "echo loading; sleep 2.5; echo 'still loading'; sleep 60"
    profile = Profile(name="pause", command=("/bin/sh", "-c", script), port=free_port_factory(), server="other",
                      stall_timeout_s=1.0)
    manager, rec = engine(profile)
    await manager.launch("pause")
    _, stalled = await rec.until(lambda v: v.stalled, timeout=10)
    assert stalled.state == "loading"
    _, resumed = await rec.until(lambda v: not v.stalled, timeout=10)
    assert resumed.state == "loading" and resumed.stall_reason is None


async def test_process_ended_waits_for_the_server_process_and_returns_at_once_for_an_ended_run(
        free_port_factory, engine) -> None:
    """What `specmon logs -f` waits on before it stops following: the run's process, not its log."""
    manager, rec = engine(sim_profile(free_port_factory()))
    view = await manager.launch("sim")
    record = manager.index.store.load(view.run_id)
    assert record is not None and record.pid == view.pid
    ended = asyncio.create_task(process_ended(manager.ops(record.host), record, poll_s=0.1))
    await rec.until(lambda v: v.state == "ready", timeout=40)
    assert not ended.done(), "returned while the server still runs"
    await manager.stop("sim")
    await asyncio.wait_for(ended, 10)                      # the process is gone: it returns
    stopped = manager.index.store.load(view.run_id)
    assert stopped is not None and stopped.terminal
    await asyncio.wait_for(process_ended(manager.ops(stopped.host), stopped), 1)   # an ended run: at once, without polling
