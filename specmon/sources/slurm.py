"""Slurm's commands on the host where jobs are submitted (this machine, or a login node over SSH), through that
host's Transport: submit a run's job, read its state, cancel it. Every argument is quoted."""

from __future__ import annotations

import shlex

from specmon.model.slurm import (
    JobInfo,
    SlurmRequest,
    job_name,
    parse_job_id,
    parse_node_addresses,
    parse_scontrol_job,
    sbatch_argv,
)
from specmon.sources.transport import Transport, TransportError


class SlurmHost:
    """Slurm's client commands on one host."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def submit(self, request: SlurmRequest, run_id: str, run_dir: str, script: str) -> str:
        """Submit `script` as the run's job; its id. TransportError with sbatch's own words when it refuses."""
        argv = sbatch_argv(request, run_id, run_dir, script)
        result = await self.transport.run(shlex.join(argv), timeout=60)
        job_id = parse_job_id(result.out) if result.exit_code == 0 else None
        if job_id is None:
            said = (result.err or result.out).strip().splitlines()
            raise TransportError(f"{self.transport.host}: sbatch refused the job: "
                                 + (said[-1] if said else f"exit {result.exit_code}"))
        return job_id

    async def job(self, job_id: str) -> JobInfo | None:
        """The job's state now; None once the controller has forgotten it (MinJobAge after its end)."""
        result = await self.transport.run(f"scontrol show job -o {shlex.quote(job_id)}", timeout=30)
        if result.exit_code != 0:
            if "Invalid job id" in result.err:
                return None
            raise TransportError(f"{self.transport.host}: scontrol show job {job_id}: "
                                 f"{result.err.strip() or f'exit {result.exit_code}'}")
        return parse_scontrol_job(result.out)

    async def find(self, run_id: str) -> JobInfo | None:
        """The job specmon submitted for `run_id` (from any jump box: found by its name), while Slurm lists it."""
        result = await self.transport.run(f"squeue -h -o %i --name={shlex.quote(job_name(run_id))}", timeout=30)
        ids = result.out.split() if result.exit_code == 0 else []
        return await self.job(ids[-1]) if ids else None

    async def node_address(self, nodelist: str, rank: int) -> str | None:
        """The address of node `rank` (0: the first) of a job's node list, as Slurm reaches it (its NodeAddr, also
        how this host, which talks to the same controller, reaches it); None when the list has no such node."""
        q = shlex.quote(nodelist)
        names = await self.transport.run(f"scontrol show hostnames {q}", timeout=30)
        nodes = await self.transport.run(f"scontrol show node -o {q}", timeout=30)
        if names.exit_code != 0 or nodes.exit_code != 0:
            raise TransportError(f"{self.transport.host}: scontrol cannot tell the nodes {nodelist}: "
                                 f"{(names.err or nodes.err).strip() or 'no answer'}")
        ordered = names.out.split()
        return parse_node_addresses(nodes.out).get(ordered[rank], ordered[rank]) if rank < len(ordered) else None

    async def cancel(self, job_id: str) -> None:
        result = await self.transport.run(f"scancel {shlex.quote(job_id)}", timeout=30)
        if result.exit_code != 0 and "Invalid job id" not in result.err:
            raise TransportError(f"{self.transport.host}: scancel {job_id}: "
                                 f"{result.err.strip() or f'exit {result.exit_code}'}")
