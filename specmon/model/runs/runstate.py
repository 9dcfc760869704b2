"""Run state: a pure reducer over launch-log events, plus ETA and a parser+reducer convenience.

    state = reduce(state, event, now)        # pure; `now` is the caller's monotonic clock
    eta_seconds(state, now, past_load_seconds=(...))
    watch = LogWatch(started_at=t0); watch.feed(chunk, now); watch.state

Phases, in launch order: launching -> loading_weights -> allocating_kv -> capturing_graphs -> warming_up
-> ready, or failed. The progress phase only moves forward: ranks interleave their lines (TP7 may print
`Load weight end` after TP0 allocated its KV cache), and a draft model loads after the target's KV
cache; going backwards would make the display flicker without telling the user anything.

Failures (`events.LoggedError`, the parser's finding at one line): the first fatal one wins, except that a provisional one (a
`Scheduler hit an exception: Traceback` header) is replaced by the exception line that follows it. A
non-fatal failure (a plain traceback) sets phase "failed" only until the launch shows progress again,
and is ignored once the server is ready (servers log tracebacks of single requests and keep serving).

Ready: SGLang's `The server is fired up and ready to roll!`; for vLLM (or an unknown server) uvicorn's
`Application startup complete.` / `Uvicorn running on`; for either server, evidence of serving: decode
or engine stats, or a request to an OpenAI route (`/v1/...`; for vLLM any access line, since vLLM does
not answer HTTP before it is ready). SGLang's own warm-up requests (`/generate`, `/model_info`) and
prefill lines come before its ready line and do not count. `ready_evidence` says which one was seen.

Load time: `ready_at - started_at` when the caller gave `started_at` (its clock at launch); otherwise
the log's own timestamps, first timestamped line to the ready line (the `log_elapsed` of the event), and
only when the log holds the launch itself (an args dump), never for an excerpt or for serving evidence.
"""

from __future__ import annotations

import enum
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specmon.model.logs import events as ev
from specmon.model.logs.logparse import LogParser
from specmon.model.logs.signals import watch_reads_only


class LogPhase(str, enum.Enum):
    """Where the launch log says the server is (see the module docstring). A `str` enum: a member equals its word
    and JSON writes it as one. `ready` is the log's word only: the run is READY once a completion is answered too."""

    LAUNCHING = "launching"
    LOADING_WEIGHTS = "loading_weights"
    ALLOCATING_KV = "allocating_kv"
    CAPTURING_GRAPHS = "capturing_graphs"
    WARMING_UP = "warming_up"
    READY = "ready"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        """As people read it: `loading weights`."""
        return self.value.replace("_", " ")


PHASES = tuple(LogPhase)
_PROGRESS_ORDER = {p: i for i, p in enumerate(PHASES[:-1])}
SHARD_RATE_ALPHA = 0.3  # weight of the newest sample in the smoothed shard rate
LAST_LINES = 20


@dataclass(frozen=True)
class RunState:
    """Everything the log told so far about one server launch. Times are the caller's monotonic clock."""

    server: str | None = None
    phase: LogPhase = LogPhase.LAUNCHING
    shards_done: int | None = None
    shards_total: int | None = None
    shard_rate: float | None = None  # smoothed shards/s
    kv_cache_tokens: int | None = None
    mem_fraction_static: float | None = None
    tp: int | None = None
    model_path: str | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    ready: bool = False
    failure: ev.LoggedError | None = None   # the error the log shows (see Failures above); a run's failure: verdicts.failure_of
    started_at: float | None = None
    last_activity: float | None = None
    ready_at: float | None = None
    load_seconds: float | None = None
    spec_accept_len: float | None = None
    spec_accept_rate: float | None = None
    gen_throughput: float | None = None
    running_reqs: int | None = None
    queue_reqs: int | None = None
    token_usage: float | None = None
    nccl_env: tuple[tuple[str, str], ...] = ()
    last_lines: tuple[str, ...] = ()  # last ~20 cleaned lines; frozen at a fatal failure (its context)
    # extras
    progress_phase: LogPhase = LogPhase.LAUNCHING  # furthest launch phase reached, whatever the failure state
    port: int | None = None
    kv_cache_dtype: str | None = None
    kv_cache_gb: float | None = None
    kv_cache_blocks: int | None = None
    weights_gb: float | None = None
    graphs_done: int | None = None
    graphs_total: int | None = None
    ready_evidence: str | None = None  # "ready_line" | "startup_complete" | "serving"
    shards_seen_at: float | None = None  # `now` of the last shard update (for a rate when tqdm has none)


