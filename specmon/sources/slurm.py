"""Slurm's commands on the host where jobs are submitted (this machine, or a login node over SSH), through that
host's Transport: submit a run's job, read its state, find its nodes, cancel it. Every argument is quoted.

The jobs of the runs watched on a host are polled together: the asks of one moment (the watchers wake on a shared
tick) are one `squeue` for all of their jobs, not one `scontrol` each, so N Slurm runs cost the controller one
request a tick, not N.

`JobTransport` reaches one node of a running job through the allocation (`srun --jobid=J --overlap -w NODE`):
what the GPU and env views run there sees the node's GPUs and the job's processes, as on the node itself."""

from __future__ import annotations

import asyncio
import contextlib
import shlex

from specmon.model.logs.clean import one_line
from specmon.model.runs.slurm import (
    JobInfo,
    SlurmRequest,
    job_name,
    parse_job_id,
    parse_node_addresses,
    parse_scontrol_job,
    parse_squeue_jobs,
    sbatch_argv,
    squeue_argv,
)
from specmon.sources.transport import MAX_OUTPUT_BYTES, CommandResult, OutputStream, Transport, TransportError

ANSWER_BYTES = 1 << 20   # what is read of a Slurm client's answer: one job's or node list's is a few kB
_LISTING: set[asyncio.Task[None]] = set()   # the squeue listings under way (the loop keeps only weak references)
SUBMIT_TIMEOUT_S = 60.0


class JobUnknown(TransportError):
    """scontrol's answer about a job did not read as one: its state is unknown this time (not gone)."""


