"""Issue 10 items 10-13 and 23-29: runs, their state and their host files under hostile conditions.

Real parts throughout: `specmon` commands as separate processes, `specmon sim` servers, real files and real
signals. The full-disk tests mount a small tmpfs (root only; skipped with the reason where mounting is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lifecycle_support import Cli, kill_marked, port_listening, profile_toml
from ports import silent_host
from process_support import alive, wait_until

from specmon.model.logs.events import LogSignature
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import RunRecord
from specmon.orchestration.runs.watcher import run_notify

# Each test runs many `specmon` processes (an interpreter start each: seconds on a loaded box) and real servers.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _state_dir() -> Path:
    return Path(os.environ["XDG_STATE_HOME"]) / "specmon"


def _record_path(run_id: str) -> Path:
    return _state_dir() / "runs" / f"{run_id}.json"


def _edit_record(run_id: str, **changes: object) -> None:
    path = _record_path(run_id)
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


@pytest.fixture
def clis(tmp_path: Path) -> Iterator[Callable[[str], Cli]]:
    """Cli runners over profiles files in separate project directories; every run is stopped at the end."""
    made: list[Cli] = []

    def make(project: str) -> Cli:
        (tmp_path / project).mkdir(exist_ok=True)
        cli = Cli(tmp_path / project / "profiles.toml")
        made.append(cli)
        return cli

    yield make
    run_ids: set[str] = set()
    for cli in made:
        if not cli.config.exists():
            continue
        listed = cli("status", "--all", "--json")
        runs = json.loads(listed.stdout) if listed.returncode == 0 else []
        for run in runs:
            if run["state"] in ("launching", "loading", "ready", "stopping"):
                cli("stop", str(run["run_id"]), "--force")
            run_ids.add(str(run["run_id"]))
    kill_marked(run_ids)


@pytest.fixture
def cli(clis: Callable[[str], Cli]) -> Cli:
    return clis("project")


def _launch_ready(cli: Cli, profile: str = "sim") -> dict[str, object]:
    launched = cli("launch", profile, "--wait", "-q", "--json", timeout=120)
    assert launched.returncode == 0, launched.stderr
    return json.loads(launched.stdout)


# ---- 10: runs belong to their profiles file ------------------------------------------------------------------
def test_stop_by_profile_name_stops_only_the_run_of_its_own_profiles_file(clis, free_port_factory) -> None:
    a, b = clis("a"), clis("b")
    port_a, port_b = free_port_factory(), free_port_factory()
    a.config.write_text(profile_toml("base", port_a))
    b.config.write_text(profile_toml("base", port_b))
    run_a, run_b = _launch_ready(a, "base"), _launch_ready(b, "base")

    stopped = a("stop", "base")
    assert stopped.returncode == 0 and str(run_a["run_id"]) in stopped.stdout
    assert not port_listening(port_a) and port_listening(port_b), "stop base from file a touched file b's server"
    # Each file sees its own runs by profile name; file b's run is reachable from a by its id only.
    assert [r["run_id"] for r in a.status()] == [run_a["run_id"]]
    assert [r["run_id"] for r in b.status()] == [run_b["run_id"]]
    assert a("wait", "base", "--timeout", "5").returncode == 1   # a's (stopped) run, not b's ready one
    by_id = a("stop", str(run_b["run_id"]))
    assert by_id.returncode == 0 and not port_listening(port_b)


def test_load_time_history_is_kept_per_profiles_file(clis, free_port_factory) -> None:
    a, b = clis("a"), clis("b")
    a.config.write_text(profile_toml("base", free_port_factory()))
    b.config.write_text(profile_toml("base", free_port_factory()))
    run_a = _launch_ready(a, "base")
    history = [json.loads(line) for line in (_state_dir() / "load_history.jsonl").read_text().splitlines()]
    assert [(h["profile"], h["config"]) for h in history] == [("base", os.path.realpath(a.config))]
    assert history[0]["load_seconds"] == pytest.approx(run_a["load_seconds"], abs=0.01)
    from specmon.orchestration.runs.store import RunStore
    store = RunStore()
    assert store.past_loads("base", os.path.realpath(a.config)) and not store.past_loads("base", os.path.realpath(b.config))


# ---- 11: XDG state directory on the host ---------------------------------------------------------------------
def test_run_directories_follow_xdg_state_home_and_old_runs_stay_readable(cli, free_port, tmp_path, monkeypatch) -> None:
    custom = tmp_path / "elsewhere-state"
    custom.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(custom))
    cli.config.write_text(profile_toml("sim", free_port))
    run = _launch_ready(cli)
    run_dir = custom / "specmon" / "runs" / str(run["run_id"])
    assert (run_dir / "server.log").is_file() and (run_dir / "pid").is_file()
    assert not (Path(os.environ["HOME"]) / ".specmon").exists()
    assert cli("stop", "sim").returncode == 0

    # A run made by an earlier version under ~/.specmon/runs stays listed and its log readable.
    old_id = "20261101-120000-0ld0ld"
    old_dir = Path(os.environ["HOME"]) / ".specmon" / "runs" / old_id
    old_dir.mkdir(parents=True)
    (old_dir / "server.log").write_text("old server line\n")
    (old_dir / "exit_code").write_text("0\n")
    old = RunRecord(run_id=old_id, profile="sim", host="local", run_dir=str(old_dir), port=free_port,
                    url=f"http://127.0.0.1:{free_port}", server="sglang", health_path="/health",
                    stall_timeout_s=30, notify_cmd=None, expected_load_s=None, started_at=time.time() - 60,
                    state="stopped")
    _record_path(old_id).write_text(json.dumps({k: v for k, v in old.to_json().items() if k != "config"}))
    assert old_id in [r["run_id"] for r in cli.status()]
    logs = cli("logs", old_id)
    assert logs.returncode == 0 and logs.stdout == "old server line\n"


# ---- 12: status ----------------------------------------------------------------------------------------------
def test_status_json_has_the_exit_code_of_a_run_that_failed_from_its_log(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port, "--crash-at-shard", "2"))
    failed = cli("launch", "sim", "--wait", "-q", timeout=120)
    assert failed.returncode == 1
    [run] = cli.status()
    assert run["state"] == "failed"
    run_dir = _state_dir() / "runs" / str(run["run_id"])
    wait_until(lambda: (run_dir / "exit_code").exists())
    [run] = cli.status()
    assert run["exit_code"] == int((run_dir / "exit_code").read_text()) == 1


@pytest.mark.timeout(600)   # six specmon processes and a stop: 100 s measured at load 10 on 2 cores
def test_status_says_a_run_failed_by_its_log_is_still_running_and_what_stop_does(cli, free_port) -> None:
    """A server that printed its traceback and then hung (a dead rank, the others waiting forever) was listed as
    plainly failed while its process still ran and held its port. status now says so, with the pid and what
    `stop` does; after the stop it is an ended failure again."""
    cli.config.write_text(profile_toml("sim", free_port, "--crash-at-shard", "2", "--hang-after-crash"))
    failed = cli("launch", "sim", "--wait", "-q", timeout=240)   # 14-22 s measured under load
    assert failed.returncode == 1, failed.stderr
    [run] = cli.status()
    pid, run_id = int(str(run["pid"])), str(run["run_id"])
    assert run["state"] == "failed" and run["still_running"] is True and run["exit_code"] is None
    assert alive(pid)
    table = cli("status").stdout.splitlines()
    assert table[1].split()[2:5] == ["failed,", "still", "running"], table
    assert table[2] == (f"run {run_id} (sim) failed by its log, but its process is still running (pid {pid}, port "
                        f"{free_port} may still be held): `specmon stop {run_id}` sends it SIGTERM, then SIGKILL "
                        "after 30 s")
    stopped = cli("stop", run_id)
    assert stopped.returncode == 0, stopped.stderr
    assert not alive(pid)
    [run] = cli.status()
    assert run["state"] == "failed" and run["still_running"] is False
    assert "still running" not in cli("status").stdout


def test_a_stopped_load_keeps_its_shard_count(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port, shards=8, load=40, scale=0.5))
    assert cli("launch", "sim").returncode == 0
    wait_until(lambda: (cli.status()[0]["shards"] or {}).get("done", 0) >= 2, timeout=60, step=0.3)
    assert cli("stop", "sim").returncode == 0
    [run] = cli.status()
    assert run["state"] == "stopped" and run["shards"]["total"] == 8 and run["shards"]["done"] >= 2
    table = cli("status").stdout
    assert f"/{8}" in table.splitlines()[1]


def _ended_record(run_id: str, port: int, started_at: float, message: str = "") -> RunRecord:
    return RunRecord(run_id=run_id, profile="sim", host="local", run_dir=f"/nonexistent/{run_id}", port=port,
                     url=f"http://127.0.0.1:{port}", server="sglang", health_path="/health", stall_timeout_s=30,
                     notify_cmd=None, expected_load_s=None, started_at=started_at, state="failed", exit_code=1,
                     failure=Failure(LogSignature.EXCEPTION, message or "boom"))


def test_status_table_cuts_long_reasons_and_heads_the_url_column(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    reason = "RuntimeError: " + "very long reason " * 40
    record = _ended_record("20261130-000000-aaaaaa", free_port, time.time() - 60, reason)
    _record_path(record.run_id).parent.mkdir(parents=True, exist_ok=True)
    _record_path(record.run_id).write_text(json.dumps({**record.to_json(), "config": os.path.realpath(cli.config)}))
    out = cli("status")
    header, row = out.stdout.splitlines()[:2]
    assert header.split() == ["PROFILE", "RUN", "STATE", "PID", "PORT", "SHARDS", "LOAD", "URL", "NOTE"]
    assert len(row) < 200 and row.endswith("…")
    assert cli.status()[0]["failure"]["message"] == reason   # whole in --json


def test_status_lists_recent_runs_by_default_all_with_all_and_forget_removes_them(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    mine = os.path.realpath(cli.config)
    old = _ended_record("20261101-000000-0ld000", free_port, time.time() - 5 * 86400)
    new = _ended_record("20261130-000000-new000", free_port, time.time() - 60)
    other = _ended_record("20261130-000000-0th000", free_port, time.time() - 30)
    _record_path(old.run_id).parent.mkdir(parents=True, exist_ok=True)
    for record, config in ((old, mine), (new, mine), (other, "/somewhere/else/profiles.toml")):
        _record_path(record.run_id).write_text(json.dumps({**record.to_json(), "config": config}))
    assert [r["run_id"] for r in cli.status()] == [new.run_id]
    table = cli("status").stdout
    assert "1 run(s) ended over 24 h ago not shown" in table and "--all" in table
    listed = json.loads(cli("status", "--all", "--json").stdout)
    assert [r["run_id"] for r in listed] == [old.run_id, new.run_id, other.run_id]
    assert "(from /somewhere/else/profiles.toml)" in cli("status", "--all").stdout
    forgot = cli("forget", "--older-than", "1")
    assert forgot.returncode == 0 and forgot.stdout.strip() == "forgot 1 run(s)"
    assert [r["run_id"] for r in json.loads(cli("status", "--all", "--json").stdout)] == [new.run_id, other.run_id]


def test_status_with_an_unknown_profile_is_an_error(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    for argv in (("status", "--profile", "nosuch"), ("--profile", "nosuch", "status")):
        out = subprocess.run([sys.executable, "-m", "specmon", "--config", str(cli.config), *argv],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and len(out.stderr.splitlines()) == 1 and "nosuch" in out.stderr, out.stderr


# ---- 13: one shard count everywhere --------------------------------------------------------------------------
def test_wait_status_and_logscan_agree_on_the_shard_of_a_stalled_load(cli, free_port) -> None:
    # The sim writes `\r...| 2/8 [...]` (no newline) and then nothing more: the update the live path dropped.
    cli.config.write_text(profile_toml("sim", free_port, "--stall-at-shard", "3", shards=8, load=8, scale=0.2))
    launched = cli("launch", "sim")
    assert launched.returncode == 0
    log = _state_dir() / "runs" / launched.stdout.strip() / "server.log"
    # Wait from the moment the stalling update is out (the interpreter's start is no part of the stall).
    wait_until(lambda: "| 2/8 [" in log.read_text(errors="replace"), timeout=60)
    waited = cli("wait", "sim", "-q", "--stall-timeout", "2", timeout=120)
    assert waited.returncode == 3, waited.stderr
    assert "shard 2/8" in waited.stderr.splitlines()[-1], waited.stderr
    [run] = cli.status()
    assert run["shards"] == {"done": 2, "total": 8}
    scanned = json.loads(cli("logscan", "--json", str(log)).stdout)
    assert scanned["shards"] == {"done": 2, "total": 8}


# ---- 23: racing launches -------------------------------------------------------------------------------------
def test_two_racing_launches_start_exactly_one_server(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    for attempt in range(3):
        procs = [subprocess.Popen(cli.argv("launch", "sim"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, stdin=subprocess.DEVNULL) for _ in range(2)]
        results = [(p.wait(120), *p.communicate()) for p in procs]
        won = [r for r in results if r[0] == 0]
        lost = [r for r in results if r[0] != 0]
        assert len(won) == 1 and len(lost) == 1, f"attempt {attempt}: {results}"
        code, out, err = lost[0]
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "still" in err, err
        live = [r for r in cli.status() if r["state"] in ("launching", "loading", "ready")]
        assert [r["run_id"] for r in live] == [won[0][1].strip()]
        assert cli("stop", "sim", "--force").returncode == 0


# ---- 24: a launch killed between the start and the recorded pid ----------------------------------------------
def test_a_launch_killed_before_recording_the_pid_is_reconciled_from_the_run_directory(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port, shards=8, load=8))
    launched = cli("launch", "sim")
    assert launched.returncode == 0
    run_id = launched.stdout.strip()
    real_pid = int((_state_dir() / "runs" / run_id / "pid").read_text())
    # What a kill in that window leaves: the record still says launching, with no pid (the run dir has it).
    _edit_record(run_id, state="launching", pid=None, starttime=None, boot_id="")
    [run] = cli.status()
    assert run["pid"] == real_pid and run["state"] in ("loading", "ready")
    waited = cli("wait", "sim", "-q", "--timeout", "60")
    assert waited.returncode == 0, waited.stderr
    assert cli("stop", "sim").returncode == 0 and not alive(real_pid)


def test_a_launch_that_never_started_its_wrapper_is_failed_and_does_not_block_the_next(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    run_id = "20261130-000000-dead00"
    run_dir = _state_dir() / "runs" / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "server.log").write_text("")
    record = RunRecord(run_id=run_id, profile="sim", host="local", run_dir=str(run_dir), port=free_port,
                       url=f"http://127.0.0.1:{free_port}", server="sglang", health_path="/health",
                       stall_timeout_s=30, notify_cmd=None, expected_load_s=None, started_at=time.time() - 120,
                       config=os.path.realpath(cli.config))
    _record_path(run_id).write_text(json.dumps(record.to_json()))
    [run] = cli.status()
    assert run["state"] == "failed" and "interrupted" in run["failure"]["message"]
    assert cli("launch", "sim").returncode == 0


# ---- 25: a full state disk -----------------------------------------------------------------------------------
@pytest.fixture
def small_state_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """$XDG_STATE_HOME on a 2 MiB tmpfs of its own (needs root), made full by `fill()`."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): the full-disk tests need root")
    monkeypatch.setenv("XDG_STATE_HOME", str(mount))
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def _fill(disk: Path) -> None:
    with open(disk / "filler", "wb") as fh, contextlib.suppress(OSError):
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
    with contextlib.suppress(OSError):   # small files too, until not even an inode's worth is left
        for i in range(10000):
            (disk / f"filler-{i}").write_bytes(b"x" * 512)


