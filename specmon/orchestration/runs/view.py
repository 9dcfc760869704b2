"""What front ends see of a run: RunView (a frozen snapshot), LogLine, StopReport, and the status JSON shape."""

from __future__ import annotations

from dataclasses import dataclass

from specmon.model.logs.clean import printable, strip_ansi
from specmon.model.runs import runstatus
from specmon.model.runs.failure import Failure
from specmon.model.runs.record import host_url, iso_utc, launched_by
from specmon.model.runs.runstate import LogPhase, RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.sources.transport import LinkState


@dataclass(frozen=True)
class RunView:
    """A snapshot of one run: its `state`, and `stalled`, a warning flag on top of it."""

    run_id: str
    profile: str
    host: str
    state: RunStatus
    stalled: bool
    pid: int | None
    port: int
    url: str
    started_at: float                     # epoch seconds
    ready_at: float | None
    load_seconds: float | None
    shards: tuple[int, int] | None        # (done, total)
    kv_cache_tokens: int | None
    exit_code: int | None
    failure: Failure | None
    eta_s: float | None
    phase: LogPhase | None                # the log's phase (None: no log read in this process)
    stall_reason: str | None
    log_path: str
    run_dir: str
    run_state: RunState | None = None     # the parser's state of the log (None: no log read by this process)
    probe_error: str | None = None        # why a run whose log says ready is not called ready yet
    health: str | None = None             # last /health answer of a watched run: "200", "503", "connection refused"
    link: LinkState | None = None         # the SSH link of a watched remote run (None: local, or not watched)
    node_rank: int | None = None          # a node of a multi-node run: its rank
    nodes: tuple[RunView, ...] = ()       # a multi-node run: its nodes' views in rank order (rank 0 first)
    config: str | None = None             # the profiles file that launched the run (None: unknown, an old run)
    still_running: bool = False           # failed by its log's verdict while its process still runs (checked now)
    job: str | None = None                # a Slurm run: its job's state, "PENDING (Resources)", "RUNNING on n1, ..."
    slurm_job: str | None = None          # a Slurm run: its job's id
    server_addr: str | None = None        # a Slurm run: its node's address as the host reaches it (None: loopback)
    slurm_node: str | None = None         # a Slurm run: its node's name (its node rank's), once the job runs
    past_load_s: float | None = None      # what this load is compared with (`typical_load_s` of the profile's
                                          # past loads, else its expected_load_s); None: unknown, or not watched

    @property
    def active(self) -> bool:
        """The server process may still be running."""
        return self.state in runstatus.ACTIVE

    @property
    def url_pending(self) -> bool:
        """Whether the server's address is not known yet: a Slurm run whose job has no node yet (queued), its `url`
        only the port it will listen on (a profile's own `url` is known from the start)."""
        return self.slurm_job is not None and self.server_addr is None and self.url == host_url(self.port)

    @property
    def queued(self) -> bool:
        """A Slurm run whose job has not started running yet (its run stays `launching` until then): no load time,
        no ETA, no elapsed time yet."""
        return self.slurm_job is not None and self.state == RunStatus.LAUNCHING

    def belongs_to(self, config: str) -> bool:
        """Whether the profiles file `config` launched this run (the rule of `RunRecord.belongs_to`)."""
        return launched_by(self.config, config)

    def to_json(self) -> dict[str, object]:
        """The `specmon status --json` object."""
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "host": self.host,
            "state": self.state,
            "pid": self.pid,
            "port": self.port,
            "url": None if self.url_pending else self.url,   # null: not known yet (a queued Slurm job's)
            "started_at": iso_utc(self.started_at),
            "ready_at": iso_utc(self.ready_at),
            "load_seconds": None if self.load_seconds is None else round(self.load_seconds, 3),
            "shards": None if self.shards is None else {"done": self.shards[0], "total": self.shards[1]},
            "kv_cache_tokens": self.kv_cache_tokens,
            "exit_code": self.exit_code,
            "failure": None if self.failure is None else {"kind": self.failure.kind, "message": self.failure.message},
            **({"node_rank": self.node_rank} if self.node_rank is not None else {}),
            **({"nodes": [node.to_json() for node in self.nodes]} if self.nodes else {}),
            "config": self.config,
            "still_running": self.still_running,
            **({"job": self.job} if self.job is not None else {}),
            **({"slurm_job": self.slurm_job} if self.slurm_job is not None else {}),
        }


def unreadable_json(run_id: str, error: str) -> dict[str, object]:
    """The `specmon status --json` object of a run whose record cannot be read: the keys of `RunView.to_json`
    (taken from it, so the two never drift apart), null, with state "unreadable" and the reason in "error"."""
    blank = RunView(run_id=run_id, profile="", host="", state=RunStatus.LAUNCHING, stalled=False, pid=None, port=0, url="",
                    started_at=0.0, ready_at=None, load_seconds=None, shards=None, kv_cache_tokens=None,
                    exit_code=None, failure=None, eta_s=None, phase=None, stall_reason=None, log_path="", run_dir="")
    return {**dict.fromkeys(blank.to_json()), "run_id": run_id, "state": "unreadable", "error": error}


def node_prefix(node: int | None) -> str:
    """What starts a shown log line of a multi-node run's node ("" for a single-node run)."""
    return "" if node is None else f"[node {node}] "


@dataclass(frozen=True)
class LogLine:
    """One log line for a reader. `kind` "line" carries server output ending at byte `end`; kind "note" is
    specmon's own remark (skipped bytes, link lost, log replaced). `highlight` is the log parser's verdict on
    the line ("ready", "error", "shard", "kv"; "" for a line that carried no event), see events.highlights."""

    text: str
    end: int
    kind: str = "line"
    node: int | None = None   # in a multi-node run's log: the node rank whose log holds the line
    highlight: str = ""      # the log parser's verdict on the line: ready, error, shard, kv (events.highlights)

    @property
    def clean(self) -> str:
        """The line as a terminal showed it last (only the last `\\r`-redrawn part), colour codes and every other
        control sequence removed, so a log can never act on the user's terminal."""
        parts = [p for p in self.text.split("\r") if p.strip()]
        return printable(strip_ansi(parts[-1] if parts else ""))


@dataclass(frozen=True)
class StopReport:
    """What `stop` did and what (if anything) still blocks the port or the GPUs."""

    run_id: str
    profile: str
    stopped: bool                  # no process of the run is left
    killed: bool                   # SIGKILL was needed
    pids: tuple[int, ...]          # every process of the run that was signalled
    blockers: tuple[str, ...]      # e.g. "port 30000 still has a listener", "pid 123 still holds GPU memory"
    seconds: float
    exit_code: int | None
    nodes: tuple[StopReport, ...] = ()   # a multi-node run: each node's report, in rank order
    job: str | None = None               # a Slurm run: the job id that was cancelled (no process was signalled)
    already: RunStatus | None = None     # the run had ended before (this state) and no process of it was left

    @property
    def clean(self) -> bool:
        return self.stopped and not self.blockers
