"""Multi-node runs on the lifecycle engine, with two "nodes" on this machine.

Each node is a host name that the test's transport factory maps to a LocalTransport, so both nodes run here as
real `specmon sim` processes (detached, tailed, probed, stopped); rank 1 is a worker node that, like SGLang's,
serves no HTTP. The same runs over SSH are in test_multinode_ssh.py.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from lifecycle_support import Views, config_of, marked_pids, port_listening, stop_everything

from specmon.errors import UserError
from specmon.model.config import Profile
from specmon.model.runs.runstate import LogPhase
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings
from specmon.orchestration.runs.view import RunView
from specmon.sources.local import LocalTransport

HOSTS = ("node-a", "node-b")


def two_node_profile(port: int, master_port: int, *extra: str, name: str = "mn", server: str = "sglang",
                     shards: int = 4, load_s: float = 4, stall_timeout_s: float = 60.0) -> Profile:
    command = (sys.executable, "-m", "specmon.sim", "--port", str(port), "--time-scale", "0.05",
               "--shards", str(shards), "--load-seconds", str(load_s), *extra)
    return Profile(name=name, command=command, host=HOSTS[0], hosts=HOSTS, port=port, server=server,
                   master_addr="127.0.0.1", master_port=master_port, stall_timeout_s=stall_timeout_s)


def args_dump(log: Path) -> dict[str, object]:
    """The sim's `server_args={...}` line, parsed."""
    for line in log.read_text().splitlines():
        if "server_args=" in line:
            return dict(ast.literal_eval(line.split("server_args=", 1)[1]))
    raise AssertionError(f"no args dump in {log}")


@pytest.fixture
async def engine() -> AsyncIterator[Callable[..., tuple[RunManager, Views]]]:
    made: list[RunManager] = []

    def make(*profiles: Profile) -> tuple[RunManager, Views]:
        manager = RunManager(config_of(*profiles), transport_factory=LocalTransport,
                             stop_timings=StopTimings(grace_s=5, port_wait_s=10))
        made.append(manager)
        return manager, Views(manager)

    yield make
    await stop_everything(made)


@pytest.mark.slow
async def test_two_nodes_launch_with_their_ranks_become_ready_with_rank0_and_stop_together(
        free_port_factory, engine) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    profile = two_node_profile(port, master_port, "--model", "m-rank{node_rank}-of-{nnodes}")
    manager, views = engine(profile)
    launched = await manager.launch("mn")
    assert [n.node_rank for n in launched.nodes] == [0, 1]
    assert [n.host for n in launched.nodes] == list(HOSTS)
    assert all(n.pid for n in launched.nodes) and len({n.pid for n in launched.nodes}) == 2

    ready = await views.until(lambda v: v.run_id == launched.run_id and v.state != "loading")
    assert ready.state == "ready", ready
    assert ready.url == f"http://127.0.0.1:{port}" and ready.shards == (4, 4)
    # The worker node printed no ready line; it counts as ready because rank 0 is.
    assert [n.state for n in ready.nodes] == ["ready", "ready"]
    assert ready.nodes[1].shards is None   # SGLang prints the shard bar on global rank 0 only

    # Each node got its rank: SGLang's flags filled in, and the {placeholders} substituted per node.
    for rank, node in enumerate(ready.nodes):
        dump = args_dump(Path(node.log_path))
        assert dump["nnodes"] == 2 and dump["node_rank"] == rank
        assert dump["dist_init_addr"] == f"127.0.0.1:{master_port}"
        assert dump["model_path"] == f"m-rank{rank}-of-2"

    # Every node's log, each line tagged with its node.
    lines: dict[int | None, list[str]] = {0: [], 1: []}

    async def read() -> None:
        async for line in manager.log_lines(launched.run_id, commit=False):
            lines[line.node].append(line.clean)

    reader = asyncio.create_task(read())
    deadline = time.monotonic() + 20
    while not (any("node_rank': 1" in t for t in lines[1]) and any("fired up" in t for t in lines[0])):
        assert time.monotonic() < deadline, lines
        await asyncio.sleep(0.05)
    assert not any("fired up" in t for t in lines[1])

    report = await manager.stop("mn")
    assert report.clean and report.stopped and len(report.nodes) == 2
    assert all(n.stopped for n in report.nodes)
    await asyncio.wait_for(reader, 10)   # the merged log ends once every node's log has ended
    for node in ready.nodes:
        assert marked_pids(node.run_id) == []
    assert not port_listening(port)
    final = manager.view(launched.run_id)
    assert final.state == "stopped" and [n.state for n in final.nodes] == ["stopped", "stopped"]
    assert manager.index.store.load(launched.run_id).state == "stopped"


