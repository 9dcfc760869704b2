"""The server lifecycle engine: launch, watch, stop, restart and reattach runs.

Engine API (used by the CLI commands and the TUI):

    manager = RunManager(config, state_dir=None, transport_factory=None, stop_timings=StopTimings(),
                         watch_timings=WatchTimings())
    view = await manager.launch("profile", watch=True)      -> RunView   (UserError before anything starts
                                                                           on a busy port, missing command,
                                                                           unwritable run dir, live run)
    report = await manager.stop("profile" | "run_id", force=False)   -> StopReport
    view = await manager.restart("profile", on_stop=None)   -> RunView   (stop + preflight + launch;
                                                                           on_stop(StopReport) per stop)
    manager.runs(all_configs=False)                         -> list[RunView]  known runs, newest last
    await manager.refresh(all_configs=False)                -> list[RunView]  one-shot check of the runs
                                                               (process alive? exit code? log state?)
    manager.unanswered                                      host -> why it did not answer that check (its
                                                               runs keep their last recorded state)
    manager.unreadable()                                    -> list[Unreadable]  corrupt state records
    manager.state_warnings                                  state writes that failed (full disk), one line each
    view = await manager.attach(run_id, stall_timeout_s=None)   start watching a run (reattach)
    manager.view(run_id)                                    -> RunView   current view (live if watched)
    unsubscribe = manager.subscribe(callback)               callback(RunView) on every change of any run
    async for view in manager.watch(run_id): ...            changes of one run until it ends
    async for line in manager.log_lines(run_id, commit=True, backlog=True, history=None): ...
                                                            LogLine(text, end, kind "line" | "note"), `.clean`
                                                            for display; with commit=True the byte offset of
                                                            shown lines is saved, so a later process resumes
                                                            after them; commit=False also replays history
    manager.find(profile_or_run_id)                         -> RunRecord (latest run of a profile)
    await manager.process_ended(record)                     returns once the run's process is gone

Runs belong to the profiles file (and profile) that launched them: a profile name finds only runs launched from
this manager's config file (`manager.config_key`), and queries list only those unless `all_configs`. A run id
always works. Port conflicts are checked host-wide whatever file launched the run.
    await manager.close()                                   cancels every task; never stops a server

RunView.state: launching | loading | ready | stopping | stopped | exited | failed | lost, plus the `stalled`
warning flag (with stall_reason); failure = Failure(kind, message, last_lines); run_state = the parser's
RunState. A verdict needs: ready = the log's ready signal (server "other": /health 200) and one completion
answered; failed = a fatal log signature, or the process ended before ready (an unasked exit 0 included);
exited = it ended on its own after ready; lost = gone without an exit code, PID reused, or host rebooted.

Every host operation goes through a Transport (shell commands), so SSH hosts need only a transport_factory.
Times in views are epoch seconds (wall clock), shared by every specmon process; durations use monotonic time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import shlex
import socket
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from specmon.errors import PortBusy, UserError
from specmon.model.clean import escape_controls, one_line
from specmon.model.config import BUILTIN_SOURCE, Config, Profile, SshSettings, parse_host
from specmon.model.failure import Failure
from specmon.model.procfs import free_ports_near
from specmon.model.runstate import LogWatch, RunState
from specmon.model.runstatus import UP, RunStatus
from specmon.model.slurm import MASTER_ADDR_VAR
from specmon.model.textfile import loads
from specmon.orchestration import multinode, slurmjobs
from specmon.orchestration.controller import (
    REPLAY_LIMIT,
    RunController,
    Watcher,
    WatchTimings,
    client_url,
    end_verdict,
    failure_of,
    host_url,
    node_url,
    run_notify,
)
from specmon.orchestration.runstore import (
    Edit,
    NodeSeat,
    RunRecord,
    RunStore,
    StateWriteError,
    Unreadable,
    iso_utc,
    new_run_id,
    progress_of,
)
from specmon.orchestration.runview import LogLine, RunView, StopReport
from specmon.orchestration.stopping import StopTimings, stop_run
from specmon.sources.health import probe_of
from specmon.sources.host import RUN_ID, HostOps, check_env, wrapper_script
from specmon.sources.local import LocalTransport
from specmon.sources.slurm import SlurmHost
from specmon.sources.tailer import read_range
from specmon.sources.transport import SMALL_FILE_BYTES, Transport, TransportError

log = logging.getLogger(__name__)
TransportFactory = Callable[[str], Transport]
PID_WAIT_S = 10.0
COMMIT_EVERY_S = 1.0
PROCESS_POLL_S = 0.5      # how often process_ended looks at the run's process
LOCK_WAIT_S = 60.0        # a racing launch waits this long for the host's launch lock (a launch holds it ~1-10 s)


def config_key(config: Config) -> str:
    """What ties a run to the profiles file that launched it: the file's real path (or the built-in name)."""
    return config.source if config.source == BUILTIN_SOURCE else os.path.realpath(config.source)


def default_transport(host: str, ssh: SshSettings) -> Transport:
    """LocalTransport for "local"; an SSHTransport (one shared connection) for any other host."""
    if host == "local":
        return LocalTransport()
    # asyncssh and its crypto take about a second to import here: only a session that reaches an SSH host pays it
    # (the TUI's first frame no longer waits for it).
    from specmon.sources.ssh import SSHTransport

    return SSHTransport(host, ssh)


