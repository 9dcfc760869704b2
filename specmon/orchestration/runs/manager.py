"""The server lifecycle engine: launch, watch, stop, restart and reattach runs.

Engine API (the verbs the CLI commands and the TUI use):

    manager = RunManager(config, state_dir=None, transport_factory=None, stop_timings=StopTimings(),
                         watch_timings=WatchTimings())
    view = await manager.launch("profile", watch=True)      -> RunView   (UserError before anything starts
                                                                           on a busy port, missing command,
                                                                           unwritable run dir, live run)
    report = await manager.stop("profile" | "run_id", force=False)   -> StopReport
    view = await manager.restart("profile", on_stop=None)   -> RunView   (stop + preflight + launch;
                                                                           on_stop(StopReport) per stop)
    await manager.refresh(all_configs=False)                -> list[RunView]  one-shot check of the runs
                                                               (process alive? exit code? log state?)
    manager.unanswered                                      host -> why it did not answer that check (its
                                                               runs keep their last recorded state)
    view = await manager.attach(run_id, stall_timeout_s=None)   start watching a run (reattach)
    manager.view(run_id)                                    -> RunView   current view (live if watched)
    unsubscribe = manager.subscribe(callback)               callback(RunView) on every change of any run
    async for view in manager.watch(run_id): ...            changes of one run until it ends
    async for line in manager.log_lines(run_id, commit=True, backlog=True, history=None): ...
                                                            LogLine(text, end, kind "line" | "note"), `.clean`
                                                            for display; with commit=True the byte offset of
                                                            shown lines is saved, so a later process resumes
                                                            after them; commit=False also replays history
    await manager.url_of("profile")                         the URL clients use for the profile's server
    await manager.host_runs(host), await manager.adopt(host, run_id)   runs found on a host, and taking one in
    manager.ops(host)                                       HostOps: the host's shell (one connection per host)
    manager.config                                          the profiles file (Config) the manager was made with
    manager.index                                           KnownRuns: the run store, `find(profile_or_run_id)`
                                                               -> RunRecord, `mine(record)`, `config_key`,
                                                               `node_records`, `unreadable()` (corrupt state
                                                               records), `state_warnings` (failed state writes)
    await manager.close()                                   cancels every task; never stops a server

Runs belong to the profiles file (and profile) that launched them: a profile name finds only runs launched from
this manager's config file (`manager.index.config_key`), and queries list only those unless `all_configs`. A run id
always works. Port conflicts are checked host-wide whatever file launched the run.

RunView.state: a RunStatus (its values, sets and the verdicts that lead to each are described once, in
model.runs.runstatus), plus the `stalled` warning flag (with stall_reason); failure = Failure(kind, message,
last_lines); run_state = the parser's RunState.

Every host operation goes through a Transport (shell commands), so SSH hosts need only a transport_factory.
Times in views are epoch seconds (wall clock), shared by every specmon process; durations use monotonic time.

RunManager is the one door for front ends; the work is done in rooms of their own (modules of this package), each
with the parts it needs:
    index.RunIndex            the runs known here (the run store), by profiles file; finding one; unwatched views
                              (front ends read it as `KnownRuns`)
    connections.HostPool      the connections: one HostOps (one transport, so one SSH connection) per host name
    reconciler.Reconciler     bringing unwatched runs' records up to date with their hosts (reconcile, refresh);
                              `replay` (what a run's log says) and `process_ended` need only the host's HostOps
    watching.WatchedRuns      the watched runs (one watcher.RunWatcher each): live views, subscribers, log lines,
                              notify_cmd; it alone changes the table of watchers, which the reconciler and the
                              stopper read (read-only) to leave a watched run to its watcher
    launcher.Launcher         preflight, launch locks and the start of a single-node run
    stopper.Stopper           the stop verb of a single-node run and its recorded verdict (terminate.terminate
                              ends the processes)
    adoption.Adopter          runs found on a host that the index does not know
    multinode, slurmjobs      multi-node runs and Slurm jobs, through the narrow NodeRuns protocol, which
                              NodeRooms satisfies from the rooms directly
Above this package: what a sweep of a profile measures (`measure.comparison.ready_url`) and what an ended run's log
says (`inspect.runlog.log_state`) are built from these verbs.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from specmon.errors import UserError
from specmon.model.config import Config, Profile
from specmon.model.runs.record import NodeSeat, RunRecord
from specmon.orchestration.runs import multinode, slurmjobs
from specmon.orchestration.runs.adoption import Adopter, HostRun
from specmon.orchestration.runs.connections import HostPool, TransportFactory, default_transport
from specmon.orchestration.runs.index import KnownRuns, RunIndex
from specmon.orchestration.runs.launcher import Launcher
from specmon.orchestration.runs.reconciler import Reconciler
from specmon.orchestration.runs.stopper import Stopper
from specmon.orchestration.runs.store import RunStore
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import LogLine, RunView, StopReport
from specmon.orchestration.runs.watcher import WatchTimings
from specmon.orchestration.runs.watching import WatchedRuns
from specmon.sources.hostshell import HostOps


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
        self._index = RunIndex(config, state_dir)
        self._hosts = HostPool(transport_factory or functools.partial(default_transport, ssh=config.ssh))
        self._watching = WatchedRuns(self._index, self._hosts, lambda record: self._reconciler.reconcile(record),
                                     watch_timings)
        self._reconciler = Reconciler(self._index, self._hosts, self._watching.watched)
        self._stopper = Stopper(self._index, self._hosts, self._watching.watched, stop_timings)
        self._launcher = Launcher(self._index, self._hosts, self._reconciler, stop_timings)
        self._adopter = Adopter(self._index, self._hosts, self._reconciler)
        self._nodes = NodeRooms(self._index, self._hosts, self._launcher, self._watching, self.stop)

    # ---- the runs known here, and their hosts ------------------------------------------------------------
    @property
    def index(self) -> KnownRuns:
        """The runs known here: the store, finding one by profile or run id, which profiles file a run is from."""
        return self._index

    def ops(self, host: str) -> HostOps:
        return self._hosts.ops(host)

    @property
    def unanswered(self) -> dict[str, str]:
        """host -> why it did not answer `refresh()` (its runs keep their last recorded state)."""
        return self._reconciler.unanswered

    async def refresh(self, all_configs: bool = False) -> list[RunView]:
        return await self._reconciler.refresh(all_configs)

    # ---- watching ----------------------------------------------------------------------------------------
    def view(self, run_id: str) -> RunView:
        return self._watching.view(run_id)

    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView:
        return await self._watching.attach(run_id, stall_timeout_s=stall_timeout_s)

    def subscribe(self, callback: Callable[[RunView], None]) -> Callable[[], None]:
        return self._watching.subscribe(callback)

    def watch(self, run_id: str) -> AsyncGenerator[RunView, None]:
        return self._watching.watch(run_id)

    def log_lines(self, run_id: str, *, commit: bool = True, backlog: bool = True,
                  history: bool | None = None) -> AsyncIterator[LogLine]:
        return self._watching.log_lines(run_id, commit=commit, backlog=backlog, history=history)

    async def url_of(self, profile_name: str) -> str:
        return await self._watching.url_of(profile_name)

    # ---- runs found on a host ----------------------------------------------------------------------------
    async def host_runs(self, host: str) -> list[HostRun]:
        return await self._adopter.host_runs(host)

    async def adopt(self, host: str, run_id: str) -> RunView:
        return await self._adopter.adopt(host, run_id)

    # ---- launch / stop / restart -------------------------------------------------------------------------
    async def launch(self, profile_name: str, *, watch: bool = True) -> RunView:
        """Start a run of the profile (every node of a multi-node one), detached from specmon; see
        `Launcher.launch`. With `watch`, it is watched from here on."""
        profile = self.config.profile(profile_name)
        if profile.hosts:
            return await multinode.launch(self._nodes, profile, watch=watch)
        if profile.slurm is not None and (profile.slurm.nodes or 1) > 1:
            return await slurmjobs.launch_nodes(self._nodes, profile, watch=watch)
        record = await self._launcher.launch(profile)
        if watch:
            return await self.attach(record.run_id)
        return self._index.static_view(self._index.store.load(record.run_id) or record)

    async def stop(self, target: str, force: bool = False) -> StopReport:
        """Stop a run (by id, or the latest run of a profile); waits for its port and GPUs to be free."""
        record = self._index.find(target)
        if record.nodes:
            return await multinode.stop(self._nodes, record, force)
        return await self._stopper.stop(record, force)

    async def restart(self, profile_name: str,
                      on_stop: Callable[[StopReport], None] | None = None) -> RunView:
        """Stop the profile's running run (if any), check the port is free, launch again.

        `on_stop` gets the report of each stop before the launch starts.
        """
        profile = self.config.profile(profile_name)
        for record in self._index.store.all():
            if (record.profile == profile.name and self._index.mine(record) and not record.terminal
                    and record.group is None):
                report = await self.stop(record.run_id)
                if on_stop is not None:
                    on_stop(report)
                if report.blockers:
                    raise UserError(f"{profile.host}: cannot restart {profile.name}: " + "; ".join(report.blockers))
        return await self.launch(profile_name)

    async def close(self) -> None:
        """Cancel every task this manager started and close its connections. Servers keep running."""
        await self._watching.close()
        await self._hosts.close()


class NodeRooms:
    """The rooms as multi-node runs and Slurm jobs use them (multinode.NodeRuns): the store, each host's operations
    and launch lock, the launcher's single-node verbs, and watching and stopping each node run."""

    def __init__(self, index: RunIndex, hosts: HostPool, launcher: Launcher, watching: WatchedRuns,
                 stop: Callable[[str, bool], Awaitable[StopReport]]) -> None:
        self._index = index
        self._hosts = hosts
        self._launcher = launcher
        self._watching = watching
        self._stop = stop

    @property
    def store(self) -> RunStore:
        return self._index.store

    @property
    def config_key(self) -> str:
        return self._index.config_key

    def ops(self, host: str) -> HostOps:
        return self._hosts.ops(host)

    def launch_locks(self, profile: Profile, hosts: Sequence[str]) -> AbstractAsyncContextManager[None]:
        return self._launcher.launch_locks(profile, hosts)

    async def preflight(self, profile: Profile, ops: HostOps, host: str) -> None:
        await self._launcher.preflight(profile, ops, host)

    async def start_run(self, profile: Profile, host: str, run_id: str, argv: tuple[str, ...], *,
                        submit: bool = True, node: NodeSeat | None = None) -> RunRecord:
        return await self._launcher.start_run(profile, host, run_id, argv, submit=submit, node=node)

    async def unmake(self, ops: HostOps, record: RunRecord, made: bool) -> None:
        await self._launcher.unmake(ops, record, made)

    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView:
        return await self._watching.attach(run_id, stall_timeout_s=stall_timeout_s)

    def view(self, run_id: str) -> RunView:
        return self._watching.view(run_id)

    async def stop(self, target: str, force: bool = False) -> StopReport:
        return await self._stop(target, force)
