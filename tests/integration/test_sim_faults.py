"""`specmon sim` fault injection: each flag's documented outcome (exit code, log lines, HTTP behaviour)."""

from __future__ import annotations

import os
import re
import signal
import socket
import time

import httpx
import pytest
from simproc import SHARD_RE, start_sim

pytestmark = pytest.mark.slow

OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
PORT_IN_USE = re.compile(r"\[Errno 98\]|[Aa]ddress already in use")
NCCL = re.compile(r"Watchdog caught collective operation timeout|ProcessGroupNCCL\.cpp")


def last_shard(lines: list[str]) -> tuple[int, int]:
    bars = [SHARD_RE.search(p) for p in lines if SHARD_RE.search(p)]
    return int(bars[-1][2]), int(bars[-1][3])


@pytest.mark.parametrize("flavor,header", [("sglang", r"Scheduler hit an exception: Traceback \(most recent call last\):"),
                                           ("vllm", r"EngineCore failed to start\.")])
def test_crash_at_shard_prints_a_traceback_and_exits_1(flavor: str, header: str) -> None:
    with start_sim("--crash-at-shard", "3", flavor=flavor, wait=None) as sim:
        assert sim.wait_exit(20) == 1
        lines = sim.lines()
    assert last_shard(lines) == (2, 4)  # died while loading shard 3
    assert any(re.search(header, p) for p in lines)
    assert any("SafetensorError" in p and "model-00003-of-00004.safetensors" in p for p in lines)
    assert not any("KV Cache is allocated" in p or "KV cache size" in p for p in lines)


@pytest.mark.parametrize("flavor,stage,before,after", [
    ("sglang", "kv", "Load weight end.", "KV Cache is allocated"),
    ("sglang", "graph", "KV Cache is allocated", "Capture target decode CUDA graph end"),
    ("vllm", "kv", "Model loading took", "GPU KV cache size"),
    ("vllm", "graph", "GPU KV cache size", "Graph capturing finished"),
])
def test_oom_prints_cuda_out_of_memory_traceback_and_exits_1(flavor: str, stage: str, before: str, after: str) -> None:
    with start_sim("--oom-at", stage, flavor=flavor, wait=None) as sim:
        assert sim.wait_exit(20) == 1
        lines = sim.lines()
    assert any(before in p for p in lines) and not any(after in p for p in lines)
    oom = [p for p in lines if OOM.search(p)]
    assert oom and "Tried to allocate" in oom[0]
    assert any("Traceback (most recent call last):" in p for p in lines)
    if flavor == "sglang" and stage == "graph":
        assert any(p.startswith("Exception: Capture cuda graph failed: CUDA out of memory") for p in lines)
        assert "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)" in lines
    if flavor == "vllm":
        assert any(p.endswith("RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}") for p in lines)


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_nccl_timeout_after_weights_exits_nonzero(flavor: str) -> None:
    with start_sim("--nccl-timeout", "--tp", "2", flavor=flavor, wait=None) as sim:
        assert sim.wait_exit(20) != 0
        lines = sim.lines()
        assert sim.health_status() is None  # never served HTTP
    watchdog = [p for p in lines if NCCL.search(p)]
    assert [p[:7] for p in watchdog if "Watchdog caught" in p] == ["[rank0]", "[rank1]"]
    assert re.match(r"\[rank0\]:\[E\d{4} \d{2}:\d{2}:\d{2}\.\d{9} ProcessGroupNCCL\.cpp:616\] \[Rank 0\] Watchdog caught collective "
                    r"operation timeout: WorkNCCL\(SeqNum=2, OpType=ALLREDUCE, .*\) ran for \d+ milliseconds before timing out\.", watchdog[0])
    load_end = next(i for i, p in enumerate(lines) if "Load weight end." in p or "Model loading took" in p)
    assert load_end < lines.index(watchdog[0])


