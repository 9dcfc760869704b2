"""The index of runs: which runs this specmon knows (the run store), which of them a profiles file launched, how
one is found by profile or run id, and the view of a run nobody watches (as its record says).

Record changes go through `save`, which keeps a run going in memory when the state disk refuses a write and
collects one warning line per failed write (`state_warnings`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from specmon.errors import UserError
from specmon.model.config import BUILTIN_SOURCE, Config
from specmon.model.runs.record import Edit, RunRecord
from specmon.model.runs.runstatus import RunStatus
from specmon.orchestration.runs import multinode
from specmon.orchestration.runs.store import RunStore, StateWriteError, Unreadable
from specmon.orchestration.runs.view import RunView
from specmon.orchestration.runs.watcher import node_url
from specmon.sources.hostshell import RUN_ID


def config_key(config: Config) -> str:
    """What ties a run to the profiles file that launched it: the file's real path (or the built-in name)."""
    return config.source if config.source == BUILTIN_SOURCE else os.path.realpath(config.source)


class KnownRuns(Protocol):
    """What front ends and the floors above read of the index (`RunManager.index`): the state files, which profiles
    file a run belongs to, finding a run, a multi-node run's nodes, and what could not be read or written."""

    @property
    def store(self) -> RunStore: ...

    @property
    def config_key(self) -> str: ...

    @property
    def state_warnings(self) -> Sequence[str]: ...

    def mine(self, record: RunRecord) -> bool: ...

    def find(self, target: str) -> RunRecord: ...

    def node_records(self, record: RunRecord) -> list[RunRecord]: ...

    def unreadable(self) -> list[Unreadable]: ...


class RunIndex:
    """The runs known under one state directory, as seen from one profiles file."""

    def __init__(self, config: Config, state_dir: Path | str | None = None) -> None:
        self.config = config
        self.store = RunStore(state_dir)
        self.config_key = config_key(config)
        self.state_warnings: list[str] = []   # state writes that failed (full disk), one line each

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

    def static_view(self, record: RunRecord) -> RunView:
        """The view of a run as its record (and its nodes' records) say, without looking at the host."""
        nodes = self.node_records(record)
        if nodes:
            return multinode.compose(record, [self.static_view(node) for node in nodes])
        state = RunStatus.LOADING if record.state == RunStatus.LAUNCHING and record.pid else record.state
        return RunView(
            run_id=record.run_id, profile=record.profile, host=record.host, state=state, stalled=False,
            pid=record.pid, port=record.port, url=node_url(record), started_at=record.started_at,
            ready_at=record.ready_at, load_seconds=record.load_seconds, shards=record.shards,
            kv_cache_tokens=record.kv_cache_tokens,
            exit_code=record.exit_code, failure=record.failure,
            eta_s=None, phase=None, stall_reason=None, log_path=record.log_path, run_dir=record.run_dir,
            node_rank=record.node_rank, config=record.config, server_addr=record.server_addr,
            slurm_node=record.slurm_node,
            job=f"job {record.slurm_job}" if record.slurm_job is not None and not record.terminal else None,
            slurm_job=record.slurm_job)

    def save(self, record: RunRecord, edit: Edit) -> RunRecord:
        """Store the record changed by `edit`; when the state disk refuses (full), keep going with the change in
        memory and say so once."""
        try:
            return self.store.change(record.run_id, edit) or edit(record)
        except StateWriteError as exc:
            self.state_error(str(exc))
            return edit(record)

    def state_error(self, message: str) -> None:
        """Remember a failed state write (once per message)."""
        if message not in self.state_warnings:
            self.state_warnings.append(message)
