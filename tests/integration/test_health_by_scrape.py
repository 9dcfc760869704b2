"""Issue 37: a READY run was read twice over: its /metrics every second by the serving view, and its health path
every 5 s by its watcher (one more read a run, through the run's SSH host when remote), and its process was checked
every 2 s besides. A /metrics read that answers proves the server alive, so the watcher skips its own health read
and most of its process checks while they answer; once they stop, both go on at their own period and a server gone silent
or dead shows as it did before (the process check: at most one tick later)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import AsyncIterator

import pytest
from lifecycle_support import config_of, sim_profile, stop_everything
from test_lifecycle import Recorder

from specmon.model.server.serving import ServingUpdate
from specmon.orchestration.inspect.serving import ServingWatcher
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView
from specmon.orchestration.runs.watcher import VOUCHED_CHECK_S, RunWatcher, WatchTimings

pytestmark = pytest.mark.slow

HEALTH_READY_S = 1.0
PROCESS_READY_S = 1.0


@contextlib.asynccontextmanager
async def scraped_sim(port: int, timings: WatchTimings, metrics_interval_s: float = 0.25,
                      ) -> AsyncIterator[tuple[Recorder, RunView, RunWatcher]]:
    """A sim run READY whose /metrics the serving view reads every `metrics_interval_s` (4 times a second), once they
    have answered; stopped at the end (its process group let go first, if a test froze it)."""
    profile = dataclasses.replace(sim_profile(port), metrics_interval_s=metrics_interval_s)
    manager = RunManager(config_of(profile), stop_timings=StopTimings(grace_s=3.0, port_wait_s=10),
                         watch_timings=timings)
    rec = Recorder(manager)
    updates: list[ServingUpdate] = []
    serving = ServingWatcher(manager, updates.append)
    unsubscribe = manager.subscribe(serving.track)
    view = await manager.launch("sim")
    try:
        await rec.until(lambda v: v.state == "ready", timeout=60)
        deadline = time.monotonic() + 30
        while not any(u.figures is not None and u.figures.running is not None for u in updates):
            assert time.monotonic() < deadline, updates[-3:]
            await asyncio.sleep(0.1)
        watcher = manager._watching.watched[view.run_id]
        assert isinstance(watcher, RunWatcher)
        yield rec, view, watcher
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(view.pid or 0, signal.SIGCONT)
        unsubscribe()
        await serving.close()
        await stop_everything([manager])


@pytest.mark.timeout(120)
async def test_a_scraped_ready_run_gets_no_health_reads_and_a_frozen_one_shows_in_its_health(free_port_factory) -> None:
    async with scraped_sim(free_port_factory(), WatchTimings(health_ready_s=HEALTH_READY_S)) as (rec, view, watcher):
        await rec.until(lambda v: v.health == "200", timeout=30)
        assert watcher._health_reader is not None
        reads: list[float] = []
        read = watcher._health_reader.read

        async def counted() -> object:
            reads.append(time.monotonic())
            return await read()

        watcher._health_reader.read = counted   # type: ignore[method-assign,assignment]
        await asyncio.sleep(5 * HEALTH_READY_S)
        assert reads == [], f"{len(reads)} health reads of a server whose /metrics answered 4 times a second"

        os.killpg(view.pid or 0, signal.SIGSTOP)   # its group (the server in it) frozen: nothing answers
        stopped_at = time.monotonic()
        # Before: a health read every HEALTH_READY_S, which times out after 5 s. Now the same, once the last
        # /metrics answer is HEALTH_READY_S old. Margins for a busy box.
        _, silent = await rec.until(lambda v: v.health not in (None, "200"), timeout=HEALTH_READY_S + 5 + 15)
        assert silent.health == "timed out" and reads, silent
        assert time.monotonic() - stopped_at >= 5.0 - 0.5   # it was read and timed out, not guessed


@pytest.mark.timeout(120)
async def test_a_scraped_ready_run_gets_no_process_checks_and_a_killed_one_is_still_seen_ended(free_port_factory) -> None:
    """Its process check was a read of its host every tick (over SSH one command a host every 2 s, with three files a
    run in it). While its /metrics answers, its host is asked only every VOUCHED_CHECK_S (is the server at its port
    still this run's?); once it is killed, the next tick's check finds it gone and the run ends."""
    async with scraped_sim(free_port_factory(), WatchTimings(process_ready_s=PROCESS_READY_S)) as (rec, view, watcher):
        checks: list[tuple[float, float]] = []   # each check: when, and how long since /metrics last answered
        run_status = watcher.ops.run_status

        async def counted(run_dir: str, pid: int) -> object:
            checks.append((time.monotonic(), time.monotonic() - watcher._answered_at()))
            return await run_status(run_dir, pid)

        watcher.ops.run_status = counted   # type: ignore[method-assign,assignment]
        window = VOUCHED_CHECK_S + 2 * PROCESS_READY_S
        await asyncio.sleep(window)
        # While /metrics had answered within a tick: once or twice (each tick of the slower clock in the window), not
        # every tick (12 times). A check after a longer silence is due (a busy box can hold the reads back for a
        # second: seen in CI, one such check besides the two on the clock).
        vouched = [at for at, silent_s in checks if silent_s < PROCESS_READY_S]
        assert checks and len(vouched) <= window // VOUCHED_CHECK_S + 1, \
            f"{len(vouched)} process checks in {window:.0f} s while the server's /metrics answered (4 times a second)"

        os.killpg(view.pid or 0, signal.SIGKILL)
        # Seen by a check, at most two ticks after its last answer (before: one); margins for a busy box.
        _, ended = await rec.until(lambda v: v.state != "ready", timeout=2 * PROCESS_READY_S + 20)
        assert checks, ended
        assert ended.state in ("exited", "failed", "lost"), ended