@pytest.mark.slow
async def test_a_failing_worker_node_fails_the_run_naming_that_node(free_port_factory, engine) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    # Rank 1 crashes at its first shard; rank 0's load takes 5 s more (the sim's rank 0, unlike SGLang's, would
    # get ready without its peer, so it must not win the race).
    profile = two_node_profile(port, master_port, "--crash-at-shard", "1", "--fault-rank", "1", shards=8,
                               load_s=100)
    manager, views = engine(profile)
    launched = await manager.launch("mn")
    failed = await views.until(lambda v: v.run_id == launched.run_id and v.state not in ("launching", "loading"))
    assert failed.state == "failed", failed
    assert failed.failure is not None and failed.failure.message.startswith("node 1 (node-b): ")
    assert failed.nodes[1].state == "failed" and failed.nodes[0].state in ("loading", "ready")
    # A node failing never stops the others by itself; `stop` stops them all and keeps the reason.
    assert Path(f"/proc/{failed.nodes[0].pid}").exists()
    report = await manager.stop(launched.run_id)
    assert report.stopped and marked_pids(failed.nodes[0].run_id) == []
    final = manager.view(launched.run_id)
    assert final.state == "failed" and final.failure and final.failure.message.startswith("node 1 (node-b): ")
    # A later process (no watcher) sees the same verdict from the records.
    other = RunManager(manager.config, transport_factory=LocalTransport)
    try:
        [again] = await other.refresh()
        assert again.run_id == launched.run_id and again.state == "failed"
        assert again.failure and again.failure.message == final.failure.message
        assert [n.node_rank for n in again.nodes] == [0, 1]
    finally:
        await other.close()


@pytest.mark.slow
async def test_status_of_an_unwatched_multinode_run_marks_the_worker_ready(free_port_factory, engine) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    manager, _ = engine(two_node_profile(port, master_port))
    launched = await manager.launch("mn", watch=False)
    assert launched.state in ("launching", "loading") and len(launched.nodes) == 2
    deadline = time.monotonic() + 60
    while True:
        [view] = await manager.refresh()
        if view.state != "loading" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.3)
    assert view.state == "ready" and [n.state for n in view.nodes] == ["ready", "ready"]
    assert view.to_json()["nodes"][1]["node_rank"] == 1
    report = await manager.stop("mn")
    assert report.clean


@pytest.mark.slow
async def test_a_busy_master_port_refuses_the_launch_before_anything_starts(free_port_factory, engine) -> None:
    port = free_port_factory()
    busy = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    master_port = busy.sockets[0].getsockname()[1]
    try:
        manager, _ = engine(two_node_profile(port, master_port))
        with pytest.raises(UserError, match=rf"node-a: master_port {master_port} is already in use"):
            await manager.launch("mn")
        assert manager.index.store.all() == []
    finally:
        busy.close()
        await busy.wait_closed()


@pytest.mark.slow
async def test_two_racing_multinode_launches_of_one_profile_start_exactly_one(free_port_factory, engine) -> None:
    """Multi-node launches skipped the host launch lock that single-node launches take: two racing launches both
    passed their preflights and each started two nodes on the same ports. Now each node's host is locked, so one
    launch starts its nodes and the other is refused in one line. (Both "hosts" are this machine here, one lock
    directory under two names: the launch takes it once.)"""
    port, master_port = free_port_factory(), free_port_factory()
    profile = two_node_profile(port, master_port)
    first, _ = engine(profile)
    second, _ = engine(profile)   # another specmon: its own manager, the same hosts and state
    for attempt in range(2):
        results = await asyncio.gather(first.launch("mn", watch=False), second.launch("mn", watch=False),
                                       return_exceptions=True)
        won = [r for r in results if isinstance(r, RunView)]
        lost = [r for r in results if isinstance(r, BaseException)]
        assert len(won) == 1 and len(lost) == 1, f"attempt {attempt}: {results}"
        assert isinstance(lost[0], UserError) and "is still" in str(lost[0]), lost[0]
        groups = {r.group for r in first.index.store.all() if r.group is not None and not r.terminal}
        assert groups == {won[0].run_id}, f"attempt {attempt}: live node runs of {groups}"
        report = await first.stop(won[0].run_id, force=True)
        assert report.stopped, report


