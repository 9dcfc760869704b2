"""The jobs of a host's Slurm runs listed by one `squeue` (model.runs.slurm.SQUEUE_FORMAT) read as the same jobs as
`scontrol show job -o` tells them one by one. The lines are as Slurm 22.05 printed them (the test cluster of
tests/support/slurm_support.py: job 1 running, job 2 queued behind it)."""

from __future__ import annotations

import asyncio
import shlex

from specmon.model.runs.slurm import parse_scontrol_job, parse_squeue_jobs, squeue_argv
from specmon.sources.slurm import SlurmHost
from specmon.sources.transport import MAX_OUTPUT_BYTES, CommandResult, OutputStream, Transport

SQUEUE = ("JobId=2 JobState=PENDING Reason=Resources NodeList= StartTime=2026-12-06T00:34:08 TimeLimit=10:00 "
          "RunTime=0:00\n"
          "JobId=1 JobState=RUNNING Reason=None NodeList=localhost StartTime=2026-12-06T00:24:08 TimeLimit=10:00 "
          "RunTime=0:03\n")
SCONTROL = {
    "1": ("JobId=1 JobName=wrap UserId=root(0) JobState=RUNNING Reason=None Dependency=(null) ExitCode=0:0 "
          "RunTime=00:00:03 TimeLimit=00:10:00 StartTime=2026-12-06T00:24:08 EndTime=2026-12-06T00:34:08 "
          "Partition=debug NodeList=localhost BatchHost=localhost NumNodes=1"),
    "2": ("JobId=2 JobName=wrap UserId=root(0) JobState=PENDING Reason=Resources Dependency=(null) ExitCode=0:0 "
          "RunTime=00:00:00 TimeLimit=00:10:00 StartTime=2026-12-06T00:34:08 EndTime=2026-12-06T00:44:08 "
          "Partition=debug NodeList= SchedNodeList=localhost NumNodes=1"),
}


def test_squeues_listing_reads_as_the_jobs_scontrol_tells_one_by_one() -> None:
    listed = parse_squeue_jobs(SQUEUE)
    assert listed == {job_id: parse_scontrol_job(line) for job_id, line in SCONTROL.items()}
    assert listed["1"].describe() == "RUNNING on localhost, 9 min 57 s left"
    assert listed["2"].describe() == "PENDING (Resources), start expected 2026-12-06T00:34:08"


def test_one_squeue_names_every_job_and_a_garbled_line_is_no_job() -> None:
    argv = squeue_argv(["7", "8", "9"])
    assert argv[:3] == ["squeue", "--noheader", "--jobs=7,8,9"]
    assert parse_squeue_jobs("slurm_load_jobs error: Unexpected message received JobId= JobState=\n") == {}


class Login(Transport):
    """A login node whose squeue lists jobs 1 and 2 (SQUEUE) and whose scontrol tells job 3, which has ended."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    async def run(self, command: str, *, input: bytes | None = None, timeout: float | None = None,
                  limit: int = MAX_OUTPUT_BYTES) -> CommandResult:
        self.commands.append(command)
        if command.startswith("squeue"):
            return CommandResult(0, SQUEUE.encode(), b"")
        ended = "JobId=3 JobState=COMPLETED Reason=None ExitCode=0:0 RunTime=00:00:09 TimeLimit=00:10:00 NodeList=localhost"
        return CommandResult(0, ended.encode(), b"")

    def stream(self, command: str) -> OutputStream:
        raise NotImplementedError


async def test_jobs_asked_at_once_are_one_squeue_and_one_it_does_not_list_is_asked_alone() -> None:
    login = Login()
    slurm = SlurmHost(login)
    jobs = await asyncio.gather(*(slurm.polled_job(job_id) for job_id in ("1", "2", "1", "3")))
    assert [job.state if job else None for job in jobs] == ["RUNNING", "PENDING", "RUNNING", "COMPLETED"]
    assert jobs[3] is not None and jobs[3].exit_code == 0   # an ended job's end is scontrol's to tell
    assert login.commands == [shlex.join(squeue_argv(["1", "2", "3"])), "scontrol show job -o 3"]


async def test_a_job_asked_alone_is_one_scontrol_not_a_squeue_as_well() -> None:
    login = Login()
    job = await SlurmHost(login).polled_job("3")
    assert job is not None and job.state == "COMPLETED"
    assert login.commands == ["scontrol show job -o 3"]
