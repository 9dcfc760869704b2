"""The serving view of a server that ends on its own: a Slurm job at its time limit (real Slurm, tests/slurm_support)
raises no "/metrics stopped answering" alert; its /metrics went quiet because it ended."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from slurm_support import SlurmCluster
from test_slurm import managers, slurm_profile  # noqa: F401  (the fixture: managers whose runs are stopped after)

from specmon.model.runs.slurm import SlurmRequest, parse_scontrol_job
from specmon.model.server.serving import ServingUpdate
from specmon.orchestration.inspect.serving import ServingWatcher


def test_a_job_slurm_is_completing_is_ending() -> None:
    """A job at its time limit passes through COMPLETING while Slurm kills its processes (seconds on a busy node):
    its server's /metrics is already gone then. Still 'running' to Slurm, it is ending, and raised a false alert
    (CI-like run of two suites at once: '/metrics stopped answering (connection refused)')."""
    line = ("JobId=7 JobName=specmon-sim JobState={} Reason=TimeLimit StartTime=2026-12-05T08:00:00 "
            "RunTime=00:01:21 TimeLimit=00:01:00 NodeList=localhost ExitCode=0:15")
    completing, running = (parse_scontrol_job(line.format(state)) for state in ("COMPLETING", "RUNNING"))
    assert completing is not None and running is not None
    assert completing.ending and completing.running
    assert running.ending   # past its limit: near it too
    far = parse_scontrol_job(line.format("RUNNING").replace("RunTime=00:01:21", "RunTime=00:00:05"))
    assert far is not None and not far.ending


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_a_job_ended_by_its_time_limit_raises_no_metrics_alert(slurm: SlurmCluster, managers,  # noqa: F811
                                                                      free_port: int, tmp_path: Path) -> None:
    # Slurm's limits are whole minutes, enforced about every 30 s: this takes 60-100 s.
    profile = dataclasses.replace(slurm_profile(free_port), slurm=SlurmRequest(time="1"), metrics_interval_s=0.5)
    manager, views = managers(profile)
    updates: list[ServingUpdate] = []
    watcher = ServingWatcher(manager, updates.append)
    unsubscribe = manager.subscribe(watcher.track)
    try:
        await manager.launch("sim")
        await views.until(lambda v: v.state == "ready", timeout=90)
        ended = await views.until(lambda v: not v.active, timeout=150)
        assert ended.failure is not None and ended.failure.kind == "timeout", ended
        await asyncio.sleep(1.0)
    finally:
        unsubscribe()
        await watcher.close()
    assert any(u.figures is not None for u in updates), updates[-3:]   # it was read while it ran
    said = [a for u in updates for a in u.raised]
    assert not [a for a in said if "/metrics" in a], said
