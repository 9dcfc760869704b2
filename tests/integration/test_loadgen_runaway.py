"""A load generator that cannot run away: absurd sizes refused in one line, a child that stops at once whatever it is
doing, and bounded reads of everything a server sends (SSE events, /v1/models, /server_info, the whole probe).

Each test runs specmon (and so its generator child) with its address space capped (RLIMIT_AS, inherited by the
child), so a regression ends in a MemoryError inside the test instead of taking the machine's memory.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import SUPPORT
from process_support import specmon_script

from specmon.loadgen.protocol import ChildSpec, Stopped, decode, encode
from specmon.loadgen.workload import Workload
from specmon.sources.resultfiles import read_results

pytestmark = pytest.mark.slow

MEMORY_CAP = 1536 << 20   # far above a sweep's needs (~200 MB), far below what a runaway took (1.9-9.7 GB)


def _capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


# Runs a command and adds, as a last stderr line, the peak resident memory (KiB) of it and the children it waited for.
_PEAK = ("import resource, subprocess, sys; rc = subprocess.call(sys.argv[1:]); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr); sys.exit(rc)")


def specmon(*args: str, cwd: Path, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """The installed command under the memory cap: its outcome, how long it took, and its peak memory in MiB."""
    exe = specmon_script()
    t = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PEAK, exe, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, preexec_fn=_capped)
    took = time.monotonic() - t
    stderr, peak = done.stderr.rstrip("\n").rsplit("\n", 1) if "\n" in done.stderr.rstrip("\n") else ("", done.stderr)
    done.stderr = stderr + "\n" if stderr else ""
    return done, took, int(peak) / 1024


@pytest.fixture
def hostile(request: pytest.FixtureRequest, free_port: int) -> Iterator[str]:
    """tests/support/hostile_http.py in its own process; `request.param` is (POST mode, GET mode)."""
    mode, get = request.param
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "hostile_http.py"), "--port", str(free_port), "--mode", mode,
                             "--get", get], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{free_port}"
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("hostile", [("usage", "ok")], indirect=True)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--request-rate", "1e9", "--duration", "5"], "request rate: must be in [0.001, 100000] requests/s, got 1e+09"),
        (["--request-rate", "5", "--duration", "1e9"], "duration: must be a number of seconds in (0, 604800]"),
        (["--levels", "1000000000", "--requests", "1000000000"],
         "concurrency level: 1000000000 is more than one load generator can keep in flight (at most 100000)"),
        (["--request-rate", "5", "--burstiness", "1e-300"], "burstiness: must be a number in [0.01, 100]"),
        (["--request-rate", "1e-9", "--requests", "1"], "request rate: must be in [0.001, 100000]"),
        (["--request-rate", "1000", "--requests", "100000000"], "100000000 requests in one level, more than 10000000"),
        (["--warmup", "1000000000"], "warm-up requests: 1000000000 is more than"),
        (["--dataset", "random", "--input-len", "1000000000"], "input/output length: at most 1048576/100000000"),
    ],
)
def test_absurd_sizes_are_refused_in_one_line(hostile: str, tmp_path: Path, args: list[str], message: str) -> None:
    """Each of these built its schedule or workers in one go (up to 9.7 GB, deaf to SIGTERM) or waited 10^9 s."""
    done, took, _ = specmon("sweep", "--url", hostile, *args, "--out", "r.jsonl", cwd=tmp_path, timeout=30)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr[-500:]
    assert not (tmp_path / "r.jsonl").exists() and took < 20


def _child(spec: ChildSpec) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "specmon.loadgen"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=_capped)
    assert proc.stdin is not None
    proc.stdin.write(encode(spec))
    proc.stdin.flush()
    return proc


def _wait_for_stop_handler(proc: subprocess.Popen[bytes]) -> None:
    """Until the child has its SIGTERM handler (and so its stdin watcher) in place: on a busy box its imports alone
    took over the 1 s this test once slept, and a SIGTERM before the handler kills it outright (rc -15)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/status", encoding="ascii") as f:
            caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.02)
    raise AssertionError("the generator did not install its SIGTERM handler within 30 s")


@pytest.mark.parametrize("how", ["SIGTERM", "stdin EOF"])
def test_generator_stops_at_once_while_it_builds_a_long_level(free_port: int, how: str) -> None:
    """A level of 9 million arrivals (within bounds) was drawn in one synchronous go (seconds, ~600 MB) during which
    SIGTERM and the parent's exit went unnoticed. Now the schedule is drawn lazily and a stop is obeyed at once."""
    workload = Workload(levels=(1,), rates=(10000.0,), requests_per_level=9_000_000, warmup_requests=0)
    proc = _child(ChildSpec(f"http://127.0.0.1:{free_port}", "m", workload))
    try:
        _wait_for_stop_handler(proc)
        time.sleep(0.5)   # into the level's build
        t = time.monotonic()
        if how == "SIGTERM":
            proc.send_signal(signal.SIGTERM)
        else:
            assert proc.stdin is not None
            proc.stdin.close()
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t
        out = proc.stdout.read().decode() if proc.stdout else ""
    finally:
        proc.kill()
        proc.wait()
    assert rc == 0 and decode(out.splitlines()[-1]) == Stopped() and took < 2.5, (rc, took, out[-300:])


