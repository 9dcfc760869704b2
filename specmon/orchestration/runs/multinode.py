"""Multi-node runs: one run made of one ordinary run per node, launched, watched and stopped together.

A profile with `hosts = ["gpu1", "gpu2"]` starts the same command on each host (node rank i on hosts[i]), with
the rank filled in by `model.runs.multinode.node_command`. Each node is a plain run (its own run dir, process group,
marker, log, gates) through its host's Transport, so this works over any transport. The multi-node run itself
is a RunRecord listing its node runs (`nodes`); its state is `model.runs.multinode.overall` of theirs (the rule is
described with every run verdict in model.runs.runstatus), kept in its record so a later `specmon status` or a
preflight sees it. Once rank 0 is ready the worker nodes are marked ready too; a failure names its node ("node 1
(gpu2): ..."); a stop stops every node (each node's own stop: group signal, marker sweep, port and GPU gates).

Rendezvous: master_addr is the profile's `master_addr`, else the address rank 0's host sends from to reach
rank 1's host (`ip route get`), else rank 0's first `hostname -I` address; master_port is the profile's
`master_port` (default 29500). Both are checked before anything starts (the port must be free on rank 0's host).

Front ends see one RunView per multi-node run (its `nodes` hold each node's view) and one merged log whose
LogLines carry their node rank.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from specmon.errors import UserError
from specmon.model.config import Profile
from specmon.model.runs.failure import Failure
from specmon.model.runs.multinode import (
    NodePlacement,
    NodeState,
    node_command,
    overall,
    worker_ready,
)
from specmon.model.runs.record import NodeSeat, RunRecord, host_url
from specmon.model.runs.runstatus import STARTING, RunStatus
from specmon.orchestration.runs.store import RunStore, new_run_id
from specmon.orchestration.runs.view import LogLine, RunView, StopReport
from specmon.orchestration.runs.watcher import RunWatcher
from specmon.sources.hostshell import HostOps
from specmon.sources.transport import TransportError


class NodeRuns(Protocol):
    """What multi-node runs (and Slurm jobs) need of the run rooms (`orchestration.runs.manager.NodeRooms` is it):
    the run store, each host's operations and launch lock, and the single-node verbs each node goes through."""

    @property
    def store(self) -> RunStore: ...

    def ops(self, host: str) -> HostOps: ...

    def launch_locks(self, profile: Profile, hosts: Sequence[str]) -> AbstractAsyncContextManager[None]: ...

    @property
    def config_key(self) -> str: ...

    async def preflight(self, profile: Profile, ops: HostOps, host: str) -> None: ...

    async def start_run(self, profile: Profile, host: str, run_id: str, argv: tuple[str, ...], *,
                        submit: bool = True, node: NodeSeat | None = None) -> RunRecord: ...

    async def unmake(self, ops: HostOps, record: RunRecord, made: bool) -> None: ...

    async def attach(self, run_id: str, *, stall_timeout_s: float | None = None) -> RunView: ...

    def view(self, run_id: str) -> RunView: ...

    async def stop(self, target: str, force: bool = False) -> StopReport: ...


def node_label(view: RunView | RunRecord) -> str:
    """How messages name a node: `node 1 (gpu2)`, its host; a Slurm job's rank once its node is known, by the
    node: `rank 1 on n2` (every rank's host is the login node)."""
    if view.slurm_node is not None:
        return f"rank {view.node_rank} on {view.slurm_node}"
    return f"node {view.node_rank} ({view.host})"


def node_run_id(run_id: str, rank: int) -> str:
    """The run id of one node of multi-node run `run_id`."""
    return f"{run_id}-n{rank}"


