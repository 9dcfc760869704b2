"""Presentation rows: what each pane shows, as frozen values built from the engine's state.

The panes draw these and nothing else, so a pane can be tested (and snapshotted) by feeding fixed rows, and the
mapping from engine state to what a person sees is a pure function tested without a screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specmon.model.runs.runstate import LogPhase
from specmon.orchestration.runs.view import LogLine, RunView, node_prefix


@dataclass(frozen=True)
class NodeRow:
    """One node of a multi-node run, as its card's compact line shows it."""

    rank: int
    host: str
    state: str
    stalled: bool = False
    phase: LogPhase | None = None
    shards_done: int | None = None
    shards_total: int | None = None
    link: str | None = None              # only when the node's SSH link is down: "reconnecting in 3s", ...


@dataclass(frozen=True)
class ServerRow:
    """One profile in the Servers pane, with its current run if any."""

    profile: str
    host: str = "local"
    run_id: str | None = None
    state: str = "idle"                 # engine run state, or "idle" when the profile has no run
    stalled: bool = False
    phase: LogPhase | None = None       # the launch log's phase (the card names it while the run loads)
    shards_done: int | None = None
    shards_total: int | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    past_load_s: float | None = None
    kv_cache_tokens: int | None = None
    mem_fraction_static: float | None = None
    spec_algorithm: str | None = None
    spec_steps: int | None = None
    spec_accept_len: float | None = None
    last_activity_ago_s: float | None = None
    failure: str | None = None
    still_running: bool = False         # failed by its log while its process runs on (holding its port and GPUs)
    job: str | None = None              # a Slurm run: its job's state ("PENDING (Resources)", "RUNNING on n1")
    pid: int | None = None
    port: int | None = None
    link: str | None = None             # a remote run's SSH link: "connected", "reconnecting in 3s", "auth failed"
    link_ok: bool = True
    nodes: tuple[NodeRow, ...] = ()      # a multi-node run: one per node, rank order


@dataclass(frozen=True)
class CrossoverMark:
    """Where two sweeps' throughput (or goodput) curves cross, and which series leads on each side (for the Sweep
    pane). `concurrency` is the load there: a request rate when `mode` is "rate"."""

    concurrency: float
    ahead_below: str
    ahead_above: str
    mode: str = "concurrency"


@dataclass(frozen=True)
class LogEntry:
    """One log line as the Log pane shows it; `kind` picks the highlight.

    kinds: "" (plain), "shard", "kv", "ready", "error", "marker" (lines skipped / link dropped).
    """

    text: str
    kind: str = ""


def row_from_view(view: RunView, now: float) -> ServerRow:
    """What the Servers pane shows of a run. `now` is epoch seconds, the clock RunView's times use."""
    rs = view.run_state
    last = rs.last_activity if rs is not None else None
    # How long the load took or has taken: until ready; for a run that ended before ready, until its last log line.
    end = view.ready_at if view.ready_at is not None else (now if view.active else (last or view.started_at))
    elapsed = view.load_seconds if view.load_seconds is not None else \
        None if view.queued else max(0.0, end - view.started_at)   # a queued Slurm job has loaded nothing yet
    failure = None
    if view.failure is not None:
        failure = view.failure.text
    elif view.stalled and view.stall_reason:
        failure = view.stall_reason
    return ServerRow(
        profile=view.profile,
        host=view.host,
        run_id=view.run_id,
        state=view.state,
        stalled=view.stalled,
        phase=view.phase,
        shards_done=view.shards[0] if view.shards else None,
        shards_total=view.shards[1] if view.shards else None,
        eta_s=view.eta_s,
        elapsed_s=elapsed,
        past_load_s=view.past_load_s,
        kv_cache_tokens=view.kv_cache_tokens,
        mem_fraction_static=rs.mem_fraction_static if rs is not None else None,
        spec_algorithm=rs.speculative_algorithm if rs is not None else None,
        spec_steps=rs.speculative_num_steps if rs is not None else None,
        spec_accept_len=rs.spec_accept_len if rs is not None else None,
        last_activity_ago_s=None if last is None else max(0.0, now - last),
        failure=failure,
        still_running=view.still_running,
        job=view.job if view.active else None,
        pid=view.pid,
        port=view.port,
        link=None if view.link is None else view.link.label(now),
        link_ok=view.link is None or view.link.up,
        nodes=tuple(
            NodeRow(rank=node.node_rank or 0, host=node.host, state=node.state, stalled=node.stalled,
                    phase=node.phase,
                    shards_done=node.shards[0] if node.shards else None,
                    shards_total=node.shards[1] if node.shards else None,
                    link=None if node.link is None or node.link.up else node.link.label(now))
            for node in view.nodes),
    )


# An access-log line of a successful /health or /metrics poll (specmon's own, about once a second per run).
_POLL_OK = re.compile(r'"GET /(?:health(?:_generate)?|metrics)[ ?/][^"]*" 200\b')


def entry_from_line(line: LogLine) -> LogEntry | None:
    """A log line as the Log pane shows it: specmon's notes become markers, lines the parser recognised get its
    highlight.

    None for successful /health and /metrics polls: specmon's own probes would scroll the log (and repaint the
    terminal) every second while nothing happens; failed polls are kept, they are news.
    """
    if line.kind != "line":
        return LogEntry(node_prefix(line.node) + line.text, "marker")
    text = line.clean
    if "GET /" in text and _POLL_OK.search(text):
        return None
    return LogEntry(node_prefix(line.node) + text, line.highlight)
