"""Stopping a single-node run: the stop request in its record, the stop itself (its process group, or its Slurm
job), and the verdict recorded here when no watcher in this process records it."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping

from specmon.errors import UserError
from specmon.model.runs.record import RunRecord, progress_of
from specmon.model.runs.runstatus import UP, RunStatus
from specmon.orchestration.runs import slurmjobs
from specmon.orchestration.runs.connections import HostPool
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.reconciler import replay
from specmon.orchestration.runs.terminate import StopTimings, terminate
from specmon.orchestration.runs.view import StopReport
from specmon.orchestration.runs.watcher import RunWatcher, Watcher
from specmon.sources import timelimit
from specmon.sources.transport import TransportError


class Stopper:
    """Stops runs and records how they ended."""

    def __init__(self, index: RunIndex, hosts: HostPool, watched: Mapping[str, Watcher], timings: StopTimings) -> None:
        self.index = index
        self.hosts = hosts
        self.watched = watched   # the runs being watched, by run id: their watcher records the end
        self.timings = timings

    async def stop(self, record: RunRecord, force: bool = False) -> StopReport:
        """Stop a single-node run; waits for its port and GPUs to be free."""
        ops = self.hosts.ops(record.host)
        watcher = self.watched.get(record.run_id)
        ended = record.state if record.terminal else None
        if record.state in UP:
            record = self.index.store.change(record.run_id, RunRecord.asked_to_stop) or record
            if isinstance(watcher, RunWatcher):
                watcher.set_record(record)
        try:
            report = await (slurmjobs.cancel(ops, record, self.timings) if record.slurm_job is not None else
                            terminate(ops, record, force=force, timings=self.timings))
        except TransportError as exc:
            raise UserError(str(exc)) from None
        if ended is not None and report.stopped and not report.pids and report.job is None:
            return dataclasses.replace(report, already=ended, exit_code=report.exit_code if report.exit_code
                                       is not None else record.exit_code)
        if watcher is not None and not watcher.finished.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await timelimit.wait_for(watcher.finished.wait(), 5.0)
        # No watcher recorded the end (none in this process, or it gave up waiting): record it here.
        current = self.index.store.load(record.run_id) or record
        if current.state == RunStatus.STOPPING and report.stopped:
            # The shard count and KV size where the load stopped stay in the record (status shows them).
            rs = None
            with contextlib.suppress(TransportError, TimeoutError):
                rs, _ = await replay(ops, current)
            progress = None if rs is None else progress_of(rs)
            self.index.save(current, lambda r: dataclasses.replace(
                r, state=RunStatus.STOPPED, exit_code=report.exit_code).with_progress(progress, keep_known=True))
        elif current.exit_code is None and report.exit_code is not None:
            self.index.save(current, lambda r: dataclasses.replace(r, exit_code=report.exit_code))
        return report