StepCallback = Callable[["RunState", "RunState"], None]


def _evolve(state: RunState, **changes: Any) -> RunState:
    """`dataclasses.replace` without its per-field overhead (the reducer runs once per event, and a busy
    serving log has an event per decode line). Only reduce() and LogWatch call it, with field names."""
    if not changes:
        return state
    new = object.__new__(RunState)
    new.__dict__.update(state.__dict__)
    new.__dict__.update(changes)
    return new


def _advance(state: RunState, phase: LogPhase) -> dict[str, Any]:
    """Changes that move the progress phase forward to `phase` (never back) and drop a non-fatal failure."""
    changes: dict[str, Any] = {}
    progress = state.progress_phase
    if _PROGRESS_ORDER[phase] > _PROGRESS_ORDER[progress]:
        progress = phase
        changes["progress_phase"] = phase
    failure = state.failure
    if failure is not None and not failure.fatal:
        failure = None
        changes["failure"] = None
    if failure is None and state.phase != progress:
        changes["phase"] = progress
    return changes


def _ready(state: RunState, now: float, evidence: str, log_elapsed: float | None) -> RunState:
    if state.ready:
        return state
    changes = _advance(state, LogPhase.READY)
    load = None
    if state.started_at is not None:
        load = max(0.0, now - state.started_at)
    elif evidence != "serving":
        load = log_elapsed
    return _evolve(state, ready=True, ready_at=now, ready_evidence=evidence, load_seconds=load, **changes)


def _merge_failure(state: RunState, f: ev.LoggedError) -> RunState:
    cur = state.failure
    new = replace(f, context=())   # the context lives on in last_lines
    if cur is None:
        if state.ready and not f.fatal:
            return state
        take = True
    elif cur.provisional and not f.provisional:
        take = True
        if cur.fatal and not new.fatal:
            new = replace(new, fatal=True)  # the exception line of a fatal header's traceback
    else:
        take = not cur.fatal and f.fatal
    if not take:
        return state
    return _evolve(state, failure=new, phase=LogPhase.FAILED, last_lines=f.context[-LAST_LINES:] or state.last_lines)


