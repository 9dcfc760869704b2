"""Runs that are Slurm jobs: submitting one (or the one job of a multi-node run), stopping one (scancel, then wait
until the job has left the queue and its port is free on the job's node) and checking one nobody watches (for
`status`, a preflight, or a specmon that reattaches).

A multi-node job (`nodes = N`) is a multi-node run (orchestration.runs.multinode: one record per node rank, one overall
state, ready with rank 0, failed when any rank fails) whose node runs all sit in the submitting host's runs root
and share one job: `model.runs.slurm.nodes_script` starts each rank on its node, the rank from Slurm's SLURM_NODEID.

The run's own files (launch.sh as the batch script, server.log as the job's output, pid and exit_code written by
the wrapper) sit in its run directory, which the submitting host and the job's node share. While a job waits in
the queue its run stays `launching`: queue time counts neither as load time nor against the stall rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shlex
import time
from collections.abc import Sequence

from specmon.errors import UserError
from specmon.model.config import Profile
from specmon.model.runs.multinode import NodePlacement, node_command
from specmon.model.runs.record import Edit, NodeSeat, RunRecord, host_url, progress_of
from specmon.model.runs.runstate import RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import JobInfo, SlurmRequest, nodes_script
from specmon.model.runs.verdicts import job_verdict
from specmon.orchestration.runs.multinode import NodeRuns, node_run_id
from specmon.orchestration.runs.store import RunStore, StateWriteError, new_run_id
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView, StopReport
from specmon.sources import timelimit
from specmon.sources.hostshell import HostOps
from specmon.sources.slurm import JobTransport, JobUnknown, SlurmHost
from specmon.sources.transport import TransportError


async def submit(ops: HostOps, store: RunStore, request: SlurmRequest, run_id: str, run_dir: str, script: str,
                 runs: Sequence[str]) -> str:
    """Submit `script` as the job of run `run_id` (output: `run_dir`/server.log) and record the job id in each of
    `runs` (the run, or every node rank of a multi-node run). A job specmon cannot record is cancelled again."""
    slurm = SlurmHost(ops.transport)
    job = await slurm.submit(request, run_id, run_dir, script)
    try:
        for run in runs:
            store.change(run, lambda r: dataclasses.replace(r, slurm_job=job))
    except StateWriteError:   # a job specmon cannot record must not run on unseen
        with contextlib.suppress(TransportError, TimeoutError):
            await slurm.cancel(job)
        raise
    return job


async def launch_nodes(manager: NodeRuns, profile: Profile, *, watch: bool) -> RunView:
    """Launch a multi-node Slurm profile as one job (see the module docstring); the run's view."""
    assert profile.slurm is not None and profile.slurm.nodes is not None
    nnodes, ops = profile.slurm.nodes, manager.ops(profile.host)
    try:
        async with manager.launch_locks(profile, [profile.host]):
            await manager.preflight(profile, ops, profile.host)
            run_id = new_run_id()
            root = await ops.runs_root()
            node_ids = tuple(node_run_id(run_id, rank) for rank in range(nnodes))
            # Rank 0's address is known once the job runs: each rank's command reads it from the job's script.
            dist = NodePlacement(0, nnodes, "{master_addr}", profile.master_port).dist_init_addr
            manager.store.save(RunRecord(
                run_id=run_id, profile=profile.name, host=profile.host, run_dir=f"{root}/{node_ids[0]}",
                port=profile.port, url=profile.url or host_url(profile.port), server=profile.server,
                health_path=profile.health_path, stall_timeout_s=profile.stall_timeout_s,
                notify_cmd=profile.notify_cmd, expected_load_s=profile.expected_load_s, started_at=time.time(),
                nodes=node_ids, config=manager.config_key))
            made: list[RunRecord] = []
            try:
                for rank, node_id in enumerate(node_ids):
                    argv = node_command(profile.command, profile.server,
                                        NodePlacement(rank, nnodes, "{master_addr}", profile.master_port))
                    made.append(await manager.start_run(profile, profile.host, node_id, argv, submit=False,
                                                        node=NodeSeat(run_id, rank, dist)))
                script = f"{made[0].run_dir}/job.sh"
                await ops.transport.write_file(script, nodes_script(run_id, root, nnodes).encode(), mode=0o700)
                await submit(ops, manager.store, profile.slurm, run_id, made[0].run_dir, script, node_ids)
            except BaseException:
                for record in made:
                    await asyncio.shield(manager.unmake(ops, record, True))
                with contextlib.suppress(StateWriteError):
                    manager.store.forget(run_id)
                raise
    except TransportError as exc:
        raise UserError(str(exc)) from None
    if watch:
        return await manager.attach(run_id)
    return manager.view(run_id)