class SlurmHost:
    """Slurm's client commands on one host. Every command is time-limited and what is read of its answer bounded
    (ANSWER_BYTES): a client that hangs or prints without end is a TransportError, never a hang."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._asked: dict[str, list[asyncio.Future[JobInfo | None]]] | None = None   # polled jobs asked this moment

    async def _run(self, command: str, timeout: float = 30.0) -> CommandResult:
        try:
            return await self.transport.run(command, timeout=timeout, limit=ANSWER_BYTES)
        except TimeoutError:
            raise TransportError(f"{self.transport.host}: {command.split()[0]} did not answer within "
                                 f"{timeout:.0f} s") from None

    async def submit(self, request: SlurmRequest, run_id: str, run_dir: str, script: str) -> str:
        """Submit `script` as the run's job; its id. TransportError with sbatch's own words when it refuses, or
        when it does not answer (a job it submitted all the same is found by its name and cancelled)."""
        argv = sbatch_argv(request, run_id, run_dir, script)
        try:
            result = await self._run(shlex.join(argv), timeout=SUBMIT_TIMEOUT_S)
        except TransportError:
            with contextlib.suppress(TransportError):
                if (job := await self.find(run_id)) is not None:
                    await self.cancel(job.job_id)
            raise
        job_id = parse_job_id(result.out) if result.exit_code == 0 else None
        if job_id is None:
            said = (result.err or result.out).strip().splitlines()
            raise TransportError(f"{self.transport.host}: sbatch refused the job: "
                                 + (said[-1] if said else f"exit {result.exit_code}"))
        return job_id

    async def job(self, job_id: str) -> JobInfo | None:
        """The job's state now; None once the controller has forgotten it (MinJobAge after its end: scontrol says
        `Invalid job id`). An answer that does not read as this job is JobUnknown: unknown this time, not gone."""
        try:
            result = await self._run(f"scontrol show job -o {shlex.quote(job_id)}")
        except TransportError as exc:
            raise JobUnknown(f"scontrol show job {job_id}: {exc}") from None
        if result.exit_code != 0:
            if "Invalid job id" in result.err:
                return None
            raise JobUnknown(one_line(f"{self.transport.host}: scontrol show job {job_id}: "
                                      f"{result.err.strip() or f'exit {result.exit_code}'}", 300))
        job = parse_scontrol_job(result.out)
        if job is None or job.job_id != job_id:
            raise JobUnknown(one_line(f"{self.transport.host}: scontrol show job {job_id}: an answer that is not "
                                      f"this job's: {result.out.strip()[:120]!r}", 300))
        return job

    async def polled_job(self, job_id: str) -> JobInfo | None:
        """The job's state as `job` tells it, asked together with every job asked at the same moment on this host:
        one `squeue` lists those still queued or running; one it does not list (ended, forgotten, or squeue
        failed), or the only job asked, is asked alone with `job`, which tells its end. TransportError when the
        host cannot be asked."""
        loop = asyncio.get_running_loop()
        if self._asked is None:
            self._asked = {}
            loop.call_soon(self._send_asks)
        answer: asyncio.Future[JobInfo | None] = loop.create_future()
        self._asked.setdefault(job_id, []).append(answer)
        listed = await answer
        return listed if listed is not None else await self.job(job_id)

    def _send_asks(self) -> None:
        asked, self._asked = self._asked or {}, None
        if len(asked) == 1:   # one job: scontrol alone asks the controller less than squeue (2 requests, not 3)
            for answer in next(iter(asked.values())):
                if not answer.done():
                    answer.set_result(None)
            return
        task = asyncio.get_running_loop().create_task(self._list(asked))
        _LISTING.add(task)
        task.add_done_callback(_LISTING.discard)

    async def _list(self, asked: dict[str, list[asyncio.Future[JobInfo | None]]]) -> None:
        """One squeue for every job of `asked`; each ask gets its job as listed, queued or running (None: not so
        listed)."""
        waiting = [(job_id, answer) for job_id, answers in asked.items() for answer in answers]
        try:
            listed = await self.listed(list(asked))
        except BaseException as exc:
            for _, answer in waiting:
                if not answer.done():
                    answer.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for job_id, answer in waiting:
            if not answer.done():
                answer.set_result(listed.get(job_id))

    async def listed(self, job_ids: list[str]) -> dict[str, JobInfo]:
        """Those of `job_ids` still queued or running, by one `squeue` (a job it does not list: ended, forgotten, or
        squeue failed; `job` tells which)."""
        result = await self._run(shlex.join(squeue_argv(job_ids)))
        jobs = parse_squeue_jobs(result.out) if result.exit_code == 0 else {}
        return {job_id: job for job_id, job in jobs.items() if job.active}

    async def find(self, run_id: str) -> JobInfo | None:
        """The job specmon submitted for `run_id` (from any jump box: found by its name), while Slurm lists it."""
        result = await self._run(f"squeue -h -o %i --name={shlex.quote(job_name(run_id))}")
        ids = result.out.split() if result.exit_code == 0 else []
        return await self.job(ids[-1]) if ids else None

    async def node(self, nodelist: str, rank: int) -> tuple[str, str] | None:
        """Node `rank` (0: the first) of a job's node list: its name and its address as Slurm reaches it (its
        NodeAddr, also how this host, which talks to the same controller, reaches it); None when the list has no
        such node."""
        q = shlex.quote(nodelist)
        names = await self._run(f"scontrol show hostnames {q}")
        nodes = await self._run(f"scontrol show node -o {q}")
        if names.exit_code != 0 or nodes.exit_code != 0:
            raise TransportError(f"{self.transport.host}: scontrol cannot tell the nodes {nodelist}: "
                                 f"{(names.err or nodes.err).strip() or 'no answer'}")
        ordered = names.out.split()
        if rank >= len(ordered):
            return None
        return ordered[rank], parse_node_addresses(nodes.out).get(ordered[rank], ordered[rank])

    async def cancel(self, job_id: str) -> None:
        result = await self._run(f"scancel {shlex.quote(job_id)}")
        if result.exit_code != 0 and "Invalid job id" not in result.err:
            raise TransportError(f"{self.transport.host}: scancel {job_id}: "
                                 f"{result.err.strip() or f'exit {result.exit_code}'}")


class JobTransport(Transport):
    """Commands run on node `node` of running job `job_id`, inside its allocation, through `base` (the transport
    of the host that submitted it): `srun --jobid=J --overlap` shares the job's resources rather than waiting for
    free ones. Files and TCP stay `base`'s (the run directory is shared; ports are reached by the node's address)."""

    def __init__(self, base: Transport, job_id: str, node: str) -> None:
        self.base = base
        self.job_id = job_id
        self.node = node
        self.host = f"{base.host} job {job_id} on {node}"

    def _inside(self, command: str) -> str:
        return shlex.join(["srun", f"--jobid={self.job_id}", "--overlap", "--nodes=1", "--ntasks=1",
                           f"--nodelist={self.node}", "--quiet", "sh", "-c", command])

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None,
                  limit: int = MAX_OUTPUT_BYTES) -> CommandResult:
        return await self.base.run(self._inside(command), input=input, timeout=timeout, limit=limit)

    def stream(self, command: str) -> OutputStream:
        return self.base.stream(self._inside(command))
