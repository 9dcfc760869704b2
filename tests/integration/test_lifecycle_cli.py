"""`specmon launch/stop/status/wait/logs` as a user runs them: separate processes, kill -9, real sim servers."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifecycle_support import Cli, kill_marked, port_listening
from lifecycle_support import profile_toml as _profile
from process_support import wait_until

from specmon.model.machine.interpreter import python_module

pytestmark = pytest.mark.slow

STATUS_KEYS = {"run_id", "profile", "host", "state", "pid", "port", "url", "started_at", "ready_at", "load_seconds",
               "shards", "kv_cache_tokens", "exit_code", "failure", "config", "still_running"}


@pytest.fixture
def cli(tmp_path: Path) -> Iterator[Cli]:
    runner = Cli(tmp_path / "profiles.toml")
    yield runner
    if runner.config.exists():
        for run in runner.status():
            if run["state"] in ("launching", "loading", "ready", "stopping"):
                runner("stop", str(run["run_id"]), "--force")
        kill_marked(str(r["run_id"]) for r in runner.status())


def test_kill_9_during_load_then_status_and_wait_resume_without_losing_or_repeating_lines(
        cli: Cli, free_port: int, tmp_path: Path) -> None:
    cli.config.write_text(_profile("sim", free_port, shards=24, load=12, scale=0.5))
    out_a = tmp_path / "a.out"
    with open(out_a, "wb") as fh:
        first = subprocess.Popen(cli.argv("launch", "sim", "--wait"), stdout=fh, stderr=subprocess.PIPE,
                                 stdin=subprocess.DEVNULL)
    state_dir = Path(os.environ["XDG_STATE_HOME"]) / "specmon" / "runs"

    def committed() -> int:
        files = list(state_dir.glob("*.json"))
        return json.loads(files[0].read_text())["log_offset"] if files else -1

    # Kill while loading, at a moment when what was printed has been committed (the usual idle moment).
    wait_until(lambda: out_a.read_bytes().count(b"\n") >= 4 and committed() == out_a.stat().st_size,
               timeout=20, step=0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(5)
    first.stderr.close()   # type: ignore[union-attr]

    [run] = cli.status()
    assert set(run) == STATUS_KEYS
    assert run["state"] == "loading" and run["profile"] == "sim" and Path(f"/proc/{run['pid']}").exists()
    second = cli("wait", "sim", "--timeout", "60")
    assert second.returncode == 0, second.stderr
    assert "sim ready" in second.stderr
    log = Path(os.environ["XDG_STATE_HOME"]) / "specmon" / "runs" / str(run["run_id"]) / "server.log"
    shown = out_a.read_text().splitlines() + second.stdout.splitlines()
    assert shown == log.read_text().splitlines()   # nothing lost, nothing twice
    assert out_a.read_text() and second.stdout

    [ready] = cli.status()
    assert ready["state"] == "ready" and ready["ready_at"] and ready["shards"] == {"done": 24, "total": 24}
    stopped = cli("stop", "sim")
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert cli.status()[0]["state"] == "stopped" and not port_listening(free_port)


def test_wait_exit_codes_failed_stalled_and_timeout(cli: Cli, free_port_factory) -> None:   # type: ignore[no-untyped-def]
    p1, p2, p3 = free_port_factory(), free_port_factory(), free_port_factory()
    cli.config.write_text(_profile("crash", p1, "--crash-at-shard", "2", scale=0.1)
                          + _profile("stall", p2, "--stall-at-shard", "2", scale=0.1, stall=2)
                          + _profile("slow", p3, shards=8, load=40, scale=1))
    assert cli("launch", "crash").returncode == 0
    failed = cli("wait", "crash", "--json")
    assert failed.returncode == 1
    verdict = json.loads(failed.stdout)
    assert verdict["verdict"] == "failed" and verdict["failure"]["kind"] == "exception"
    assert "SafetensorError" in failed.stderr and "last log lines:" in failed.stderr

    assert cli("launch", "stall").returncode == 0
    stalled = cli("wait", "stall", "--stall-timeout", "1.5", "-q")
    assert stalled.returncode == 3 and "stalled" in stalled.stderr and "no log output" in stalled.stderr
    time.sleep(0.6)
    table = cli("status").stdout
    assert "STALLED: no log output" in next(line for line in table.splitlines() if line.startswith("stall "))

    t0 = time.monotonic()
    timed = cli("launch", "slow", "--wait", "--timeout", "2", "-q")
    assert timed.returncode == 3 and "not ready after 2s" in timed.stderr
    assert time.monotonic() - t0 < 15
    states = {r["profile"]: r for r in cli.status()}
    assert states["crash"]["state"] == "failed" and states["crash"]["failure"]["kind"] == "exception"
    assert states["crash"]["shards"] == {"done": 1, "total": 4}   # where it crashed, kept after the end
    assert states["stall"]["state"] == "loading" and states["slow"]["state"] == "loading"


def test_wait_outlasts_a_silent_phase_longer_than_its_heartbeat(cli: Cli, free_port: int) -> None:
    """Seen on a GPU host: a server silent for over 10 s (the progress heartbeat) made `launch --wait` end with
    'run is loading' and exit 1 while the load went on. The wait must last until the verdict."""
    sim = " ".join([sys.executable, "-m", "specmon.sim", "--port", str(free_port), "--time-scale", "0.05",
                    "--shards", "2", "--load-seconds", "2"])
    argv = ["sh", "-c", f"sleep 11; exec {sim}"]
    cli.config.write_text(f"[profiles.quiet]\nport = {free_port}\ncommand = {json.dumps(argv)}\n")
    done = cli("launch", "quiet", "--wait", "-q", timeout=90)
    assert done.returncode == 0, done.stderr
    assert "quiet ready" in done.stderr
    assert cli.status()[0]["state"] == "ready"


def test_logs_and_preflight_errors(cli: Cli, free_port: int) -> None:
    cli.config.write_text(_profile("sim", free_port))
    launched = cli("launch", "sim")   # nobody watches this load: `status` itself must find it ready
    assert launched.returncode == 0 and launched.stdout.strip()
    wait_until(lambda: cli.status()[0]["state"] == "ready", timeout=40, step=0.3)
    [ready] = cli.status()
    assert ready["run_id"] == launched.stdout.strip() and ready["load_seconds"] is not None and ready["ready_at"]
    logs = cli("logs", "sim", "-n", "2")
    assert logs.returncode == 0 and len(logs.stdout.splitlines()) == 2
    assert cli("stop", "sim").returncode == 0
    # Stopping it again said "stopped in 0.0s (SIGTERM; 0 process(es))", as if it had just been stopped (issue 35 #20).
    again = cli("stop", "sim")
    code = cli.status()[0]["exit_code"]   # 0 or 143, as the sim's SIGTERM handling went
    assert (again.returncode, again.stdout) == (0, f"sim run {ready['run_id']}: already stopped (exit code {code}); "
                                                   "nothing to stop\n"), again
    followed = cli("logs", "sim", "-f", "-n", "1000", timeout=20)   # the run has ended: -f returns
    log = Path(os.environ["XDG_STATE_HOME"]) / "specmon" / "runs" / str(cli.status()[0]["run_id"]) / "server.log"
    assert followed.returncode == 0 and followed.stdout == log.read_text()

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", free_port))
        listener.listen()
        busy = cli("launch", "sim")
    assert busy.returncode == 2 and busy.stdout == ""
    # One line naming who holds the port (this test process) and free ports to use instead (issue 10 #1).
    [line] = busy.stderr.strip().splitlines()
    assert re.fullmatch(rf"specmon: error: local: port {free_port} is already in use \(profile sim\) by pid "
                        rf"{os.getpid()} \(.+\); stop it or choose another port \(free: \d+, \d+\)", line), line
    unknown = cli("stop", "nothing-like-this")
    assert unknown.returncode == 2 and "nothing-like-this" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_server_that_lost_its_port_to_a_racing_launch_names_the_holder_and_free_ports(
        cli: Cli, free_port: int) -> None:
    """Two demos at once: the port was free at each preflight, one server bound it first, and the other's card said
    only `port_in_use: ERROR: [Errno 98] error while attempting to bind ...` (issue 35 #11). Now its failure says
    who holds the port and which ports are free, as a refused launch does."""
    cli.config.write_text(_profile("sim", free_port, load=4))   # the sim binds its port after loading
    assert cli("launch", "sim").returncode == 0                 # the preflight found the port free
    with socket.socket() as racer:                               # ... and now another takes it first
        racer.bind(("127.0.0.1", free_port))
        racer.listen()
        waited = cli("wait", "sim", "-q")
        [status] = cli.status()
    assert waited.returncode == 1, waited.stderr
    holder = rf"port {free_port} is already in use by pid {os.getpid()} \(.+\); stop it or choose another port " \
             rf"\(free: \d+, \d+\)"
    assert re.search(rf"^specmon: sim failed: port_in_use: {holder}$", waited.stderr, re.M), waited.stderr
    assert "[Errno 98]" in waited.stderr   # the server's own line is still among the last lines shown
    assert status["state"] == "failed" and re.fullmatch(holder, status["failure"]["message"]), status
    # Nobody watching the load: `status` finds the ended run and says the same.
    second = cli("launch", "sim").stdout.strip()
    assert second and second != status["run_id"]

    def run() -> dict[str, object]:
        return next(r for r in cli.status() if r["run_id"] == second)

    with socket.socket() as racer:
        racer.bind(("127.0.0.1", free_port))
        racer.listen()
        wait_until(lambda: run()["state"] == "failed", timeout=60, step=0.5)
    assert re.fullmatch(holder, run()["failure"]["message"]), run()   # type: ignore[index]


def test_streaming_commands_end_quietly_when_their_reader_goes_away(cli: Cli, free_port: int) -> None:
    """`specmon metrics NAME -f | head` ended in a BrokenPipeError traceback; `specmon logs NAME -f | head -1` never
    ended (nothing more to write to notice the reader had gone) (issue 35 #10)."""
    cli.config.write_text(_profile("sim", free_port, load=0.5) + "metrics_interval_s = 0.3\n")
    assert cli("launch", "sim", "--wait").returncode == 0
    for command in (("metrics", "sim", "-f"), ("logs", "sim", "-f")):
        reader = subprocess.Popen(cli.argv(*command), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL)
        assert reader.stdout is not None and reader.stderr is not None
        assert reader.stdout.readline()   # as `| head -1` reads one line, then goes away
        reader.stdout.close()
        try:
            code = reader.wait(timeout=30)   # the run stays ready: only the reader going away ends these
        except subprocess.TimeoutExpired:
            reader.kill()
            raise AssertionError(f"`specmon {' '.join(command)}` still running 30 s after its reader went away") from None
        assert (code, reader.stderr.read()) == (141, b""), command   # 128 + SIGPIPE, as a shell reports it


def test_logs_never_print_a_logs_escape_sequences(cli: Cli, free_port: int) -> None:
    """`specmon logs` copied the server log's bytes to the terminal, OSC title and C1 sequences included."""
    hostile = r"title\033]0;PWNED\007 link\033]8;;http://evil\033\\x\033]8;;\033\\ c1\302\23331m red\033[31mR\033[0m\n"
    argv = ["sh", "-c", f"printf 'loading\\n'; printf '{hostile}'; printf 'after\\n'; exec sleep 60"]
    cli.config.write_text(f'[profiles.raw]\nserver = "other"\nport = {free_port}\ncommand = {json.dumps(argv)}\n')
    assert cli("launch", "raw").returncode == 0
    shown: list[subprocess.CompletedProcess[str]] = []
    wait_until(lambda: "after" in (shown.append(cli("logs", "raw")) or shown[-1].stdout), timeout=30, step=0.2)
    assert shown[-1].returncode == 0, shown[-1].stderr
    assert shown[-1].stdout == "loading\ntitle linkx c1 redR\nafter\n", repr(shown[-1].stdout)


def test_a_local_specmon_command_runs_the_running_specmon_with_no_specmon_on_path(
        tmp_path: Path, free_port: int) -> None:
    """The shipped profiles.toml's demo profiles say `specmon sim`. From a venv that is not activated, `launch`
    and `experiment demo` failed: 'local: command not found: specmon'. A local profile's `specmon ...` runs the
    running specmon; its env view inspects that interpreter (it inspected `python3` on PATH)."""
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.sim]\nport = {free_port}\ncommand = ["specmon", "sim", "--port", "{free_port}", '
                      f'"--shards", "2", "--load-seconds", "1"]\n')
    env = dict(os.environ, PATH="/usr/bin:/bin")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*python_module("specmon"), "--config", str(config), *args], capture_output=True,
                              text=True, timeout=90, env=env, stdin=subprocess.DEVNULL, check=False)

    try:
        launched = run("launch", "sim", "--wait", "--timeout", "60", "-q")
        assert launched.returncode == 0, launched.stdout + launched.stderr
        report = json.loads(run("env", "sim", "--json").stdout)
        assert report["python"] == sys.executable
    finally:
        run("stop", "sim")
