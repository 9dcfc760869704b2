"""`specmon logscan` against the real simulated server (`specmon sim`) writing its launch log live.

The sim prints real-format SGLang / vLLM launch logs (and injected failures); logscan --follow tails the
file while the sim writes it. Each sim runs on its own free 127.0.0.1 port and is stopped by its pid.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ports import free_port

pytestmark = pytest.mark.slow


def run_sim_and_follow(tmp_path: Path, *sim_args: str) -> tuple[int, list[dict], Path]:
    log = tmp_path / "server.log"
    log.write_bytes(b"")
    with open(log, "wb") as out:
        sim = subprocess.Popen([sys.executable, "-m", "specmon", "sim", "--time-scale", "0.05", "--shards", "4",
                                "--tp", "2", "--kv-tokens", "123456", "--host", "127.0.0.1", "--port", str(free_port()),
                                *sim_args], stdout=out, stderr=subprocess.STDOUT)
    try:
        follow = subprocess.run([sys.executable, "-m", "specmon", "logscan", "--follow", "--json", str(log)],
                                capture_output=True, text=True, timeout=90)
    finally:
        sim.terminate()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
            sim.wait(timeout=10)
    updates = [json.loads(line) for line in follow.stdout.splitlines()]
    return follow.returncode, updates, log


def line_of(log: Path, fragment: str) -> int:
    """The `grep -n` number of the first line holding `fragment` (lines end at \\n only; \\r is a bar redraw)."""
    for number, line in enumerate(log.read_bytes().decode("utf-8", "replace").split("\n"), start=1):
        if fragment in line:
            return number
    raise AssertionError(f"{fragment!r} not in {log}")


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
def test_follow_a_live_launch_to_ready(tmp_path: Path, flavor: str) -> None:
    rc, updates, _ = run_sim_and_follow(tmp_path, "--flavor", flavor)
    assert rc == 0
    final = updates[-1]
    assert (final["server"], final["phase"], final["ready"], final["failure"]) == (flavor, "ready", True, None)
    assert (final["shards"], final["kv_cache_tokens"], final["tp"]) == ({"done": 4, "total": 4}, 123456, 2)
    # Every shard step was reported on its own, in order, while the log grew.
    steps = [u["shards"]["done"] for u in updates if u["shards"]]
    assert sorted(set(steps)) == [0, 1, 2, 3, 4] and steps == sorted(steps)
    phases = [u["phase"] for u in updates]
    assert phases.index("loading_weights") < phases.index("allocating_kv") < phases.index("capturing_graphs") \
        < phases.index("ready")


@pytest.mark.parametrize("sim_args,kind,fragment", [
    (("--flavor", "sglang", "--oom-at", "graph"), "oom", "Capture cuda graph failed"),
    (("--flavor", "vllm", "--oom-at", "kv"), "oom", "torch.OutOfMemoryError"),
    (("--flavor", "sglang", "--nccl-timeout"), "nccl", "Watchdog caught collective operation timeout"),
    (("--flavor", "vllm", "--crash-at-shard", "2"), "exception", "SafetensorError"),
])
def test_follow_a_live_launch_to_its_failure(tmp_path: Path, sim_args: tuple[str, ...], kind: str,
                                            fragment: str) -> None:
    rc, updates, log = run_sim_and_follow(tmp_path, *sim_args)
    assert rc == 1
    final = updates[-1]
    assert (final["phase"], final["ready"]) == ("failed", False)
    assert final["failure"]["kind"] == kind
    assert fragment in final["failure"]["message"]
    assert final["failure"]["line"] == line_of(log, fragment)
