"""Sweep result files: one JSONL file per sweep, a meta line then one line per finished level.

Schema (version 1)::

    {"type": "meta", "schema": 1, "specmon_version": "0.1.0", "created_at": "2026-11-29T15:40:00Z",
     "profile": "eagle3" | null, "url": "http://127.0.0.1:30000", "model": "...",
     "server": {...what the server exposes: kv_cache_tokens, mem_fraction, speculative {...}, version...},
     "workload": {"api": "chat", "levels": [1, 2, 5], "requests_per_level": 16 | null, "duration_s": null,
                  "warmup_requests": 2, "input_len": 128, "output_len": 256, "dataset": "builtin",
                  "dataset_path": null, "seed": 0, "input_range": 0.0, "output_range": 0.0,
                  "output_from_dataset": false, ...},
     "dataset": {"name": "builtin", "path": "specmon/data/prompts.jsonl", "sha256": "...", "prompts": 250,
                 "skipped": 0, "categories": {"chat": 50, ...}} | null,
     "records": "results/x.requests.jsonl" | null}
    {"type": "level", "concurrency": 1, "requests_ok": 16, "requests_failed": 0,
     "errors": {"refused": 0, ...only kinds that happened},
     "duration_s": 12.3, "input_tokens": 2048, "output_tokens": 4096,
     "output_throughput": 333.0, "total_throughput": 499.5, "request_throughput": 1.3,
     "ttft_ms": {"mean", "p50", "p90", "p99"}, "tpot_ms": {...}, "itl_ms": {...}, "e2e_ms": {...},
     "decode_tok_s": {...}, "tokens_per_chunk": 2.6, "achieved_concurrency": 0.98, "usage_missing": 0,
     "started_at": "...", "client": {"cpu_s": 0.4, "chunks": 1600, "cpu_us_per_chunk": 250.0,
                                     "loop_lag_ms_p99": 0.3, "bound": false,
                                     "cpu_wait_s": 0.01},
     ...open loop only: "rate": 4.0, "achieved_rate": 3.99, "served_rate": 3.9, "send_late_ms": {...},
     "behind": false, "backlog_max": 2, "over_capacity": false, "ttft_growth": 1.1,
     "categories": {"code": {"requests": 4, "output_tokens": 1024, "chunks": 300, "tokens_per_chunk": 3.41}, ...},
     ...open loop only: "rate": 4.0, "achieved_rate": 3.99, "served_rate": 3.9, "send_late_ms": {...},
     "behind": false, "backlog_max": 2, "over_capacity": false, "ttft_growth": 1.1,
     ...with --slo only: "goodput": 3.5, "good_share": 0.88}

In an open-loop file (workload.mode "rate") a level's x value is its offered `rate`; its `concurrency` is the
max-concurrency cap, 0 without one.

The meta's `dataset` says which prompts were sent (the file's sha256 tells an edited file apart); its `workload`
holds the sampling (seed, lengths, ranges). A level's `categories` is acceptance per prompt category (tokens per
chunk over that category's requests), empty when the prompts have no categories.

A level line is appended (and fsynced) the moment the level ends, so a crash or Ctrl-C keeps every
finished level (specmon.loadgen.lines writes the lines, specmon.sources.resultfiles reads the files; this module
only shapes the lines and parses their text). Statistics
whose sample is empty are written as null. API keys never reach a file: `redact` is applied to everything written.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from specmon.errors import UserError
from specmon.model.text.numbers import fmt_ms
from specmon.model.text.textfile import loads

SCHEMA_VERSION = 1
ERROR_KINDS = ("refused", "http_4xx", "http_5xx", "malformed_sse", "truncated", "timeout", "bad_usage")
STAT_KEYS = ("mean", "p50", "p90", "p99")

def utc_now_iso() -> str:
    """The current UTC time as ISO-8601 with a Z suffix, to the second."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class Stats:
    """Mean and percentiles of one metric over a level; None where the sample was empty."""

    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {k: (None if v is None else round(v, 4)) for k, v in zip(STAT_KEYS, (self.mean, self.p50, self.p90, self.p99))}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> Stats:
        if d is None:
            return cls()
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected an object with {', '.join(STAT_KEYS)}")
        return cls(*(_opt_float(d.get(k), f"{where}.{k}") for k in STAT_KEYS))