@pytest.mark.parametrize("hostile", [("usage", "ok")], indirect=True)
def test_first_arrival_beyond_the_deadline_is_said(hostile: str, tmp_path: Path) -> None:
    """--request-rate 0.01 --requests 1: the one request is due 100 s in; the sweep said nothing while it waited."""
    exe = specmon_script()
    proc = subprocess.Popen([exe, "sweep", "--url", hostile, "--request-rate", "0.01", "--requests", "1", "--warmup", "0",
                             "--timeout", "1", "--deadline", "2", "--out", "r.jsonl"], cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_capped)
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline and "warning" not in line:
            line = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert "0.01 req/s: the first request is due 100 s after the level starts, later than the 2 s request " \
           "deadline" in line, line


@pytest.mark.parametrize("hostile", [("endless_line", "ok")], indirect=True)
def test_an_endless_sse_line_fails_the_request_not_the_memory(hostile: str, tmp_path: Path) -> None:
    """The stream buffered the line until a MemoryError (7 s); now one event over 4 MiB fails its request."""
    done, took, _ = specmon("sweep", "--url", hostile, "--levels", "1", "--requests", "1", "--warmup", "0",
                         "--timeout", "10", "--deadline", "40", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 1, done.stderr[-500:]
    (level,) = read_results(tmp_path / "r.jsonl").levels
    assert level.errors == {"malformed_sse": 1}
    record = json.loads((tmp_path / "r.requests.jsonl").read_text().splitlines()[-1])
    assert record["detail"] == "one SSE event is longer than 4 MiB" and took < 30


@pytest.mark.parametrize("hostile", [("usage", "trickle")], indirect=True)
def test_a_trickled_models_answer_ends_within_the_deadline(hostile: str, tmp_path: Path) -> None:
    """A /v1/models body sent a byte every 2 s never timed out a single read: `--timeout 5 --deadline 8` still
    waited past 45 s. The deadline now covers the whole probe."""
    done, took, _ = specmon("sweep", "--url", hostile, "--levels", "1", "--timeout", "5", "--deadline", "8",
                         "--out", "r.jsonl", cwd=tmp_path, timeout=40)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr[-500:]
    assert "/v1/models: no whole answer within 8 s" in done.stderr and took < 20


@pytest.mark.parametrize("hostile", [("usage", "huge")], indirect=True)
def test_a_huge_models_answer_is_refused_unread(hostile: str, tmp_path: Path) -> None:
    """A 400 MB /v1/models answer cost 1.9 GB and printed the 400 MB id; now reading stops at 4 MiB."""
    done, took, peak_mb = specmon("sweep", "--url", hostile, "--levels", "1", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr) < 300 and not done.stdout, done.stderr[-500:]
    assert done.stderr.endswith("/v1/models: answer is over 4 MiB; pass --model to skip it\n") and took < 30
    assert peak_mb < 300, peak_mb


@pytest.mark.parametrize("hostile", [("usage", "deep")], indirect=True)
def test_a_deeply_nested_models_answer_is_one_line(hostile: str, tmp_path: Path) -> None:
    """Issue 20 item 3: 100,000 nested arrays in /v1/models ended in a RecursionError traceback."""
    done, _, _ = specmon("sweep", "--url", hostile, "--levels", "1", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-500:]
    assert done.stderr.endswith("/v1/models: answer is not JSON (nested deeper than 64 levels); pass --model to skip it\n")


@pytest.mark.parametrize("hostile", [("usage", "long_id")], indirect=True)
def test_an_implausible_model_id_is_cut_before_the_terminal(hostile: str, tmp_path: Path) -> None:
    """A 5000-character id was taken as the model, sent, and printed whole."""
    done, _, _ = specmon("sweep", "--url", hostile, "--levels", "1", "--requests", "1", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and len(done.stderr) < 300 and not done.stdout, done.stderr[-500:]
    assert "the first model id is not a plausible name (5000 characters, 'mmmm" in done.stderr
    assert "pass --model" in done.stderr


@pytest.mark.parametrize("hostile", [("usage", "huge_info")], indirect=True)
def test_a_huge_server_info_is_left_out_and_the_sweep_runs(hostile: str, tmp_path: Path) -> None:
    """A 400 MB /server_info answer was read whole (the sweep then used over 1 GB); now reading stops at 4 MiB
    and the server summary goes without it."""
    done, _, peak_mb = specmon("sweep", "--url", hostile, "--levels", "1", "--requests", "1", "--warmup", "0",
                               "--model", "fixture-model", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-500:]
    assert peak_mb < 300, peak_mb
    res = read_results(tmp_path / "r.jsonl")
    assert res.meta.model == "fixture-model" and [lv.requests_ok for lv in res.levels] == [1]
