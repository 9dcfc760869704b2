"""`specmon sim` through the main CLI: registration, --help, option errors, and a client that hangs up."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx
import pytest
from simproc import READY_PATTERNS, SimProcess, free_port, start_sim

pytestmark = pytest.mark.slow

FLAGS = ("--flavor", "--host", "--port", "--tp", "--shards", "--load-seconds", "--kv-tokens", "--new-token-ratio",
         "--mem-fraction-static", "--spec", "--accept-len", "--model", "--time-scale", "--decode-log-interval", "--crash-at-shard", "--oom-at",
         "--nccl-timeout", "--stall-at-shard", "--slow-health", "--exit-zero-after", "--ignore-sigterm", "--spawn-child")


def test_help_documents_every_flag() -> None:
    out = subprocess.run([sys.executable, "-m", "specmon", "sim", "--help"], capture_output=True, text=True, check=True).stdout
    for flag in FLAGS:
        assert re.search(rf"^\s+{re.escape(flag)}\b.*\n?\s+\S", out, re.M), flag


def test_bad_option_values_are_one_line_with_exit_2() -> None:
    cases = [(["--tp", "0"], "--tp must be >= 1"), (["--spec", "eagle3", "--accept-len", "9"], "--accept-len must be in [1, 4] (spec-steps + 1)"),
             (["--crash-at-shard", "9", "--shards", "4"], "--crash-at-shard must be in 1..--shards"),
             (["--mem-fraction-static", "1.5"], "--mem-fraction-static must be in (0, 1]"),
             (["--new-token-ratio", "0"], "--new-token-ratio must be in (0, 1]")]
    for argv, message in cases:
        for entry in (["-m", "specmon", "sim"], ["-m", "specmon.sim"]):
            proc = subprocess.run([sys.executable, *entry, *argv], capture_output=True, text=True, timeout=30)
            assert proc.returncode == 2, argv
            assert proc.stderr.strip().splitlines() == [f"specmon: error: sim: {message}"]


def test_specmon_sim_subcommand_serves() -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "specmon", "sim", "--flavor", "sglang", "--port", str(port),
                             "--time-scale", "0.05", "--load-seconds", "2"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    sim = SimProcess(proc, port, "sglang")
    try:
        sim.wait_for(READY_PATTERNS["sglang"], 20)
        assert sim.health_status() == 200
        assert sim.wait_for(r"Uvicorn running on (http://\S+)")[1] == f"http://127.0.0.1:{port}"
    finally:
        assert sim.stop() == 0


def test_client_hanging_up_frees_the_running_slot_and_leaves_the_queue() -> None:
    with start_sim("--max-running-requests", "1") as sim:
        body = {"messages": [{"role": "user", "content": "long"}], "max_tokens": 5000, "ignore_eos": True, "stream": True}
        with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=10) as resp:
            lines = resp.iter_lines()
            data = [line for line in (next(lines) for _ in range(12)) if line.startswith("data: ")]
            assert len(data) == 6
            time.sleep(0.2)
            assert httpx.get(sim.url + "/server_info").json()["sim"]["running"] == 1
            with httpx.stream("POST", sim.url + "/v1/chat/completions", json=body, timeout=10) as queued:
                assert queued.status_code == 200
                time.sleep(0.2)
                assert httpx.get(sim.url + "/server_info").json()["sim"]["queued"] == 1
            time.sleep(0.2)  # the queued client hung up: it leaves the queue without ever running
            info = httpx.get(sim.url + "/server_info").json()["sim"]
            assert (info["running"], info["queued"]) == (1, 0)
            resp.close()  # hang up mid-stream
        deadline = time.monotonic() + 5
        while httpx.get(sim.url + "/server_info").json()["sim"]["running"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(sim.url + "/server_info").json()["sim"]["running"] == 0
        assert not any("Traceback" in p or "Error handling request" in p for p in sim.lines())