def client_flag(bound: bool, skewed: bool, handling_ms_p99: float | None) -> str | None:
    """A level's client flag, the one rule every table, comparison, report and verdict shows: "BOUND" when the load
    generator was the bottleneck (the timings measure it), "SKEW 4.0ms" when chunks waited that long (p99) for
    the stream's code, a material share of the ITL (a caution: they were stamped on arrival, so the wait is not in
    their times unless the box delayed the reads too), else None. BOUND wins where both apply. The wait is given
    to a tenth of a ms below 10 ms, whole ms above (a flag that fits its table column: "SKEW 16ms")."""
    if bound:
        return "BOUND"
    if skewed:
        if handling_ms_p99 is None:
            return "SKEW"
        ms = handling_ms_p99
        return f"SKEW {ms:.1f}ms" if ms < 10 else f"SKEW {ms:.0f}ms" if ms < 1000 else f"SKEW {fmt_ms(ms)}"
    return None


@dataclass(frozen=True)
class ClientHealth:
    """How hard the load generator itself worked during a level, and whether that makes the level suspect."""

    cpu_s: float = 0.0
    chunks: int = 0
    loop_lag_ms_p99: float | None = None
    bound: bool = False
    cpu_wait_s: float | None = None   # runnable but waiting for a CPU (Linux schedstat): a busy box, not us
    handling_ms_p99: float | None = None   # p99 over requests of the longest a chunk waited for its stream's code
    burst_max: int | None = None      # most sockets one look found with new bytes (chunks arriving together)
    skewed: bool = False              # that wait is a material share of the ITL: SKEW, a caution
    processes: int = 1                # generator processes that sent the level (cpu_s is theirs together)

    @property
    def cpu_us_per_chunk(self) -> float | None:
        return self.cpu_s * 1e6 / self.chunks if self.chunks else None

    @property
    def recorded(self) -> bool:
        """Whether the load generator recorded its health: another tool's file (guidellm, vLLM, SGLang) has no
        chunk count and no CPU time, so there is nothing to call "ok"."""
        return bool(self.chunks or self.cpu_s)

    @property
    def flag(self) -> str | None:
        """The level's client flag (client_flag)."""
        return client_flag(self.bound, self.skewed, self.handling_ms_p99)

    def to_dict(self) -> dict[str, Any]:
        per_chunk = self.cpu_us_per_chunk
        return {
            "cpu_s": round(self.cpu_s, 4),
            "chunks": self.chunks,
            "cpu_us_per_chunk": None if per_chunk is None else round(per_chunk, 2),
            "loop_lag_ms_p99": None if self.loop_lag_ms_p99 is None else round(self.loop_lag_ms_p99, 3),
            "bound": self.bound,
            "cpu_wait_s": None if self.cpu_wait_s is None else round(self.cpu_wait_s, 4),
            "handling_ms_p99": None if self.handling_ms_p99 is None else round(self.handling_ms_p99, 3),
            "burst_max": self.burst_max,
            "skewed": self.skewed,
            "processes": self.processes,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> ClientHealth:
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected an object")
        return cls(
            cpu_s=_req_float(d, "cpu_s", where),
            chunks=_req_int(d, "chunks", where),
            loop_lag_ms_p99=_opt_float(d.get("loop_lag_ms_p99"), f"{where}.loop_lag_ms_p99"),
            bound=bool(d.get("bound", False)),
            cpu_wait_s=_opt_float(d.get("cpu_wait_s"), f"{where}.cpu_wait_s"),
            handling_ms_p99=_opt_float(d.get("handling_ms_p99"), f"{where}.handling_ms_p99"),
            burst_max=None if d.get("burst_max") is None else _req_int(d, "burst_max", where),
            skewed=bool(d.get("skewed", False)),
            processes=_req_int(d, "processes", where) if "processes" in d else 1,
        )


@dataclass(frozen=True)
class CategoryStats:
    """One prompt category's successful requests at a level, and its acceptance as the client sees it."""

    requests: int
    output_tokens: int   # from usage
    chunks: int          # text-carrying chunks of the same requests

    @property
    def tokens_per_chunk(self) -> float | None:
        """Usage tokens per streamed chunk: the category's accept length where a chunk is one verify step."""
        return self.output_tokens / self.chunks if self.chunks else None

    def to_dict(self) -> dict[str, Any]:
        tpc = self.tokens_per_chunk
        return {"requests": self.requests, "output_tokens": self.output_tokens, "chunks": self.chunks,
                "tokens_per_chunk": None if tpc is None else round(tpc, 4)}

    @classmethod
    def from_dict(cls, d: Any, where: str) -> CategoryStats:
        if not isinstance(d, Mapping):
            raise ValueError(f"{where}: expected an object with requests, output_tokens, chunks")
        return cls(_req_int(d, "requests", where), _req_int(d, "output_tokens", where), _req_int(d, "chunks", where))


def pool_categories(levels: Iterable[LevelResult]) -> dict[str, CategoryStats]:
    """Each prompt category's counts summed over several levels (repeats of one level, or a whole sweep)."""
    totals: dict[str, list[int]] = {}
    for lv in levels:
        for name, c in lv.categories.items():
            t = totals.setdefault(name, [0, 0, 0])
            t[0] += c.requests
            t[1] += c.output_tokens
            t[2] += c.chunks
    return {name: CategoryStats(*t) for name, t in sorted(totals.items())}


@dataclass(frozen=True)
class LevelResult:
    """Everything measured at one concurrency level (metric definitions: specmon.model.sweeps.sweepstats)."""

    concurrency: int
    requests_ok: int
    requests_failed: int | None   # None: unknown (another tool's file that does not say how many failed)
    duration_s: float
    output_tokens: int
    output_throughput: float
    request_throughput: float
    ttft_ms: Stats
    tpot_ms: Stats
    itl_ms: Stats
    e2e_ms: Stats
    tokens_per_chunk: float | None
    client: ClientHealth
    errors: Mapping[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    total_throughput: float = 0.0
    decode_tok_s: Stats = Stats()
    achieved_concurrency: float | None = None
    usage_missing: int = 0
    started_at: str | None = None
    categories: Mapping[str, CategoryStats] = field(default_factory=dict)   # prompt category -> its requests
    rate: float | None = None              # open loop: offered requests/s; None in a closed-loop level
    achieved_rate: float | None = None     # open loop: requests sent / time to the last send
    served_rate: float | None = None       # open loop: completions/s while arrivals were still coming
    send_late_ms: Stats = Stats()          # open loop: how late each send was against its schedule
    behind: bool = False                   # open loop: the generator fell behind its schedule
    backlog_max: int | None = None         # open loop: the most requests due and not yet sent at one moment
    over_capacity: bool = False            # open loop: the server did not keep up with the offered rate
    ttft_growth: float | None = None       # open loop: TTFT p50 of the last quarter of arrivals / the first's
    goodput: float | None = None           # with an SLO: successful requests meeting every target, per second
    good_share: float | None = None        # with an SLO: share of measured requests meeting every target
    accept_length: float | None = None     # another tool's file: the speculative accept length it recorded
    accept_rate: float | None = None       # another tool's file: its draft-token acceptance rate (0..1)

    @property
    def load(self) -> float:
        """The level's place on its sweep's x axis: the offered rate (open loop) or the concurrency."""
        return self.rate if self.rate is not None else float(self.concurrency)

    def to_dict(self) -> dict[str, Any]:
        d = self._closed_loop_dict()
        if self.rate is not None:
            d.update({
                "rate": self.rate, "achieved_rate": _round(self.achieved_rate, 4), "served_rate": _round(self.served_rate, 4),
                "send_late_ms": self.send_late_ms.to_dict(), "behind": self.behind, "backlog_max": self.backlog_max,
                "over_capacity": self.over_capacity,
                "ttft_growth": _round(self.ttft_growth, 3),
            })
        if self.goodput is not None:
            d["goodput"] = round(self.goodput, 4)
            d["good_share"] = _round(self.good_share, 4)
        if self.accept_length is not None:
            d["accept_length"] = round(self.accept_length, 4)
        if self.accept_rate is not None:
            d["accept_rate"] = round(self.accept_rate, 4)
        return d

    def _closed_loop_dict(self) -> dict[str, Any]:
        return {
            "type": "level",
            "concurrency": self.concurrency,
            "requests_ok": self.requests_ok,
            "requests_failed": self.requests_failed,
            "errors": dict(self.errors),
            "duration_s": round(self.duration_s, 4),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "output_throughput": round(self.output_throughput, 3),
            "total_throughput": round(self.total_throughput, 3),
            "request_throughput": round(self.request_throughput, 4),
            "ttft_ms": self.ttft_ms.to_dict(),
            "tpot_ms": self.tpot_ms.to_dict(),
            "itl_ms": self.itl_ms.to_dict(),
            "e2e_ms": self.e2e_ms.to_dict(),
            "decode_tok_s": self.decode_tok_s.to_dict(),
            "tokens_per_chunk": None if self.tokens_per_chunk is None else round(self.tokens_per_chunk, 4),
            "achieved_concurrency": None if self.achieved_concurrency is None else round(self.achieved_concurrency, 3),
            "usage_missing": self.usage_missing,
            "started_at": self.started_at,
            "client": self.client.to_dict(),
            "categories": {name: c.to_dict() for name, c in self.categories.items()},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "level") -> LevelResult:
        """Parse a level line; raises ValueError naming the bad field."""
        concurrency = _req_int(d, "concurrency", where)
        rate = _opt_float(d.get("rate"), f"{where}: rate")
        if rate is not None and not rate > 0:
            raise ValueError(f"{where}: rate must be > 0, got {rate}")
        if concurrency < (0 if rate is not None else 1):
            raise ValueError(f"{where}: concurrency must be >= 1, got {concurrency}")
        errors = d.get("errors") or {}
        if not isinstance(errors, Mapping) or not all(isinstance(v, int) for v in errors.values()):
            raise ValueError(f"{where}: errors must map an error kind to a count")
        tpc = d.get("tokens_per_chunk")
        ach = d.get("achieved_concurrency")
        categories = d.get("categories") or {}
        if not isinstance(categories, Mapping):
            raise ValueError(f"{where}: categories must map a prompt category to its counts")
        return cls(
            concurrency=concurrency,
            requests_ok=_req_int(d, "requests_ok", where),
            requests_failed=_req_int(d, "requests_failed", where),
            duration_s=_req_float(d, "duration_s", where),
            output_tokens=_req_int(d, "output_tokens", where),
            output_throughput=_req_float(d, "output_throughput", where),
            request_throughput=_req_float(d, "request_throughput", where),
            ttft_ms=Stats.from_dict(d.get("ttft_ms"), f"{where}: ttft_ms"),
            tpot_ms=Stats.from_dict(d.get("tpot_ms"), f"{where}: tpot_ms"),
            itl_ms=Stats.from_dict(d.get("itl_ms"), f"{where}: itl_ms"),
            e2e_ms=Stats.from_dict(d.get("e2e_ms"), f"{where}: e2e_ms"),
            tokens_per_chunk=_opt_float(tpc, f"{where}: tokens_per_chunk"),
            client=ClientHealth.from_dict(d.get("client", {}), f"{where}: client"),
            errors=dict(errors),
            input_tokens=int(d.get("input_tokens") or 0),
            total_throughput=float(d.get("total_throughput") or 0.0),
            decode_tok_s=Stats.from_dict(d.get("decode_tok_s"), f"{where}: decode_tok_s"),
            achieved_concurrency=_opt_float(ach, f"{where}: achieved_concurrency"),
            usage_missing=int(d.get("usage_missing") or 0),
            started_at=d.get("started_at"),
            rate=rate,
            achieved_rate=_opt_float(d.get("achieved_rate"), f"{where}: achieved_rate"),
            served_rate=_opt_float(d.get("served_rate"), f"{where}: served_rate"),
            send_late_ms=Stats.from_dict(d.get("send_late_ms"), f"{where}: send_late_ms"),
            behind=bool(d.get("behind", False)),
            backlog_max=_opt_int(d.get("backlog_max"), f"{where}: backlog_max"),
            over_capacity=bool(d.get("over_capacity", False)),
            ttft_growth=_opt_float(d.get("ttft_growth"), f"{where}: ttft_growth"),
            goodput=_opt_float(d.get("goodput"), f"{where}: goodput"),
            good_share=_opt_float(d.get("good_share"), f"{where}: good_share"),
            accept_length=_opt_float(d.get("accept_length"), f"{where}: accept_length"),
            accept_rate=_opt_float(d.get("accept_rate"), f"{where}: accept_rate"),
            categories={str(k): CategoryStats.from_dict(v, f"{where}: categories.{k}") for k, v in categories.items()},
        )


@dataclass(frozen=True)
class SweepMeta:
    """The first line of a result file: what was measured, against what, and when."""

    url: str
    model: str | None
    workload: Mapping[str, Any]
    profile: str | None = None
    server: Mapping[str, Any] = field(default_factory=dict)
    specmon_version: str = ""
    created_at: str = ""
    records: str | None = None
    tool: str | None = None   # the other load generator whose file this was read from (specmon.model.sweeps.formats)
    dataset: Mapping[str, Any] | None = None   # datasets.Dataset.describe(): name, path, sha256, prompts, categories

    @property
    def label(self) -> str:
        """A short name for tables and chart legends: the profile, else the URL."""
        return self.profile or self.url

    @property
    def mode(self) -> str:
        """"rate" for an open-loop sweep (levels at request rates), else "concurrency"."""
        return "rate" if self.workload.get("mode") == "rate" or self.workload.get("rates") else "concurrency"

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": "meta",
            "schema": SCHEMA_VERSION,
            "specmon_version": self.specmon_version,
            "created_at": self.created_at,
            "profile": self.profile,
            "url": self.url,
            "model": self.model,
            "server": dict(self.server),
            "workload": dict(self.workload),
            "dataset": None if self.dataset is None else dict(self.dataset),
            "records": self.records,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "meta") -> SweepMeta:
        url = d.get("url")
        if not isinstance(url, str) or not url:
            raise ValueError(f"{where}: missing url")
        workload = d.get("workload") or {}
        server = d.get("server") or {}
        if not isinstance(workload, Mapping) or not isinstance(server, Mapping):
            raise ValueError(f"{where}: workload and server must be objects")
        dataset = d.get("dataset")
        if dataset is not None and not isinstance(dataset, Mapping):
            raise ValueError(f"{where}: dataset must be an object or null")
        return cls(
            url=url,
            model=d.get("model"),
            workload=dict(workload),
            profile=d.get("profile"),
            server=dict(server),
            specmon_version=str(d.get("specmon_version") or ""),
            created_at=str(d.get("created_at") or ""),
            records=d.get("records"),
            dataset=None if dataset is None else dict(dataset),
        )


@dataclass(frozen=True)
class SweepResult:
    """A whole result file: its meta line and the levels finished so far, in file order."""

    path: str | None
    meta: SweepMeta
    levels: tuple[LevelResult, ...]
    notes: tuple[str, ...] = ()   # what a reader must be told about the file (a torn last line left out)

    @property
    def label(self) -> str:
        return self.meta.label

    @property
    def warnings(self) -> tuple[str, ...]:
        """The notes as a reader is told them: each naming the file once (one about a line of it already does)."""
        return tuple(n if not self.path or n.startswith(f"{self.path}:") else f"{self.path}: {n}" for n in self.notes)

    @property
    def failure(self) -> str | None:
        """Why this sweep measured nothing (no request of any level succeeded), or None when it measured something.

        The one rule every front end applies (`sweep` exits 1, `demo --headless` exits 1, the TUI shows the sweep
        as failed): a file of failures must never pass for a measurement.
        """
        if any(lv.requests_ok for lv in self.levels):
            return None
        failed = sum(lv.requests_failed or 0 for lv in self.levels)
        where = f"; see {self.path}" if self.path else ""
        if not failed:
            return f"sweep measured nothing: no level finished{where}"
        kinds: dict[str, int] = {}
        for lv in self.levels:
            for kind, n in lv.errors.items():
                if n:
                    kinds[kind] = kinds.get(kind, 0) + n
        why = ", ".join(f"{k} {n}" for k, n in kinds.items())
        return f"sweep measured nothing: all {failed} requests failed ({why}){where}"

    @property
    def mode(self) -> str:
        return self.meta.mode


_META_TYPE = re.compile(r'"type"\s*:\s*"meta"')


def is_specmon(text: str) -> bool:
    """Whether `text` is a specmon sweep result (its first line the meta object)."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not _META_TYPE.search(first):   # cheap first: a one-line guidellm report is the whole file
        return False
    try:
        obj = loads(first)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "meta"


def parse_results(lines: Iterable[str], path: str = "<results>") -> SweepResult:
    """Parse result-file lines; a bad line raises UserError naming path:line and the fault."""
    meta: SweepMeta | None = None
    levels: list[LevelResult] = []
    for lineno, text in enumerate(lines, 1):
        where = f"{path}:{lineno}"
        if not text.strip():
            continue
        try:
            obj = loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where}: not JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{where}: expected a JSON object")
        kind = obj.get("type")
        try:
            if kind == "meta":
                if meta is not None:
                    raise ValueError("a second meta line")
                schema = obj.get("schema")
                if schema != SCHEMA_VERSION:
                    raise ValueError(f"unsupported schema {schema!r} (this specmon reads {SCHEMA_VERSION})")
                meta = SweepMeta.from_dict(obj, "meta")
            elif kind == "level":
                if meta is None:
                    raise ValueError("level line before the meta line")
                levels.append(LevelResult.from_dict(obj, "level"))
            else:
                raise ValueError(f"unknown line type {kind!r} (expected 'meta' or 'level')")
        except (ValueError, TypeError) as exc:
            raise UserError(f"{where}: {exc}") from None
    if meta is None:
        raise UserError(f"{path}:1: no meta line; not a specmon sweep result file")
    return SweepResult(path=path, meta=meta, levels=tuple(levels))


def results_from_text(text: str, path: str) -> SweepResult:
    """A result file written by `specmon sweep` from its text (finished levels only, in file order); the file's
    path names it in errors and in the note of a torn last line."""
    lines = text.splitlines()
    notes: tuple[str, ...] = ()
    if lines and not text.endswith("\n") and not _is_json(lines[-1]):
        # An append cut short (disk full, a crash mid-write): every whole line before it is still good.
        notes = (torn_note(path, len(lines)),)
        lines.pop()
    result = parse_results(lines, path)
    return SweepResult(path=result.path, meta=result.meta, levels=result.levels, notes=notes)


def whole_lines(text: str, path: str) -> SweepResult | None:
    """A result file still being written, from its text: its whole lines (a kill can leave it empty, or end it
    inside a line); None before its meta line."""
    whole = text[: text.rfind("\n") + 1]
    return parse_results(whole.splitlines(), path) if whole.strip() else None


def torn_note(path: str, line: int) -> str:
    """What a reader is told of a file whose last line was cut short (specmon's or another tool's JSONL)."""
    return f"{path}:{line}: last line is cut short (an interrupted write); left out, the lines before it are used"


def _is_json(text: str) -> bool:
    try:
        loads(text)
    except ValueError:
        return False
    return True


def _req_int(d: Mapping[str, Any], key: str, where: str) -> int:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where}: {key} must be an integer, got {v!r}")
    return v


def _req_float(d: Mapping[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: {key} must be a number, got {v!r}")
    return float(v)


def _round(v: float | None, digits: int) -> float | None:
    return None if v is None else round(v, digits)


def _opt_int(v: Any, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError(f"{where} must be an integer or null, got {v!r}")
    return v


def _opt_float(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where} must be a number or null, got {v!r}")
    return float(v)


# What the meta line keeps from SGLang's /server_info (others: too large or too volatile to be useful later).
_SGLANG_KEYS = {
    "max_total_num_tokens": "kv_cache_tokens", "mem_fraction_static": "mem_fraction", "tp_size": "tp_size",
    "dp_size": "dp_size", "context_length": "context_length", "max_running_requests": "max_running_requests",
    "chunked_prefill_size": "chunked_prefill_size", "model_path": "model_path", "version": "version",
    "attention_backend": "attention_backend", "cuda_graph_max_bs": "cuda_graph_max_bs",
}
_VLLM_CACHE_INFO = re.compile(r"^vllm:cache_config_info\{([^}]*)\}", re.M)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def summarize_server(models: Any, server_info: Any, version: Any, metrics_text: str | None) -> dict[str, Any]:
    """The server facts worth keeping with a sweep: kind, version, KV tokens, mem fraction, speculation.

    Inputs are what /v1/models, /server_info (SGLang), /version (vLLM) and /metrics answered (None if nothing).
    """
    out: dict[str, Any] = {"kind": "unknown"}
    data = models.get("data") if isinstance(models, Mapping) else None
    if isinstance(data, list) and data and isinstance(data[0], Mapping):
        if data[0].get("max_model_len") is not None:
            out["max_model_len"] = data[0]["max_model_len"]
        if data[0].get("owned_by") == "vllm":
            out["kind"] = "vllm"
    if isinstance(server_info, Mapping):
        if out["kind"] == "unknown" and "mem_fraction_static" in server_info:
            out["kind"] = "sglang"   # vLLM answers /server_info only in dev mode, with another shape
        for key, name in _SGLANG_KEYS.items():
            if server_info.get(key) is not None:
                out[name] = server_info[key]
        spec = {k[len("speculative_"):]: v for k, v in server_info.items()
                if k.startswith("speculative_") and v is not None and not isinstance(v, (dict, list))}
        out["speculative"] = spec if spec.get("algorithm") else None
        states = server_info.get("internal_states")
        if isinstance(states, list) and states and isinstance(states[0], Mapping):
            accept = states[0].get("avg_spec_accept_length")
            if accept is not None:
                out["avg_spec_accept_length_at_start"] = accept
    if isinstance(version, Mapping) and isinstance(version.get("version"), str):
        out.setdefault("version", version["version"])
    if metrics_text:
        m = _VLLM_CACHE_INFO.search(metrics_text)
        if m:
            out["kind"] = "vllm"
            labels = dict(_LABEL.findall(m.group(1)))
            with_blocks = labels.get("num_gpu_blocks"), labels.get("block_size")
            if all(v and v.isdigit() for v in with_blocks):
                out["kv_cache_tokens"] = int(with_blocks[0]) * int(with_blocks[1])  # type: ignore[arg-type]
            if labels.get("gpu_memory_utilization"):
                with contextlib.suppress(ValueError):
                    out["mem_fraction"] = float(labels["gpu_memory_utilization"])
        if "vllm:spec_decode_num_drafts" in metrics_text:
            out.setdefault("speculative", {"enabled": True})
    return out
