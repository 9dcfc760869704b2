"""The interface every peer format implements, and the field checks and limits its adapters share. Pure.

An adapter reads its format's content (never its file name) into a `SweepResult` and writes a result in it. The
registry (specmon.model.sweeps.formats) asks them in order which one a file's content is; reading files and
folders from disk is specmon.sources.resultfiles's.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar

from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.sweeps.results import LevelResult, Stats, SweepResult
from specmon.model.sweeps.sweepstats import RequestRecord
from specmon.model.text.textfile import loads

EXPECTED = ("a specmon sweep result, `vllm bench serve --save-result` JSON (or a directory of them, or a `vllm bench "
            "sweep serve` folder or summary.json), "
            "SGLang bench_serving JSONL or a guidellm benchmarks report (JSON, YAML or CSV)")

# Runs (levels) in one file or directory: a sweep has tens; a million parsed cost 1.4 GB, so more are refused before
# they are parsed (each format's `run_mark` counts them unparsed).
MAX_RUNS = 10_000

# What a result can hold that a peer format may have no field for, in the order the export's note names them.
_HELD: tuple[tuple[str, Callable[[LevelResult], object]], ...] = (
    ("tokens per chunk", lambda lv: lv.tokens_per_chunk is not None),
    ("achieved concurrency", lambda lv: lv.achieved_concurrency is not None),
    ("goodput", lambda lv: lv.goodput is not None),
    ("failed requests", lambda lv: lv.requests_failed),
    ("acceptance rate", lambda lv: lv.accept_rate is not None),
    ("accept length", lambda lv: lv.accept_length is not None),
    ("over-capacity and behind-schedule flags", lambda lv: lv.over_capacity or lv.behind),
    ("acceptance by prompt category", lambda lv: lv.categories),
    ("errors by kind", lambda lv: lv.errors),
    ("client health", lambda lv: lv.client.chunks),
    ("decode tok/s", lambda lv: lv.decode_tok_s.mean is not None),
)
# What no peer format has a field for.
NO_PEER_FIELD = frozenset({"over-capacity and behind-schedule flags", "acceptance by prompt category",
                           "client health", "decode tok/s"})

Located = tuple[str, Mapping[str, Any]]   # an object with the place an error about it names (file, line, index)


class PeerFormat(ABC):
    """One other load generator's result format: how its content is recognised, read and written."""

    name: ClassVar[str]           # `specmon export --format NAME`, and `SweepMeta.tool` of a result read from it
    tool: ClassVar[str]           # the tool, as said to the user ("vllm bench serve")
    run_mark: ClassVar[str]       # text each run in a file holds once: runs are counted before any is parsed
    per_run: ClassVar[bool]       # one JSON object per run (True), or one report object holding every run
    no_field_for: ClassVar[frozenset[str]]   # names in _HELD this format cannot hold when written
    out_folder: ClassVar[bool]    # written as a folder of files (True) or one file
    out_suffix: ClassVar[str]     # the default output's name: the result's stem plus this
    needs_records: ClassVar[bool] = False   # written from the sweep's per-request records
    itl_lacked: ClassVar[str] = "ITL"       # how `lacks_note` names a file without ITL
    failed_lacked: ClassVar[str] = "failed requests (neither failed nor num_prompts)"

    def read_layout(self, text: str, path: str) -> SweepResult | None:
        """The result when `text` is this format in a layout other than JSON objects (CSV, a JSON list); else None."""
        return None

    def other_syntax(self, text: str, path: str) -> Mapping[str, Any] | None:
        """The file's one object when `text` is not JSON but this format's other syntax (YAML); else None."""
        return None

    @abstractmethod
    def claims(self, obj: Mapping[str, Any]) -> bool:
        """Whether a JSON object is this format's (one run of it, or its report); asked in the registry's order."""

    @abstractmethod
    def read(self, objs: Sequence[tuple[int, Mapping[str, Any]]], path: str, torn: tuple[str, ...]) -> SweepResult:
        """The result from the file's objects (with their line numbers); `torn` notes a last line cut short."""

    @abstractmethod
    def write(self, result: SweepResult, records: Sequence[RequestRecord]) -> list[tuple[str, str]]:
        """`result` in this format: (path relative to the output folder, text) per file; for a one-file format
        one entry whose path is "" (the output itself). `records` are the sweep's per-request records when
        `needs_records`, else empty."""

    def cannot_hold(self, result: SweepResult) -> list[str]:
        """What `result` holds that this format has no field for (said in one line at export)."""
        return [name for name, held in _HELD
                if name in self.no_field_for and any(held(lv) for lv in result.levels)]


# --- shared by the adapters ---------------------------------------------------------------------------------------
def check_run_count(runs: int, path: str) -> None:
    if runs > MAX_RUNS:
        raise UserError(f"{path}: about {runs:,} runs; specmon reads at most {MAX_RUNS:,} from one file or directory "
                        "(refused unread: a sweep has tens of levels; split the file)")


def json_value(text: str, path: str) -> Any:
    try:
        return loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc}); expected {EXPECTED}") from None


