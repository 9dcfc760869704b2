"""RunWatcher: watches one run (log, process, health, readiness, stall) and turns it into RunViews.

One watcher per watched run; it owns its tasks and cancels them in `close()`, which never stops the server.
Its verdicts (ready, stalled, failed, exited, stopped, lost) follow the rules in `model.runs.runstatus`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import shlex
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from specmon.model.logs.events import LogSignature, highlights
from specmon.model.logs.signals import watch_reads_only
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import Edit, RunRecord, host_url, progress_of
from specmon.model.runs.runstate import LogWatch, RunState, eta_seconds, typical_load_s
from specmon.model.runs.runstatus import ACTIVE, STARTING, RunStatus
from specmon.model.runs.slurm import JobInfo
from specmon.model.runs.verdicts import end_verdict, failure_of, job_verdict
from specmon.orchestration.runs.store import RunStore, StateWriteError
from specmon.orchestration.runs.view import LogLine, RunView
from specmon.sources import timelimit
from specmon.sources.health import ProbeResult, ServerProbe, poll, probe_of
from specmon.sources.hostshell import HostOps
from specmon.sources.relayread import metrics_scraper
from specmon.sources.scrape import MetricsScraper, answered_at
from specmon.sources.tailer import LogTailer, TailBatch, read_range
from specmon.sources.transport import LinkState, Transport, TransportError, tick_passed, until_tick, url_host

REPLAY_LIMIT = 8 * 1024 * 1024   # on reattach, rebuild the run state from at most this much of the log
BACKLOG_LINES = 5000             # lines kept for readers that subscribe late
READY_PROBE_PATIENCE = 25        # failed test completions after the ready signal before saying so
NOTIFY_TIMEOUT_S = 30.0          # a notify_cmd running longer is killed with its whole process group
LOG_POLL_S = 0.5                 # a starting run's log is polled this often (where logs are polled: SSH) ...
LOG_POLL_READY_S = 1.0           # ... a ready one's less often: its lines no longer decide anything
LOG_QUIET_READY_S = 4.0          # ... and a ready one's quiet log down to this (a new line: at most ~1.5x this late);
# quiet: no line but the access lines of the reads that watch it (signals.watch_reads_only: the serving view's own
# /metrics read every second is one such line a second in SGLang's and vLLM's logs)

# A READY run whose /metrics answers is checked this often, not every tick (each tick again once it stops answering):
# the answers show a server alive at its port, the check that it is still this run's (its process; a Slurm run's job,
# each tick once its time limit is near). One squeue a host every 2 s was the idle app's one process started a
# second, and the process checks most of what it wrote to its hosts.
VOUCHED_CHECK_S = 10.0

RANK_EXIT_GRACE_S = 3.0          # a multi-node Slurm job's rank ended alone this long: it died (not the job's end)


@dataclass(frozen=True)
class WatchTimings:
    """Poll periods (seconds). Health polls re-arm after each answer; the process check is one round trip."""

    process_s: float = 0.5
    process_ready_s: float = 2.0   # a ready server is checked less often: idle cost of a monitor left open for hours;
    # only every VOUCHED_CHECK_S while its /metrics answered 200 within this
    health_s: float = 1.0
    health_ready_s: float = 5.0    # ... and its health too: the process check already notices a dead one; not read
    # at all while its /metrics (the serving view's reads) answered 200 within this: `scrape.answered_at`
    ready_retry_s: float = 0.2


def node_url(record: RunRecord) -> str:
    """The run's URL as its host reaches it (what `status` shows): a Slurm run's port on its node once the job runs
    there, else as recorded."""
    if record.server_addr is not None and record.url == host_url(record.port):
        return f"http://{url_host(record.server_addr)}:{record.port}"
    return record.url


async def client_url(transport: Transport, recorded: str, port: int, addr: str | None = None) -> str:
    """The one answer to "which URL does a client use for this server" (sweeps, probes, views).

    The port on the host's loopback, or on `addr` as the host reaches it (a Slurm job's node), is reached through
    the transport (a forward over SSH, the address itself locally); a profile's own `url` (a port the network can
    reach) is used as it is.
    """
    return await transport.local_url(port, addr or "127.0.0.1") if recorded == host_url(port) else recorded


async def name_port_holder(ops: HostOps, port: int, failure: Failure) -> Failure:
    """A port_in_use failure as a refused launch says it: who holds the port and free ports nearby (the log says only
    "[Errno 98] ... address already in use": two launches raced for the port). Other failures, or when the host does
    not answer, as they are."""
    if failure.kind != LogSignature.PORT_IN_USE:
        return failure
    try:
        busy = await ops.busy_port(port)
    except (TransportError, TimeoutError):
        return failure
    return dataclasses.replace(failure, message=busy.text)


class Watcher(Protocol):
    """What the RunManager needs of a watched run: a RunWatcher, or a multi-node run's NodesWatcher."""

    stall_timeout_s: float
    finished: asyncio.Event

    def view(self) -> RunView: ...

    def add_reader(self, backlog: bool = True, history: bool = False) -> asyncio.Queue[LogLine | None]: ...

    def remove_reader(self, queue: asyncio.Queue[LogLine | None]) -> None: ...

    def commit_offset(self, end: int, node: int | None = None) -> None: ...

    async def close(self) -> None: ...


