"""Terminating a run's processes (`terminate`, the work under `Stopper.stop`): SIGTERM to the group, grace period,
SIGKILL, sweep by session id and marker, then gates.

Processes are found by the run's session id (the wrapper's pid, when its start time still matches) and by the
`SPECMON_RUN_ID=<run_id>` marker in /proc/*/environ: never by name. The gates wait until the port has no
listener and, where nvidia-smi exists, until no process of the run holds GPU memory.
"""

from __future__ import annotations

import asyncio
import shlex
import time
from dataclasses import dataclass

from specmon.model.runs.record import RunRecord
from specmon.orchestration.runs.view import StopReport
from specmon.sources.hostshell import HostOps


@dataclass(frozen=True)
class StopTimings:
    """How long each step may take (seconds)."""

    grace_s: float = 30.0
    kill_wait_s: float = 5.0
    port_wait_s: float = 15.0
    gpu_wait_s: float = 90.0
    poll_s: float = 0.25


async def _session_id(ops: HostOps, record: RunRecord) -> int | None:
    """The run's session id, only if the recorded pid is still the process we started: same start time AND
    carrying the run's marker (a record edited or mixed up must never aim a group signal at a stranger)."""
    if not record.pid or record.pid <= 1:
        return None
    info = await ops.proc(record.pid)
    if info is None or info.starttime != record.starttime:
        return None
    return record.pid if await ops.owns(record.pid, record.run_id) else None


async def terminate(ops: HostOps, record: RunRecord, *, force: bool, timings: StopTimings) -> StopReport:
    """Stop every process of `record`'s run and wait for its port and GPUs to be released."""
    t0 = time.monotonic()
    await ops.sh(f"umask 077; : > {shlex.quote(record.run_dir + '/stop_requested')} 2>/dev/null; true")
    sid = await _session_id(ops, record)
    signalled: set[int] = set()
    killed = False

    async def members() -> list[int]:
        return [p.pid for p in await ops.members(sid or -1, record.run_id)]

    async def wait_gone(limit_s: float) -> list[int]:
        deadline = time.monotonic() + limit_s
        left = await members()
        while left and time.monotonic() < deadline:
            await asyncio.sleep(timings.poll_s)
            left = await members()
        return left

    left = await members()
    if left and not force:
        signalled.update(left)
        await ops.signal("TERM", sid, left)
        left = await wait_gone(timings.grace_s)
    if left:
        killed = True
        signalled.update(left)
        await ops.signal("KILL", sid, left)
        left = await wait_gone(timings.kill_wait_s)
        if left:   # children forked during the sweep get one more round
            signalled.update(left)
            await ops.signal("KILL", None, left)
            left = await wait_gone(timings.kill_wait_s)

    blockers = [f"pid {p} of run {record.run_id} survived SIGKILL" for p in left]
    deadline = time.monotonic() + timings.port_wait_s
    # Only a run that had processes can be releasing its ports: a listener found when none was left (a newer run
    # of the profile, after a restart) is not this run's, and waiting for it would only stall the stop.
    while signalled and (held_ports := sorted(set(record.gate_ports) & await ops.listening())):
        if time.monotonic() >= deadline:
            blockers += [f"port {p} on {ops.host} still has a listener" for p in held_ports]
            break
        await asyncio.sleep(timings.poll_s)

    apps = await ops.compute_apps()
    if apps is not None:
        deadline = time.monotonic() + timings.gpu_wait_s
        while held := sorted(set(apps) & (signalled | set(left))):
            if time.monotonic() >= deadline:
                blockers += [f"pid {p} still holds {apps[p]} MiB of GPU memory" for p in held]
                break
            await asyncio.sleep(max(timings.poll_s, 1.0))
            apps = await ops.compute_apps() or {}

    exit_text = await ops.read_file(record.run_dir + "/exit_code")
    exit_code = int(exit_text.strip()) if exit_text and exit_text.strip().lstrip("-").isdigit() else None
    return StopReport(
        run_id=record.run_id,
        profile=record.profile,
        stopped=not left,
        killed=killed,
        pids=tuple(sorted(signalled)),
        blockers=tuple(blockers),
        seconds=time.monotonic() - t0,
        exit_code=exit_code,
    )
