"""specmon's local state: one JSON file per run, plus a load-time history per profile.

Layout under `$XDG_STATE_HOME/specmon` (default `~/.local/state/specmon`):
    runs/<run_id>.json     RunRecord (model.runs.record), written atomically (tmp + fsync + rename), mode 600
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
import fcntl
import json
import os
import secrets
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from specmon.errors import UserError
from specmon.model.runs.record import Edit, RunRecord, is_number, iso_utc
from specmon.model.text import textfile

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
            if item.get("profile") == profile and is_number(item.get("load_seconds")):
                loads.append(float(item["load_seconds"]))
        return tuple(loads[-limit:])