def reduce(state: RunState, event: ev.Event, now: float) -> RunState:
    """The state after `event` (pure: no clock reads, no I/O; `now` only stamps times)."""
    # Exact-type tests, commonest events first: cheaper than isinstance, and mypy narrows on them.
    if type(event) is ev.ShardProgress:
        done, total = event.done, event.total
        cur_done, cur_total = state.shards_done, state.shards_total
        changes = _advance(state, LogPhase.LOADING_WEIGHTS)
        rate = event.rate_per_s
        if rate is None and cur_done is not None and state.shards_seen_at is not None and now > state.shards_seen_at \
                and cur_total == total and done > cur_done:
            rate = (done - cur_done) / (now - state.shards_seen_at)
        if rate is not None and rate > 0:
            old = state.shard_rate
            changes["shard_rate"] = rate if old is None else SHARD_RATE_ALPHA * rate + (1 - SHARD_RATE_ALPHA) * old
        # Keep the most advanced bar (highest fraction, then the larger one): interleaved DP engines print
        # several bars, and a drafter's small bar after the target's must not hide the target's count.
        if total > 0 and (cur_total is None or cur_done is None or done * cur_total > cur_done * total
                          or (done * cur_total == cur_done * total and total > cur_total)):
            changes["shards_done"], changes["shards_total"] = done, total
        changes["shards_seen_at"] = now
        return _evolve(state, **changes)
    if type(event) is ev.Line:
        return state
    if type(event) is ev.DecodeStats:
        changes = {}
        for name, value in (("running_reqs", event.running_reqs), ("queue_reqs", event.queue_reqs),
                            ("token_usage", event.token_usage), ("spec_accept_len", event.accept_len),
                            ("spec_accept_rate", event.accept_rate), ("gen_throughput", event.gen_throughput)):
            if value is not None:
                changes[name] = value
        state = _evolve(state, **changes)
        return _ready(state, now, "serving", None)
    if type(event) is ev.NcclEnv:
        env = dict(state.nccl_env)
        if env.get(event.name) == event.value:
            return state
        env[event.name] = event.value
        return _evolve(state, nccl_env=tuple(env.items()))
    if type(event) is ev.LoggedError:
        return _merge_failure(state, event)
    if type(event) is ev.ServerDetected:
        return state if state.server == event.server else _evolve(state, server=event.server)
    if type(event) is ev.LaunchArgs:
        changes = {}
        for name, arg in (("tp", event.tp), ("mem_fraction_static", event.mem_fraction_static),
                          ("speculative_algorithm", event.speculative_algorithm),
                          ("speculative_num_steps", event.speculative_num_steps),
                          ("model_path", event.model_path), ("port", event.port)):
            if arg is not None:
                changes[name] = arg
        return _evolve(state, **changes)
    if type(event) is ev.LoadStarted:
        return _evolve(state, **_advance(state, LogPhase.LOADING_WEIGHTS))
    if type(event) is ev.WeightsLoaded:
        changes = _advance(state, LogPhase.LOADING_WEIGHTS)
        if event.mem_gb is not None and state.weights_gb is None:
            changes["weights_gb"] = event.mem_gb
        return _evolve(state, **changes)
    if type(event) is ev.KVCache:
        changes = _advance(state, LogPhase.ALLOCATING_KV)
        for name, found in (("kv_cache_tokens", event.tokens), ("kv_cache_dtype", event.dtype),
                            ("kv_cache_gb", event.mem_gb), ("kv_cache_blocks", event.blocks)):
            if found is not None and getattr(state, name) is None:  # the first value is the pool's size
                changes[name] = found
        return _evolve(state, **changes)
    if type(event) is ev.GraphCapture:
        changes = _advance(state, LogPhase.CAPTURING_GRAPHS)
        if event.stage == "progress" and event.total:
            changes["graphs_done"], changes["graphs_total"] = event.done, event.total
        return _evolve(state, **changes)
    if type(event) is ev.WarmUp:
        return _evolve(state, **_advance(state, LogPhase.WARMING_UP))
    if type(event) is ev.HttpUp:
        if state.server == "sglang":
            return _evolve(state, **_advance(state, LogPhase.WARMING_UP))
        return _ready(state, now, "startup_complete", event.log_elapsed)
    if type(event) is ev.Ready:
        return _ready(state, now, "ready_line", event.log_elapsed)
    if type(event) is ev.HttpRequest:
        if state.ready:
            return state
        if state.server == "sglang":
            if event.path.startswith("/v1/") and 200 <= event.status < 300:
                return _ready(state, now, "serving", None)
            return _evolve(state, **_advance(state, LogPhase.WARMING_UP))
        return _ready(state, now, "serving", None)
    return state


def typical_load_s(past_load_seconds: Sequence[float]) -> float | None:
    """What a load is compared with (the ETA's history and the card's `elapsed/~typical`): the median of the
    past load durations; None without any."""
    past = [p for p in past_load_seconds if p is not None and p >= 0]
    return statistics.median(past) if past else None


def eta_seconds(state: RunState, now: float, past_load_seconds: Sequence[float] = ()) -> float | None:
    """Estimated seconds until the server is ready, or None when nothing supports a guess.

    Two estimates: from shards, `(total - done) / shard_rate` (only while weights load; it covers weight
    loading, the part of the launch the log can measure); from history, `typical_load_s(past_load_seconds) -
    (now - started_at)` (floored at 0; needs `started_at`). With both, they are blended by load progress:
    `f * shards + (1 - f) * history` with `f = done / total`, since tqdm's rate firms up as shards finish
    while history knows about the phases after loading. After weight loading only history can answer.
    """
    if state.ready or state.phase == LogPhase.FAILED:
        return 0.0 if state.ready else None
    history: float | None = None
    typical = typical_load_s(past_load_seconds)
    if typical is not None and state.started_at is not None:
        history = max(0.0, typical - (now - state.started_at))
    shards: float | None = None
    fraction = 0.0
    if (state.progress_phase in (LogPhase.LAUNCHING, LogPhase.LOADING_WEIGHTS) and state.shards_total and state.shard_rate
            and state.shards_done is not None):
        shards = max(0, state.shards_total - state.shards_done) / state.shard_rate
        fraction = state.shards_done / state.shards_total
    if shards is not None and history is not None:
        return fraction * shards + (1 - fraction) * history
    return shards if shards is not None else history


