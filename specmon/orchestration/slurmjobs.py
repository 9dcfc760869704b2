"""Runs that are Slurm jobs: stopping one (scancel, then wait until the job has left the queue and its port is
free) and checking one nobody watches (for `status`, a preflight, or a specmon that reattaches).

The run's own files (launch.sh as the batch script, server.log as the job's output, pid and exit_code written by
the wrapper) sit in its run directory, which the submitting host and the job's node share. While a job waits in
the queue its run stays `launching`: queue time counts neither as load time nor against the stall rule.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
import time
from typing import Any

from specmon.model.runstate import RunState
from specmon.model.slurm import JobInfo
from specmon.orchestration.controller import job_verdict, progress_of
from specmon.orchestration.runstore import RunRecord
from specmon.orchestration.runview import StopReport
from specmon.orchestration.stopping import StopTimings
from specmon.sources.host import HostOps
from specmon.sources.slurm import SlurmHost


async def exit_code_of(ops: HostOps, record: RunRecord) -> int | None:
    """The server's exit code as the wrapper recorded it (None: not recorded)."""
    text = (await ops.read_file(record.run_dir + "/exit_code") or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


async def cancel(ops: HostOps, record: RunRecord, timings: StopTimings) -> StopReport:
    """Cancel the run's job and wait until it has left the queue and the run's port has no listener."""
    assert record.slurm_job is not None
    t0 = time.monotonic()
    slurm = SlurmHost(ops.transport)
    await ops.sh(f"umask 077; : > {shlex.quote(record.run_dir + '/stop_requested')} 2>/dev/null; true")
    job = await slurm.job(record.slurm_job)
    was_active = job is not None and job.active
    if was_active:
        await slurm.cancel(record.slurm_job)
    blockers = []
    deadline = t0 + timings.grace_s + timings.kill_wait_s
    while job is not None and job.active:
        if time.monotonic() >= deadline:
            blockers.append(f"Slurm job {job.job_id} is still {job.state} after scancel")
            break
        await asyncio.sleep(timings.poll_s)
        job = await slurm.job(record.slurm_job)
    # The port is checked on the submitting host, which is the job's node only on a one-machine cluster.
    deadline = time.monotonic() + timings.port_wait_s
    while was_active and not blockers and record.port in await ops.listening():
        if time.monotonic() >= deadline:
            blockers.append(f"port {record.port} on {ops.host} still has a listener")
            break
        await asyncio.sleep(timings.poll_s)
    return StopReport(run_id=record.run_id, profile=record.profile, stopped=job is None or not job.active,
                      killed=False, pids=(), blockers=tuple(blockers), seconds=time.monotonic() - t0,
                      exit_code=await exit_code_of(ops, record), job=record.slurm_job)


async def reconcile(ops: HostOps, record: RunRecord, job: JobInfo | None,
                    run_state: RunState | None) -> dict[str, Any]:
    """What changes in the record of a Slurm run nobody watched, now that its job is `job` (None: Slurm forgot
    it); `run_state` is the parser's state of its log (needed once the job has ended)."""
    if job is not None and job.active:
        if job.running and record.state == "launching":
            return {"state": "loading", "started_at": job.start_epoch or time.time()}
        return {}
    exit_code = await exit_code_of(ops, record)
    stop = record.stop_requested or await ops.read_file(record.run_dir + "/stop_requested") is not None
    state, failure = job_verdict(record, run_state, job, exit_code, stop)
    return {"state": state, "exit_code": exit_code, "stop_requested": stop,
            **(progress_of(run_state) if run_state is not None else {}),
            "failure": None if failure is None else dataclasses.asdict(failure)}
