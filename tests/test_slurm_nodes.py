"""Two-node Slurm jobs against a real two-node cluster on this machine (tests/slurm_support.py: n1 at 127.0.0.2,
n2 at 127.0.0.3, one slurmd each): `specmon sim` as each rank of one job, the rank from Slurm's SLURM_NODEID, rank
0's node as the master address, the server reached at the node Slurm names (its address, never 127.0.0.1)."""

from __future__ import annotations

import ast
import dataclasses
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lifecycle_support import Views, config_of, stop_everything
from slurm_support import TWO_NODES, SlurmCluster

from specmon.loadgen.workload import Workload
from specmon.model.config import Profile
from specmon.model.slurm import SlurmRequest
from specmon.orchestration.runs import RunManager
from specmon.orchestration.stopping import StopTimings
from specmon.orchestration.sweep import SweepSpec, run_sweep

pytestmark = pytest.mark.slow   # a cluster and a job each (a few seconds)

N1 = TWO_NODES["n1"]


def two_node_job(port: int, master_port: int, *extra: str, shards: int = 4, load_s: float = 2,
                 before: tuple[str, ...] = ()) -> Profile:
    """Rank 0 binds n1's address only: a probe, sweep or port check that went to 127.0.0.1 would find nothing."""
    command = (*before, sys.executable, "-m", "specmon.sim", "--host", N1, "--port", str(port), "--time-scale", "0.05",
               "--shards", str(shards), "--load-seconds", str(load_s), *extra)
    return Profile(name="mn", command=command, port=port, server="sglang", master_port=master_port,
                   stall_timeout_s=30.0, slurm=SlurmRequest(nodes=2, time="10"))


def args_dump(log: Path) -> dict[str, object]:
    for line in log.read_text().splitlines():
        if "server_args=" in line:
            return dict(ast.literal_eval(line.split("server_args=", 1)[1]))
    raise AssertionError(f"no args dump in {log}")


def answers(addr: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex((addr, port)) == 0


@pytest.fixture
async def managers(tmp_path: Path) -> AsyncIterator[Callable[[Profile], tuple[RunManager, Views]]]:
    made: list[RunManager] = []

    def make(profile: Profile) -> tuple[RunManager, Views]:
        manager = RunManager(config_of(profile), state_dir=tmp_path / "state",
                             stop_timings=StopTimings(grace_s=10, port_wait_s=10))
        made.append(manager)
        return manager, Views(manager)

    yield make
    await stop_everything(made)


async def test_a_two_node_job_runs_rank_0_on_n1_and_rank_1_on_n2_is_ready_with_rank_0_and_stops_as_one(
        slurm2: SlurmCluster, managers, free_port_factory, tmp_path: Path) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    manager, views = managers(two_node_job(port, master_port))
    launched = await manager.launch("mn")
    [job] = slurm2.jobs()   # one job for both ranks
    assert slurm2.run("squeue", "-h", "-j", job, "-o", "%j %D").split() == [f"specmon-{launched.run_id}", "2"]
    assert [n.node_rank for n in launched.nodes] == [0, 1]

    ready = await views.until(lambda v: v.run_id == launched.run_id and v.state == "ready", timeout=90)
    assert [n.state for n in ready.nodes] == ["ready", "ready"]
    # Each rank ran on its own node, the rank being Slurm's, with rank 0's node (n1's address) as the master.
    for rank, node in enumerate(ready.nodes):
        log = Path(node.log_path)
        assert f"specmon: node rank {rank} on n{rank + 1} (master {N1})" in log.read_text()
        dump = args_dump(log)
        assert (dump["node_rank"], dump["nnodes"], dump["dist_init_addr"]) == (rank, 2, f"{N1}:{master_port}")
    # Readiness went to the port on n1 (nothing listens on 127.0.0.1), and so does a sweep.
    assert ready.url == f"http://{N1}:{port}" and not answers("127.0.0.1", port)
    workload = Workload(levels=(1,), requests_per_level=3, warmup_requests=1, input_len=16, output_len=16)
    result = await run_sweep(SweepSpec(url=ready.url, workload=workload, out_path=tmp_path / "sweep.jsonl"))
    assert [(level.requests_ok, level.requests_failed) for level in result.levels] == [(3, 0)]

    report = await manager.stop(launched.run_id)
    assert report.clean and report.stopped and len(report.nodes) == 2, report
    assert slurm2.run("squeue", "-h", "-j", job, "-o", "%T", check=False).strip() in ("", "CANCELLED")
    assert not answers(N1, port)
    final = manager.view(launched.run_id)
    assert final.state == "stopped" and [n.state for n in final.nodes] == ["stopped", "stopped"]


async def test_a_rank_dying_in_a_two_node_job_fails_the_run_naming_that_rank(
        slurm2: SlurmCluster, managers, free_port_factory) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    # Rank 1 (by Slurm's SLURM_NODEID) dies after 2 s without a word in its log, while the job runs on; rank 0
    # would go on loading for a long while.
    dies = ("sh", "-c", 'if [ "$SLURM_NODEID" = 1 ]; then sleep 2; exit 3; fi; exec "$@"', "sh")
    manager, views = managers(two_node_job(port, master_port, shards=8, load_s=400, before=dies))
    launched = await manager.launch("mn")
    failed = await views.until(lambda v: v.run_id == launched.run_id and v.state not in ("launching", "loading"),
                               timeout=90)
    assert failed.state == "failed" and failed.failure is not None, failed
    assert failed.failure.message == "node 1 (local): exited with code 3", failed.failure
    assert failed.nodes[1].state == "failed" and failed.nodes[0].state == "loading"
    # As for SSH multi-node runs, the other ranks keep running (here: the job) until the run is stopped.
    assert slurm2.run("squeue", "-h", "-o", "%T").split() == ["RUNNING"]
    report = await manager.stop(launched.run_id)
    assert report.stopped and slurm2.run("squeue", "-h", "-o", "%T", check=False).strip() in ("", "CANCELLED")
    final = manager.view(launched.run_id)
    assert final.state == "failed" and final.failure is not None and final.failure.message == failed.failure.message
    assert dataclasses.asdict(final.failure)["kind"] == "exited"
