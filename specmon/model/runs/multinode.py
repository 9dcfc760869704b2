"""Multi-node runs as pure rules: each node's command line, and the one overall state of the nodes together.

A multi-node profile (`hosts = ["gpu1", "gpu2"]`) runs the same command on every host; host i is node rank i,
and rank 0 is the one that serves HTTP. Two rules live here so every front end agrees on them:

    node_command(argv, server, NodePlacement) -> argv for one node
        Substitutes the placeholders {node_rank} {nnodes} {master_addr} {master_port} (plain text replacement:
        JSON such as --speculative-config '{"method": "mtp"}' is left alone). For server = "sglang" it appends
        `--nnodes N --node-rank R --dist-init-addr ADDR:PORT`, unless the command names one of those flags
        itself: then the command owns them (and must say --node-rank {node_rank}, see `dist_flag_problem`).

    overall(nodes) -> Overall(state, node)
        The one status of the nodes together, by the multi-node rule of model.runs.runstatus (where every run
        verdict is described); `node` names the node a failure came from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specmon.model.runs.runstatus import BROKEN, STARTING, RunStatus

PLACEHOLDERS = ("{node_rank}", "{nnodes}", "{master_addr}", "{master_port}")
SGLANG_DIST_FLAGS = ("--nnodes", "--node-rank", "--dist-init-addr")
DEFAULT_MASTER_PORT = 29500   # torch.distributed's conventional MASTER_PORT


@dataclass(frozen=True)
class NodePlacement:
    """Where one node sits in its multi-node run."""

    rank: int
    nnodes: int
    master_addr: str
    master_port: int

    @property
    def dist_init_addr(self) -> str:
        """`ADDR:PORT` as SGLang's --dist-init-addr wants it (an IPv6 address in brackets)."""
        addr = f"[{self.master_addr}]" if ":" in self.master_addr else self.master_addr
        return f"{addr}:{self.master_port}"


def _names_flag(arg: str, flag: str) -> bool:
    return arg == flag or arg.startswith(flag + "=")


def dist_flags_in(argv: Sequence[str]) -> tuple[str, ...]:
    """Which of SGLang's multi-node flags the command already names (`--flag V` or `--flag=V`)."""
    return tuple(flag for flag in SGLANG_DIST_FLAGS if any(_names_flag(arg, flag) for arg in argv))


def dist_flag_problem(argv: Sequence[str]) -> str | None:
    """Why an SGLang multi-node command that names its own multi-node flags would start every node alike.

    A command that names any of the flags gets none added, so it must name all three, and its node rank must
    differ per node (`--node-rank {node_rank}`). None when the command is fine.
    """
    named = dist_flags_in(argv)
    if not named:
        return None
    missing = [flag for flag in SGLANG_DIST_FLAGS if flag not in named]
    if missing:
        return (f"names {', '.join(named)} but not {', '.join(missing)}: name all three (with the placeholders "
                "{node_rank} {nnodes} {master_addr}:{master_port}) or none, and specmon adds them")
    if not any("{node_rank}" in arg for arg in argv):
        return "gives --node-rank without {node_rank}: every node would start as the same rank"
    return None


def node_command(argv: Sequence[str], server: str, node: NodePlacement) -> tuple[str, ...]:
    """The argv node `node.rank` runs (see the module docstring). Each item stays one argument."""
    values = {"{node_rank}": str(node.rank), "{nnodes}": str(node.nnodes),
              "{master_addr}": node.master_addr, "{master_port}": str(node.master_port)}
    out = []
    for arg in argv:
        for name, value in values.items():
            arg = arg.replace(name, value)
        out.append(arg)
    if server == "sglang" and not dist_flags_in(argv):
        out += ["--nnodes", str(node.nnodes), "--node-rank", str(node.rank), "--dist-init-addr", node.dist_init_addr]
    return tuple(out)


@dataclass(frozen=True)
class NodeState:
    """What the overall rule needs of one node: its rank, its run state and whether it is stalled."""

    rank: int
    state: RunStatus
    stalled: bool = False


@dataclass(frozen=True)
class Overall:
    """The state of a multi-node run; `node` is the rank that decided a failure (or a stall), else None."""

    state: RunStatus
    node: int | None = None
    stalled_node: int | None = None


def overall(nodes: Sequence[NodeState]) -> Overall:
    """The one state of a multi-node run from its nodes' states (the rule: model.runs.runstatus)."""
    by_rank = sorted(nodes, key=lambda n: n.rank)
    if not by_rank:
        return Overall(RunStatus.LAUNCHING)
    bad = [n for n in by_rank if n.state in BROKEN]
    if bad:
        return Overall(RunStatus.FAILED, bad[0].rank)
    if any(n.state == RunStatus.STOPPING for n in by_rank):
        return Overall(RunStatus.STOPPING)
    if all(n.state == RunStatus.STOPPED for n in by_rank):
        return Overall(RunStatus.STOPPED)
    if any(n.state == RunStatus.STOPPED for n in by_rank):   # one node stopped on its own account: the rest are going
        return Overall(RunStatus.STOPPING)
    stalled = next((n.rank for n in by_rank if n.stalled), None)
    rank0 = by_rank[0]
    if rank0.state == RunStatus.READY:
        return Overall(RunStatus.READY)
    return Overall(rank0.state, stalled_node=stalled)


def worker_ready(rank0_state: RunStatus, worker_state: RunStatus) -> bool:
    """Whether a worker node (rank >= 1) counts as ready: rank 0 is ready and the worker still loads.

    Worker nodes print no ready line (only rank 0 runs the HTTP server), so their readiness is rank 0's.
    """
    return rank0_state == RunStatus.READY and worker_state in STARTING
