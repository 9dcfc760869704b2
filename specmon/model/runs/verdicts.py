"""How a run ended, as rules: the terminal (status, failure) of a run whose process ended (`end_verdict`), of a Slurm
run whose job ended (`job_verdict`), and the log parser's fatal failure as a run's (`failure_of`). The verdicts
themselves are described in model.runs.runstatus; the watcher and the reconciler (orchestration.runs) apply these."""

from __future__ import annotations

from specmon.model.logs.logparse import KILLED
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import RunRecord
from specmon.model.runs.runstate import RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import JobInfo, over_memory, slurm_failure, unseen_run_dir


def failure_of(run_state: RunState | None) -> Failure | None:
    """The parser's fatal failure as a run's failure, with the lines before it (None when the log shows none)."""
    failure = run_state.failure if run_state is not None else None
    if run_state is None or failure is None or not failure.settled:
        return None
    return Failure(failure.kind, failure.message, run_state.last_lines)


def end_verdict(record: RunRecord, run_state: RunState | None, exit_code: int | None, lost: bool,
                stop_requested: bool) -> tuple[RunStatus, Failure | None]:
    """The terminal (state, failure) of a run whose process has ended."""
    last = run_state.last_lines if run_state is not None else ()
    if record.state == RunStatus.FAILED and record.failure:
        return RunStatus.FAILED, record.failure   # a stop after a failure keeps the reason
    if stop_requested or record.stop_requested:
        return RunStatus.STOPPED, None
    failure = failure_of(run_state) or record.failure
    if failure is None:
        if lost:
            failure = Failure(RunStatus.LOST, "the server's wrapper is gone without recording an exit code "
                                          "(killed by a signal or the OOM killer?)", last)
        elif exit_code == 0:
            failure = Failure(RunStatus.EXITED, "exited unexpectedly with code 0", last)
        else:
            failure = Failure(RunStatus.EXITED, f"exited with code {exit_code}", last)
    if lost:
        return RunStatus.LOST, failure
    return (RunStatus.EXITED if record.ready_at is not None else RunStatus.FAILED), failure


def job_verdict(record: RunRecord, run_state: RunState | None, job: JobInfo | None, exit_code: int | None,
                stop_requested: bool, wrapper_started: bool = True) -> tuple[RunStatus, Failure | None]:
    """The terminal (state, failure) of a Slurm run whose job has ended (`job` None: Slurm no longer knows it).

    An end that was Slurm's doing (time limit, node failure, preemption, a cancel specmon did not ask for) is its
    own verdict, ahead of whatever the server's log said as it was being killed (a `Killed` seen in the log before
    the job ended, e.g. by the kernel in the job's memory cgroup, gives way to Slurm's OUT_OF_MEMORY or TIMEOUT
    once Slurm has its end). A job that ended otherwise without
    starting the run's wrapper (`wrapper_started` False: no pid file) ran where the run directory is not."""
    state, failure = end_verdict(record, run_state, exit_code, job is None and exit_code is None, stop_requested)
    cause = slurm_failure(job) if job is not None else None
    if cause is None and job is not None and exit_code is None:   # the wrapper did not see its server end
        last = run_state.last_lines if run_state is not None else ()
        cause = over_memory(job, last) or (None if wrapper_started else unseen_run_dir(job, record.host, record.run_dir))
    logged = record.state == RunStatus.FAILED and record.failure is not None and record.failure.message != KILLED
    if cause is not None and state != RunStatus.STOPPED and not logged:
        state = RunStatus.EXITED if record.ready_at is not None else RunStatus.FAILED
        failure = Failure(cause[0], cause[1], run_state.last_lines if run_state is not None else ())
    return state, failure
