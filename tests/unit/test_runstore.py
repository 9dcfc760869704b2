"""Run record files across specmon versions: a record an older specmon wrote (its state and failure as plain JSON
words) still loads, a change writes the same words back, and a state no specmon knows is one line naming the field."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specmon.model.logs.events import LogSignature
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import RunRecord
from specmon.model.runs.runstatus import RunStatus
from specmon.model.runs.slurm import SlurmEnd
from specmon.orchestration.runs.store import RunStore

# Written by specmon at ddbe1ae (before RunStatus and Failure): RunRecord.to_json() of a run failed by its log.
OLDER_RECORD = {
    "schema_version": 1, "run_id": "20261130-120000-01d01d", "profile": "sim", "host": "local",
    "run_dir": "/tmp/nowhere/20261130-120000-01d01d", "port": 30000, "url": "http://127.0.0.1:30000",
    "server": "sglang", "health_path": "/health", "stall_timeout_s": 300.0, "notify_cmd": None,
    "expected_load_s": None, "started_at": 1764500000.0, "state": "failed", "pid": 4242, "starttime": 123,
    "boot_id": "b00t", "ready_at": None, "load_seconds": None, "exit_code": None,
    "failure": {"kind": "oom", "message": "CUDA out of memory",
                "last_lines": ["Loading weights", "torch.OutOfMemoryError: CUDA out of memory"]},
    "stop_requested": False, "shards": [3, 8], "kv_cache_tokens": None, "log_offset": 0, "log_inode": None,
    "group": None, "node_rank": None, "nodes": [], "dist_init_addr": None, "config": "/tmp/profiles.toml",
    "slurm_job": None,
}
ADDED_SINCE = {"server_addr": None, "slurm_node": None}   # RunRecord fields added after ddbe1ae, with defaults


def _write(root: Path, data: dict[str, object]) -> Path:
    path = root / "runs" / f"{data['run_id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def test_a_record_an_older_specmon_wrote_loads_and_a_change_keeps_its_words(tmp_path: Path) -> None:
    path = _write(tmp_path, OLDER_RECORD)
    store = RunStore(tmp_path)
    record = store.load(str(OLDER_RECORD["run_id"]))
    assert record is not None and store.unreadable() == []
    assert record.state is RunStatus.FAILED and record.terminal
    assert record.failure == Failure(LogSignature.OOM, "CUDA out of memory",
                                     ("Loading weights", "torch.OutOfMemoryError: CUDA out of memory"))
    assert record.failure.text == "oom: CUDA out of memory"
    store.change(record.run_id, lambda r: dataclasses.replace(r, exit_code=1))
    # The same keys and words (plus the fields specmon has gained since: server_addr, 5fa3df2's Slurm nodes, and
    # slurm_node, their names).
    assert json.loads(path.read_text()) == {**OLDER_RECORD, **ADDED_SINCE, "exit_code": 1}


def test_a_record_saved_now_is_what_an_older_specmon_reads(tmp_path: Path) -> None:
    """The file's state is the bare word and its failure the kind/message/last_lines object, nothing more."""
    record = RunRecord.from_json(OLDER_RECORD)
    store = RunStore(tmp_path)
    store.save(record.asked_to_stop())
    written = json.loads((tmp_path / "runs" / f"{record.run_id}.json").read_text())
    assert written == {**OLDER_RECORD, **ADDED_SINCE, "state": "stopping", "stop_requested": True}


def test_a_state_no_specmon_knows_is_one_line_naming_the_field(tmp_path: Path) -> None:
    _write(tmp_path, {**OLDER_RECORD, "state": "crashed"})
    [broken] = RunStore(tmp_path).unreadable()
    assert broken.reason == "state: unknown state 'crashed'"


@pytest.mark.parametrize(("word", "kind"), [
    ("oom", LogSignature.OOM), ("port_in_use", LogSignature.PORT_IN_USE), ("exception", LogSignature.EXCEPTION),
    ("exited", RunStatus.EXITED), ("lost", RunStatus.LOST), ("failed", RunStatus.FAILED),
    ("timeout", SlurmEnd.TIMEOUT), ("node_fail", SlurmEnd.NODE_FAIL), ("no_shared_fs", SlurmEnd.NO_SHARED_FS),
])
def test_an_older_records_failure_word_loads_as_what_told_it_and_is_written_back_as_the_same_word(
        tmp_path: Path, word: str, kind: object) -> None:
    """The word an older specmon kept (the log's signature, the run's end, Slurm's verdict) is read as its kind."""
    older = {**OLDER_RECORD, "failure": {**OLDER_RECORD["failure"], "kind": word}}   # type: ignore[dict-item]
    path = _write(tmp_path, older)
    store = RunStore(tmp_path)
    record = store.load(str(older["run_id"]))
    assert record is not None and record.failure is not None and record.failure.kind is kind
    store.change(record.run_id, lambda r: dataclasses.replace(r, exit_code=1))
    assert json.loads(path.read_text())["failure"] == older["failure"]


def test_a_failure_kind_no_specmon_knows_is_one_line_naming_the_field(tmp_path: Path) -> None:
    _write(tmp_path, {**OLDER_RECORD, "failure": {"kind": "gremlins", "message": "?"}})
    [broken] = RunStore(tmp_path).unreadable()
    assert broken.reason == "failure: unknown failure kind 'gremlins'"