def located(objs: Sequence[tuple[int, Mapping[str, Any]]], path: str) -> list[Located]:
    """Each object with the place an error about it names: the file, and its line when it holds several."""
    return [(f"{path}:{n}" if len(objs) > 1 else path, o) for n, o in objs]


def shown(v: Any) -> str | None:
    """A name another tool's file gives (a model, a target URL) as one line with no terminal control in it (an OSC 52
    or a clear-screen in a model name reaches compare's output, the TUI's toasts, a report); None if not a string."""
    return one_line(v, 500) if isinstance(v, str) and v else None


def axis_workload(levels: Sequence[LevelResult]) -> dict[str, Any]:
    """The levels as specmon's workload names them: an open-loop sweep's rates, else its concurrencies."""
    if levels and levels[0].rate is not None:
        caps = {lv.concurrency for lv in levels}
        return {"mode": "rate", "rates": sorted({lv.rate for lv in levels if lv.rate is not None}),
                "max_concurrency": (caps.pop() or None) if len(caps) == 1 else None}
    return {"levels": sorted({lv.concurrency for lv in levels})}


def dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def peer_dataset(name: object) -> str:
    """specmon's dataset as the peers name theirs: random and sharegpt alike, a prompt file (and the built-in
    set) as "custom"."""
    return name if isinstance(name, str) and name in ("random", "sharegpt") else "custom"


def lacked(result: SweepResult, fmt: PeerFormat) -> list[str]:
    """What a file of `fmt` read into `result` does not hold (computed from its levels: a vLLM file run with
    --metric-percentiles 90 has p90, one without e2el has no E2E)."""
    levels = result.levels
    lacks = []
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        stats = [getattr(lv, name) for lv in levels]
        if all(s == Stats() for s in stats):
            lacks.append(fmt.itl_lacked if name == "itl_ms" else label)
        else:
            missing = [k for k in ("mean", "p50", "p90", "p99") if all(getattr(s, k) is None for s in stats)]
            if missing:
                lacks.append(f"{label} {'/'.join(missing)}")
    if any(lv.requests_failed is None for lv in levels):
        lacks.append(fmt.failed_lacked)
    present: Iterable[tuple[bool, str]] = (
        (any(lv.tokens_per_chunk is not None for lv in levels), "tokens per chunk"),
        (any(lv.achieved_concurrency is not None for lv in levels), "achieved concurrency"),
        (any(lv.accept_length is not None for lv in levels), "speculative accept length"))
    lacks += [what for held, what in present if not held]
    lacks.append("client health")
    return lacks


# --- field checks --------------------------------------------------------------------------------------------
_MISSING = object()
# No figure of a benchmark reaches this (a count, tokens, milliseconds, tokens/s): beyond it a value is a broken file.
ABSURD = 1e12
# A cap on concurrent requests beyond any load generator's (max_concurrency 1e18 is a broken file).
MAX_CONCURRENCY = 10_000_000


def _value(d: Mapping[str, Any], key: str, where: str, default: Any, expected: str) -> Any:
    """d[key], or `default` where it is absent or null; a required one missing names the field."""
    v = d.get(key)
    if v is None:
        if default is _MISSING:
            raise UserError(f"{where}: {key}: missing; expected {expected}")
        return default
    return v


def bounded(v: Any, key: str, where: str, expected: str) -> float:
    """A number from a file: finite, >= 0 and below ABSURD, else one line naming the file (line) and field."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(f"{where}: {key} must be {expected}, got {v!r}")
    if not math.isfinite(v) or v < 0 or v > ABSURD:
        raise UserError(f"{where}: {key} is {plain(v)}; expected {expected} (a finite number from 0 to {ABSURD:g})")
    return float(v)


def plain(v: float) -> str:
    """A refused number as the file wrote it (NaN, Infinity), never Python's nan/inf."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def num(d: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> float:
    return bounded(_value(d, key, where, default, "a number"), key, where, "a number")


def positive(d: Mapping[str, Any], key: str, where: str) -> float:
    v = num(d, key, where)
    if v <= 0:
        raise UserError(f"{where}: {key} is {v:g}; expected a time > 0 (seconds)")
    return v


def count(d: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> int:
    v = _value(d, key, where, default, "an integer")
    n = bounded(v, key, where, "a count (an integer >= 0)")
    if not n.is_integer():
        raise UserError(f"{where}: {key} must be a count (an integer >= 0), got {v!r}")
    return int(n)


def opt(d: Mapping[str, Any], key: str, where: str) -> float | None:
    v = d.get(key)
    return None if v is None else bounded(v, key, where, "a number or null")


def cap(d: Mapping[str, Any], where: str) -> int | None:
    """A run's or strategy's max_concurrency: an integer from 1 to MAX_CONCURRENCY, or None."""
    c = d.get("max_concurrency")
    if c is not None and (isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY):
        raise UserError(f"{where}: max_concurrency must be an integer from 1 to {MAX_CONCURRENCY} or null, "
                        f"got {plain(c) if isinstance(c, float) else repr(c)}")
    return c