def test_a_launch_on_a_full_state_disk_is_one_line_and_leaves_nothing(cli, free_port, small_state_disk) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    _fill(small_state_disk)
    for argv in (("launch", "sim"), ("launch", "sim", "--wait")):
        out = cli(*argv)
        assert out.returncode == 2, out
        assert out.stderr.count("\n") == 1 and "No space left on device" in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    runs = small_state_disk / "specmon" / "runs"
    assert not runs.exists() or [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []
    assert not port_listening(free_port)
    status = cli("status")
    assert status.returncode == 0 and status.stdout.strip() == "no runs"


def test_wait_and_status_on_a_disk_that_filled_during_the_load_say_so_once(cli, free_port, small_state_disk) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    launched = cli("launch", "sim")
    assert launched.returncode == 0
    log = small_state_disk / "specmon" / "runs" / launched.stdout.strip() / "server.log"
    wait_until(lambda: "ready to roll" in log.read_text(), timeout=60)
    _fill(small_state_disk)
    status = cli("status")   # confirms readiness, and cannot save it
    assert status.returncode == 0 and "ready" in status.stdout.splitlines()[1]
    assert status.stderr.count("No space left on device") == 1 and "Traceback" not in status.stderr
    waited = cli("wait", "sim", "-q")
    assert waited.returncode == 0, waited.stderr
    assert waited.stderr.count("No space left on device") <= 1
    assert "Traceback" not in waited.stderr and "Task exception" not in waited.stderr
    for path in small_state_disk.glob("filler*"):
        path.unlink()
    assert cli("stop", "sim").returncode == 0


# ---- 26: a corrupt record ------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["pid_text", "started_at_null", "failure_string", "array", "truncated", "empty"])
def test_one_corrupt_record_is_shown_unreadable_and_the_others_still_listed(cli, free_port, damage) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    good = _ended_record("20261130-000000-g00d00", free_port, time.time() - 60)
    bad = _ended_record("20261130-000000-bad000", free_port, time.time() - 30)
    _record_path(good.run_id).parent.mkdir(parents=True, exist_ok=True)
    mine = os.path.realpath(cli.config)
    _record_path(good.run_id).write_text(json.dumps({**good.to_json(), "config": mine}))
    data = {**bad.to_json(), "config": mine}
    text = {
        "pid_text": json.dumps({**data, "pid": "abc"}),
        "started_at_null": json.dumps({**data, "started_at": None}),
        "failure_string": json.dumps({**data, "failure": "boom"}),
        "array": json.dumps([data]),
        "truncated": json.dumps(data)[:57],
        "empty": "",
    }[damage]
    _record_path(bad.run_id).write_text(text)
    table = cli("status")
    assert table.returncode == 0 and "Traceback" not in table.stderr, table.stderr
    rows = {line.split()[1]: line for line in table.stdout.splitlines()[1:]}
    assert "failed" in rows[good.run_id] and "unreadable" in rows[bad.run_id]
    listed = {r["run_id"]: r for r in cli.status()}
    assert listed[good.run_id]["state"] == "failed" and listed[bad.run_id]["state"] == "unreadable"
    assert listed[bad.run_id]["error"]
    # The same keys as a readable run's (a second key list in `status` had lost `still_running`), all null.
    assert set(listed[bad.run_id]) == set(listed[good.run_id]) | {"error"}
    assert all(v is None for k, v in listed[bad.run_id].items() if k not in ("run_id", "state", "error"))
    stop = cli("stop", bad.run_id)
    assert stop.returncode == 2 and "unreadable" in stop.stderr and len(stop.stderr.splitlines()) == 1


# ---- 27: notify_cmd's children -------------------------------------------------------------------------------
async def test_a_notify_cmd_past_its_timeout_is_ended_with_its_children(tmp_path: Path) -> None:
    pid_file = tmp_path / "sleep.pid"
    record = _ended_record("20261130-000000-n0t1fy", 1, time.time())
    task = run_notify(f"sleep 100 & echo $! > {pid_file}; wait", record, "ready", "test", timeout_s=1.0)
    with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
        await task
    sleeper = int(pid_file.read_text())
    for _ in range(100):
        if not alive(sleeper):
            break
        await asyncio.sleep(0.05)
    try:
        assert not alive(sleeper), "notify_cmd's `sleep 100` outlived its timeout"
    finally:
        with contextlib.suppress(OSError):
            os.kill(sleeper, signal.SIGKILL)


# ---- 28: stop checks the marker ------------------------------------------------------------------------------
def test_stop_never_signals_a_process_the_record_wrongly_points_at(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port, shards=8, load=8))
    launched = cli("launch", "sim")
    assert launched.returncode == 0
    run_id = launched.stdout.strip()
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        starttime = int(Path(f"/proc/{stranger.pid}/stat").read_text().rpartition(")")[2].split()[19])
        _edit_record(run_id, pid=stranger.pid, starttime=starttime)
        stopped = cli("stop", run_id, "--grace", "2")
        assert alive(stranger.pid), "stop killed a process that is not the run's"
        # The run's own processes carry its marker: the sweep still ends them.
        assert stopped.returncode == 0 and not port_listening(free_port)
    finally:
        stranger.kill()
        stranger.wait()


