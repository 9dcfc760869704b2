"""What specmon remembers about a run between processes: RunRecord (one JSON object per run, read and written by
orchestration.runs.store), its parts (Progress, NodeSeat) and the URL and time words it records. Pure: the file
itself, its lock and its directory are the store's."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from specmon.model.runs import runstatus
from specmon.model.runs.failure import Failure
from specmon.model.runs.runstate import RunState
from specmon.model.runs.runstatus import RunStatus

SCHEMA_VERSION = 1


def host_url(port: int) -> str:
    """How a server is addressed on its own host: what a run records when its profile gives no `url`."""
    return f"http://127.0.0.1:{port}"


def iso_utc(epoch: float | None) -> str | None:
    """UTC ISO-8601 with seconds, or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def launched_by(run_config: str | None, config: str) -> bool:
    """Whether the profiles file `config` launched a run whose record names `run_config` (a run recorded before
    the file was kept names none: it belongs to every file)."""
    return run_config is None or run_config == config


@dataclass(frozen=True)
class Progress:
    """How far a load got, as a run's record keeps it (`status` shows it for a run that has ended)."""

    shards: tuple[int, int] | None = None   # (done, total)
    kv_cache_tokens: int | None = None


def progress_of(run_state: RunState) -> Progress:
    """The progress the log parser's state shows: shards (done, total) and KV cache tokens."""
    total = run_state.shards_total
    return Progress((run_state.shards_done or 0, total) if total else None, run_state.kv_cache_tokens)


@dataclass(frozen=True)
class NodeSeat:
    """Where a node's run sits in its multi-node run: the multi-node run's id, the node's rank, and rank 0's
    rendezvous ADDR:PORT."""

    group: str
    rank: int
    dist_init_addr: str


@dataclass(frozen=True)
class RunRecord:
    """What specmon remembers about a run between processes."""

    run_id: str
    profile: str
    host: str
    run_dir: str
    port: int
    url: str
    server: str
    health_path: str
    stall_timeout_s: float
    notify_cmd: str | None
    expected_load_s: float | None
    started_at: float                  # epoch seconds (wall clock: shared by every specmon process)
    state: RunStatus = RunStatus.LAUNCHING
    pid: int | None = None             # the wrapper's pid = pgid = sid
    starttime: int | None = None       # /proc/PID/stat field 22, catches PID reuse
    boot_id: str = ""                  # catches a reboot
    ready_at: float | None = None
    load_seconds: float | None = None
    exit_code: int | None = None
    failure: Failure | None = None
    stop_requested: bool = False
    shards: tuple[int, int] | None = None   # (done, total) when the run ended, for status of finished runs
    kv_cache_tokens: int | None = None
    log_offset: int = 0                # end of the last complete log line delivered to a reader
    log_inode: int | None = None
    # Multi-node runs: one record per node (group = the run's id, node_rank) plus the run's own record, which
    # lists its node runs in rank order (nodes) and keeps the overall state; it has no process of its own.
    group: str | None = None
    node_rank: int | None = None
    nodes: tuple[str, ...] = ()
    dist_init_addr: str | None = None  # ADDR:PORT of rank 0's rendezvous (multi-node only)
    config: str | None = None          # the profiles file that launched it (None: a run from before that was kept)
    slurm_job: str | None = None       # a Slurm run: its job id (the job's state decides when it runs and ends)
    server_addr: str | None = None     # a Slurm run: its node's address as `host` reaches it, once the job runs
                                       # (its port is there, not on `host`); None: `host`'s own 127.0.0.1
    slurm_node: str | None = None      # a Slurm run: its node's name (its node rank's), once the job runs

    @property
    def serves_api(self) -> bool:
        """Whether clients talk to this run's port: single-node runs and node rank 0, never a worker node."""
        return not self.node_rank

    @property
    def gate_ports(self) -> tuple[int, ...]:
        """Ports that must have no listener once the run is stopped (rank 0 also holds the rendezvous port)."""
        dist = self.dist_init_addr.rpartition(":")[2] if self.node_rank == 0 and self.dist_init_addr else ""
        return (self.port, int(dist)) if dist.isdigit() else (self.port,)

    @property
    def log_path(self) -> str:
        return f"{self.run_dir}/server.log"

    @property
    def terminal(self) -> bool:
        return self.state in runstatus.TERMINAL

    def loading_from(self, at: float) -> RunRecord:
        """This record once its server started at `at` (a Slurm job that left the queue: load time counts from
        there)."""
        return dataclasses.replace(self, state=RunStatus.LOADING, started_at=at)

    def asked_to_stop(self) -> RunRecord:
        """This record once a stop was asked for: stopping, and the request remembered."""
        return dataclasses.replace(self, state=RunStatus.STOPPING, stop_requested=True)

    def with_progress(self, progress: Progress | None, *, keep_known: bool = False) -> RunRecord:
        """This record with the load's `progress` (None: unchanged); with `keep_known`, a figure the progress
        does not know keeps the recorded one."""
        if progress is None:
            return self
        return dataclasses.replace(
            self, shards=self.shards if keep_known and progress.shards is None else progress.shards,
            kv_cache_tokens=self.kv_cache_tokens if keep_known and progress.kv_cache_tokens is None
            else progress.kv_cache_tokens)

    def to_json(self) -> dict[str, object]:
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self),
                "failure": None if self.failure is None else self.failure.to_json()}

    def belongs_to(self, config: str) -> bool:
        """Whether the profiles file `config` launched this run (runs recorded before that was kept: any)."""
        return launched_by(self.config, config)

    @classmethod
    def from_json(cls, data: object) -> RunRecord:
        """Parse a stored record; ValueError naming the first field of the wrong type or a missing one."""
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, found {type(data).__name__}")
        fields: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name not in data:
                if f.default is dataclasses.MISSING:
                    raise ValueError(f"{f.name}: missing")
                continue
            value = data[f.name]
            if not _FIELD_CHECKS[str(f.type)](value):
                raise ValueError(f"{f.name}: unexpected value {json.dumps(value)[:40]}")
            fields[f.name] = tuple(value) if f.name in ("shards", "nodes") and value is not None else value
        try:
            fields["failure"] = Failure.from_json(fields.get("failure"))
        except ValueError as exc:
            raise ValueError(f"failure: {exc}") from None
        try:
            fields["state"] = RunStatus.parse(fields["state"])
        except ValueError as exc:
            raise ValueError(f"state: {exc}") from None
        return cls(**fields)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: object) -> bool:
    return (_is_int(v) or isinstance(v, float)) and v == v   # NaN is no time


# One check per annotation used in RunRecord (a new field with a new type fails loudly here, at import).
_FIELD_CHECKS: dict[str, Callable[[object], bool]] = {
    "str": lambda v: isinstance(v, str),
    "RunStatus": lambda v: isinstance(v, str),   # which word: RunStatus.parse
    "int": _is_int,
    "float": is_number,
    "bool": lambda v: isinstance(v, bool),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int | None": lambda v: v is None or _is_int(v),
    "float | None": lambda v: v is None or is_number(v),
    "Failure | None": lambda v: v is None or (
        isinstance(v, dict) and isinstance(v.get("kind", ""), str) and isinstance(v.get("message", ""), str)
        and isinstance(v.get("last_lines") or [], list)),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "tuple[int, int] | None": lambda v: v is None or (
        isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v)),
}
assert all(str(f.type) in _FIELD_CHECKS for f in dataclasses.fields(RunRecord))


Edit = Callable[[RunRecord], RunRecord]   # a change of a record: `lambda r: dataclasses.replace(r, ...)`