class RunWatcher:
    """Watches one run. Create, `await start()`, read `view()`, subscribe to lines; `await close()` at the end."""

    def __init__(
        self,
        record: RunRecord,
        ops: HostOps,
        store: RunStore,
        *,
        on_view: Callable[[RunView], None],
        notify: Callable[[RunRecord, str, str], None],
        timings: WatchTimings = WatchTimings(),
        stall_timeout_s: float | None = None,
        on_state_error: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.record = record
        self.ops = ops
        self.store = store
        self.timings = timings
        self.stall_timeout_s = stall_timeout_s if stall_timeout_s is not None else record.stall_timeout_s
        self._on_view = on_view
        self._notify = notify
        self._on_state_error = on_state_error
        self.state_error: str | None = None   # why the run's state could not be saved (a full disk), once
        self.watch = LogWatch(record.started_at)
        self.tailer = LogTailer(ops.transport, record.log_path, record.log_offset, record.log_inode)
        self.probe: ServerProbe | None = None   # made in start(): the transport says where the port is reached
        self._health_reader: MetricsScraper | None = None   # ... and the reader of its health path
        self.url = record.url
        # Measured loads of this profile feed the ETA; the profile's expected_load_s stands in until one exists.
        self.past_loads = store.past_loads(record.profile, record.config) or (
            (record.expected_load_s,) if record.expected_load_s else ())
        self.stalled = False
        self.stall_reason: str | None = None
        self.probe_error: str | None = None
        self.last_bytes_at = time.time()
        self.last_health: ProbeResult | None = None
        self.finished = asyncio.Event()
        self._ready_trigger = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._tail_task: asyncio.Task[None] | None = None
        self._naming_holder: asyncio.Task[None] | None = None   # a port_in_use verdict, waiting for the port's holder
        self._history: deque[LogLine] = deque(maxlen=BACKLOG_LINES)   # lines before the resume offset
        self._backlog: deque[LogLine] = deque(maxlen=BACKLOG_LINES)   # lines read by this watcher
        self._readers: set[asyncio.Queue[LogLine | None]] = set()
        self._last_view: RunView | None = None
        self._unwatch_link: Callable[[], None] | None = None
        self._link_down_since: float | None = None
        self._process_alive = False   # the last process check found the server's process running
        self._checked_at = float("-inf")   # (loop time) the last check of its process or job (`_check_due`)
        self.job: JobInfo | None = None   # a Slurm run: its job as last read
        self._exit_seen_at: float | None = None   # a multi-node job's rank: when its server's end was first seen
        # Set once the server's address is known (a Slurm run: when its job runs on a node); probes wait for it.
        self._reachable = asyncio.Event()

    # ---- views -------------------------------------------------------------------------------------------
    def view(self) -> RunView:
        """The current snapshot."""
        r, rs, now = self.record, self.watch.state, time.time()
        progress = progress_of(rs)
        state = r.state
        if state == RunStatus.LAUNCHING and r.pid is not None:
            state = RunStatus.LOADING
        failure = r.failure
        eta = None
        queued = r.slurm_job is not None and state == RunStatus.LAUNCHING   # nothing loads while the job waits
        if state in STARTING and not queued:
            with contextlib.suppress(Exception):   # an estimate must never break the view
                eta = eta_seconds(rs, now, self.past_loads)
        return RunView(
            run_id=r.run_id, profile=r.profile, host=r.host, state=state,
            stalled=self.stalled and state in STARTING,
            pid=r.pid, port=r.port, url=self.url, started_at=r.started_at, ready_at=r.ready_at,
            load_seconds=r.load_seconds, shards=progress.shards or r.shards,
            kv_cache_tokens=progress.kv_cache_tokens or r.kv_cache_tokens,
            exit_code=r.exit_code, failure=failure, eta_s=eta, phase=rs.phase, past_load_s=typical_load_s(self.past_loads),
            still_running=state == RunStatus.FAILED and self._process_alive,
            stall_reason=self.stall_reason if self.stalled else None,
            log_path=r.log_path, run_dir=r.run_dir, run_state=rs, node_rank=r.node_rank,
            probe_error=self.probe_error if state in STARTING else None,
            health=None if self.last_health is None or state not in ACTIVE else
            str(self.last_health.status or self.last_health.error),
            link=self.ops.transport.link if r.host != "local" and state in ACTIVE else None,
            job=None if r.slurm_job is None else (self.job.describe() if self.job else f"job {r.slurm_job}"),
            slurm_job=r.slurm_job,
            server_addr=r.server_addr, slurm_node=r.slurm_node,
        )

    def _publish(self) -> None:
        view = self.view()
        if view != self._last_view:
            self._last_view = view
            self._on_view(view)

    def set_record(self, record: RunRecord) -> None:
        """Take a record changed elsewhere (e.g. by a stop request) and publish the new view."""
        self.record = record
        self._publish()

    def _state_failed(self, exc: StateWriteError) -> None:
        """Keep babysitting in memory when the state disk refuses a write; tell readers once."""
        if self.state_error is None:
            self.state_error = str(exc)
            self._emit(LogLine(f"{exc} (the run goes on; its state is kept in memory only)",
                               self.tailer.offset, kind="note"))
        self._on_state_error(str(exc))

    def _update(self, edit: Edit) -> None:
        """Change the stored record by `edit` (in memory alone when the state disk refuses) and publish."""
        try:
            stored = self.store.change(self.record.run_id, edit)
        except StateWriteError as exc:
            self._state_failed(exc)
            stored = None
        self.record = stored if stored is not None else edit(self.record)
        self._publish()

    # ---- log lines ---------------------------------------------------------------------------------------
    def add_reader(self, backlog: bool = True, history: bool = False) -> asyncio.Queue[LogLine | None]:
        """A queue of LogLines from now on; None marks the end of the run.

        `backlog`: first the lines this watcher already read; `history`: before them, the (last
        BACKLOG_LINES) lines before the saved resume offset, which an earlier reader already showed.
        """
        queue: asyncio.Queue[LogLine | None] = asyncio.Queue()
        if history:
            for line in self._history:
                queue.put_nowait(line)
        if backlog:
            for line in self._backlog:
                queue.put_nowait(line)
        if self.finished.is_set():
            queue.put_nowait(None)
        self._readers.add(queue)
        return queue

    def remove_reader(self, queue: asyncio.Queue[LogLine | None]) -> None:
        self._readers.discard(queue)

    def commit_offset(self, end: int, node: int | None = None) -> None:
        """Remember that a reader has shown every line up to byte `end` (a later process resumes there).

        `node` is for a multi-node run's watcher (which node's log); a single run has one log."""
        if end > self.record.log_offset:
            try:
                inode = self.tailer.inode
                self.record = self.store.change(
                    self.record.run_id, lambda r: dataclasses.replace(r, log_offset=end, log_inode=inode)) or self.record
            except StateWriteError as exc:
                self._state_failed(exc)

    def _emit(self, line: LogLine | None) -> None:
        if line is not None:
            self._backlog.append(line)
        for queue in self._readers:
            queue.put_nowait(line)

    # ---- life --------------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Rebuild the state from the log already read, then start watching (unless the run has ended)."""
        if self.record.slurm_job is None or self.record.server_addr is not None:
            await self._reach(self.record.server_addr)
        if self.record.log_offset > 0:
            start = max(0, self.record.log_offset - REPLAY_LIMIT)
            data = await read_range(self.ops.transport, self.record.log_path, start, self.record.log_offset)
            if start > 0:
                data = data[data.find(b"\n") + 1:]
            marks = self._feed(data, time.time(), 0) if data else {}
            self._history.extend(self._lines(data, self.record.log_offset - len(data), marks))
        mtime = await self.ops.sh(f"stat -c %Y -- {shlex.quote(self.record.log_path)} 2>/dev/null")
        if mtime[0] == 0 and mtime[1].strip().isdigit():
            self.last_bytes_at = min(time.time(), float(mtime[1].strip()))
        if self.record.terminal:
            # Nothing runs any more: read the rest once so the view and the readers are complete.
            self._on_batch(await self.tailer.drain())
            self._finish_readers()
            self._publish()
            return
        if self.record.state == RunStatus.READY:
            self._ready_trigger.set()
        self._unwatch_link = self.ops.transport.watch_link(self._on_link)
        self._tail_task = asyncio.create_task(self._tail_loop(), name=f"tail {self.record.run_id}")
        self._tasks += [
            self._tail_task,
            asyncio.create_task(self._process_loop() if self.record.slurm_job is None else self._job_loop(),
                                name=f"process {self.record.run_id}"),
        ]
        if self.record.serves_api:   # a worker node answers no client: its readiness is rank 0's
            self._tasks += [
                asyncio.create_task(self._health_loop(), name=f"health {self.record.run_id}"),
                asyncio.create_task(self._ready_loop(), name=f"ready {self.record.run_id}"),
            ]
        self._publish()

    async def _reach(self, addr: str | None) -> None:
        """Point the URL and the probes at the server's port on `addr` as the host reaches it (None: the host's
        own loopback)."""
        self.url = await client_url(self.ops.transport, self.record.url, self.record.port, addr)
        old, self.probe = self.probe, await probe_of(self.ops.transport, self.record.port, self.record.health_path,
                                                     timeout_s=5.0, addr=addr or "127.0.0.1")
        if old is not None:
            await old.aclose()
        # The health path is read every few seconds for as long as the run lives: by the lean kept-alive reader
        # (httpx costs about ten times its CPU a request, and eight ready runs are read at once); over SSH through the
        # host's metrics relay, as the serving view's reads, not over a channel of its own.
        path = self.record.health_path
        old_reader, self._health_reader = self._health_reader, metrics_scraper(
            self.ops.transport, self.record.port, 5.0, addr or "127.0.0.1", path if path.startswith("/") else "/" + path)
        if old_reader is not None:
            await old_reader.aclose()
        self._reachable.set()

    async def _find_node(self, job: JobInfo) -> None:
        """The job runs: record its node's name and address (this run's node rank's), and reach the server there."""
        with contextlib.suppress(TransportError, TimeoutError):
            node = await self.ops.slurm.node(job.nodes or "", self.record.node_rank or 0)
            if node is not None:
                name, addr = node
                self._update(lambda r: dataclasses.replace(r, server_addr=addr, slurm_node=name))
                await self._reach(addr)

    def _on_link(self, link: LinkState) -> None:
        """Time without a link is not time without log output: the stall clock restarts when the link is back
        (the silence before a dead link is noticed, up to the keepalive window, is forgiven too)."""
        if not link.up:
            self._link_down_since = self._link_down_since or time.time()
        elif self._link_down_since is not None:
            self._link_down_since = None
            self.last_bytes_at = max(self.last_bytes_at, time.time())
        self._publish()

    async def close(self) -> None:
        """Cancel every task of this watcher and wait for them. The server keeps running."""
        if self._unwatch_link is not None:
            self._unwatch_link()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self.probe is not None:
            await self.probe.aclose()
        if self._health_reader is not None:
            await self._health_reader.aclose()

    def _finish_readers(self) -> None:
        self.finished.set()
        self._emit(None)

    # ---- loops -------------------------------------------------------------------------------------------
    async def _tail_loop(self) -> None:
        async with contextlib.aclosing(self.tailer.follow()) as batches:
            async for batch in batches:
                self._on_batch(batch)

    def _feed(self, data: bytes, now: float, at: int) -> dict[int, str]:
        """Feed the parser; returns the highlights of the lines it read (line_no -> kind).

        A parser bug must not end the babysitting: the lines still reach readers, unhighlighted.
        """
        try:
            return highlights(self.watch.feed(data, now) if data else self.watch.close(now))
        except Exception as exc:
            self._emit(LogLine(f"specmon: log parser error: {exc!r}", at, kind="note"))
            return {}

    def _lines(self, data: bytes, start: int, marks: dict[int, str]) -> list[LogLine]:
        """The complete lines of `data` (which begins at byte `start`), each with the parser's highlight.

        The parser has read every byte up to the end of `data`, so its last complete lines are these.
        """
        raws = data.split(b"\n")[:-1]
        first = self.watch.parser.line_no - len(raws)
        out, end = [], start
        for i, raw in enumerate(raws):
            end += len(raw) + 1
            out.append(LogLine(raw.decode("utf-8", errors="replace"), end, highlight=marks.get(first + i, "")))
        return out

    def _on_batch(self, batch: TailBatch) -> None:
        if batch.note:
            self._emit(LogLine(batch.note, batch.end, kind="note"))
        if not batch.fresh:
            return
        now = time.time()
        self.last_bytes_at = now
        before, was_stalled = self.watch.state, self.stalled
        self.stalled = False
        marks = self._feed(batch.fresh, now, batch.start)
        for line in self._lines(batch.data, batch.start, marks):
            self._emit(line)
        rs = self.watch.state
        if rs.ready and self.record.server != "other":
            self._ready_trigger.set()
        failure = failure_of(rs)
        if failure is not None and self.record.state in STARTING:
            if failure.kind != LogSignature.PORT_IN_USE:
                self._fail(failure, rs)
            elif self._naming_holder is None:   # the verdict waits for one look at who holds the port
                self._naming_holder = asyncio.create_task(self._fail_naming_holder(failure, rs))
                self._tasks.append(self._naming_holder)
        if rs is not before or was_stalled or self.record.state != RunStatus.READY:
            self._publish()   # (a READY run's view is made and compared only when its log changed its state: the
            # access line of its /metrics read every second does not)

    def _fail(self, failure: Failure, rs: RunState) -> None:
        self._process_alive = False   # "still running" only once a check after the verdict finds it so
        progress = progress_of(rs)
        self._update(lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure).with_progress(progress))
        self._notify(self.record, RunStatus.FAILED, failure.message)

    async def _fail_naming_holder(self, failure: Failure, rs: RunState) -> None:
        failure = await name_port_holder(self.ops, self.record.port, failure)
        if self.record.state in STARTING:
            self._fail(failure, rs)
            self._publish()

    async def _process_loop(self) -> None:
        pid = self.record.pid
        while True:
            ready = self._pace_log()
            # On the shared tick: the checks of a host's runs go out as one command (Transport.read_files).
            await asyncio.sleep(until_tick(self.timings.process_ready_s if ready else self.timings.process_s))
            if pid is None:
                continue
            if not self._check_due():
                self._settle()
                continue
            try:
                info, exit_code, stop = await self.ops.run_status(self.record.run_dir, pid)
            except (TransportError, TimeoutError):
                continue
            if info is not None and info.alive and info.starttime == self.record.starttime:
                if not self._process_alive:
                    self._process_alive = True
                    self._publish()   # a run failed by its log says its process still runs
                self._settle()
                self._check_stall()
                continue
            self._process_alive = False
            await self._finish(exit_code, lost=exit_code is None, stop_requested=stop)
            return

    async def _job_loop(self) -> None:
        """A Slurm run: its job's state says when the server starts (the time queued is neither load time nor
        stall time) and how it ended; the job's node may be another machine, so no pid is looked at."""
        assert self.record.slurm_job is not None
        while True:
            self._pace_log()
            if not (self.job is not None and self.job.near_time_limit) and not self._check_due():
                self._settle()   # (only its time left changes while its server answers)
                await asyncio.sleep(until_tick(self.timings.process_ready_s))
                continue
            try:   # asked with the other jobs watched on this host: one squeue a tick for all of them
                job = await self.ops.slurm.polled_job(self.record.slurm_job)
            except (TransportError, TimeoutError):
                await asyncio.sleep(self.timings.process_s)
                continue
            if job is not None and job.near_time_limit and not (self.job is not None and self.job.near_time_limit):
                self._notify(self.record, "time_limit", f"Slurm job {job.job_id} {job.describe()}")
            changed = job != self.job
            self.job = job
            if job is not None and job.running and self.record.state == RunStatus.LAUNCHING:
                started = job.start_epoch or time.time()
                self.watch.started(started)   # load time starts now; what its log said already is kept
                self.last_bytes_at = max(self.last_bytes_at, started)
                self._update(functools.partial(RunRecord.loading_from, at=started))
            if job is not None and job.running and not self._reachable.is_set():
                await self._find_node(job)
            if changed:
                self._publish()
            exit_code, stop = None, False
            with contextlib.suppress(TransportError, TimeoutError):
                _, exit_code, stop = await self.ops.run_status(self.record.run_dir, 0)   # its files only
            if job is None or not job.active or (exit_code is not None and await self._rank_died_alone()):
                await self._finish(exit_code, lost=job is None and exit_code is None, stop_requested=stop, job=job)
                return
            if self.record.state in (RunStatus.LOADING, RunStatus.READY):
                self._settle()
                self._check_stall()
            ready = self.record.state == RunStatus.READY
            await asyncio.sleep(until_tick(self.timings.process_ready_s if ready else self.timings.process_s))

    async def _rank_died_alone(self) -> bool:
        """This node rank's server has ended while its multi-node job runs on: true once it has been so for
        RANK_EXIT_GRACE_S while another rank's server still runs (it died on its own). When every rank has ended,
        the job is ending (Slurm signals every rank of a cancelled, preempted or timed-out job at once; its state
        changes when its steps are done), so its end decides; a single-node job ends with its server anyway."""
        if self.record.group is None:
            return False
        now = time.time()
        self._exit_seen_at = self._exit_seen_at or now
        if now - self._exit_seen_at < RANK_EXIT_GRACE_S:
            return False
        group = self.store.load(self.record.group)
        runs = [self.store.load(node) for node in group.nodes] if group is not None else []
        with contextlib.suppress(TransportError, TimeoutError):
            codes = await self.ops.transport.read_files([f"{r.run_dir}/exit_code" for r in runs if r is not None])
            return any(code is None for code in codes)
        return False

    def _settle(self) -> None:
        """No bytes for a poll period: read the progress update waiting after the log's last `\\r`."""
        if time.time() - self.last_bytes_at < self.timings.process_s:
            return
        try:
            events = self.watch.settle(time.time())
        except Exception as exc:   # a parser bug must not end the babysitting
            self._emit(LogLine(f"specmon: log parser error: {exc!r}", self.tailer.offset, kind="note"))
            return
        if events:
            self._publish()

    def _check_stall(self) -> None:
        if self.record.state not in STARTING or self._link_down_since is not None:
            return
        idle = time.time() - self.last_bytes_at
        if not self.stalled and idle >= self.stall_timeout_s:
            rs = self.watch.state
            where = f"phase {rs.phase}"
            if rs.shards_total:
                where += f", shard {rs.shards_done}/{rs.shards_total}"
            self.stalled = True
            self.stall_reason = f"no log output and no progress for {idle:.0f} s ({where})"
            self._notify(self.record, "stalled", self.stall_reason)
            self._publish()

    async def _finish(self, exit_code: int | None, *, lost: bool, stop_requested: bool,
                      job: JobInfo | None = None) -> None:
        """The process has ended: drain the log, record the verdict, end the other loops."""
        if self._tail_task is not None:
            self._tail_task.cancel()
            await asyncio.gather(self._tail_task, return_exceptions=True)
        with contextlib.suppress(TransportError, TimeoutError):
            self._on_batch(await self.tailer.drain())
        self._feed(b"", time.time(), self.tailer.offset)
        if self._naming_holder is not None:   # its verdict (the holder named) before the end's
            await asyncio.gather(self._naming_holder, return_exceptions=True)
        if self.record.slurm_job is not None:
            started = True
            with contextlib.suppress(TransportError, TimeoutError):
                started = await self.ops.read_file(self.record.run_dir + "/pid") is not None
            state, failure = job_verdict(self.record, self.watch.state, job, exit_code, stop_requested, started)
        else:
            state, failure = end_verdict(self.record, self.watch.state, exit_code, lost, stop_requested)
        already_failed = self.record.state == RunStatus.FAILED
        stop = stop_requested or self.record.stop_requested
        progress = progress_of(self.watch.state)
        self._update(lambda r: dataclasses.replace(r, state=state, exit_code=exit_code, stop_requested=stop,
                                                   failure=failure).with_progress(progress))
        if failure is not None and not already_failed:
            self._notify(self.record, self.record.state, failure.message)
        self._finish_readers()
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()

    def _answered_at(self) -> float:
        """When (monotonic) the serving view's /metrics read of this server last answered 200 (-inf: never)."""
        answered = answered_at(self.ops.transport, self.record.server_addr or "127.0.0.1", self.record.port)
        return float("-inf") if answered is None else answered

    def _pace_log(self) -> bool:
        """Poll the log (where logs are polled) at the pace of the run's state; whether it is READY."""
        ready = self.record.state == RunStatus.READY
        self.tailer.poll_s = LOG_POLL_READY_S if ready else LOG_POLL_S
        self.tailer.quiet_poll_s = LOG_QUIET_READY_S if ready else 0.0
        self.tailer.idle_lines = watch_reads_only if ready else None
        return ready

    def _check_due(self) -> bool:
        """Whether the process (a Slurm run's job) is to be checked at this tick, which then counts as its last check.
        Not while its /metrics answered within a tick (issue 37), but for once a tick of the VOUCHED_CHECK_S clock has
        passed (the host's runs wake together, and check together). A server that dies is checked at the first tick
        after its last answer is a tick old: at most one tick later than if it were checked every tick (its serving
        view says at once that /metrics stopped answering)."""
        if self._vouched_for(self.timings.process_ready_s) and not tick_passed(VOUCHED_CHECK_S, self._checked_at):
            return False
        self._checked_at = asyncio.get_running_loop().time()
        return True

    def _vouched_for(self, seconds: float) -> bool:
        """Whether this READY server's /metrics answered 200 within `seconds`: it is alive, a check of its own would
        tell nothing new."""
        return self.record.state == RunStatus.READY and time.monotonic() - self._answered_at() < seconds

    async def _health_loop(self) -> None:
        def on_health(result: ProbeResult) -> bool:
            changed = self.last_health is None or (result.status, result.error) != (
                self.last_health.status, self.last_health.error)
            self.last_health = result
            if changed:
                self._publish()
            if result.ok and self.record.server == "other":
                self._ready_trigger.set()
            return False

        vouched_until: float | None = None   # (monotonic) a /metrics answer shows the server alive till then

        def interval() -> float:
            if self.record.state != RunStatus.READY:
                return self.timings.health_s
            # Skipped: read once that answer is health_ready_s old. A server gone silent just after its last answer
            # is read then, as it was at most health_ready_s after it went silent before: seen as soon as before.
            return self.timings.health_ready_s if vouched_until is None else max(0.05, vouched_until - time.monotonic())

        async def health() -> ProbeResult:
            nonlocal vouched_until
            assert self._health_reader is not None   # made with the probe, before _reachable is set
            # A READY server whose /metrics answered lately is alive: one read fewer a run every few seconds.
            if self._vouched_for(self.timings.health_ready_s):
                vouched_until = self._answered_at() + self.timings.health_ready_s
                return ProbeResult(200, None, 0.0)
            vouched_until = None
            return (await self._health_reader.read())[0]

        await self._reachable.wait()
        await poll(health, interval, on_health)

    async def _ready_loop(self) -> None:
        await self._ready_trigger.wait()
        await self._reachable.wait()
        if self.record.state == RunStatus.READY or self.probe is None:
            return
        attempts = 0
        while not (result := await self.probe.completion()).ok:
            attempts += 1
            if attempts >= READY_PROBE_PATIENCE:
                # Say why the run is not called ready, and stop hammering a server that refuses completions.
                self.probe_error = f"ready signal seen, but the test completion fails: " \
                                   f"{result.status or result.error} {result.error or ''}".strip()
                self._publish()
            await asyncio.sleep(self.timings.ready_retry_s if attempts < READY_PROBE_PATIENCE else 2.0)
        self.probe_error = None
        if self.record.state not in STARTING:
            return
        now = time.time()
        load_seconds = now - self.record.started_at
        self.stalled = False
        progress = progress_of(self.watch.state)
        self._update(lambda r: dataclasses.replace(r, state=RunStatus.READY, ready_at=now, load_seconds=load_seconds)
                     .with_progress(progress))
        try:
            self.store.record_load(self.record.profile, self.record.config, load_seconds, now)
        except StateWriteError as exc:
            self._state_failed(exc)
        self._notify(self.record, RunStatus.READY, f"ready after {load_seconds:.1f} s")


def run_notify(command: str, record: RunRecord, state: str, reason: str,
               timeout_s: float = NOTIFY_TIMEOUT_S) -> asyncio.Task[None]:
    """Start the profile's notify_cmd (locally, where specmon runs) with the run's facts in its env.

    It runs in its own process group; on its timeout (or when specmon cancels it at exit) the whole group is
    killed, so a `sleep 100; ...` inside it leaves nothing behind.
    """
    env = dict(os.environ, SPECMON_PROFILE=record.profile, SPECMON_STATE=state, SPECMON_REASON=reason,
               SPECMON_RUN_ID=record.run_id)

    async def go() -> None:
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True)
        try:
            await timelimit.wait_for(proc.wait(), timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await asyncio.shield(proc.wait())
            raise

    return asyncio.create_task(go(), name=f"notify {record.run_id} {state}")
