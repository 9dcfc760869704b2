"""specmon's local state: one JSON file per run, plus a load-time history per profile.

Layout under `$XDG_STATE_HOME/specmon` (default `~/.local/state/specmon`):
    runs/<run_id>.json     RunRecord, written atomically (tmp + fsync + rename), mode 600
    runs/.lock             flock taken around read-modify-write, so concurrent specmon processes never undo
                           each other's fields (e.g. `status` marking a run failed while `wait` saves its offset)
    load_history.jsonl     one line per completed load: {"profile", "config", "load_seconds", "at"}

Every file is 0600 and the directories 0700. A write that fails (a full disk) raises StateWriteError, a
UserError naming the file, and leaves the previous version intact. A record that cannot be read (bad JSON,
wrong types) is listed by `unreadable()` instead of breaking every other run.

The host's run directory stays the source of truth; these files are the index and cache that let any later
specmon process reattach.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.runs import runstatus
from specmon.model.runs.failure import Failure
from specmon.model.runs.runstate import RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.model.text import textfile

SCHEMA_VERSION = 1
MAX_RECORD_BYTES = 16 << 20      # a record is about 2 KiB
MAX_HISTORY_BYTES = 256 << 20    # one line of ~150 bytes per launch


class StateWriteError(UserError):
    """specmon's own state could not be written (full or read-only disk)."""


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/specmon, else ~/.local/state/specmon."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "specmon"