def compose(record: RunRecord, nodes: Sequence[RunView]) -> RunView:
    """The view of multi-node run `record` from its nodes' views (rank 0 first): overall state, rank 0's
    progress, URL and timing, and a failure or stall that names its node."""
    verdict = overall([NodeState(v.node_rank or 0, v.state, v.stalled) for v in nodes])
    rank0 = nodes[0]
    state, failure = verdict.state, None
    if record.state == RunStatus.FAILED and record.failure:   # the first failure seen stays the reason
        state, failure = RunStatus.FAILED, record.failure
    elif verdict.node is not None:
        bad = nodes[verdict.node]
        reason = bad.failure or Failure(bad.state, f"is {bad.state}")
        failure = Failure(reason.kind, f"{node_label(bad)}: {reason.message}", reason.last_lines)
    stall_reason = None
    if verdict.stalled_node is not None:
        stalled = nodes[verdict.stalled_node]
        stall_reason = f"{node_label(stalled)}: {stalled.stall_reason or 'stalled'}"
    return dataclasses.replace(
        rank0, run_id=record.run_id, state=state, stalled=stall_reason is not None, stall_reason=stall_reason,
        started_at=record.started_at, failure=failure, node_rank=None, nodes=tuple(nodes),
        eta_s=rank0.eta_s if state in STARTING else None)


def with_progress(record: RunRecord, view: RunView) -> RunRecord:
    """The multi-node run's record with the fields that follow its view (stored, so a later process sees the
    same)."""
    return dataclasses.replace(record, state=view.state, failure=view.failure, ready_at=view.ready_at,
                               load_seconds=view.load_seconds, shards=view.shards, kv_cache_tokens=view.kv_cache_tokens)


def save_progress(store: RunStore, run_id: str, view: RunView) -> RunRecord | None:
    """Store the fields of the run's record that follow its view (see `with_progress`); the record as stored."""
    return store.change(run_id, lambda record: with_progress(record, view))


def mark_workers_ready(store: RunStore, rank0: RunView, workers: Sequence[RunRecord]) -> list[RunRecord]:
    """Record worker nodes as ready once rank 0 is (see `model.runs.multinode.worker_ready`); returns the changed."""
    changed = []
    for worker in workers:
        if worker_ready(rank0.state, worker.state):
            updated = store.change(worker.run_id, lambda r: dataclasses.replace(
                r, state=RunStatus.READY, ready_at=rank0.ready_at, load_seconds=rank0.load_seconds))
            if updated is not None:
                changed.append(updated)
    return changed