# ---- 29: private run directories, redacted secrets -----------------------------------------------------------
def test_the_run_directory_and_its_files_are_private_whatever_the_umask(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    old = os.umask(0)
    try:
        run = _launch_ready(cli)
        assert cli("stop", "sim").returncode == 0
    finally:
        os.umask(old)
    run_dir = _state_dir() / "runs" / str(run["run_id"])
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    files = {p.name: stat.S_IMODE(p.stat().st_mode) for p in run_dir.iterdir()}
    assert {"server.log", "meta.json", "launch.sh", "pid", "exit_code", "stop_requested"} <= set(files)
    assert all(mode == 0o600 for mode in files.values()), files
    assert stat.S_IMODE(_record_path(str(run["run_id"])).stat().st_mode) == 0o600
    assert stat.S_IMODE((_state_dir() / "load_history.jsonl").stat().st_mode) == 0o600


def test_profiles_and_status_redact_secret_looking_arguments(cli, free_port) -> None:
    secret, token = "sk-live-abcdef123456", "tok-98765"
    argv = [sys.executable, "-m", "specmon.sim", "--api-key", secret, f"--token={token}", "--port", str(free_port)]
    cli.config.write_text(f"[profiles.leaky]\nport = {free_port}\ncommand = {json.dumps(argv)}\n")
    for out in (cli("profiles"), cli("profiles", "--json")):
        assert out.returncode == 0 and secret not in out.stdout and token not in out.stdout
    command = json.loads(cli("profiles", "--json").stdout)["profiles"][0]["command"]
    assert command[3:] == ["--api-key", "<redacted>", "--token=<redacted>", "--port", str(free_port)]
    # A failure reason that echoes the server's arguments (as SGLang's ServerArgs dump and argparse errors do).
    reason = f"ValueError: bad --api-key {secret} in ServerArgs(api_key='{secret}', port={free_port})"
    record = _ended_record("20261130-000000-1eaky0", free_port, time.time() - 5, reason)
    _record_path(record.run_id).parent.mkdir(parents=True, exist_ok=True)
    _record_path(record.run_id).write_text(json.dumps({**record.to_json(), "config": os.path.realpath(cli.config)}))
    for out in (cli("status"), cli("status", "--json")):
        assert out.returncode == 0 and "ValueError: bad --api-key <redacted>" in out.stdout, out.stdout
        assert secret not in out.stdout


def test_a_launch_lock_left_by_a_killed_launch_does_not_block_launches(cli, free_port) -> None:
    cli.config.write_text(profile_toml("sim", free_port))
    lock = _state_dir() / "runs" / ".launch.lock"
    lock.mkdir(parents=True)
    (lock / "owner").write_text("otherhost pid 1 x\n")
    old = time.time() - 600
    os.utime(lock, (old, old))
    launched = cli("launch", "sim")
    assert launched.returncode == 0, launched.stderr
    assert not lock.exists()


def test_status_waits_for_silent_ssh_hosts_at_once_not_one_after_the_other(cli, free_port_factory) -> None:
    """Issue 37: `status --all` checked runs one after the other, so each host whose link hangs (a listener that
    never sends SSH's banner: a blackholed or frozen node) added its whole connect timeout: four such hosts cost
    four timeouts before the healthy runs were listed. Now hosts are checked at once: about one timeout in all."""
    timeout = 3.0
    port = free_port_factory()
    cli.config.write_text(profile_toml("sim", port) + f"[ssh]\nconnect_timeout_s = {timeout}\n")
    mine = os.path.realpath(cli.config)
    local = _ended_record("20261130-000000-10ca10", port, time.time() - 60)
    _record_path(local.run_id).parent.mkdir(parents=True, exist_ok=True)
    _record_path(local.run_id).write_text(json.dumps({**local.to_json(), "config": mine}))
    started = time.monotonic()
    assert cli("status", "--all").returncode == 0
    healthy_s = time.monotonic() - started   # what this box takes for status without a silent host
    with contextlib.ExitStack() as stack:
        silent = [stack.enter_context(silent_host()) for _ in range(4)]
        for i, host in enumerate(silent):
            for j in range(2):
                record = dataclasses.replace(local, run_id=f"20261130-00000{i}-hang{i}{j}", host=host, state="ready",
                                             exit_code=None, failure=None, pid=4242, started_at=time.time() - 30)
                _record_path(record.run_id).write_text(json.dumps({**record.to_json(), "config": mine}))
        started = time.monotonic()
        out = cli("status", "--all", timeout=120)
        elapsed = time.monotonic() - started
    assert out.returncode == 0, out.stderr
    assert sorted(line.split()[2].rstrip(":") for line in out.stderr.splitlines()) == sorted(silent), out.stderr
    assert local.run_id in out.stdout and out.stdout.count("unchecked") == 8, out.stdout
    # One after the other: at least 4 timeouts; at once: one (2.5 leaves room for a busy box).
    assert elapsed < healthy_s + 2.5 * timeout, f"status --all took {elapsed:.1f} s ({healthy_s:.1f} s without " \
        f"the silent hosts, connect timeout {timeout:g} s)"


def test_status_lists_what_it_can_when_ssh_hosts_do_not_answer(cli, free_port_factory) -> None:
    """One unreachable SSH host blanked `status` and `status --all`: exit 2 with 'gpu1: cannot connect …', the
    local runs not listed either. Now each host that does not answer gets one line (stderr), its runs are listed
    as last recorded (NOTE: unchecked), the rest as checked; exit 1 only when nothing could be checked."""
    port = free_port_factory()
    cli.config.write_text(profile_toml("sim", port))
    mine = os.path.realpath(cli.config)
    local = _ended_record("20261130-000000-10ca10", port, time.time() - 60)
    dead = [dataclasses.replace(local, run_id=f"20261130-00000{i}-dead0{i}", host=f"127.0.0.1:{free_port_factory()}",
                                state="ready", exit_code=None, failure=None, pid=4242, started_at=time.time() - 30)
            for i in range(3)]
    dead[2] = dataclasses.replace(dead[2], host=dead[1].host)   # two runs on one host: one line for it
    _record_path(local.run_id).parent.mkdir(parents=True, exist_ok=True)
    for record in (local, *dead):
        _record_path(record.run_id).write_text(json.dumps({**record.to_json(), "config": mine}))
    for args in (("status",), ("status", "--all")):
        out = cli(*args)
        assert out.returncode == 0, out.stderr
        assert "Traceback" not in out.stderr
        lines = out.stderr.splitlines()
        assert len(lines) == 2 and all("cannot connect to" in line for line in lines), out.stderr
        assert {line.split()[2].rstrip(":") for line in lines} == {dead[0].host, dead[1].host}
        rows = {line.split()[1]: line for line in out.stdout.splitlines()[1:] if line.strip()}
        assert rows.keys() == {local.run_id, *(r.run_id for r in dead)}, out.stdout
        assert "unchecked" not in rows[local.run_id] and all("unchecked" in rows[r.run_id] for r in dead)
    listed = cli("status", "--json")
    assert listed.returncode == 0 and len(json.loads(listed.stdout)) == 4
    # Nothing but runs on hosts that do not answer: listed as recorded, and exit 1 says nothing was checked.
    _record_path(local.run_id).unlink()
    only_dead = cli("status", "--json")
    assert only_dead.returncode == 1 and len(json.loads(only_dead.stdout)) == 3, only_dead.stderr
