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

RunView.state: a RunStatus (its values, sets and the verdicts that lead to each are described once, in
model.runs.runstatus), plus the `stalled` warning flag (with stall_reason); failure = Failure(kind, message,
last_lines); run_state = the parser's RunState.

Every host operation goes through a Transport (shell commands), so SSH hosts need only a transport_factory.
Times in views are epoch seconds (wall clock), shared by every specmon process; durations use monotonic time.

RunManager is the one door; the work is done in rooms of their own (modules of this package), each with the
parts it needs:
    index.RunIndex            the runs known here (the run store), by profiles file; finding one; unwatched views
    hostpool.HostPool         one HostOps (one transport, so one SSH connection) per host name
    reconciler.Reconciler     bringing unwatched runs' records up to date with their hosts (reconcile, refresh)
    watching.WatchedRuns      the watched runs (one watcher.RunWatcher each): live views, subscribers, log lines,
                              notify_cmd
    launcher.Launcher         preflight, launch locks and the start of a single-node run
    stopper.Stopper           the stop verb of a single-node run and its recorded verdict (terminate.terminate
                              ends the processes)
    adoption.Adopter          runs found on a host that the index does not know
    multinode, slurmjobs      multi-node runs and Slurm jobs, through the narrow NodeRuns protocol, which
                              NodeRooms satisfies from the rooms directly (RunManager keeps only the verbs its
                              front ends use)
"""

from __future__ import annotations

import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from specmon.errors import UserError
from specmon.model.config import Config, Profile
from specmon.model.runs.record import NodeSeat, RunRecord
from specmon.model.runs.runstate import RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.orchestration.runs import multinode, slurmjobs
from specmon.orchestration.runs.adoption import Adopter, HostRun
from specmon.orchestration.runs.hostpool import HostPool, TransportFactory, default_transport
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.launcher import Launcher
from specmon.orchestration.runs.reconciler import PROCESS_POLL_S, Reconciler
from specmon.orchestration.runs.stopper import Stopper
from specmon.orchestration.runs.store import RunStore, Unreadable
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import LogLine, RunView, StopReport
from specmon.orchestration.runs.watcher import Watcher, WatchTimings
from specmon.orchestration.runs.watching import WatchedRuns
from specmon.sources.host import HostOps


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
        watched: dict[str, Watcher] = {}
        self._reconciler = Reconciler(self._index, self._hosts, watched)
        self._watchers = WatchedRuns(self._index, self._hosts, self._reconciler, watched, watch_timings)
        self._stopper = Stopper(self._index, self._hosts, self._reconciler, watched, stop_timings)
        self._launcher = Launcher(self._index, self._hosts, self._reconciler, lambda: self._stopper.timings)
        self._adopter = Adopter(self._index, self._hosts, self._reconciler)
        self._nodes = NodeRooms(self._index, self._hosts, self._launcher, self._watchers, self.stop)
        self.watch_timings = watch_timings
        self.config_key = self._index.config_key

    # ---- the index ---------------------------------------------------------------------------------------
    @property
    def store(self) -> RunStore:
        return self._index.store

    @property
    def state_warnings(self) -> list[str]:
        """State writes that failed (full disk), one line each."""
        return self._index.state_warnings

    @property
    def unanswered(self) -> dict[str, str]:
        """host -> why it did not answer `refresh()` (its runs keep their last recorded state)."""
        return self._reconciler.unanswered

    @property
    def stop_timings(self) -> StopTimings:
        return self._stopper.timings

    @stop_timings.setter
    def stop_timings(self, timings: StopTimings) -> None:
        self._stopper.timings = timings

    def ops(self, host: str) -> HostOps:
        return self._hosts.ops(host)

    def mine(self, record: RunRecord) -> bool:
        """Whether this manager's profiles file launched the run."""
        return self._index.mine(record)

    def find(self, target: str) -> RunRecord:
        """A run by id, or the latest run of a profile launched from this profiles file."""
        return self._index.find(target)

    def node_records(self, record: RunRecord) -> list[RunRecord]:
        return self._index.node_records(record)

    def unreadable(self) -> list[Unreadable]:
        return self._index.unreadable()

    # ---- queries and watching ----------------------------------------------------------------------------
    def runs(self, all_configs: bool = False) -> list[RunView]:
        return self._watchers.runs(all_configs)

    def view(self, run_id: str) -> RunView:
        return self._watchers.view(run_id)

    async def url_of(self, profile_name: str) -> str:
        return await self._watchers.url_of(profile_name)

    async def ready_url(self, profile_name: str) -> str:
        """The URL of the profile's ready run: what a sweep of the profile measures. UserError when the profile has
        no run, or its latest is not READY (stopped, failed, still loading): whatever answers on its port then is
        not the profile's server, and its figures must not be filed under the profile's name."""
        profile = self.config.profile(profile_name)
        hint = f"`specmon launch {profile.name} --wait` starts one; `--url URL` measures any server on purpose"
        try:
            run_id = self.find(profile.name).run_id
        except UserError:
            raise UserError(f"profile {profile.name} has no ready run (none launched from {self.config.source}): "
                            f"{hint}") from None
        view = next((v for v in await self.refresh() if v.run_id == run_id), None) or self.view(run_id)
        if view.state != RunStatus.READY:
            raise UserError(f"profile {profile.name} has no ready run (its latest, {run_id}, is {view.state}): {hint}")
        return await self.url_of(profile.name)   # as clients reach it (a remote run: through the host's forward)

    def subscribe(self, callback: Callable[[RunView], None]) -> Callable[[], None]:
        return self._watchers.subscribe(callback)

    def watch(self, run_id: str) -> AsyncGenerator[RunView, None]:
        return self._watchers.watch(run_id)

    def log_lines(self, run_id: str, *, commit: bool = True, backlog: bool = True,
                  history: bool | None = None) -> AsyncIterator[LogLine]:
        return self._watchers.log_lines(run_id, commit=commit, backlog=backlog, history=history)

    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView:
        return await self._watchers.attach(run_id, stall_timeout_s=stall_timeout_s)

    async def process_ended(self, record: RunRecord, poll_s: float = PROCESS_POLL_S) -> None:
        await self._reconciler.process_ended(record, poll_s)

    async def refresh(self, all_configs: bool = False) -> list[RunView]:
        return await self._reconciler.refresh(all_configs)

    async def log_state(self, run_id: str) -> RunState:
        """What a run's log says (its last part, parsed): for a run that ended before this process watched it, read
        from its record alone, its speculative set-up, memory fraction and last log line."""
        record = self.store.load(run_id)
        if record is None:
            raise UserError(f"no run {run_id}")
        return (await self._reconciler.replay(record))[0]

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
        return self._index.static_view(self.store.load(record.run_id) or record)

    async def stop(self, target: str, force: bool = False) -> StopReport:
        """Stop a run (by id, or the latest run of a profile); waits for its port and GPUs to be free."""
        record = self.find(target)
        if record.nodes:
            return await multinode.stop(self._nodes, record, force)
        return await self._stopper.stop(record, force)

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
        """Cancel every task this manager started and close its connections. Servers keep running."""
        await self._watchers.close()
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
