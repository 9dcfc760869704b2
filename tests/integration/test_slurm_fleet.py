"""Many Slurm runs watched at once, against a real single-node Slurm cluster whose node runs several jobs at once
(tests/support/slurm_support.py): what watching them asks of the controller does not grow with their number."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest
from lifecycle_support import Views, config_of, sim_profile, stop_everything
from ports import free_port
from slurm_support import SlurmCluster

from specmon.model.config import Profile
from specmon.model.runs.slurm import SlurmRequest
from specmon.orchestration.inspect.serving import ServingWatcher
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView
from specmon.orchestration.runs.watcher import VOUCHED_CHECK_S, WatchTimings

pytestmark = pytest.mark.slow

RUNS = 4
WINDOW_S = 8.0
# The controller's answers about jobs: one job (scontrol show job J), every job (squeue), a user's jobs.
JOB_QUERIES = ("REQUEST_JOB_INFO_SINGLE", "REQUEST_JOB_INFO", "REQUEST_JOB_USER_INFO")


def slurm_profiles() -> list[Profile]:
    """RUNS sim profiles, each run as a Slurm job."""
    return [dataclasses.replace(sim_profile(free_port(), name=f"sim{i}"), slurm=SlurmRequest(time="10"))
            for i in range(RUNS)]


def manager_of(profiles: list[Profile], tmp_path: Path) -> RunManager:
    """A manager of `profiles` whose state is in tmp_path (a second one made so sees the same runs)."""
    return RunManager(config_of(*profiles), state_dir=tmp_path / "state", stop_timings=StopTimings(grace_s=10, port_wait_s=10))


async def launch_ready(manager: RunManager, profiles: list[Profile]) -> list[RunView]:
    """Launch every profile; their views once every run is READY."""
    views = Views(manager)
    for profile in profiles:
        await manager.launch(profile.name)
    return [await views.until(lambda v, name=profile.name: v.profile == name and v.state == "ready", timeout=120)
            for profile in profiles]


async def test_ready_slurm_runs_on_one_host_cost_the_controller_one_job_query_a_tick_not_one_each(
        slurm_shared: SlurmCluster, tmp_path: Path) -> None:
    profiles = slurm_profiles()
    manager = manager_of(profiles, tmp_path)
    try:
        ready = await launch_ready(manager, profiles)
        before, t0 = slurm_shared.rpcs(), time.monotonic()
        await asyncio.sleep(WINDOW_S)
        after, elapsed = slurm_shared.rpcs(), time.monotonic() - t0
        asked = sum(after.get(name, 0) - before.get(name, 0) for name in JOB_QUERIES)
        ticks = elapsed / WatchTimings().process_ready_s
        # One query a tick for all of them (a tick or two more at the window's edges), not RUNS a tick.
        assert asked <= ticks + 2, (asked, ticks, after)
        # Still followed, each by its own job: running on the node, as Slurm says.
        for run in ready:
            view = manager.view(run.run_id)
            assert view.state == "ready" and view.job is not None and view.job.startswith("RUNNING on localhost"), view
    finally:
        await stop_everything([manager])


async def test_ready_slurm_runs_whose_metrics_answer_are_asked_of_their_jobs_on_a_slower_clock_and_one_cancelled_ends(
        slurm_shared: SlurmCluster, tmp_path: Path) -> None:
    """Issue 37: with the serving view reading their /metrics, ready Slurm runs need no squeue every tick (a process
    the app starts each time): their servers answering shows their jobs running. Their jobs are asked together every
    VOUCHED_CHECK_S; a job cancelled is still seen ended, its server having stopped answering."""
    profiles = [dataclasses.replace(p, metrics_interval_s=0.25) for p in slurm_profiles()]
    manager = manager_of(profiles, tmp_path)
    serving = ServingWatcher(manager, lambda _update: None)
    unsubscribe = manager.subscribe(serving.track)
    try:
        ready = await launch_ready(manager, profiles)
        await asyncio.sleep(2 * WatchTimings().process_ready_s)   # every run's /metrics answered
        window = VOUCHED_CHECK_S + WINDOW_S
        before = slurm_shared.rpcs()
        await asyncio.sleep(window)
        after = slurm_shared.rpcs()
        asked = sum(after.get(name, 0) - before.get(name, 0) for name in JOB_QUERIES)
        # One squeue for all of them on each tick of the slower clock in the window (two at most); every tick
        # (window / process_ready_s, 9) before.
        assert 1 <= asked <= window // VOUCHED_CHECK_S + 1, (asked, after)

        cancelled = ready[0]
        job = manager.view(cancelled.run_id).slurm_job
        assert job is not None
        slurm_shared.run("scancel", job)
        views = Views(manager)
        ended = await views.until(lambda v: v.run_id == cancelled.run_id and v.state != "ready", timeout=60)
        assert ended.state in ("exited", "failed", "stopped", "lost"), ended
        assert all(manager.view(r.run_id).state == "ready" for r in ready[1:])
    finally:
        unsubscribe()
        await serving.close()
        await stop_everything([manager])


async def test_status_of_slurm_runs_on_one_host_asks_the_controller_once_not_twice_a_run(
        slurm_shared: SlurmCluster, tmp_path: Path) -> None:
    """Issue 37: `specmon status --all` asked `scontrol show job` twice for each Slurm run nobody watches (its check,
    then its job's line): 2 N job queries for N runs of one host. The jobs of a host's runs are now listed by one
    squeue a status, as the watchers poll them; every run is still shown ready, with its job as Slurm says it."""
    profiles = slurm_profiles()
    launcher, status = manager_of(profiles, tmp_path), manager_of(profiles, tmp_path)
    try:
        await launch_ready(launcher, profiles)
        await launcher.close()   # nobody watches them now: status checks them itself
        before = slurm_shared.rpcs()
        checked = await status.refresh(all_configs=True)
        after = slurm_shared.rpcs()
        asked = sum(after.get(name, 0) - before.get(name, 0) for name in JOB_QUERIES)
        assert asked == 1, f"{asked} job queries of the controller for the status of {RUNS} runs: {after}"
        assert [(v.state, (v.job or "").startswith("RUNNING on localhost")) for v in checked] == [("ready", True)] * RUNS
    finally:
        await stop_everything([status, launcher])
