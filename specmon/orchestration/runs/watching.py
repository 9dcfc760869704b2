"""WatchedRuns, the runs this process watches: one RunWatcher per run (a NodesWatcher for a multi-node run), shared by every reader
in this process, and what front ends read through them: live views (`view`, `subscribe`, `watch`), log
lines (`log_lines`, whose shown offsets a later process resumes after) and the URL clients use.

A run's record is checked against its host (`Reconciler.reconcile`) before its watcher starts. The profile's
notify_cmd runs from here, on the watchers' verdicts."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from types import MappingProxyType

from specmon.errors import UserError
from specmon.model.runs.record import RunRecord, host_url
from specmon.orchestration.runs import multinode
from specmon.orchestration.runs.connections import HostPool
from specmon.orchestration.runs.index import RunIndex
from specmon.orchestration.runs.view import LogLine, RunView
from specmon.orchestration.runs.watcher import RunWatcher, Watcher, WatchTimings, client_url, run_notify
from specmon.sources.transport import TransportError

log = logging.getLogger(__name__)
COMMIT_EVERY_S = 1.0   # a log reader's shown offset is saved at least this often


class WatchedRuns:
    """The runs this process watches, by run id, and their readers."""

    def __init__(self, index: RunIndex, hosts: HostPool, reconcile: Callable[[RunRecord], Awaitable[RunRecord]],
                 timings: WatchTimings) -> None:
        self.index = index
        self.hosts = hosts
        self.reconcile = reconcile   # a record brought up to date with its host (Reconciler.reconcile)
        self._watched: dict[str, Watcher] = {}   # by run id: RunWatchers, and multi-node runs' watchers; only here
        # changes it, the reconciler and stopper read it (a watched run's watcher knows better than they)
        self.watched: Mapping[str, Watcher] = MappingProxyType(self._watched)
        self.timings = timings
        self._attaching: dict[str, asyncio.Future[Watcher]] = {}
        self._subscribers: list[Callable[[RunView], None]] = []
        self._side_tasks: set[asyncio.Task[None]] = set()

    def view(self, run_id: str) -> RunView:
        """The current view of one run (live if watched)."""
        watcher = self.watched.get(run_id)
        if watcher is not None:
            return watcher.view()
        record = self.index.store.load(run_id)
        if record is None:
            raise UserError(f"unknown run {run_id!r}")
        return self.index.static_view(record)

    async def url_of(self, profile_name: str) -> str:
        """The base URL clients use for a profile's server (sweeps, `profiles --json`).

        The run owns it: a watched run's URL, else what the transport gives for the port of the profile's latest
        run that may still be running, else for the profile's port. A forwarded port stays open while this
        manager lives.
        """
        profile = self.index.config.profile(profile_name)
        live = [r for r in self.index.store.all() if r.profile == profile_name and not r.terminal]
        if live and live[-1].run_id in self.watched:
            return self.watched[live[-1].run_id].view().url
        host, recorded, port, addr = ((live[-1].host, live[-1].url, live[-1].port, live[-1].server_addr) if live else
                                      (profile.host, profile.url or host_url(profile.port), profile.port, None))
        try:
            return await client_url(self.hosts.ops(host).transport, recorded, port, addr)
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
            watcher = await self._attach(run_id)
            yield watcher.view()
            while True:
                get = asyncio.ensure_future(queue.get())
                done_wait = asyncio.ensure_future(watcher.finished.wait())
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
                    yield watcher.view()
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
        watcher = await self._attach(run_id)
        queue = watcher.add_reader(backlog, history=not commit if history is None else history)
        shown: dict[int | None, int] = {}   # per log (a multi-node run's lines carry their node)
        saved_at = time.monotonic()

        def save() -> None:
            for node, end in shown.items():
                watcher.commit_offset(end, node)

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
            watcher.remove_reader(queue)
            if commit:
                save()

    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView:
        """Start watching a run (a no-op if already watched); returns its view."""
        return (await self._attach(run_id, stall_timeout_s)).view()

    async def _attach(self, run_id: str, stall_timeout_s: float | None = None) -> Watcher:
        watcher = self.watched.get(run_id)
        if watcher is None:
            # Concurrent callers (a view and a log pane) share one watcher being set up.
            pending = self._attaching.get(run_id)
            if pending is None:
                pending = asyncio.ensure_future(self._new_watcher(run_id))
                self._attaching[run_id] = pending
                pending.add_done_callback(lambda _: self._attaching.pop(run_id, None))
            watcher = await asyncio.shield(pending)
        if stall_timeout_s is not None:
            watcher.stall_timeout_s = stall_timeout_s
        return watcher

    async def _new_watcher(self, run_id: str) -> Watcher:
        record = self.index.store.load(run_id)
        if record is None:
            raise UserError(f"unknown run {run_id!r}")
        if record.group is not None:   # a node is watched with its multi-node run
            await self._attach(record.group)
            return self.watched[run_id]
        nodes = self.index.node_records(record)
        if nodes:
            return await self._watch_nodes(record, nodes)
        return await self._start_watcher(record, self._on_view)

    async def _start_watcher(self, record: RunRecord, on_view: Callable[[RunView], None]) -> RunWatcher:
        if not record.terminal:
            record = await self.reconcile(record)
        watcher = RunWatcher(record, self.hosts.ops(record.host), self.index.store, on_view=on_view,
                                   notify=self._notify, timings=self.timings,
                                   on_state_error=self.index.state_error)
        self._watched[record.run_id] = watcher
        await watcher.start()
        return watcher

    async def _watch_nodes(self, record: RunRecord, nodes: list[RunRecord]) -> Watcher:
        watcher = multinode.NodesWatcher(record, self.index.store, publish=self._on_view, notify=self._notify)
        self._watched[record.run_id] = watcher
        node_watchers = await asyncio.gather(*(self._start_watcher(node, watcher.on_node_view) for node in nodes))
        watcher.start(node_watchers)
        return watcher

    def _own(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.add(task)
        task.add_done_callback(self._side_task_done)

    def _side_task_done(self, task: asyncio.Task[None]) -> None:
        self._side_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:   # retrieved here, logged, never re-raised
            log.warning("%s failed: %r", task.get_name(), task.exception())

    def _on_view(self, view: RunView) -> None:
        for callback in list(self._subscribers):
            try:
                callback(view)
            except Exception:   # a front end's bug must not stop the babysitting
                log.exception("run view subscriber failed")

    def _notify(self, record: RunRecord, state: str, reason: str) -> None:
        if record.notify_cmd:
            self._own(run_notify(record.notify_cmd, record, state, reason))

    async def close(self) -> None:
        """Cancel every watcher and notify_cmd task. Servers keep running."""
        for watcher in list(self.watched.values()):
            await watcher.close()
        self._watched.clear()
        tasks = list(self._side_tasks)
        if tasks:   # let a just-started notify_cmd finish (briefly) before cancelling it
            await asyncio.wait(tasks, timeout=5.0)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
