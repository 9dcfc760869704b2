"""specmon's local state: one JSON file per run, plus a load-time history per profile.

Layout under `$XDG_STATE_HOME/specmon` (default `~/.local/state/specmon`):
    runs/<run_id>.json     RunRecord, written atomically (tmp + fsync + rename), mode 600
    runs/.lock             flock taken around read-modify-write, so concurrent specmon processes never undo
                           each other's fields (e.g. `status` marking a run failed while `wait` saves its offset)
    load_history.jsonl     one line per completed load: {"profile", "load_seconds", "at"}

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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
TERMINAL_STATES = ("stopped", "exited", "failed", "lost")


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_STATE_HOME/specmon, else ~/.local/state/specmon."""
    env = os.environ if env is None else env
    base = env.get("XDG_STATE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return Path(base) / "specmon"


def new_run_id() -> str:
    """Sortable, unique enough, safe in paths and shell words: 20261129-154501-3fa9c2."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def iso_utc(epoch: float | None) -> str | None:
    """UTC ISO-8601 with seconds, or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


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
    state: str = "launching"           # launching|loading|ready|stopping|stopped|exited|failed|lost
    pid: int | None = None             # the wrapper's pid = pgid = sid
    starttime: int | None = None       # /proc/PID/stat field 22, catches PID reuse
    boot_id: str = ""                  # catches a reboot
    ready_at: float | None = None
    load_seconds: float | None = None
    exit_code: int | None = None
    failure: dict[str, Any] | None = None   # {"kind", "message", "last_lines"}
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
        return self.state in TERMINAL_STATES

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        for name in ("shards", "nodes"):   # JSON has no tuples
            if isinstance(fields.get(name), list):
                fields[name] = tuple(fields[name])
        return cls(**fields)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
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


class RunStore:
    """Run records and load history under one state directory."""

    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root) if root is not None else default_state_dir()
        self.runs_dir = self.root / "runs"
        self.history_path = self.root / "load_history.jsonl"

    def _ensure(self) -> None:
        self.runs_dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._ensure()
        with open(self.runs_dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _path(self, run_id: str) -> Path:
        return self.runs_dir / f"{run_id}.json"

    def load(self, run_id: str) -> RunRecord | None:
        try:
            return RunRecord.from_json(json.loads(self._path(run_id).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None

    def save(self, record: RunRecord) -> None:
        with self._locked():
            _atomic_write(self._path(record.run_id), json.dumps(record.to_json(), indent=1) + "\n")

    def update(self, run_id: str, **changes: Any) -> RunRecord | None:
        """Apply `changes` to the stored record under the lock (re-read first); returns the new record."""
        with self._locked():
            current = self.load(run_id)
            if current is None:
                return None
            new = dataclasses.replace(current, **changes)
            if new != current:
                _atomic_write(self._path(run_id), json.dumps(new.to_json(), indent=1) + "\n")
            return new

    def all(self) -> list[RunRecord]:
        """Every readable record, oldest launch first."""
        if not self.runs_dir.is_dir():
            return []
        records = [self.load(p.stem) for p in self.runs_dir.glob("*.json")]
        return sorted((r for r in records if r is not None), key=lambda r: (r.started_at, r.run_id))

    def record_load(self, profile: str, load_seconds: float, at: float) -> None:
        """Append one completed load duration to the history."""
        self._ensure()
        line = json.dumps({"profile": profile, "load_seconds": round(load_seconds, 3), "at": iso_utc(at)})
        with open(self.history_path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def past_loads(self, profile: str, limit: int = 10) -> tuple[float, ...]:
        """The last `limit` load durations of `profile`, oldest first."""
        try:
            lines = self.history_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return ()
        loads = []
        for line in lines:
            try:
                item = json.loads(line)
            except ValueError:
                continue   # a torn last line after a crash
            if item.get("profile") == profile and isinstance(item.get("load_seconds"), (int, float)):
                loads.append(float(item["load_seconds"]))
        return tuple(loads[-limit:])