class NodesWatcher:
    """Watches a multi-node run through its nodes' RunWatchers (the manager's Watcher for it)."""

    def __init__(self, record: RunRecord, store: RunStore, *, publish: Callable[[RunView], None],
                 notify: Callable[[RunRecord, str, str], None]) -> None:
        self.record = record
        self.store = store
        self.nodes: list[RunWatcher] = []
        self.finished = asyncio.Event()
        self._publish = publish
        self._notify = notify
        self._last: RunView | None = None
        self._pumps: dict[asyncio.Queue[LogLine | None], list[tuple[RunWatcher, asyncio.Queue[LogLine | None],
                                                                    asyncio.Task[None]]]] = {}
        self._finisher: asyncio.Task[None] | None = None

    def start(self, nodes: Sequence[RunWatcher]) -> None:
        """Take the node watchers (rank order, already started) and publish the first view."""
        self.nodes = list(nodes)
        self._finisher = asyncio.create_task(self._wait_finished(), name=f"nodes {self.record.run_id}")
        self.on_node_view(None)

    async def _wait_finished(self) -> None:
        await asyncio.gather(*(node.finished.wait() for node in self.nodes))
        self.on_node_view(None)
        self.finished.set()

    @property
    def stall_timeout_s(self) -> float:
        return self.nodes[0].stall_timeout_s if self.nodes else self.record.stall_timeout_s

    @stall_timeout_s.setter
    def stall_timeout_s(self, seconds: float) -> None:
        for node in self.nodes:
            node.stall_timeout_s = seconds

    def view(self) -> RunView:
        return compose(self.record, [node.view() for node in self.nodes])

    def on_node_view(self, _: RunView | None) -> None:
        """A node changed: mark workers ready after rank 0, keep the run's record, publish, notify."""
        if len(self.nodes) != len(self.record.nodes):
            return   # still being set up
        rank0 = self.nodes[0].view()
        for updated in mark_workers_ready(self.store, rank0, [node.record for node in self.nodes[1:]]):
            self.nodes[updated.node_rank or 0].set_record(updated)   # re-enters here with the new view
        view = self.view()
        if view == self._last:
            return
        before, self._last = self._last, view
        if with_progress(self.record, view) != self.record:
            self.record = save_progress(self.store, self.record.run_id, view) or self.record
        if before is None or before.state != view.state:
            if view.state == RunStatus.READY:
                self._notify(self.record, RunStatus.READY, f"ready after {view.load_seconds or 0:.1f} s")
            elif view.state == RunStatus.FAILED and view.failure is not None:
                self._notify(self.record, RunStatus.FAILED, view.failure.message)
        if view.stalled and not (before and before.stalled) and view.stall_reason:
            self._notify(self.record, "stalled", view.stall_reason)
        self._publish(view)

    # ---- the merged log ----------------------------------------------------------------------------------
    def add_reader(self, backlog: bool = True, history: bool = False) -> asyncio.Queue[LogLine | None]:
        """Every node's lines (each carrying its `node` rank) on one queue; None once every node's log ended."""
        merged: asyncio.Queue[LogLine | None] = asyncio.Queue()
        left = [len(self.nodes)]

        async def pump(node: RunWatcher, queue: asyncio.Queue[LogLine | None]) -> None:
            while (line := await queue.get()) is not None:
                merged.put_nowait(dataclasses.replace(line, node=node.record.node_rank))
            left[0] -= 1
            if left[0] == 0:
                merged.put_nowait(None)

        pumps = []
        for node in self.nodes:
            queue = node.add_reader(backlog, history)
            pumps.append((node, queue, asyncio.create_task(pump(node, queue), name=f"log {node.record.run_id}")))
        self._pumps[merged] = pumps
        return merged

    def remove_reader(self, queue: asyncio.Queue[LogLine | None]) -> None:
        for node, node_queue, task in self._pumps.pop(queue, []):
            task.cancel()
            node.remove_reader(node_queue)

    def commit_offset(self, end: int, node: int | None = None) -> None:
        if node is not None and 0 <= node < len(self.nodes):
            self.nodes[node].commit_offset(end)

    async def close(self) -> None:
        """Cancel this watcher's tasks (the node watchers belong to the manager). Servers keep running."""
        tasks = [task for pumps in self._pumps.values() for _, _, task in pumps]
        if self._finisher is not None:
            tasks.append(self._finisher)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._pumps.clear()


# ---- launch and stop -------------------------------------------------------------------------------------
async def master_address(profile: Profile, ops: Sequence[HostOps]) -> str:
    """The rendezvous address every node is given (see the module docstring for the rule)."""
    if profile.master_addr:
        return profile.master_addr
    rank0_addresses = await ops[0].addresses()
    for peer in await ops[1].addresses():
        source = await ops[0].source_address(peer)
        if source:
            return source
    if rank0_addresses:
        return rank0_addresses[0]
    raise UserError(f"{ops[0].host}: cannot tell rank 0's address (no `hostname -I`); set master_addr in "
                    f"profile {profile.name}")


async def launch(manager: NodeRuns, profile: Profile, *, watch: bool) -> RunView:
    """Start every node of a multi-node profile (after checking every host first); see the module docstring.

    Every node's host launch lock is held from the preflights to the recorded pids, as for a single-node launch,
    so of two racing launches exactly one starts nodes."""
    try:
        async with manager.launch_locks(profile, profile.nodes):
            run_id = await _start_nodes(manager, profile)
    except TransportError as exc:
        raise UserError(str(exc)) from None
    if watch:
        return await manager.attach(run_id)
    return manager.view(run_id)


