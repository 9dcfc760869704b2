"""A two-node profile over SSH: two aliases (gpu1 direct, gpu2 through a ProxyJump) to the test's real sshd.

Driven through the installed `specmon` command, as a user would: launch --wait, status --json, logs, stop. Both
"nodes" are this machine behind sshd (remote HOME is the fixture's temp dir), so the test can check the
processes by their SPECMON_RUN_ID markers.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from lifecycle_support import kill_marked, marked_pids, port_listening
from process_support import run_specmon
from sshd_support import Sshd

pytestmark = pytest.mark.slow


def _profiles(tmp_path: Path, sshd: Sshd, port: int, master_port: int, *extra: str) -> Path:
    command = [sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", "0.05", "--shards", "4",
               "--load-seconds", "4", *extra]
    path = tmp_path / "profiles.toml"
    path.write_text(f'[profiles.mn]\nhosts = ["gpu1", "gpu2"]\nport = {port}\nmaster_port = {master_port}\n'
                    f"stall_timeout_s = 60\ncommand = {json.dumps(command)}\n\n" + sshd.ssh_table())
    return path


def _args_dump(log: str) -> dict[str, object]:
    for line in log.splitlines():
        if "server_args=" in line:
            return dict(ast.literal_eval(line.split("server_args=", 1)[1]))
    raise AssertionError(f"no args dump in {log[-2000:]}")


def _cleanup(config: Path, sshd: Sshd, status: list[dict[str, object]]) -> None:
    """Stop what is left and remove the nodes' run dirs from the sshd's (session-wide) HOME, so later SSH tests
    that list a host's runs find only their own."""
    run_specmon("--config", str(config), "stop", "--force", "mn")
    node_ids = [str(node["run_id"]) for run in status for node in run.get("nodes", [])]  # type: ignore[union-attr]
    kill_marked(node_ids)
    for node_id in node_ids:
        for run_dir in list(sshd.home.rglob(node_id)):
            if run_dir.is_dir():
                shutil.rmtree(run_dir)


def test_two_nodes_over_ssh_launch_with_their_ranks_show_both_logs_and_stop_both(
        sshd: Sshd, tmp_path: Path, free_port_factory) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    config = _profiles(tmp_path, sshd, port, master_port)
    status: list[dict[str, object]] = []
    try:
        launched = run_specmon("--config", str(config), "launch", "--wait", "-q", "mn")
        assert launched.returncode == 0, launched.stderr
        status = json.loads(run_specmon("--config", str(config), "status", "--json").stdout)
        [run] = status
        assert run["state"] == "ready" and run["host"] == "gpu1"
        nodes = run["nodes"]
        assert [(n["node_rank"], n["host"], n["state"]) for n in nodes] == [(0, "gpu1", "ready"),
                                                                           (1, "gpu2", "ready")]
        # Each node got its own rank (its log, read over SSH, has the args dump).
        own_addresses = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
        for rank in (0, 1):
            dump = _args_dump(run_specmon("--config", str(config), "logs", "-n", "500", "--node", str(rank), "mn").stdout)
            assert (dump["nnodes"], dump["node_rank"]) == (2, rank)
            addr, _, dist_port = str(dump["dist_init_addr"]).rpartition(":")
            assert dist_port == str(master_port) and addr in own_addresses   # rank 0's address, found over SSH

        logs = run_specmon("--config", str(config), "logs", "-n", "200", "mn")
        assert logs.returncode == 0, logs.stderr
        assert "[node 0] " in logs.stdout and "'node_rank': 1" in logs.stdout
        assert any(line.startswith("[node 1] ") and "'node_rank': 1" in line for line in logs.stdout.splitlines())
        assert any(line.startswith("[node 0] ") and "fired up" in line for line in logs.stdout.splitlines())
        only1 = run_specmon("--config", str(config), "logs", "--node", "1", "mn").stdout
        assert "'node_rank': 1" in only1 and "fired up" not in only1 and "[node" not in only1

        table = run_specmon("--config", str(config), "status").stdout
        assert "node 0 gpu1" in table and "node 1 gpu2" in table

        stopped = run_specmon("--config", str(config), "stop", "mn")
        assert stopped.returncode == 0, stopped.stderr
        assert "node 0 run" in stopped.stdout and "node 1 run" in stopped.stdout
        for node in nodes:
            assert marked_pids(str(node["run_id"])) == []
        assert not port_listening(port)
        [final] = json.loads(run_specmon("--config", str(config), "status", "--json").stdout)
        assert final["state"] == "stopped" and [n["state"] for n in final["nodes"]] == ["stopped", "stopped"]
    finally:
        _cleanup(config, sshd, status)


def test_one_node_failing_over_ssh_fails_the_run_naming_that_node(sshd: Sshd, tmp_path: Path,
                                                                  free_port_factory) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    # Rank 1 crashes at its first shard, long before rank 0 (which, unlike SGLang's, needs no peer) is ready.
    config = _profiles(tmp_path, sshd, port, master_port, "--shards", "8", "--load-seconds", "100",
                       "--crash-at-shard", "1", "--fault-rank", "1")
    status: list[dict[str, object]] = []
    try:
        waited = run_specmon("--config", str(config), "launch", "--wait", "-q", "mn")
        assert waited.returncode == 1, (waited.stdout, waited.stderr)
        assert "node 1 (gpu2)" in waited.stderr and "Traceback" not in waited.stderr.split("last log lines")[0]
        status = json.loads(run_specmon("--config", str(config), "status", "--json").stdout)
        [run] = status
        assert run["state"] == "failed" and run["failure"]["message"].startswith("node 1 (gpu2): ")
        assert run["nodes"][1]["state"] == "failed"
        stopped = run_specmon("--config", str(config), "stop", "mn")
        assert stopped.returncode == 0, stopped.stderr
        for node in run["nodes"]:
            assert marked_pids(str(node["run_id"])) == []
        [final] = json.loads(run_specmon("--config", str(config), "status", "--json").stdout)
        assert final["state"] == "failed" and final["failure"]["message"] == run["failure"]["message"]
    finally:
        _cleanup(config, sshd, status)