def test_stall_stops_progress_and_logging_but_stays_alive() -> None:
    with start_sim("--stall-at-shard", "2", "--time-scale", "0.1", wait=None) as sim:
        sim.wait_for(r"1/4 \[")
        time.sleep(0.3)
        before = sim.text()
        time.sleep(1.5)  # the whole load would take 0.4 s
        assert sim.text() == before
        assert sim.process.poll() is None
        assert sim.health_status() is None
        assert last_shard(sim.lines()) == (1, 4)
        assert sim.stop() == 0  # SIGTERM still ends it


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_port_in_use_after_load_logs_errno_98_and_exits_1(flavor: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with start_sim(flavor=flavor, wait=None, port=port) as sim:
            assert sim.wait_exit(20) == 1
            lines = sim.lines()
    errors = [p for p in lines if PORT_IN_USE.search(p)]
    assert len(errors) == 1
    assert errors[0].endswith(f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use")
    assert last_shard(lines) == (4, 4)  # only after the whole weight load
    assert lines.index(errors[0]) > max(i for i, p in enumerate(lines) if SHARD_RE.search(p))


def test_slow_health_delays_every_answer() -> None:
    # The delay (2 s) is far above what a busy box adds to one loopback request; /v1/models, answered between
    # two health checks, is timed against them rather than against a fixed budget.
    with start_sim("--slow-health", "2.0") as sim:
        t0 = time.monotonic()
        assert httpx.get(sim.url + "/health", timeout=10).status_code == 200
        first_health = time.monotonic() - t0
        t0 = time.monotonic()
        assert httpx.get(sim.url + "/v1/models", timeout=10).status_code == 200
        models = time.monotonic() - t0
        t0 = time.monotonic()
        assert httpx.get(sim.url + "/health", timeout=10).status_code == 200
        second_health = time.monotonic() - t0
        assert first_health >= 2.0 and second_health >= 2.0   # every health answer waits
        assert models < second_health - 1.0, (models, second_health)   # other endpoints do not


def test_exit_zero_after_ready_unasked() -> None:
    with start_sim("--exit-zero-after", "1.0") as sim:
        t_ready = time.monotonic()
        assert sim.health_status() == 200
        assert sim.wait_exit(10) == 0
        assert time.monotonic() - t_ready >= 0.5
        assert sim.lines()[-1].endswith(f"INFO:     Finished server process [{sim.pid}]")


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_sigterm_stops_gracefully_with_exit_0(flavor: str) -> None:
    with start_sim(flavor=flavor) as sim:
        assert sim.stop() == 0
        assert any(p.endswith("INFO:     Waiting for application shutdown.") for p in sim.lines())


def test_ignore_sigterm_logs_and_keeps_serving() -> None:
    with start_sim("--ignore-sigterm") as sim:
        sim.process.send_signal(signal.SIGTERM)
        sim.wait_for(r"Received SIGTERM; ignoring it")
        time.sleep(0.3)
        assert sim.process.poll() is None and sim.health_status() == 200
        sim.process.kill()
        assert sim.wait_exit(5) == -signal.SIGKILL


def test_spawn_child_in_own_session_survives_the_sim() -> None:
    marker = f"specmon-test-{os.getpid()}-{time.monotonic_ns()}"
    with start_sim("--spawn-child", env={"SPECMON_SIM_TEST_MARKER": marker}) as sim:
        child = int(sim.wait_for(r"Started helper process pid=(\d+) in its own session")[1])
        try:
            assert os.getsid(child) == child != os.getsid(sim.pid)
            with open(f"/proc/{child}/environ", "rb") as fh:
                assert f"SPECMON_SIM_TEST_MARKER={marker}".encode() in fh.read().split(b"\0")
            sim.process.kill()
            sim.wait_exit(5)
            time.sleep(0.1)
            os.kill(child, 0)  # still alive: an orphan for the lifecycle code to find
        finally:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