@dataclass(frozen=True)
class HostRun:
    """A run directory found on a host that the local index does not know (adoptable)."""

    run_id: str
    profile: str
    port: int
    launched_at: str          # as meta.json says (UTC ISO-8601)
    pid: int | None
    running: bool
    exit_code: int | None


def _int_or(value: object, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _epoch(iso: object) -> float | None:
    """Epoch seconds of an ISO-8601 time as iso_utc writes it (None if it is not one)."""
    if not isinstance(iso, str):
        return None
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class RunManager:
    """Owns the runs of one specmon process. See the module docstring for the API."""

    def __init__(
        self,
        config: Config,
        state_dir: Path | str | None = None,
        transport_factory: TransportFactory | None = None,
        *,
        stop_timings: StopTimings = StopTimings(),
        watch_timings: WatchTimings = WatchTimings(),
    ) -> None:
        self.config = config
        self.store = RunStore(state_dir)
        self._factory = transport_factory or functools.partial(default_transport, ssh=config.ssh)
        self._ops: dict[str, HostOps] = {}
        self._controllers: dict[str, Watcher] = {}   # by run id: RunControllers, and multi-node runs' watchers
        self._attaching: dict[str, asyncio.Future[Watcher]] = {}
        self._subscribers: list[Callable[[RunView], None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()
        self.stop_timings = stop_timings
        self.watch_timings = watch_timings
        self.config_key = config_key(config)
        self.state_warnings: list[str] = []
        self.unanswered: dict[str, str] = {}   # host -> why it did not answer refresh() (its runs: as recorded)

    # ---- helpers -----------------------------------------------------------------------------------------
    def ops(self, host: str) -> HostOps:
        if host not in self._ops:
            if host != "local":
                try:
                    parse_host(host)   # one named on the command line is not checked by the config
                except ValueError as exc:
                    raise UserError(f"host {one_line(host, 60)}: {exc}") from None
            self._ops[host] = HostOps(self._factory(host))
        return self._ops[host]

    def _own(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.add(task)
        task.add_done_callback(self._side_task_done)

    def _side_task_done(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:   # retrieved here, logged, never re-raised
            log.warning("%s failed: %r", task.get_name(), task.exception())

    def _save(self, record: RunRecord, edit: Edit) -> RunRecord:
        """Store the record changed by `edit`; when the state disk refuses (full), keep going with the change in
        memory and say so once."""
        try:
            return self.store.change(record.run_id, edit) or edit(record)
        except StateWriteError as exc:
            if str(exc) not in self.state_warnings:
                self.state_warnings.append(str(exc))
            return edit(record)

    def _on_view(self, view: RunView) -> None:
        for callback in list(self._subscribers):
            try:
                callback(view)
            except Exception:   # a front end's bug must not stop the babysitting
                log.exception("run view subscriber failed")

    def _state_error(self, message: str) -> None:
        if message not in self.state_warnings:
            self.state_warnings.append(message)

    def _notify(self, record: RunRecord, state: str, reason: str) -> None:
        if record.notify_cmd:
            self._own(run_notify(record.notify_cmd, record, state, reason))

    def mine(self, record: RunRecord) -> bool:
        """Whether this manager's profiles file launched the run."""
        return record.belongs_to(self.config_key)

    def find(self, target: str) -> RunRecord:
        """A run by id, or the latest run of a profile launched from this profiles file (preferring one that
        may still run)."""
        record = self.store.load(target) if RUN_ID.match(target) else None
        if record is not None:
            return record
        broken = [u for u in self.store.unreadable() if u.run_id == target]
        if broken:
            raise UserError(f"run {target}: its state record {broken[0].path} is unreadable: {broken[0].reason}")
        runs = [r for r in self.store.all() if r.profile == target and r.group is None and self.mine(r)]
        if not runs:
            elsewhere = sorted({r.config or "?" for r in self.store.all() if r.profile == target})
            hint = f"; runs of a profile {target!r} from {', '.join(elsewhere)} are addressed by run id" \
                if elsewhere else ""
            raise UserError(f"no run of profile or run id {target!r} from {self.config.source} is known "
                            f"(see `specmon status`){hint}")
        active = [r for r in runs if not r.terminal]
        return (active or runs)[-1]

    def node_records(self, record: RunRecord) -> list[RunRecord]:
        """A multi-node run's node records in rank order ([] for a single-node run or a lost node record)."""
        nodes = [self.store.load(node) for node in record.nodes]
        return [node for node in nodes if node is not None] if all(nodes) else []

    def unreadable(self) -> list[Unreadable]:
        """Run records that cannot be read (shown as such by `status`, never hiding the others)."""
        return self.store.unreadable()

    def _static_view(self, record: RunRecord) -> RunView:
        nodes = self.node_records(record)
        if nodes:
            return multinode.compose(record, [self._static_view(node) for node in nodes])
        state = RunStatus.LOADING if record.state == RunStatus.LAUNCHING and record.pid else record.state
        return RunView(
            run_id=record.run_id, profile=record.profile, host=record.host, state=state, stalled=False,
            pid=record.pid, port=record.port, url=node_url(record), started_at=record.started_at,
            ready_at=record.ready_at, load_seconds=record.load_seconds, shards=record.shards,
            kv_cache_tokens=record.kv_cache_tokens,
            exit_code=record.exit_code, failure=record.failure,
            eta_s=None, phase=None, stall_reason=None, log_path=record.log_path, run_dir=record.run_dir,
            node_rank=record.node_rank, config=record.config,
            job=f"job {record.slurm_job}" if record.slurm_job is not None and not record.terminal else None)

    # ---- queries -----------------------------------------------------------------------------------------
    def runs(self, all_configs: bool = False) -> list[RunView]:
        """The runs launched from this profiles file (`all_configs`: every known run), from the state files;
        watched runs with their live view."""
        views = []
        for record in self.store.all():
            if record.group is not None:
                continue   # a node: its view is part of its multi-node run's
            if not (all_configs or self.mine(record)):
                continue
            controller = self._controllers.get(record.run_id)
            views.append(controller.view() if controller else self._static_view(record))
        return views

    def view(self, run_id: str) -> RunView:
        """The current view of one run (live if watched)."""
        controller = self._controllers.get(run_id)
        if controller is not None:
            return controller.view()
        record = self.store.load(run_id)
        if record is None:
            raise UserError(f"unknown run {run_id!r}")
        return self._static_view(record)

    async def url_of(self, profile_name: str) -> str:
        """The base URL clients use for a profile's server (sweeps, `profiles --json`).

        The run owns it: a watched run's URL, else what the transport gives for the port of the profile's latest
        run that may still be running, else for the profile's port. A forwarded port stays open while this
        manager lives.
        """
        profile = self.config.profile(profile_name)
        live = [r for r in self.store.all() if r.profile == profile_name and not r.terminal]
        if live and live[-1].run_id in self._controllers:
            return self._controllers[live[-1].run_id].view().url
        host, recorded, port, addr = ((live[-1].host, live[-1].url, live[-1].port, live[-1].server_addr) if live else
                                      (profile.host, profile.url or host_url(profile.port), profile.port, None))
        try:
            return await client_url(self.ops(host).transport, recorded, port, addr)
        except TransportError as exc:
            raise UserError(str(exc)) from None

    def subscribe(self, callback: Callable[[RunView], None]) -> Callable[[], None]:
        """Call `callback(view)` whenever a watched run changes; returns the unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    async def watch(self, run_id: str) -> AsyncGenerator[RunView, None]:
        """The views of one run as it changes (attaching if needed), ending after its final view."""
        queue: asyncio.Queue[RunView] = asyncio.Queue()

        def on_view(view: RunView) -> None:
            if view.run_id == run_id:
                queue.put_nowait(view)

        unsubscribe = self.subscribe(on_view)
        try:
            controller = await self._attach(run_id)
            yield controller.view()
            while True:
                get = asyncio.ensure_future(queue.get())
                done_wait = asyncio.ensure_future(controller.finished.wait())
                try:
                    await asyncio.wait({get, done_wait}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    done_wait.cancel()
                    if not get.done():
                        get.cancel()
                if get.done() and not get.cancelled():
                    yield get.result()
                else:
                    while not queue.empty():
                        yield queue.get_nowait()
                    yield controller.view()
                    return
        finally:
            unsubscribe()

    async def log_lines(self, run_id: str, *, commit: bool = True, backlog: bool = True,
                        history: bool | None = None) -> AsyncIterator[LogLine]:
        """Log lines of a run (attaching if needed), ending when the run has ended and its log is drained.

        With `commit`, the offset of the lines this iterator handed out and the caller came back from is saved
        (at least once a second and whenever no line is waiting), so a later specmon process resumes after
        them. `history` (default: `not commit`) first replays up to 5000 lines an earlier reader already
        showed: what a display wants, never a resuming consumer. `backlog`: lines this process read before
        the call.
        """
        controller = await self._attach(run_id)
        queue = controller.add_reader(backlog, history=not commit if history is None else history)
        shown: dict[int | None, int] = {}   # per log (a multi-node run's lines carry their node)
        saved_at = time.monotonic()

        def save() -> None:
            for node, end in shown.items():
                controller.commit_offset(end, node)

        try:
            while True:
                if commit and shown and (queue.empty() or time.monotonic() - saved_at > COMMIT_EVERY_S):
                    save()
                    saved_at = time.monotonic()
                line = await queue.get()
                if line is None:
                    return
                yield line
                if line.kind == "line":
                    shown[line.node] = line.end
        finally:
            controller.remove_reader(queue)
            if commit:
                save()

    async def process_ended(self, record: RunRecord, poll_s: float = PROCESS_POLL_S) -> None:
        """Return once the run's process has ended, or its pid now belongs to another process (PID reuse); at
        once for a run already over. One /proc read on the run's host every `poll_s`: `specmon logs -f` stops
        following then, without watching the run's log."""
        if record.terminal or record.pid is None:
            return
        ops = self.ops(record.host)
        while True:
            info = await ops.proc(record.pid)
            if info is None or not info.alive or info.starttime != record.starttime:
                return
            await asyncio.sleep(poll_s)

    # ---- watching ----------------------------------------------------------------------------------------
    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView:
        """Start watching a run (a no-op if already watched); returns its view."""
        return (await self._attach(run_id, stall_timeout_s)).view()

    async def _attach(self, run_id: str, stall_timeout_s: float | None = None) -> Watcher:
        controller = self._controllers.get(run_id)
        if controller is None:
            # Concurrent callers (a view and a log pane) share one controller being set up.
            pending = self._attaching.get(run_id)
            if pending is None:
                pending = asyncio.ensure_future(self._new_controller(run_id))
                self._attaching[run_id] = pending
                pending.add_done_callback(lambda _: self._attaching.pop(run_id, None))
            controller = await asyncio.shield(pending)
        if stall_timeout_s is not None:
            controller.stall_timeout_s = stall_timeout_s
        return controller

    async def _new_controller(self, run_id: str) -> Watcher:
        record = self.store.load(run_id)
        if record is None:
            raise UserError(f"unknown run {run_id!r}")
        if record.group is not None:   # a node is watched with its multi-node run
            await self._attach(record.group)
            return self._controllers[run_id]
        nodes = self.node_records(record)
        if nodes:
            return await self._watch_nodes(record, nodes)
        return await self._start_controller(record, self._on_view)

    async def _start_controller(self, record: RunRecord, on_view: Callable[[RunView], None]) -> RunController:
        if not record.terminal:
            record = await self._reconcile(record)
        controller = RunController(record, self.ops(record.host), self.store, on_view=on_view,
                                   notify=self._notify, timings=self.watch_timings,
                                   on_state_error=self._state_error)
        self._controllers[record.run_id] = controller
        await controller.start()
        return controller

    async def _watch_nodes(self, record: RunRecord, nodes: list[RunRecord]) -> Watcher:
        watcher = multinode.NodesWatcher(record, self.store, publish=self._on_view, notify=self._notify)
        self._controllers[record.run_id] = watcher
        controllers = await asyncio.gather(*(self._start_controller(node, watcher.on_node_view) for node in nodes))
        watcher.start(controllers)
        return watcher

    async def _reconcile(self, record: RunRecord) -> RunRecord:
        """Check a run that is believed running: reboot (boot id), PID reuse (start time), exit code."""
        ops = self.ops(record.host)
        if record.slurm_job is not None:
            rs = None
            job = await SlurmHost(ops.transport).job(record.slurm_job)
            if job is None or not job.active:
                rs, _ = await self._replay(record)
            return self._save(record, await slurmjobs.reconcile(ops, record, job, rs))
        if record.pid is None:
            return await self._adopt_pid(record)
        info, exit_code, stop = await ops.run_status(record.run_dir, record.pid)
        boot_ok = not record.boot_id or record.boot_id == await ops.boot_id()
        if boot_ok and info is not None and info.alive and info.starttime == record.starttime:
            return record
        state, rs = None, None
        if boot_ok and exit_code is None and info is not None and info.alive and info.starttime != record.starttime:
            reason = f"pid {record.pid} now belongs to another process (start time differs): the server is gone"
            failure: Failure | None = Failure(RunStatus.LOST, reason)
            state = RunStatus.LOST
        else:
            rs, _ = await self._replay(record)
            state, failure = end_verdict(record, rs, exit_code, lost=exit_code is None, stop_requested=stop)
            if not boot_ok:
                failure = Failure(RunStatus.LOST, f"host {record.host} rebooted since the launch")
                state = RunStatus.LOST
        stop = stop or record.stop_requested
        progress = progress_of(rs) if rs is not None else None
        return self._save(record, lambda r: dataclasses.replace(
            r, state=state, exit_code=exit_code, stop_requested=stop, failure=failure).with_progress(progress))

    async def _adopt_pid(self, record: RunRecord) -> RunRecord:
        """A `launching` record without a pid (the launching specmon was killed after the start): take the pid
        from the run directory, or give the run up once the wrapper clearly never started."""
        ops = self.ops(record.host)
        text = await ops.read_file(f"{record.run_dir}/pid")
        if not (text and text.strip().isdigit()):
            if time.time() - record.started_at < 3 * PID_WAIT_S:
                return record   # may still be starting: a launch holds its host's lock meanwhile
            failure = Failure(RunStatus.EXITED, "the launch was interrupted before the server started")
            return self._save(record, lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure))
        pid = int(text.strip())
        info = await ops.proc(pid)
        if info is not None and info.alive and await ops.owns(pid, record.run_id):
            starttime, boot_id = info.starttime, await ops.boot_id()
            return self._save(record, lambda r: dataclasses.replace(
                r, pid=pid, starttime=starttime, boot_id=boot_id, state=RunStatus.LOADING))
        # The wrapper has ended already: judge the run from what its directory says (start time unknown).
        return await self._reconcile(dataclasses.replace(record, pid=pid, starttime=-1))

    async def _replay(self, record: RunRecord) -> tuple[RunState, float | None]:
        """The parser's state for the whole log (its last REPLAY_LIMIT bytes) and the log's mtime (epoch s).

        The parser gets no start time: its load time then comes from the log's own timestamps, which is
        right for a load nobody watched.
        """
        watch = LogWatch(None)
        code, out, _ = await self.ops(record.host).sh(f"stat -c '%s %Y' -- {shlex.quote(record.log_path)} 2>/dev/null")
        fields = out.split() if code == 0 else []
        size, mtime = (int(fields[0]), float(fields[1])) if len(fields) == 2 else (0, None)
        data = await read_range(self.ops(record.host).transport, record.log_path, max(0, size - REPLAY_LIMIT), size)
        with contextlib.suppress(Exception):   # a parser bug must not break `status`
            watch.feed(data, time.time())
            watch.close(time.time())
        return watch.state, mtime

    async def refresh(self, all_configs: bool = False) -> list[RunView]:
        """Check every run of this profiles file (`all_configs`: every run) that may still be running, once
        (for `specmon status`); returns their views."""
        views = []
        for record in self.store.all():
            if not (all_configs or self.mine(record)):
                continue
            if record.group is not None:
                continue   # a node: checked with its multi-node run
            nodes = self.node_records(record)
            hosts = {node.host for node in nodes} | {record.host}
            if hosts & self.unanswered.keys():   # asked once: each run there would wait for it again
                views.append(self._static_view(record))
                continue
            try:
                if nodes and record.run_id not in self._controllers:
                    views.append(await self._refresh_nodes(record, nodes))
                else:
                    views.append(await self._refresh_one(record))
            except (TransportError, TimeoutError) as exc:
                # One host that does not answer must not hide the others' runs: say it once, show this run
                # as last recorded.
                self.unanswered[self._host_of(exc, hosts)] = str(exc)
                views.append(self._static_view(record))
        return views

    @staticmethod
    def _host_of(exc: Exception, hosts: set[str]) -> str:
        """Which of a run's hosts an error is about (the transport's messages start with the host)."""
        return next((h for h in sorted(hosts) if str(exc).startswith(f"{h}:")), min(hosts))

    async def _refresh_nodes(self, record: RunRecord, nodes: list[RunRecord]) -> RunView:
        """Check each node of an unwatched multi-node run; keep the run's record in step with them."""
        views = [await self._refresh_one(node) for node in nodes]
        for worker in multinode.mark_workers_ready(self.store, views[0], [self.store.load(n.run_id) or n
                                                                          for n in nodes[1:]]):
            rank = worker.node_rank or 0
            views[rank] = dataclasses.replace(views[rank], state=worker.state, ready_at=worker.ready_at,
                                              load_seconds=worker.load_seconds, stalled=False, stall_reason=None)
        view = multinode.compose(record, views)
        multinode.save_progress(self.store, record.run_id, view)
        return view

    async def _refresh_one(self, record: RunRecord) -> RunView:
        if record.run_id in self._controllers:
            return self._controllers[record.run_id].view()
        still_running = False
        with contextlib.suppress(TransportError, TimeoutError):
            if not record.terminal:
                record = await self._reconcile(record)
            elif record.exit_code is None and record.state in (RunStatus.FAILED, RunStatus.EXITED) and record.pid:
                # Failed from the log while the process still ran: its exit code comes later, if ever (a server
                # whose rank died can wait forever), so say whether it still runs.
                info, exit_code, _ = await self.ops(record.host).run_status(record.run_dir, record.pid)
                if exit_code is not None:
                    record = self._save(record, lambda r: dataclasses.replace(r, exit_code=exit_code))
                else:
                    still_running = info is not None and info.alive and info.starttime == record.starttime
        if record.terminal:
            return dataclasses.replace(self._static_view(record), still_running=still_running)
        job = None
        if record.slurm_job is not None:
            with contextlib.suppress(TransportError, TimeoutError):
                queued = await SlurmHost(self.ops(record.host).transport).job(record.slurm_job)
                job = queued.describe() if queued is not None else None
        rs, mtime = await self._replay(record)
        if record.state != RunStatus.READY and rs.ready and failure_of(rs) is None:
            record = await self._confirm_ready(record, rs.load_seconds)
        base = self._static_view(record)
        progress = progress_of(rs)
        idle = None if mtime is None else time.time() - mtime
        stalled = base.state == RunStatus.LOADING and idle is not None and idle >= record.stall_timeout_s
        return dataclasses.replace(
            base, shards=progress.shards, kv_cache_tokens=progress.kv_cache_tokens, phase=rs.phase,
            run_state=rs, stalled=stalled, job=job,
            stall_reason=f"no log output for {idle:.0f} s" if stalled and idle is not None else None)

    async def _confirm_ready(self, record: RunRecord, log_load_seconds: float | None) -> RunRecord:
        """An unwatched run whose log says ready: one test completion decides."""
        probe = await probe_of(self.ops(record.host).transport, record.port, record.health_path, timeout_s=3.0,
                               addr=record.server_addr or "127.0.0.1")
        try:
            if not (await probe.completion()).ok:
                return record
        finally:
            await probe.aclose()
        ready_at = record.started_at + log_load_seconds if log_load_seconds else time.time()
        return self._save(record, lambda r: dataclasses.replace(
            r, state=RunStatus.READY, ready_at=ready_at, load_seconds=log_load_seconds))

    # ---- runs found on a host ----------------------------------------------------------------------------
    async def host_runs(self, host: str) -> list[HostRun]:
        """Runs whose directory is on `host` (in either runs root) but which this specmon does not know."""
        ops = self.ops(host)
        roots = await ops.run_roots()
        root = " and ".join(roots)
        # One round trip: each meta.json, its pid and exit code, separated by RS characters.
        code, out, err = await ops.sh(
            f"for d in {' '.join(shlex.quote(r) + '/*/' for r in roots)}; do [ -f \"$d/meta.json\" ] || continue; "
            f"head -c {SMALL_FILE_BYTES} -- \"$d/meta.json\"; "
            "printf '\\036'; cat -- \"$d/pid\" 2>/dev/null; printf '\\036'; cat -- \"$d/exit_code\" 2>/dev/null; "
            "printf '\\035'; done; true", timeout=60)
        if code != 0:
            raise UserError(f"{host}: cannot list {root}: {err or f'exit {code}'}")
        known = {r.run_id for r in self.store.all()}
        found = []
        for entry in out.split("\x1d"):
            meta_text, _, rest = entry.partition("\x1e")
            pid_text, _, exit_text = rest.partition("\x1e")
            try:
                meta = loads(meta_text)   # one cut at SMALL_FILE_BYTES is not JSON: skipped
            except ValueError:
                continue
            run_id = str(meta.get("run_id", "")) if isinstance(meta, dict) else ""
            if not RUN_ID.match(run_id) or run_id in known:
                continue
            pid = int(pid_text) if pid_text.strip().isdigit() else None
            if meta.get("slurm"):   # a job's pid is its node's: Slurm says whether it still runs (or waits)
                running = await SlurmHost(ops.transport).find(run_id) is not None
            else:
                info = await ops.proc(pid) if pid else None
                running = info is not None and info.alive
            found.append(HostRun(
                run_id=run_id, profile=str(meta.get("profile") or "?"), port=_int_or(meta.get("port"), 0),
                launched_at=str(meta.get("launched_at") or ""), pid=pid, running=running,
                exit_code=int(exit_text) if exit_text.strip().lstrip("-").isdigit() else None))
        return sorted(found, key=lambda r: r.run_id)

    async def adopt(self, host: str, run_id: str) -> RunView:
        """Take a run found on `host` into the local index (then `status`, `wait`, `logs`, `stop` and the TUI know
        it). Its state is checked at once; a run that already ended gets its verdict from the files it left."""
        if not RUN_ID.match(run_id):
            raise UserError(f"bad run id {run_id!r}")
        if self.store.load(run_id) is not None:
            raise UserError(f"run {run_id} is already known here (see `specmon status`)")
        ops = self.ops(host)
        for root in await ops.run_roots():   # the XDG runs root first, then the one of earlier versions
            run_dir = f"{root}/{run_id}"
            text = await ops.read_file(f"{run_dir}/meta.json")
            if text is not None:
                break
        try:
            meta = loads(text or "")
        except ValueError:
            meta = None
        if not isinstance(meta, dict) or meta.get("run_id") != run_id:
            raise UserError(f"{host}: no run {run_id} (no readable {run_dir}/meta.json)")
        pid_text = (await ops.read_file(f"{run_dir}/pid") or "").strip()
        pid = int(pid_text) if pid_text.isdigit() else None
        info = await ops.proc(pid) if pid else None
        alive = info is not None and info.alive
        profile = self.config.profiles.get(str(meta.get("profile")))
        port = _int_or(meta.get("port"), 0)
        if not 1 <= port <= 65535:
            raise UserError(f"{host}: {run_dir}/meta.json: port: {escape_controls(repr(meta.get('port')))[:40]} is not a "
                            "TCP port (1-65535); not adopted")
        record = RunRecord(
            run_id=run_id, profile=str(meta.get("profile") or run_id), host=host, run_dir=run_dir, port=port,
            url=host_url(port), server=str(meta.get("server") or "sglang"),
            health_path=profile.health_path if profile else "/health",
            stall_timeout_s=profile.stall_timeout_s if profile else 300.0, notify_cmd=None,
            expected_load_s=profile.expected_load_s if profile else None,
            started_at=_epoch(meta.get("launched_at")) or time.time(), state=RunStatus.LOADING if pid else RunStatus.LAUNCHING,
            # Adopted while alive: the start time read now guards against PID reuse from here on.
            pid=pid, starttime=info.starttime if alive and info else None,
            boot_id=await ops.boot_id() if alive else "")
        try:
            if meta.get("slurm"):
                # A Slurm job (from any jump box): found by its name; its pid means nothing on this host.
                record = await self._adopt_job(ops, dataclasses.replace(record, pid=None, starttime=None, boot_id=""))
            self.store.save(record)
            record = await self._reconcile(record) if not record.terminal else record
        except TransportError as exc:
            raise UserError(str(exc)) from None
        return self._static_view(record)

    async def _adopt_job(self, ops: HostOps, record: RunRecord) -> RunRecord:
        """A found Slurm run: its job while Slurm still lists it, else its verdict from the files it left."""
        job = await SlurmHost(ops.transport).find(record.run_id)
        if job is not None:
            return dataclasses.replace(record, slurm_job=job.job_id, state=RunStatus.LAUNCHING)
        rs, _ = await self._replay(record)
        return (await slurmjobs.reconcile(ops, record, None, rs))(record)

    # ---- launch / stop / restart -------------------------------------------------------------------------
    @staticmethod
    def _check_profile(profile: Profile) -> None:
        """What is wrong with the profile itself: refused before anything reaches the host."""
        where = f"profile {profile.name}"
        check_env(profile.env, where)
        if not profile.command:
            raise UserError(f"{where}: command is empty")

    async def preflight(self, profile: Profile, ops: HostOps, host: str) -> None:
        """Refuse a launch of `profile` on `host` that cannot work (UserError naming host, port or key)."""
        self._check_profile(profile)
        where = f"profile {profile.name}"
        for record in self.store.all():
            if record.host == host and record.port == profile.port and not record.terminal and not record.nodes:
                record = await self._reconcile(record)
                if not record.terminal:
                    raise UserError(f"{where}: run {record.group or record.run_id} (profile {record.profile}) is "
                                    f"still {record.state} on {ops.host} port {record.port}; stop it first or use "
                                    "`specmon restart`")
        if profile.workdir and not await ops.workdir_exists(profile.workdir):
            raise UserError(f"{ops.host}: workdir {profile.workdir} does not exist ({where})")
        if profile.slurm is not None:
            return   # the server runs on a node Slurm picks: this host's ports and commands are not the node's
        for run_dir in await ops.live_runs_on_port(profile.port):
            raise UserError(f"{where}: run {run_dir.rsplit('/', 1)[1]} is still running on {ops.host} port "
                            f"{profile.port} ({run_dir}); stop it first")
        listening = await ops.listening()
        if profile.port in listening:
            holder = await ops.port_holder(profile.port)
            others = [p.port for p in self.config.profiles.values() if p.host == host]
            free = tuple(free_ports_near(profile.port, listening, avoid=others))
            raise PortBusy(f"{ops.host}: port {profile.port} is already in use ({where})"
                           + (f" by {holder}" if holder else " by a process specmon cannot see")
                           + f"; stop it or choose another port (free: {', '.join(map(str, free))})",
                           profile.port, free)
        if not await ops.find_command(profile.command[0], profile.env, profile.workdir):
            raise UserError(f"{ops.host}: command not found: {profile.command[0]} ({where}: command)")

    async def launch(self, profile_name: str, *, watch: bool = True) -> RunView:
        """Start a run of the profile, detached from specmon. Returns once its pid is known.

        The host's launch lock is held from the preflight to the recorded pid, so of two racing launches for
        one port exactly one starts a server; the other fails the preflight. A launch that fails leaves no
        run directory and no record behind.
        """
        profile = self.config.profile(profile_name)
        if profile.hosts:
            return await multinode.launch(self, profile, watch=watch)
        if profile.slurm is not None and (profile.slurm.nodes or 1) > 1:
            return await slurmjobs.launch_nodes(self, profile, watch=watch)
        self._check_profile(profile)
        ops = self.ops(profile.host)
        try:
            async with self.launch_locks(profile, [profile.host]):
                await self.preflight(profile, ops, profile.host)
                record = await self.start_run(profile, profile.host, new_run_id(), profile.command)
        except TransportError as exc:
            raise UserError(str(exc)) from None
        if watch:
            return await self.attach(record.run_id)
        return self._static_view(self.store.load(record.run_id) or record)

    @contextlib.asynccontextmanager
    async def launch_locks(self, profile: Profile, hosts: Sequence[str]) -> AsyncIterator[None]:
        """Hold the launch lock of every host in `hosts` (from the preflight to the recorded pids).

        Hosts are locked one by one in name order, so two launches over the same hosts never each hold one lock
        while waiting for the other's; two names for one machine (one lock directory) take its lock once."""
        token = f"{socket.gethostname()} pid {os.getpid()} {new_run_id()}"
        held: list[HostOps] = []
        try:
            for host in sorted(set(hosts)):
                ops = self.ops(host)
                await self._lock(ops, token, profile)
                held.append(ops)
            yield
        finally:
            for ops in reversed(held):
                with contextlib.suppress(TransportError, TimeoutError):
                    await asyncio.shield(ops.unlock(token))

    async def _lock(self, ops: HostOps, token: str, profile: Profile) -> None:
        deadline = time.monotonic() + LOCK_WAIT_S
        # Our own token as the holder: another name of a host already locked in this launch.
        while (holder := await ops.try_lock(token)) not in (None, token):
            if time.monotonic() >= deadline:
                raise UserError(f"{ops.host}: another launch holds the launch lock ({holder}) for over "
                                f"{LOCK_WAIT_S:.0f} s (profile {profile.name})")
            await asyncio.sleep(0.1)

    async def start_run(self, profile: Profile, host: str, run_id: str, argv: tuple[str, ...], *,
                        submit: bool = True, node: NodeSeat | None = None) -> RunRecord:
        """Make the run dir, write launch.sh and meta.json, start it detached and wait for its pid (a Slurm
        profile: submit launch.sh as its job; with `submit` False, not: a node rank of a multi-node job, which
        `slurmjobs.launch_nodes` submits once for every rank).

        `node`: the run is a node of a multi-node run (its record and meta.json say which; it notifies nobody:
        its multi-node run does). The record is saved before anything exists on the host (a full state disk stops
        us there, with nothing made); a failure before the start removes the run dir and the record again."""
        ops = self.ops(host)
        try:
            run_dir = f"{await ops.runs_root()}/{run_id}"
        except TransportError as exc:
            raise UserError(str(exc)) from None
        started_at = time.time()
        record = RunRecord(
            run_id=run_id, profile=profile.name, host=host, run_dir=run_dir, port=profile.port,
            url=profile.url or host_url(profile.port), server=profile.server, health_path=profile.health_path,
            stall_timeout_s=profile.stall_timeout_s, notify_cmd=profile.notify_cmd if node is None else None,
            expected_load_s=profile.expected_load_s, started_at=started_at, config=self.config_key,
            group=None if node is None else node.group, node_rank=None if node is None else node.rank,
            dist_init_addr=None if node is None else node.dist_init_addr)
        # Written before the start, so a crash right after still leaves a trace to reconcile.
        self.store.save(record)
        made = False
        try:
            problem = await ops.make_run_dir(run_dir)
            if problem is not None:
                raise UserError(f"{ops.host}: cannot create run directory {run_dir}: {problem}")
            made = True
            # A node of a multi-node job learns rank 0's address only when the job runs (its script exports it).
            runtime = {"{master_addr}": MASTER_ADDR_VAR} if profile.slurm is not None and node is not None \
                else None
            await ops.transport.write_file(f"{run_dir}/launch.sh", wrapper_script(
                run_dir, argv, profile.env, profile.workdir, run_id, runtime).encode())
            await ops.write_json(f"{run_dir}/meta.json", {
                "run_id": run_id, "profile": profile.name, "host": host, "argv": list(argv),
                "port": profile.port, "server": profile.server, "launched_at": iso_utc(started_at),
                "config": self.config_key, **({"slurm": True} if profile.slurm is not None else {}),
                **({} if node is None else
                   {"group": node.group, "node_rank": node.rank, "dist_init_addr": node.dist_init_addr}),
            })
            if profile.slurm is not None:
                # The job holds the run from here: its state says when the server starts (slurmjobs).
                if submit:
                    await slurmjobs.submit(ops, self.store, profile.slurm, run_id, run_dir, f"{run_dir}/launch.sh",
                                           [run_id])
                return self.store.load(run_id) or record
            await ops.start_detached(run_dir, run_id)
        except TransportError as exc:
            await asyncio.shield(self.unmake(ops, record, made))
            raise UserError(str(exc)) from None
        except BaseException:
            await asyncio.shield(self.unmake(ops, record, made))
            raise
        pid = await self._wait_pid(ops, run_dir)
        try:
            if pid is None:
                failure = Failure(RunStatus.EXITED, f"the launch wrapper did not start within {PID_WAIT_S:.0f} s")
                self.store.change(run_id, lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure))
            else:
                info = await ops.proc(pid)
                starttime, boot_id = info.starttime if info else None, await ops.boot_id()
                self.store.change(run_id, lambda r: dataclasses.replace(
                    r, pid=pid, starttime=starttime, boot_id=boot_id, state=RunStatus.LOADING))
        except StateWriteError:
            # The server runs but cannot be recorded: end it rather than leave one specmon cannot see.
            if pid is not None:
                info = await ops.proc(pid)
                gone = dataclasses.replace(record, pid=pid, starttime=info.starttime if info else None)
                with contextlib.suppress(TransportError, TimeoutError):
                    await stop_run(ops, gone, force=True, timings=self.stop_timings)
            await self.unmake(ops, record, True)
            raise
        return self.store.load(run_id) or record

    async def unmake(self, ops: HostOps, record: RunRecord, made: bool) -> None:
        """Undo a launch that failed before its server started: its run directory and its record."""
        with contextlib.suppress(TransportError, TimeoutError, ValueError):
            if made:
                await ops.remove_run_dir(record.run_dir)
        with contextlib.suppress(StateWriteError):
            self.store.forget(record.run_id)

    async def _wait_pid(self, ops: HostOps, run_dir: str) -> int | None:
        deadline = time.monotonic() + PID_WAIT_S
        while time.monotonic() < deadline:
            text = await ops.read_file(f"{run_dir}/pid")
            if text and text.strip().isdigit():
                return int(text.strip())
            await asyncio.sleep(0.02)
        return None

    async def stop(self, target: str, force: bool = False) -> StopReport:
        """Stop a run (by id, or the latest run of a profile); waits for its port and GPUs to be free."""
        record = self.find(target)
        if record.nodes:
            return await multinode.stop(self, record, force)
        ops = self.ops(record.host)
        controller = self._controllers.get(record.run_id)
        if record.state in UP:
            record = self.store.change(record.run_id, RunRecord.asked_to_stop) or record
            if isinstance(controller, RunController):
                controller.set_record(record)
        try:
            report = await (slurmjobs.cancel(ops, record, self.stop_timings) if record.slurm_job is not None else
                            stop_run(ops, record, force=force, timings=self.stop_timings))
        except TransportError as exc:
            raise UserError(str(exc)) from None
        if controller is not None and not controller.finished.is_set():
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(controller.finished.wait(), 5.0)
        # No watcher recorded the end (none in this process, or it gave up waiting): record it here.
        current = self.store.load(record.run_id) or record
        if current.state == RunStatus.STOPPING and report.stopped:
            # The shard count and KV size where the load stopped stay in the record (status shows them).
            rs = None
            with contextlib.suppress(TransportError, TimeoutError):
                rs, _ = await self._replay(current)
            progress = None if rs is None else progress_of(rs)
            self._save(current, lambda r: dataclasses.replace(r, state=RunStatus.STOPPED, exit_code=report.exit_code)
                       .with_progress(progress, keep_known=True))
        elif current.exit_code is None and report.exit_code is not None:
            self._save(current, lambda r: dataclasses.replace(r, exit_code=report.exit_code))
        return report

    async def restart(self, profile_name: str,
                      on_stop: Callable[[StopReport], None] | None = None) -> RunView:
        """Stop the profile's running run (if any), check the port is free, launch again.

        `on_stop` gets the report of each stop before the launch starts.
        """
        profile = self.config.profile(profile_name)
        for record in self.store.all():
            if record.profile == profile.name and self.mine(record) and not record.terminal and record.group is None:
                report = await self.stop(record.run_id)
                if on_stop is not None:
                    on_stop(report)
                if report.blockers:
                    raise UserError(f"{profile.host}: cannot restart {profile.name}: " + "; ".join(report.blockers))
        return await self.launch(profile_name)

    async def close(self) -> None:
        """Cancel every task this manager started. Servers keep running."""
        for controller in list(self._controllers.values()):
            await controller.close()
        self._controllers.clear()
        tasks = list(self._side_tasks)
        if tasks:   # let a just-started notify_cmd finish (briefly) before cancelling it
            await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ops in self._ops.values():
            await ops.transport.close()