def new_run_id() -> str:
    """Sortable, unique enough, safe in paths and shell words: 20261129-154501-3fa9c2."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


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
        fields["failure"] = Failure.from_json(fields.get("failure"))
        try:
            fields["state"] = RunStatus.parse(fields["state"])
        except ValueError as exc:
            raise ValueError(f"state: {exc}") from None
        return cls(**fields)


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: object) -> bool:
    return (_is_int(v) or isinstance(v, float)) and v == v   # NaN is no time


# One check per annotation used in RunRecord (a new field with a new type fails loudly here, at import).
_FIELD_CHECKS: dict[str, Callable[[object], bool]] = {
    "str": lambda v: isinstance(v, str),
    "RunStatus": lambda v: isinstance(v, str),   # which word: RunStatus.parse
    "int": _is_int,
    "float": _is_num,
    "bool": lambda v: isinstance(v, bool),
    "str | None": lambda v: v is None or isinstance(v, str),
    "int | None": lambda v: v is None or _is_int(v),
    "float | None": lambda v: v is None or _is_num(v),
    "Failure | None": lambda v: v is None or (
        isinstance(v, dict) and isinstance(v.get("kind", ""), str) and isinstance(v.get("message", ""), str)
        and isinstance(v.get("last_lines") or [], list)),
    "tuple[str, ...]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    "tuple[int, int] | None": lambda v: v is None or (
        isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v)),
}
assert all(str(f.type) in _FIELD_CHECKS for f in dataclasses.fields(RunRecord))


Edit = Callable[[RunRecord], RunRecord]   # a change of a record: `lambda r: dataclasses.replace(r, ...)`


@dataclass(frozen=True)
class Unreadable:
    """A run record file that could not be read, and why."""

    run_id: str
    path: str
    reason: str


def _write_error(path: Path, exc: OSError) -> StateWriteError:
    return StateWriteError(f"cannot write specmon state {path}: {exc.strerror or exc}")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise _write_error(path, exc) from None


class RunStore:
    """Run records and load history under one state directory."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_state_dir()
        self.runs_dir = self.root / "runs"
        self.history_path = self.root / "load_history.jsonl"

    def _ensure(self) -> None:
        try:
            self.runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise _write_error(self.runs_dir, exc) from None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure()
        try:
            lock = open(os.open(self.runs_dir / ".lock", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "a")
        except OSError as exc:
            raise _write_error(self.runs_dir / ".lock", exc) from None
        with lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _path(self, run_id: str) -> Path:
        return self.runs_dir / f"{run_id}.json"

    def _read(self, run_id: str) -> RunRecord | Unreadable | None:
        path = self._path(run_id)
        try:
            text = textfile.read_capped(path, MAX_RECORD_BYTES).decode("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return Unreadable(run_id, str(path), reason)
        try:
            record = RunRecord.from_json(textfile.loads(text))
        except ValueError as exc:   # JSONDecodeError and UnicodeDecodeError are ValueErrors
            reason = "empty file" if not text.strip() else str(exc)
            return Unreadable(run_id, str(path), reason)
        if record.run_id != run_id:
            return Unreadable(run_id, str(path), f"run_id: {record.run_id!r} does not match the file name")
        return record

    def load(self, run_id: str) -> RunRecord | None:
        """The stored record, or None when there is none or it is unreadable."""
        record = self._read(run_id)
        return record if isinstance(record, RunRecord) else None

    def save(self, record: RunRecord) -> None:
        with self._locked():
            _atomic_write(self._path(record.run_id), json.dumps(record.to_json(), indent=1) + "\n")

    def change(self, run_id: str, edit: Edit) -> RunRecord | None:
        """Replace the stored record by `edit(record)` under the lock (re-read first; written only if it
        differs); returns the new record, or None when there is none."""
        with self._locked():
            current = self.load(run_id)
            if current is None:
                return None
            new = edit(current)
            if new != current:
                _atomic_write(self._path(run_id), json.dumps(new.to_json(), indent=1) + "\n")
            return new

    def _scan(self) -> list[RunRecord | Unreadable]:
        if not self.runs_dir.is_dir():
            return []
        found = [self._read(p.stem) for p in self.runs_dir.glob("*.json")]
        return [r for r in found if r is not None]

    def all(self) -> list[RunRecord]:
        """Every readable record, oldest launch first."""
        records = [r for r in self._scan() if isinstance(r, RunRecord)]
        return sorted(records, key=lambda r: (r.started_at, r.run_id))

    def unreadable(self) -> list[Unreadable]:
        """The record files that could not be read (corrupt, truncated, empty), by run id."""
        return sorted((r for r in self._scan() if isinstance(r, Unreadable)), key=lambda u: u.run_id)

    def forget(self, run_id: str) -> bool:
        """Delete one run's record (never its run directory on the host). False if there was none."""
        with self._locked():
            try:
                self._path(run_id).unlink()
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise _write_error(self._path(run_id), exc) from None
        return True

    def record_load(self, profile: str, config: str | None, load_seconds: float, at: float) -> None:
        """Append one completed load duration to the history (a failed append leaves whole lines only)."""
        self._ensure()
        line = json.dumps({"profile": profile, "config": config, "load_seconds": round(load_seconds, 3),
                           "at": iso_utc(at)}) + "\n"
        try:
            fd = os.open(self.history_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            try:
                size = os.fstat(fd).st_size
                try:
                    os.write(fd, line.encode())
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)
        except OSError as exc:
            raise _write_error(self.history_path, exc) from None

    def past_loads(self, profile: str, config: str | None = None, limit: int = 10) -> tuple[float, ...]:
        """The last `limit` load durations of `profile` launched from the profiles file `config`, oldest first.

        Lines written before the config was kept belong to no file: only a `config=None` query sees them."""
        try:
            lines = textfile.read_capped(self.history_path, MAX_HISTORY_BYTES).decode("utf-8", "replace").splitlines()
        except (OSError, ValueError):
            return ()
        loads = []
        for line in lines:
            try:
                item = textfile.loads(line)
            except ValueError:
                continue   # a torn last line after a crash
            if not isinstance(item, dict) or item.get("config") != config:
                continue
            if item.get("profile") == profile and _is_num(item.get("load_seconds")):
                loads.append(float(item["load_seconds"]))
        return tuple(loads[-limit:])