async def exit_code_of(ops: HostOps, record: RunRecord) -> int | None:
    """The server's exit code as the wrapper recorded it (None: not recorded)."""
    text = (await ops.read_file(record.run_dir + "/exit_code") or "").strip()
    return int(text) if text.lstrip("-").isdigit() else None


async def job_node(ops: HostOps, record: RunRecord, job: JobInfo | None) -> tuple[str | None, str | None]:
    """The name and the address (as the host reaches it) of the run's node (its node rank's, in a multi-node
    job): as recorded, else from Slurm while the job runs; (None, None) before it ran."""
    if record.server_addr is not None or job is None or not job.running or not job.nodes:
        return record.slurm_node, record.server_addr
    node = await SlurmHost(ops.transport).node(job.nodes, record.node_rank or 0)
    return node if node is not None else (None, None)


async def job_transport(ops: HostOps, record: RunRecord) -> JobTransport | None:
    """The run's node through its job's allocation (`srun --overlap`), while the job runs; None otherwise (not a
    Slurm run, queued, ended)."""
    if record.slurm_job is None or record.terminal:
        return None
    slurm = SlurmHost(ops.transport)
    job = await slurm.job(record.slurm_job)
    if job is None or not job.running or not job.nodes:
        return None
    node = await slurm.node(job.nodes, record.node_rank or 0)
    return None if node is None else JobTransport(ops.transport, job.job_id, node[0])


async def _port_answers(ops: HostOps, addr: str, port: int) -> bool:
    """Whether something accepts connections on `addr`:`port`, tried from the host (the login node)."""
    try:
        _, writer = await timelimit.wait_for(ops.transport.open_tcp(addr, port), 5.0)
    except (OSError, TransportError, asyncio.TimeoutError):
        return False
    writer.close()
    return True


async def cancel(ops: HostOps, record: RunRecord, timings: StopTimings) -> StopReport:
    """Cancel the run's job and wait until it has left the queue and the server's port on its node has no
    listener (a worker rank serves none)."""
    assert record.slurm_job is not None
    t0 = time.monotonic()
    slurm = SlurmHost(ops.transport)
    await ops.sh(f"umask 077; : > {shlex.quote(record.run_dir + '/stop_requested')} 2>/dev/null; true")
    job = await slurm.job(record.slurm_job)
    was_active = job is not None and job.active
    addr = (await job_node(ops, record, job))[1] if record.serves_api else None
    if was_active:
        await slurm.cancel(record.slurm_job)
    blockers = []
    deadline = t0 + timings.grace_s + timings.kill_wait_s
    while job is not None and job.active:
        if time.monotonic() >= deadline:
            blockers.append(f"Slurm job {job.job_id} is still {job.state} after scancel")
            break
        await asyncio.sleep(timings.poll_s)
        with contextlib.suppress(JobUnknown):   # unknown this time: asked again
            job = await slurm.job(record.slurm_job)
    # The port is the job's node's, reached from the host as Slurm names the node.
    deadline = time.monotonic() + timings.port_wait_s
    while addr is not None and not blockers and await _port_answers(ops, addr, record.port):
        if time.monotonic() >= deadline:
            blockers.append(f"port {record.port} on node {addr} (job {record.slurm_job}) still has a listener")
            break
        await asyncio.sleep(timings.poll_s)
    return StopReport(run_id=record.run_id, profile=record.profile, stopped=job is None or not job.active,
                      killed=False, pids=(), blockers=tuple(blockers), seconds=time.monotonic() - t0,
                      exit_code=await exit_code_of(ops, record), job=record.slurm_job)


async def reconcile(ops: HostOps, record: RunRecord, job: JobInfo | None,
                    run_state: RunState | None) -> Edit:
    """What changes in the record of a Slurm run nobody watched, now that its job is `job` (None: Slurm forgot
    it); `run_state` is the parser's state of its log (needed once the job has ended)."""
    if job is not None and job.active:
        found = job.running and record.server_addr is None
        name, addr = await job_node(ops, record, job) if found else (None, None)
        starts, at = job.running and record.state == RunStatus.LAUNCHING, job.start_epoch or time.time()

        def running(r: RunRecord) -> RunRecord:
            r = dataclasses.replace(r, server_addr=addr, slurm_node=name) if found else r
            return r.loading_from(at) if starts else r
        return running
    exit_code = await exit_code_of(ops, record)
    stop = record.stop_requested or await ops.read_file(record.run_dir + "/stop_requested") is not None
    started = await ops.read_file(record.run_dir + "/pid") is not None
    state, failure = job_verdict(record, run_state, job, exit_code, stop, started)
    progress = progress_of(run_state) if run_state is not None else None
    return lambda r: dataclasses.replace(r, state=state, exit_code=exit_code, stop_requested=stop,
                                         failure=failure).with_progress(progress)