async def _start_nodes(manager: NodeRuns, profile: Profile) -> str:
    """Preflight every host, then start every node; returns the group's run id (the hosts' locks are held)."""
    hosts = profile.nodes
    ops = [manager.ops(host) for host in hosts]
    try:
        await asyncio.gather(*(manager.preflight(profile, o, host) for o, host in zip(ops, hosts)))
        if profile.master_port in await ops[0].listening():
            raise UserError(f"{hosts[0]}: master_port {profile.master_port} is already in use (profile "
                            f"{profile.name}); stop whatever listens there or set another master_port")
        addr = await master_address(profile, ops)
        run_id = new_run_id()
        node_ids = tuple(node_run_id(run_id, rank) for rank in range(len(hosts)))
        run_dir = f"{await ops[0].runs_root()}/{node_ids[0]}"
    except TransportError as exc:
        raise UserError(str(exc)) from None
    placements = [NodePlacement(rank, len(hosts), addr, profile.master_port) for rank in range(len(hosts))]
    dist = placements[0].dist_init_addr
    record = RunRecord(
        run_id=run_id, profile=profile.name, host=hosts[0], run_dir=run_dir, port=profile.port,
        url=profile.url or host_url(profile.port), server=profile.server, health_path=profile.health_path,
        stall_timeout_s=profile.stall_timeout_s, notify_cmd=profile.notify_cmd,
        expected_load_s=profile.expected_load_s, started_at=time.time(), nodes=node_ids, dist_init_addr=dist)
    manager.store.save(record)
    results = await asyncio.gather(*(
        manager.start_run(profile, host, node_id, node_command(profile.command, profile.server, placement),
                          node=NodeSeat(run_id, placement.rank, dist))
        for host, node_id, placement in zip(hosts, node_ids, placements)), return_exceptions=True)
    errors = [(rank, error) for rank, error in enumerate(results) if isinstance(error, BaseException)]
    if errors:
        # A partial multi-node server cannot work: stop the nodes that did start.
        for node_id, result in zip(node_ids, results):
            if isinstance(result, RunRecord):
                with contextlib.suppress(UserError):
                    await manager.stop(node_id, force=True)
        rank, error = errors[0]
        message = f"node {rank} ({hosts[rank]}): {error}"
        failure = Failure(RunStatus.EXITED, message)
        manager.store.change(run_id, lambda r: dataclasses.replace(r, state=RunStatus.FAILED, failure=failure))
        if not isinstance(error, (UserError, TransportError)):
            raise error
        raise UserError(message)
    return run_id


async def stop(manager: NodeRuns, record: RunRecord, force: bool) -> StopReport:
    """Stop every node at once (each with its own gates); one report naming each node's blockers."""
    t0 = time.monotonic()
    if not record.terminal:
        manager.store.change(record.run_id, RunRecord.asked_to_stop)
    results = await asyncio.gather(*(manager.stop(node_id, force=force) for node_id in record.nodes),
                                   return_exceptions=True)
    reports: list[StopReport] = []
    blockers: list[str] = []
    for rank, result in enumerate(results):
        node = manager.store.load(record.nodes[rank])
        label = node_label(node) if node is not None else f"node {rank} (?)"
        if isinstance(result, StopReport):
            reports.append(result)
            blockers += [f"{label}: {b}" for b in result.blockers]
        elif isinstance(result, (UserError, TransportError)):
            blockers.append(f"{label}: {result}")
        elif isinstance(result, BaseException):
            raise result
    save_progress(manager.store, record.run_id, manager.view(record.run_id))
    return StopReport(
        run_id=record.run_id, profile=record.profile,
        stopped=len(reports) == len(record.nodes) and all(r.stopped for r in reports),
        killed=any(r.killed for r in reports), pids=tuple(sorted({p for r in reports for p in r.pids})),
        blockers=tuple(blockers), seconds=time.monotonic() - t0,
        exit_code=reports[0].exit_code if reports else None, nodes=tuple(reports),
        job=next((r.job for r in reports if r.job), None))   # a multi-node Slurm job: one job for every node