class LogWatch:
    """A parser and the reducer together: feed bytes with the time they arrived, read `state`.

    Used by the lifecycle engine, `specmon wait` and `specmon logscan`. `started_at` is the caller's
    monotonic time at launch (None when unknown, e.g. a finished file: load time then comes from the
    log's own timestamps).
    """

    def __init__(self, started_at: float | None = None, lines: bool = False) -> None:
        self.parser = LogParser(lines=lines)
        self.state = RunState(started_at=started_at)

    def feed(self, data: bytes, now: float, on_step: StepCallback | None = None) -> list[ev.Event]:
        """Parse `data` (arrived at `now`), update `state`, return the events.

        `on_step(before, after)`, when given, is called after each event with the states around it, so a
        front end can report every step even when one read holds several (`logscan --follow`).

        Data that is nothing but access lines of the reads that watch the server (`signals.watch_reads_only`: the
        serving view reads every ready server each second) is no sign of the server's life: it leaves
        `last_activity` and `last_lines` as they were, so the state does not change with every read. Once the
        server is ready they are not even parsed (`LogParser.pass_over`): they can change nothing then.
        """
        own = watch_reads_only(data)
        if own and self.state.ready and self.parser.pass_over(data.count(b"\n")):
            return []
        events = self.parser.feed(data)
        return self._apply(events, now, bool(data) and not own, on_step, keep_lines=own)

    def started(self, at: float) -> None:
        """The server started at `at` (a Slurm job left the queue): load time counts from then. What was read
        stays: a job's log can be read before its start is learned (the queue is asked once a tick)."""
        self.state = _evolve(self.state, started_at=at)

    def settle(self, now: float) -> list[ev.Event]:
        """The writer has paused: take the shard progress waiting after the last `\\r` (see LogParser.settle),
        so a live reader counts what a reader of the finished file counts. Settling reads no new line, so
        `last_lines` stay as the last feed left them (the lines since may be nothing but specmon's own reads)."""
        return self._apply(self.parser.settle(), now, False, None, keep_lines=True)

    def close(self, now: float, on_step: StepCallback | None = None) -> list[ev.Event]:
        """End of input: flush the trailing partial line, update `state`, return the events."""
        return self._apply(self.parser.close(), now, False, on_step)

    def _apply(self, events: list[ev.Event], now: float, activity: bool, on_step: StepCallback | None,
               keep_lines: bool = False) -> list[ev.Event]:
        state = self.state
        for event in events:
            before, state = state, reduce(state, event, now)
            if on_step is not None and state is not before:
                on_step(before, state)
        if state.server is None and self.parser.weak_server() is not None:
            state = _evolve(state, server=self.parser.weak_server())
        changes: dict[str, Any] = {}
        if activity:
            changes["last_activity"] = now
        if not keep_lines and (state.failure is None or not state.failure.fatal):
            # After a fatal failure last_lines keep the lines that led to it (set by the reducer).
            changes["last_lines"] = self.parser.tail()
        self.state = _evolve(state, **changes)
        return events


def summary(state: RunState) -> dict[str, Any]:
    """The state as the `specmon logscan --json` contract object (without "file"), plus extra fields."""
    failure = state.failure
    return {
        "server": state.server,
        "phase": state.phase,
        "shards": ({"done": state.shards_done, "total": state.shards_total}
                   if state.shards_total is not None else None),
        "kv_cache_tokens": state.kv_cache_tokens,
        "ready": state.ready,
        "failure": ({"kind": failure.kind, "line": failure.line_no, "message": failure.message}
                    if failure is not None else None),
        "spec_accept_len": state.spec_accept_len,
        "load_seconds": state.load_seconds,
        # extras
        "ready_evidence": state.ready_evidence,
        "progress_phase": state.progress_phase,
        "model_path": state.model_path,
        "tp": state.tp,
        "mem_fraction_static": state.mem_fraction_static,
        "speculative_algorithm": state.speculative_algorithm,
        "speculative_num_steps": state.speculative_num_steps,
        "port": state.port,
        "kv_cache_blocks": state.kv_cache_blocks,
        "kv_cache_gb": state.kv_cache_gb,
        "graphs": ({"done": state.graphs_done, "total": state.graphs_total}
                   if state.graphs_total is not None else None),
        "spec_accept_rate": state.spec_accept_rate,
        "gen_throughput": state.gen_throughput,
        "running_reqs": state.running_reqs,
        "queue_reqs": state.queue_reqs,
        "token_usage": state.token_usage,
        "nccl_env": dict(state.nccl_env),
    }
