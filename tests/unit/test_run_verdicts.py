"""The run verdicts as pure rules (model.runs.verdicts): how a run whose process or Slurm job ended is judged, from its
record alone, with no host, store or event loop (issue 33 item 2)."""

from __future__ import annotations

import dataclasses

from specmon.model.logs.events import LogSignature
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import RunRecord, host_url
from specmon.model.runs.runstate import LogWatch
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import JobInfo, SlurmEnd
from specmon.model.runs.verdicts import end_verdict, failure_of, job_verdict

LOADING = RunRecord(run_id="20261205-120000-abcdef", profile="eagle3", host="local", run_dir="/tmp/run", port=30000,
                    url=host_url(30000), server="sglang", health_path="/health", stall_timeout_s=300.0, notify_cmd=None,
                    expected_load_s=None, started_at=1_000.0, state=RunStatus.LOADING)
READY = dataclasses.replace(LOADING, state=RunStatus.READY, ready_at=1_060.0)


def test_a_server_that_exits_0_before_it_was_ready_failed_and_after_it_was_ready_exited() -> None:
    state, failure = end_verdict(LOADING, None, 0, lost=False, stop_requested=False)
    assert state == RunStatus.FAILED and failure is not None and failure.text == "exited unexpectedly with code 0"
    state, failure = end_verdict(READY, None, 3, lost=False, stop_requested=False)
    assert state == RunStatus.EXITED and failure is not None and failure.text == "exited with code 3"


def test_a_run_asked_to_stop_is_stopped_but_a_failed_run_keeps_its_reason_through_the_stop() -> None:
    assert end_verdict(READY.asked_to_stop(), None, 143, lost=False, stop_requested=False) == (RunStatus.STOPPED, None)
    oom = Failure(LogSignature.OOM, "CUDA out of memory")
    failed = dataclasses.replace(LOADING, state=RunStatus.FAILED, failure=oom)
    assert end_verdict(failed, None, 1, lost=False, stop_requested=True) == (RunStatus.FAILED, oom)


def test_a_run_gone_without_an_exit_code_is_lost_and_says_why() -> None:
    state, failure = end_verdict(READY, None, None, lost=True, stop_requested=False)
    assert state == RunStatus.LOST and failure is not None and failure.kind is RunStatus.LOST
    assert "without recording an exit code" in failure.message


def test_a_slurm_time_limit_is_its_own_verdict_ahead_of_the_exit_code() -> None:
    job = JobInfo("4242", "TIMEOUT")
    state, failure = job_verdict(dataclasses.replace(LOADING, slurm_job="4242"), None, job, None, stop_requested=False)
    assert state == RunStatus.FAILED and failure == Failure(SlurmEnd.TIMEOUT, "Slurm job 4242 reached its time limit")
    assert failure.kind is SlurmEnd.TIMEOUT   # what Slurm said, not a word


def test_the_parsers_finding_becomes_the_runs_one_failure_type_only_once_settled() -> None:
    watch = LogWatch(started_at=0.0)
    watch.feed(b"[2026-12-05 12:00:00] Scheduler hit an exception: Traceback (most recent call last):\n", 1.0)
    assert watch.state.failure is not None and watch.state.failure.line_no == 1
    assert failure_of(watch.state) is None   # a header: its exception line is still to come
    watch.feed(b'  File "x.py", line 1, in <module>\nRuntimeError: Cannot find any model weights\n', 2.0)
    failure = failure_of(watch.state)
    assert failure is not None and failure.kind is LogSignature.MODEL_NOT_FOUND and failure.last_lines[-1].endswith("weights")
    # The run's failure is the one type (kind, message, last lines): the parser's line, fatal and provisional
    # flags stay with its LoggedError.
    assert [f.name for f in dataclasses.fields(Failure)] == ["kind", "message", "last_lines"]
    assert Failure.from_json(failure.to_json()) == failure
