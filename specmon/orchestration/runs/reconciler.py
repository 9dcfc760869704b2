"""Reconciler: bringing the records of runs nobody watches up to date with their hosts: is the process still the one launched (boot id, PID start time), did it end
and how (exit code, log verdict), did an unwatched load become ready (one test completion)?

`reconcile` brings one record up to date with its host; `refresh` does it for every run of a profiles file
(`specmon status`), naming each host that did not answer (`unanswered`) instead of failing on it. A watched run
is not checked here: its watcher (`watched`) already knows. The Slurm jobs of a host's runs are asked by one `squeue`
a refresh (as the watchers poll them), not one `scontrol` each; a job it does not list is asked alone (its end)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Mapping

from specmon.model.runs.failure import Failure
from specmon.model.runs.record import RunRecord, progress_of
from specmon.model.runs.runstate import LogWatch, RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import JobInfo
from specmon.model.runs.verdicts import end_verdict, failure_of
from specmon.orchestration.runs import multinode, slurmjobs
from specmon.orchestration.runs.connections import HostPool, per_host
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.view import RunView
from specmon.orchestration.runs.watcher import REPLAY_LIMIT, Watcher, name_port_holder
from specmon.sources.health import probe_of
from specmon.sources.hostshell import HostOps
from specmon.sources.tailer import log_end
from specmon.sources.transport import TransportError

PID_WAIT_S = 10.0         # a launch's wrapper writes its pid within this (a record without one is given up at 3x)
PROCESS_POLL_S = 0.5      # how often process_ended looks at the run's process


async def replay(ops: HostOps, record: RunRecord) -> tuple[RunState, float | None]:
    """The parser's state for a run's whole log (its last REPLAY_LIMIT bytes, read through its host's `ops`) and
    the log's mtime (epoch s).

    The parser gets no start time: its load time then comes from the log's own timestamps, which is right for a
    load nobody watched.
    """
    watch = LogWatch(None)
    data, mtime = await log_end(ops.transport, record.log_path, REPLAY_LIMIT)
    with contextlib.suppress(Exception):   # a parser bug must not break `status`
        watch.feed(data, time.time())
        watch.close(time.time())
    return watch.state, mtime


async def _nothing() -> str:
    return ""


class Reconciler:
    """Brings the records of unwatched runs up to date with their hosts."""

    def __init__(self, index: RunIndex, hosts: HostPool, watched: Mapping[str, Watcher]) -> None:
        self.index = index
        self.hosts = hosts
        self.watched = watched                 # the runs being watched, by run id (their watchers know better)
        self.unanswered: dict[str, str] = {}   # host -> why it did not answer refresh() (its runs: as recorded)
        self._listings: dict[str, asyncio.Task[dict[str, JobInfo]]] = {}   # in refresh(): host -> its one squeue

    async def _job(self, record: RunRecord) -> JobInfo | None:
        """A Slurm run's job now: as its host's squeue of this refresh lists it, else asked alone (`scontrol`: a job
        no longer queued or running, or a host with one job to ask, where scontrol asks the controller less)."""
        assert record.slurm_job is not None
        slurm = self.hosts.ops(record.host).slurm
        listing = self._listings.get(record.host)
        if listing is not None and (job := (await asyncio.shield(listing)).get(record.slurm_job)) is not None:
            return job
        return await slurm.job(record.slurm_job)

    def _list_jobs(self, records: list[RunRecord]) -> None:
        """Start one squeue per host for the jobs of its Slurm runs that `refresh` is to check (two or more)."""
        jobs: dict[str, set[str]] = {}
        for record in records:
            if record.slurm_job is not None and not record.terminal and record.run_id not in self.watched:
                jobs.setdefault(record.host, set()).add(record.slurm_job)
        self._listings = {host: asyncio.create_task(self.hosts.ops(host).slurm.listed(sorted(ids)))
                          for host, ids in jobs.items() if len(ids) > 1}

    async def reconcile(self, record: RunRecord) -> RunRecord:
        """Check a run that is believed running: reboot (boot id), PID reuse (start time), exit code."""
        ops = self.hosts.ops(record.host)
        if record.slurm_job is not None:
            rs = None
            job = await self._job(record)
            if job is None or not job.active:
                rs, _ = await replay(ops, record)
            return self.index.save(record, await slurmjobs.reconcile(ops, record, job, rs))
        if record.pid is None:
            return await self._adopt_pid(record)
        # Asked at once: both reads go out as one command (Transport.read_files), with the other runs' of the host.
        (info, exit_code, stop), boot_id = await asyncio.gather(
            ops.run_status(record.run_dir, record.pid), ops.boot_id() if record.boot_id else _nothing())
        boot_ok = not record.boot_id or record.boot_id == boot_id
        if boot_ok and info is not None and info.alive and info.starttime == record.starttime:
            return record
        state, rs = None, None
        if boot_ok and exit_code is None and info is not None and info.alive and info.starttime != record.starttime:
            reason = f"pid {record.pid} now belongs to another process (start time differs): the server is gone"
            failure: Failure | None = Failure(RunStatus.LOST, reason)
            state = RunStatus.LOST
        else:
            rs, _ = await replay(ops, record)
            state, failure = end_verdict(record, rs, exit_code, lost=exit_code is None, stop_requested=stop)
            if failure is not None and failure is not record.failure:   # the log's verdict, new here
                failure = await name_port_holder(ops, record.port, failure)
            if not boot_ok:
                failure = Failure(RunStatus.LOST, f"host {record.host} rebooted since the launch")
                state = RunStatus.LOST
        stop = stop or record.stop_requested
        progress = progress_of(rs) if rs is not None else None
        return self.index.save(record, lambda r: dataclasses.replace(
            r, state=state, exit_code=exit_code, stop_requested=stop, failure=failure).with_progress(progress))

    async def _adopt_pid(self, record: RunRecord) -> RunRecord:
        """A `launching` record without a pid (the launching specmon was killed after the start): take the pid
        from the run directory, or give the run up once the wrapper clearly never started."""
        ops = self.hosts.ops(record.host)
        text = await ops.read_file(f"{record.run_dir}/pid")
        if not (text and text.strip().isdigit()):
            if time.time() - record.started_at < 3 * PID_WAIT_S:
                return record   # may still be starting: a launch holds its host's lock meanwhile
            failure = Failure(RunStatus.EXITED, "the launch was interrupted before the server started")
            return self.index.save(record, lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure))
        pid = int(text.strip())
        info = await ops.proc(pid)
        if info is not None and info.alive and await ops.owns(pid, record.run_id):
            starttime, boot_id = info.starttime, await ops.boot_id()
            return self.index.save(record, lambda r: dataclasses.replace(
                r, pid=pid, starttime=starttime, boot_id=boot_id, state=RunStatus.LOADING))
        # The wrapper has ended already: judge the run from what its directory says (start time unknown).
        return await self.reconcile(dataclasses.replace(record, pid=pid, starttime=-1))

    async def refresh(self, all_configs: bool = False) -> list[RunView]:
        """Check every run of this profiles file (`all_configs`: every run) that may still be running, once
        (for `specmon status`); returns their views, in the store's order.

        Hosts are checked at once, each by `connections.LANES_PER_HOST` runs at a time: one after the other, 128 runs took
        each one's round trips in turn (6 s on one host, and a host that does not answer held up every host after
        it). A host that does not answer costs its timeout once: its later runs are shown as last recorded."""
        records = [r for r in self.index.store.all() if (all_configs or self.index.mine(r)) and r.group is None]
        nodes_of = {record.run_id: self.index.node_records(record) for record in records}   # a multi-node run's

        def hosts_of(record: RunRecord) -> set[str]:
            return {node.host for node in nodes_of[record.run_id]} | {record.host}

        self._list_jobs([node for record in records for node in nodes_of[record.run_id] or [record]])
        try:
            return await per_host(records, hosts_of, lambda record: self._refresh_checked(
                record, nodes_of[record.run_id], hosts_of(record)))
        finally:
            listings, self._listings = list(self._listings.values()), {}
            for listing in listings:
                listing.cancel()
            await asyncio.gather(*listings, return_exceptions=True)

    async def _refresh_checked(self, record: RunRecord, nodes: list[RunRecord], hosts: set[str]) -> RunView:
        if hosts & self.unanswered.keys():   # asked once: each run there would wait for it again
            return self.index.static_view(record)
        try:
            if nodes and record.run_id not in self.watched:
                return await self._refresh_nodes(record, nodes)
            return await self._refresh_one(record)
        except (TransportError, TimeoutError) as exc:
            # One host that does not answer must not hide the others' runs: say it once, show this run
            # as last recorded.
            self.unanswered[self._host_of(exc, hosts)] = str(exc)
            return self.index.static_view(record)

    @staticmethod
    def _host_of(exc: Exception, hosts: set[str]) -> str:
        """Which of a run's hosts an error is about (the transport's messages start with the host)."""
        return next((h for h in sorted(hosts) if str(exc).startswith(f"{h}:")), min(hosts))

    async def _refresh_nodes(self, record: RunRecord, nodes: list[RunRecord]) -> RunView:
        """Check each node of an unwatched multi-node run; keep the run's record in step with them."""
        views = [await self._refresh_one(node) for node in nodes]
        for worker in multinode.mark_workers_ready(self.index.store, views[0], [self.index.store.load(n.run_id) or n
                                                                          for n in nodes[1:]]):
            rank = worker.node_rank or 0
            views[rank] = dataclasses.replace(views[rank], state=worker.state, ready_at=worker.ready_at,
                                              load_seconds=worker.load_seconds, stalled=False, stall_reason=None)
        view = multinode.compose(record, views)
        multinode.save_progress(self.index.store, record.run_id, view)
        return view

    async def _refresh_one(self, record: RunRecord) -> RunView:
        if record.run_id in self.watched:
            return self.watched[record.run_id].view()
        still_running = False
        with contextlib.suppress(TransportError, TimeoutError):
            if not record.terminal:
                record = await self.reconcile(record)
            elif record.exit_code is None and record.state in (RunStatus.FAILED, RunStatus.EXITED) and record.pid:
                # Failed from the log while the process still ran: its exit code comes later, if ever (a server
                # whose rank died can wait forever), so say whether it still runs.
                info, exit_code, _ = await self.hosts.ops(record.host).run_status(record.run_dir, record.pid)
                if exit_code is not None:
                    record = self.index.save(record, lambda r: dataclasses.replace(r, exit_code=exit_code))
                else:
                    still_running = info is not None and info.alive and info.starttime == record.starttime
        if record.terminal:
            return dataclasses.replace(self.index.static_view(record), still_running=still_running)
        job = None
        if record.slurm_job is not None:
            with contextlib.suppress(TransportError, TimeoutError):
                queued = await self._job(record)
                job = queued.describe() if queued is not None else None
        rs, mtime = await replay(self.hosts.ops(record.host), record)
        if record.state != RunStatus.READY and rs.ready and failure_of(rs) is None:
            record = await self._confirm_ready(record, rs.load_seconds)
        base = self.index.static_view(record)
        progress = progress_of(rs)
        idle = None if mtime is None else time.time() - mtime
        stalled = base.state == RunStatus.LOADING and idle is not None and idle >= record.stall_timeout_s
        return dataclasses.replace(
            base, shards=progress.shards, kv_cache_tokens=progress.kv_cache_tokens, phase=rs.phase,
            run_state=rs, stalled=stalled, job=job,
            stall_reason=f"no log output for {idle:.0f} s" if stalled and idle is not None else None)

    async def _confirm_ready(self, record: RunRecord, log_load_seconds: float | None) -> RunRecord:
        """An unwatched run whose log says ready: one test completion decides."""
        probe = await probe_of(self.hosts.ops(record.host).transport, record.port, record.health_path, timeout_s=3.0,
                               addr=record.server_addr or "127.0.0.1")
        try:
            if not (await probe.completion()).ok:
                return record
        finally:
            await probe.aclose()
        ready_at = record.started_at + log_load_seconds if log_load_seconds else time.time()
        return self.index.save(record, lambda r: dataclasses.replace(
            r, state=RunStatus.READY, ready_at=ready_at, load_seconds=log_load_seconds))


async def process_ended(ops: HostOps, record: RunRecord, poll_s: float = PROCESS_POLL_S) -> None:
    """Return once the run's process has ended, or its pid now belongs to another process (PID reuse); at once for
    a run already over. One /proc read through its host's `ops` every `poll_s`: `specmon logs -f` stops following
    then, without watching the run's log."""
    if record.terminal or record.pid is None:
        return
    while True:
        info = await ops.proc(record.pid)
        if info is None or not info.alive or info.starttime != record.starttime:
            return
        await asyncio.sleep(poll_s)
