"""Events read from an SGLang or vLLM launch log.

Every event is a small frozen dataclass with a `line_no`: the 1-based physical line of the log it came
from (lines are counted on `\\n`; the pieces of a tqdm bar redrawn with `\\r` share their line's
number, so the numbers match `grep -n`). Fields a given server version does not print are None: the
parser is tolerant field by field, so a partial answer is still an answer.

The parser only allocates events for lines that carry a signal. `Line` events (one per cleaned line,
for consumers that show the log) are emitted only when the parser is built with `lines=True`.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


class LogSignature(str, enum.Enum):
    """What kind of error a server's log said it hit (model.logs.signals tells them apart). A `str` enum: a member
    equals its word, and run records, `logscan --json` and `status --json` keep the words older specmon wrote."""

    OOM = "oom"                          # CUDA/host memory ran out, or the kernel's `Killed`
    NCCL = "nccl"                        # a collective failed or timed out
    PORT_IN_USE = "port_in_use"          # the server's port was taken
    MODEL_NOT_FOUND = "model_not_found"  # no such model, or no weights in it
    EXCEPTION = "exception"              # any other exception

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Line:
    """One cleaned line (ANSI codes and wrapper/server prefixes removed); only with LogParser(lines=True)."""

    text: str
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class ServerDetected:
    """The log is from this server ("sglang" or "vllm"); emitted when the parser's belief is set or changes."""

    server: str
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class LaunchArgs:
    """Key launch arguments from an args dump (or a runtime adjustment such as an auto-reduced mem fraction).

    Only the fields found are set; `raw` holds every scalar `key=value` / `'key': value` pair found.
    For vLLM, `mem_fraction_static` carries `gpu_memory_utilization` (the same knob).
    """

    tp: int | None = None
    mem_fraction_static: float | None = None
    speculative_algorithm: str | None = None
    speculative_num_steps: int | None = None
    model_path: str | None = None
    port: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class LoadStarted:
    """Weight loading began (SGLang `Load weight begin`, vLLM `Starting to load model`)."""

    avail_mem_gb: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class ShardProgress:
    """One update of a checkpoint-shard loading bar: `done` of `total` shards, tqdm's own rate in shards/s."""

    done: int
    total: int
    rank: int | None = None
    rate_per_s: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class WeightsLoaded:
    """Weights are in GPU memory (SGLang `Load weight end`, vLLM `Model loading took` / `Loading weights took`)."""

    mem_gb: float | None = None
    seconds: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class KVCache:
    """KV cache sizing. `tokens` is the capacity in tokens when the line states it.

    `mem_gb` is the KV memory (SGLang K+V size or KV size, vLLM `Available KV cache memory`), `blocks` the
    V0 block count (`# GPU blocks: N`), whose token capacity depends on a block size the log does not print.
    """

    tokens: int | None = None
    dtype: str | None = None
    k_gb: float | None = None
    v_gb: float | None = None
    mem_gb: float | None = None
    blocks: int | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class GraphCapture:
    """CUDA-graph capture: `done` of `total` bar steps (batch sizes); `stage` is "progress" for a bar
    update, "begin" / "end" for the lines around it (`seconds`: the capture time an end line states)."""

    done: int | None = None
    total: int | None = None
    stage: str = "progress"
    seconds: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class WarmUp:
    """The server is warming up: the engine is built and the HTTP front end is starting or being exercised."""

    line_no: int = 0


@dataclass(frozen=True, slots=True)
class HttpUp:
    """uvicorn says the HTTP app is up (`Application startup complete.` / `Uvicorn running on ...`).

    For vLLM this is the ready signal; for SGLang it is only the start of warm-up. `log_elapsed` as in
    `Ready`.
    """

    log_elapsed: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """A uvicorn access line."""

    method: str
    path: str
    status: int
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class Ready:
    """The server's own ready line (SGLang `The server is fired up and ready to roll!`).

    `log_elapsed` is seconds from the first timestamped line of the log to this one, from the log's own
    timestamps (None when they are missing, or when the log does not show the launch's args dump).
    """

    log_elapsed: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class DecodeStats:
    """Periodic serving stats (SGLang `Decode batch`, vLLM `Engine 000:` / `SpecDecoding metrics`).

    `token_usage` is a 0-1 ratio for both servers (vLLM's percentage is divided by 100). `accept_rate` is
    a 0-1 ratio. Lines that carry only some fields (vLLM prints spec stats on their own line) leave the
    others None.
    """

    running_reqs: int | None = None
    queue_reqs: int | None = None
    token_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    gen_throughput: float | None = None
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class NcclEnv:
    """An `NCCL INFO NAME set by environment to VALUE` line."""

    name: str
    value: str
    line_no: int = 0


@dataclass(frozen=True, slots=True)
class LoggedError:
    """An error the server logged, as the parser finds it at one line: what kind of error, and `line_no`,
    the line carrying the error message itself. It is no run's failure yet: the run-state reducer weighs it
    (model.runs.runstate) and a fatal, settled one becomes the run's `model.runs.failure.Failure`
    (model.runs.verdicts.failure_of).

    `fatal`: the error ends the server for sure (a classified error, a fatal marker such as `Scheduler hit
    an exception`, or a traceback that such a marker opened); a plain traceback is not fatal: servers log
    tracebacks they survive. `provisional`: a header (`Scheduler hit an exception: Traceback ...`,
    `EngineCore failed to start.`) whose exception line is still to come and will replace it.
    `context`: up to 20 cleaned lines ending with this one (for failure reports).
    """

    kind: LogSignature
    message: str
    fatal: bool = True
    provisional: bool = False
    line_no: int = 0
    context: tuple[str, ...] = ()

    @property
    def settled(self) -> bool:
        """Fatal, and no later line will replace it: the run failed for this reason."""
        return self.fatal and not self.provisional


Event = (
    Line
    | ServerDetected
    | LaunchArgs
    | LoadStarted
    | ShardProgress
    | WeightsLoaded
    | KVCache
    | GraphCapture
    | WarmUp
    | HttpUp
    | HttpRequest
    | Ready
    | DecodeStats
    | NcclEnv
    | LoggedError
)

# What a log view highlights on a line that carried an event, strongest first (one highlight per line).
HIGHLIGHTS: tuple[tuple[str, tuple[type, ...]], ...] = (
    ("ready", (Ready, HttpUp)),
    ("error", (LoggedError,)),
    ("shard", (ShardProgress,)),
    ("kv", (KVCache,)),
)
_RANK = {kind: i for i, (kind, _) in enumerate(HIGHLIGHTS)}


def highlights(events: Iterable[Event]) -> dict[int, str]:
    """line_no -> the highlight ("ready", "error", "shard", "kv") of each line the events came from."""
    out: dict[int, str] = {}
    for event in events:
        for kind, types in HIGHLIGHTS:
            if isinstance(event, types):
                held = out.get(event.line_no)
                if held is None or _RANK[kind] < _RANK[held]:
                    out[event.line_no] = kind
                break
    return out