@pytest.mark.slow
async def test_the_master_address_defaults_to_rank0s_address_towards_rank1(free_port_factory, engine) -> None:
    port, master_port = free_port_factory(), free_port_factory()
    profile = dataclasses.replace(two_node_profile(port, master_port), master_addr=None)
    manager, views = engine(profile)
    launched = await manager.launch("mn")
    ready = await views.until(lambda v: v.run_id == launched.run_id and v.state != "loading")
    dump = args_dump(Path(ready.nodes[1].log_path))
    addr, _, dist_port = str(dump["dist_init_addr"]).rpartition(":")
    assert dist_port == str(master_port)
    # Both "nodes" are this machine: the address it sends from to reach itself is one of its own.
    own = (await LocalTransport().run("hostname -I")).out.split()
    assert addr in own and re.fullmatch(r"[0-9a-f.:\[\]]+", addr)
    await manager.stop("mn")


# ---- the pure rules (model/runs/multinode.py) ---------------------------------------------------------------------
def test_node_command_fills_in_sglang_flags_and_substitutes_placeholders_per_node() -> None:
    from specmon.model.runs.multinode import NodePlacement, node_command

    argv = ("python3", "-m", "sglang.launch_server", "--served-model-name", "r{node_rank}/{nnodes}",
            "--speculative-config", '{"method": "mtp"}')
    node = NodePlacement(rank=1, nnodes=2, master_addr="10.0.0.5", master_port=5000)
    assert node_command(argv, "sglang", node) == (
        "python3", "-m", "sglang.launch_server", "--served-model-name", "r1/2", "--speculative-config",
        '{"method": "mtp"}', "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "10.0.0.5:5000")
    # A command that names the flags itself gets none added; vLLM and others only get the placeholders.
    own = ("x", "--nnodes", "{nnodes}", "--node-rank={node_rank}", "--dist-init-addr", "{master_addr}:{master_port}")
    assert node_command(own, "sglang", node) == ("x", "--nnodes", "2", "--node-rank=1", "--dist-init-addr",
                                                 "10.0.0.5:5000")
    assert node_command(("vllm", "serve", "--node-rank", "{node_rank}"), "vllm", node) == (
        "vllm", "serve", "--node-rank", "1")
    v6 = NodePlacement(rank=0, nnodes=2, master_addr="fd00::2", master_port=5000)
    assert node_command(("x",), "sglang", v6)[-1] == "[fd00::2]:5000"


@pytest.mark.parametrize(("states", "expected"), [
    (("loading", "loading"), ("loading", None)),
    (("ready", "loading"), ("ready", None)),
    (("loading", "ready"), ("loading", None)),           # only rank 0's readiness counts
    (("loading", "failed"), ("failed", 1)),
    (("ready", "exited"), ("failed", 1)),                # a worker dying after ready breaks the run
    (("lost", "failed"), ("failed", 0)),
    (("stopping", "ready"), ("stopping", None)),
    (("stopped", "stopped"), ("stopped", None)),
    (("stopped", "failed"), ("failed", 1)),              # a stop after a failure keeps the reason
])
def test_overall_state_of_two_nodes(states: tuple[str, str], expected: tuple[str, int | None]) -> None:
    from specmon.model.runs.multinode import NodeState, overall

    verdict = overall([NodeState(rank, state) for rank, state in enumerate(states)])
    assert (verdict.state, verdict.node) == expected


def test_a_stalled_worker_node_is_named() -> None:
    from specmon.model.runs.multinode import NodeState, overall

    verdict = overall([NodeState(0, "loading"), NodeState(1, "loading", stalled=True)])
    assert verdict == overall([NodeState(1, "loading", stalled=True), NodeState(0, "loading")])
    assert verdict.state == "loading" and verdict.stalled_node == 1


@pytest.mark.parametrize(("body", "message"), [
    ('host = "gpu1"\nhosts = ["gpu1", "gpu2"]', ':3: profiles.mn.hosts: set host (one node) or hosts'),
    ('hosts = ["gpu1"]', ":2: profiles.mn.hosts: a multi-node profile needs at least two hosts"),
    ('hosts = ["gpu1", "gpu1"]', ":2: profiles.mn.hosts: each host may appear once"),
    ('hosts = ["gpu1", "-oProxyCommand=x"]', ":2: profiles.mn.hosts: must be \"local\", an ssh alias"),
    ('hosts = "gpu1,gpu2"', ":2: profiles.mn.hosts: must be an array of host names"),
    ('master_port = 5000', ":2: profiles.mn.master_port: only for multi-node profiles"),
    ('hosts = ["a", "b"]\nmaster_port = 0', ":3: profiles.mn.master_port: must be an integer in 1..65535"),
    ('hosts = ["a", "b"]\nmaster_addr = "a;b"', ":3: profiles.mn.master_addr: must be a host name or IP"),
])
def test_bad_multinode_keys_name_file_and_line(tmp_path: Path, body: str, message: str) -> None:
    from specmon.model.config import load_config

    path = tmp_path / "profiles.toml"
    path.write_text(f"[profiles.mn]\n{body}\ncommand = \"python3 -m sglang.launch_server\"\n")
    with pytest.raises(UserError) as err:
        load_config(path)
    assert str(err.value).startswith(f"{path}{message}"), err.value


def test_an_sglang_command_with_its_own_node_rank_must_vary_it(tmp_path: Path) -> None:
    from specmon.model.config import load_config

    path = tmp_path / "profiles.toml"
    path.write_text('[profiles.mn]\nhosts = ["a", "b"]\n'
                    'command = "python3 -m sglang.launch_server --nnodes 2 --node-rank 0 --dist-init-addr a:5000"\n')
    with pytest.raises(UserError, match=r":3: profiles\.mn\.command: gives --node-rank without \{node_rank\}"):
        load_config(path)
    path.write_text('[profiles.mn]\nhosts = ["a", "b"]\n'
                    'command = "python3 -m sglang.launch_server --node-rank {node_rank}"\n')
    with pytest.raises(UserError, match=r"names --node-rank but not --nnodes, --dist-init-addr"):
        load_config(path)
    path.write_text('[profiles.mn]\nhosts = ["a", "b"]\nmaster_addr = "10.1.2.3"\nmaster_port = 5000\n'
                    'command = "python3 -m sglang.launch_server"\n')
    profile = load_config(path).profiles["mn"]
    assert profile.nodes == ("a", "b") and profile.host == "a" and profile.master_port == 5000


# ---- front ends ---------------------------------------------------------------------------------------------
@pytest.mark.slow
async def test_servers_card_shows_a_line_per_node(tmp_path: Path) -> None:
    from ui_states import ROWS, fed_app

    from specmon.ui.rows import NodeRow, ServerRow
    from specmon.ui.servers import RunCard

    app = fed_app(tmp_path)
    row = ServerRow(profile="demo-eagle3", host="gpu1", run_id="r-3", state="failed", phase=LogPhase.FAILED,
                    shards_done=5, shards_total=8, failure="exception: node 1 (gpu2): RuntimeError: boom",
                    nodes=(NodeRow(0, "gpu1", "loading", phase=LogPhase.LOADING_WEIGHTS, shards_done=5, shards_total=8),
                           NodeRow(1, "gpu2", "failed", phase=LogPhase.FAILED)))
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        app.update_rows([ROWS[0], row])
        app.flush()
        await pilot.pause()
        card = next(c for c in app.query(RunCard) if c.profile == "demo-eagle3")
        body = str(card.render())
        assert "node 0 gpu1 LOADING WEIGHTS 5/8" in body
        assert "node 1 gpu2 FAILED" in body
        assert "node 1 (gpu2): RuntimeError: boom" in body
