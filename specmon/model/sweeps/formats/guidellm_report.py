"""A specmon sweep written as a guidellm benchmarks report (the JSON guidellm 0.8's `GenerativeBenchmarksReport`
loads), built from the sweep's per-request records. Pure, stdlib only.

guidellm keeps every request of a benchmark and computes its metrics from their times; specmon's records hold what
those need: per request its send time, first and last text chunk (TTFT and E2E), end of the response, chunk count,
token counts and, in open loop, its scheduled time (the send time less its lateness and slot wait). Each request
becomes a `generative_request_stats` entry with those timings, and each metric is computed from them as guidellm
0.8.1 computes it (`DistributionSummary.from_values`, `rate_distribution_from_timings`,
`concurrency_distribution_from_timings`: weighted values, percentiles read off the cumulative distribution, events
closer than 0.1 ms merged); so guidellm's reading of the file is guidellm's own definition applied to specmon's
measurements: its percentiles are nearest-rank, its ITL is weighted by tokens, its request latency runs to the end of
the response (specmon's E2E to the last text chunk).

What specmon does not measure is written as guidellm writes it when it lacks a value: its scheduler's internal
delays as -1.0, queue, resolve and iteration times other than the request's as null, no confidence intervals.
`NOT_MEASURED` names them for the export's note. Absolute times are the level's start time (kept to the second)
plus the records' offsets, so every duration and rate is exact.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from itertools import accumulate
from typing import Any

from specmon.errors import UserError
from specmon.model.sweeps.results import LevelResult, SweepResult
from specmon.model.sweeps.sweepstats import RequestRecord
from specmon.model.text.textfile import loads

PERCENTILES = {"p001": 0.001, "p01": 0.01, "p05": 0.05, "p10": 0.1, "p25": 0.25, "p50": 0.5, "p75": 0.75,
               "p90": 0.9, "p95": 0.95, "p99": 0.99, "p999": 0.999}
_MERGE_S = 1e-4    # guidellm merges event times closer than 0.1 ms
_EPSILON = 1e-6
# guidellm's scheduler timings (worker queues, resolve steps) that specmon's load generator has no counterpart for.
_SCHEDULER_AVGS = ("queued_time_avg", "resolve_start_delay_avg", "resolve_targeted_start_delay_avg",
                   "request_start_delay_avg", "request_targeted_start_delay_avg", "resolve_end_delay_avg",
                   "resolve_time_avg", "finalized_delay_avg", "processed_delay_avg")
NOT_MEASURED = ("guidellm's scheduler timings (queue, resolve and finalize delays: -1, as guidellm writes them "
                "unknown)", "per-modality summaries (text tokens, words, characters: null)", "confidence intervals")
_STATUSES = ("successful", "errored", "incomplete", "total")


def parse_records(text: str, path: str) -> list[RequestRecord]:
    """A sweep's per-request records file's text (one JSON object a line); a bad line is one error naming it."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(RequestRecord.from_dict(loads(line)))
        except (ValueError, KeyError, TypeError) as exc:
            if n == len(text.splitlines()):   # a torn last line (the sweep was stopped mid-write): the rest stands
                break
            raise UserError(f"{path}:{n}: not a per-request record ({exc})") from None
    return out


# ---------------------------------------------------------------------------------------------- distributions
def distribution(pairs: Iterable[tuple[float, float]], count: int | None = None) -> dict[str, Any]:
    """guidellm's DistributionSummary.from_values of (value, weight) pairs: equal values pooled, zero weights
    dropped, percentiles the first value whose cumulative probability reaches them."""
    items = list(pairs)
    if not items:
        return _empty()
    if count is None:
        count = round(sum(w for _, w in items))
    pooled: dict[float, float] = {}
    for v, w in items:
        pooled[v] = pooled.get(v, 0.0) + w
    values = [v for v in sorted(pooled) if pooled[v] > 0]
    if not values:
        return _empty(count)
    weights = [pooled[v] for v in values]
    total = math.fsum(weights)
    if total <= _EPSILON:
        weights = [1.0] * len(values)
        total = float(len(values))
    probs = [w / total for w in weights]
    cdf = list(accumulate(probs))
    pct = {k: values[min(bisect_left(cdf, p), len(values) - 1)] for k, p in PERCENTILES.items()}
    mean = math.fsum(v * p for v, p in zip(values, probs))
    variance = math.fsum((v - mean) ** 2 * p for v, p in zip(values, probs))
    return {"mean": mean, "median": pct["p50"], "mode": values[probs.index(max(probs))], "variance": variance,
            "std_dev": math.sqrt(variance), "min": values[0], "max": values[-1], "count": count,
            "total_sum": mean * count, "percentiles": pct, "pdf": None, "mean_ci": None, "percentile_cis": None}


def _empty(count: int = 0) -> dict[str, Any]:
    return {"mean": 0.0, "median": 0.0, "mode": 0.0, "variance": 0.0, "std_dev": 0.0, "min": 0.0, "max": 0.0,
            "count": count, "total_sum": 0.0, "percentiles": dict.fromkeys(PERCENTILES, 0.0), "pdf": None,
            "mean_ci": None, "percentile_cis": None}


def _merged(events: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Events sorted by time, equal times pooled, then each run of times within 0.1 ms of its first kept as one."""
    pooled: dict[float, float] = {}
    for t, w in events:
        pooled[t] = pooled.get(t, 0.0) + w
    times = sorted(pooled)
    out: list[tuple[float, float]] = []
    i = 0
    while i < len(times):
        j = i
        while j + 1 < len(times) and times[j + 1] <= times[i] + _MERGE_S:
            j += 1
        out.append((times[i], math.fsum(pooled[t] for t in times[i:j + 1])))
        i = j + 1
    return out


def rate_distribution(events: Iterable[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    """guidellm's rate_distribution_from_timings: each event's weight over the time around it (half-way to its
    neighbours), the rates weighted by those times; the mean is the events' total over end - start."""
    kept = [(start, 0.0), *((t, w) for t, w in events if start <= t <= end), (end, 0.0)]
    merged = _merged(kept)
    if len(merged) <= 1:
        return distribution([])
    times = [t for t, _ in merged]
    mids = [(a + b) / 2 for a, b in zip(times, times[1:])]
    durations = [mids[0] - times[0], *(b - a for a, b in zip(mids, mids[1:])), max(times[-1] - mids[-1], _EPSILON)]
    occurrences = [w for _, w in merged]
    return distribution(((o / d, d) for o, d in zip(occurrences, durations)), count=round(math.fsum(occurrences)))


def concurrency_distribution(intervals: Sequence[tuple[float, float]], start: float, end: float) -> dict[str, Any]:
    """guidellm's concurrency_distribution_from_timings: requests in flight over time, weighted by how long."""
    kept = [(s, e) for s, e in intervals if e >= start and s <= end]
    count = len(kept)
    merged = _merged([*((s, 1.0) for s, _ in kept), *((e, -1.0) for _, e in kept)])
    if merged:
        times = [t for t, _ in merged]
        at = bisect_left(times, start)
        merged = [(start, math.fsum(w for _, w in merged[:at])), *merged[at:]]
        times = [t for t, _ in merged]
        merged = [*merged[:bisect_right(times, end)], (end, 0.0)]
    levels = [max(c, 0.0) for c in accumulate(w for _, w in merged)]
    if len(levels) <= 1:
        return distribution([] if count == 0 else [(levels[0], 1.0)])
    durations = [max(b - a, 0.0) for (a, _), (b, _) in zip(merged, merged[1:])]
    if not any(d > 0 for d in durations):
        return distribution([])
    return distribution(zip(levels[:-1], durations), count=count)


def _by_status(fn: Any, ok: Sequence[Any], failed: Sequence[Any], *args: Any) -> dict[str, Any]:
    """A StatusDistributionSummary: `fn` over the successful, errored, incomplete (none) and all requests."""
    return {"successful": fn(ok, *args), "errored": fn(failed, *args), "incomplete": fn([], *args),
            "total": fn([*ok, *failed], *args)}


# --------------------------------------------------------------------------------------------------- requests
class _Request:
    """One specmon record as guidellm's timings (epoch seconds): the figures guidellm's metrics are computed from."""

    def __init__(self, r: RequestRecord, t0: float) -> None:
        self.record = r
        self.start = t0 + r.start_s
        self.end = t0 + r.end_s
        # No chunk arrives after the response ends: the records' microsecond rounding must not put one past it
        # (guidellm would count its tokens outside the benchmark's window).
        self.first = None if r.ttft_ms is None else min(self.start + r.ttft_ms / 1000.0, self.end)
        self.last = None if r.e2e_ms is None else min(self.start + r.e2e_ms / 1000.0, self.end)
        self.iterations = r.chunks
        self.prompt_tokens = r.prompt_tokens
        # guidellm counts iterations as tokens when the server sent no usage, as specmon counts chunks.
        self.output_tokens = r.output_tokens if r.output_tokens is not None else (r.chunks or None)
        late = None if r.late_ms is None else (r.late_ms + (r.queued_ms or 0.0)) / 1000.0
        self.targeted = None if late is None else self.start - late

    def output_timings(self) -> list[tuple[float, float]]:
        """guidellm's output_tokens_timings: the first token at its time, the rest spread evenly to the last."""
        tokens = self.output_tokens or 0
        if self.first is None or self.last is None or self.iterations <= 1:
            return [(self.last if self.last is not None else self.end, float(tokens))]
        per = (tokens - 1.0) / (self.iterations - 1.0) if tokens > 1 else None
        steps = self.iterations - 1
        step = (self.last - self.first) / steps   # numpy's linspace, as guidellm spaces them
        spread = [] if per is None else [(self.last if k == steps else k * step + self.first, per)
                                         for k in range(1, steps + 1)]
        return [(self.first, 1.0 * bool(tokens)), *spread]

    def stats(self) -> dict[str, Any]:
        r = self.record
        tokens = self.output_tokens
        timings = {"targeted_start": self.targeted, "request_start": self.start, "first_request_iteration": self.first,
                   "first_token_iteration": self.first, "first_output_token_iteration": self.first,
                   "last_token_iteration": self.last, "last_request_iteration": self.last,
                   "request_iterations": self.iterations, "token_iterations": self.iterations,
                   # guidellm reads a request's end from resolve_end when request_end is missing, and requires it:
                   # specmon's request has no resolve step after its end.
                   "request_end": self.end, "resolve_end": self.end}
        rid = f"c{r.concurrency}-r{r.rate:g}-{r.index}" if r.rate is not None else f"c{r.concurrency}-{r.index}"
        return {"type_": "generative_request_stats", "request_id": rid,
                "info": {"request_id": rid, "status": "completed" if r.ok else "errored", "timings": timings,
                         "error": None if r.ok else f"{r.error}: {r.detail}" if r.detail else r.error},
                "input_metrics": {"text_tokens": r.prompt_tokens, "total_tokens": r.prompt_tokens},
                "output_metrics": {"text_tokens": r.output_tokens, "total_tokens": r.output_tokens},
                "prompt_tokens": r.prompt_tokens, "output_tokens": tokens}


def _values(reqs: Sequence[_Request], fn: Any) -> dict[str, Any]:
    return distribution((v, 1.0) if not isinstance(v, tuple) else v for v in (fn(q) for q in reqs) if v is not None)


def _ms(a: float | None, b: float | None) -> float:
    return 0.0 if a is None or b is None else 1000.0 * (b - a)


def _itl(q: _Request) -> tuple[float, float]:
    tokens = q.output_tokens
    if q.first is None or q.last is None or tokens is None or tokens <= 1:
        return (0.0, (tokens or 1.0) - 1.0)
    return (1000.0 * (q.last - q.first) / (tokens - 1), tokens - 1.0)


def _tpot(q: _Request) -> tuple[float, float]:
    tokens = q.output_tokens
    last = q.last if q.last is not None else q.end
    return ((1000.0 * (last - q.start) / tokens) if tokens else 0.0, float(tokens or 0))


def _metrics(ok: list[_Request], failed: list[_Request], start: float, end: float, open_loop: bool) -> dict[str, Any]:
    first_in = [q for q in ok if q.first is not None and start <= q.first <= end]
    first_failed = [q for q in failed if q.first is not None and start <= q.first <= end]

    def values(fn: Any, reqs: tuple[Sequence[_Request], Sequence[_Request]] = (ok, failed)) -> dict[str, Any]:
        return _by_status(lambda rs: _values(rs, fn), *reqs)

    def rates(fn: Any) -> dict[str, Any]:
        return _by_status(lambda rs: rate_distribution([e for q in rs for e in fn(q)], start, end), ok, failed)

    def per_iteration(q: _Request) -> list[tuple[float, float]]:
        return [(w, 1.0) for _, w in q.output_timings()]

    def spread_iterations(q: _Request) -> list[tuple[float, float]]:
        return [(w, 1.0) for _, w in q.output_timings()[1:]] if len(q.output_timings()) > 1 else []

    def prompt_timing(q: _Request) -> list[tuple[float, float]]:
        return [(q.first if q.first is not None else q.end, float(q.prompt_tokens or 0))]

    return {
        "request_totals": {"successful": len(ok), "errored": len(failed), "incomplete": 0, "total": len(ok) + len(failed)},
        "requests_per_second": rates(lambda q: [(q.end, 1.0)]),
        "request_concurrency": _by_status(lambda rs: concurrency_distribution([(q.start, q.end) for q in rs], start, end),
                                          ok, failed),
        "request_latency": values(lambda q: q.end - q.start),
        # Only an open-loop level has a schedule to be late against (guidellm writes null for the others).
        "request_dispatch_delay": values(lambda q: None if q.targeted is None else q.start - q.targeted)
        if open_loop else None,
        "request_scheduled_latency": values(lambda q: None if q.targeted is None else q.end - q.targeted)
        if open_loop else None,
        "request_streaming_iterations_count": values(lambda q: float(q.iterations)),
        "prompt_token_count": values(lambda q: float(q.prompt_tokens or 0)),
        "output_token_count": values(lambda q: float(q.output_tokens or 0)),
        "total_token_count": values(lambda q: float((q.prompt_tokens or 0) + (q.output_tokens or 0))),
        "time_to_first_token_ms": values(lambda q: _ms(q.start, q.first), (first_in, first_failed)),
        "time_to_first_output_token_ms": values(lambda q: _ms(q.start, q.first), (first_in, first_failed)),
        "time_per_output_token_ms": values(_tpot),
        "inter_token_latency_ms": values(_itl, ([q for q in ok if q.first is None or q.first >= start],
                                                [q for q in failed if q.first is None or q.first >= start])),
        "time_to_last_round_trip_ms": values(lambda q: 0.0),   # websocket backends only (guidellm writes 0 here)
        "avg_round_trip_time_ms": values(lambda q: 0.0),
        "prompt_tokens_per_second": rates(prompt_timing),
        "output_tokens_per_second": rates(lambda q: q.output_timings()),
        "tokens_per_second": rates(lambda q: [*prompt_timing(q), *q.output_timings()]),
        "output_tokens_per_iteration": _by_status(lambda rs: distribution(p for q in rs for p in per_iteration(q)),
                                                  ok, failed),
        "iter_tokens_per_iteration": _by_status(lambda rs: distribution(p for q in rs for p in spread_iterations(q)),
                                                ok, failed),
        "text": {"tokens": None, "words": None, "characters": None},
        "image": {"tokens": None, "images": None, "pixels": None, "bytes": None},
        "video": {"tokens": None, "frames": None, "seconds": None, "bytes": None},
        "audio": {"tokens": None, "samples": None, "seconds": None, "bytes": None},
        "tool_call": {"tokens": None, "mixed_tokens": None, "count": None},
    }


# ----------------------------------------------------------------------------------------------------- report
def guidellm_report(result: SweepResult, records: Iterable[RequestRecord]) -> dict[str, Any]:
    """The report: one benchmark per level, each from the level's measured requests (warm-up ones left out)."""
    by_level: dict[tuple[int, float | None], list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            by_level.setdefault((r.concurrency, r.rate), []).append(r)
    meta = result.meta
    run_id = f"specmon {meta.label} {meta.created_at}".strip()
    burstiness = float(meta.workload.get("burstiness") or 1.0)
    backend = {"kind": "openai_http", "target": meta.url, "model": meta.model or ""}
    benchmarks = []
    for i, lv in enumerate(result.levels):
        level_records = by_level.get((lv.concurrency, lv.rate))
        if not level_records:
            raise UserError(f"{result.path}: no per-request records for the level at {_where(lv)} in the records "
                            "file; a guidellm report is built from them")
        benchmarks.append(_benchmark(lv, level_records, i, run_id, backend, burstiness))
    rates = [lv.rate for lv in result.levels if lv.rate is not None]
    caps = {lv.concurrency for lv in result.levels}
    profile: dict[str, Any] = {"kind": _rate_kind(burstiness), "rate": rates,
                               "max_concurrency": (caps.pop() or None) if len(caps) == 1 else None} if rates \
        else {"kind": "concurrent", "streams": [lv.concurrency for lv in result.levels]}
    spec = {"backend": backend, "profile": profile, "data": [_data(meta.workload, meta.dataset)]}
    return {"config": {"metadata": {"labels": {"specmon_profile": meta.label}}, "spec": spec},
            "benchmarks": benchmarks}


def _rate_kind(burstiness: float) -> str:
    # guidellm's poisson is specmon's burstiness 1; any other shape is said in the export's note.
    return "poisson" if burstiness == 1.0 else "constant"


def _data(workload: Mapping[str, Any], dataset: Mapping[str, Any] | None) -> dict[str, Any]:
    """The prompts as guidellm names a source: random prompts as its synthetic text of those lengths, a prompt file
    (the built-in set included) by its path."""
    path = (dataset or {}).get("path") or workload.get("dataset_path")
    if workload.get("dataset", "random") == "random" or not path:
        return {"kind": "synthetic_text", "prompt_tokens": int(workload.get("input_len") or 1),
                "output_tokens": workload.get("output_len")}
    return {"kind": "json_file", "path": str(path)}


def _where(lv: LevelResult) -> str:
    return f"{lv.rate:g} req/s" if lv.rate is not None else f"C={lv.concurrency}"


def _epoch(iso: str | None, path: str | None) -> float:
    try:
        return datetime.fromisoformat((iso or "").replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise UserError(f"{path}: a level without its start time (started_at); a guidellm report needs it") from None


def _benchmark(lv: LevelResult, records: list[RequestRecord], index: int, run_id: str, backend: Mapping[str, Any],
               burstiness: float) -> dict[str, Any]:
    t0 = _epoch(lv.started_at, None)
    reqs = [_Request(r, t0) for r in records]
    start, end = min(q.start for q in reqs), max(q.end for q in reqs)
    ok = [q for q in reqs if q.record.ok]
    failed = [q for q in reqs if not q.record.ok]
    cap = lv.concurrency or None
    if lv.rate is None:
        strategy: dict[str, Any] = {"type_": "concurrent", "streams": lv.concurrency}
    else:
        strategy = {"type_": _rate_kind(burstiness), "rate": lv.rate, "max_concurrency": cap}
    made = {"successful": len(ok), "errored": len(failed), "incomplete": 0, "total": len(reqs)}
    return {
        "type_": "generative_benchmark",
        "config": {"run_id": run_id, "run_index": index, "strategy": strategy, "constraints": {}, "profile": {},
                   "requests": {}, "backend": dict(backend),
                   "environment": {}, "confidence": None, "warnings": []},
        "scheduler_state": {"start_time": start, "end_time": end, "start_requests_time": start,
                            "end_requests_time": end, "created_requests": len(reqs), "processed_requests": len(reqs),
                            "successful_requests": len(ok), "errored_requests": len(failed)},
        "scheduler_metrics": {"start_time": start, "request_start_time": start, "measure_start_time": start,
                              "measure_end_time": end, "request_end_time": end, "end_time": end,
                              "requests_made": made, "generation_delay": distribution([]),
                              **dict.fromkeys(_SCHEDULER_AVGS, -1.0),
                              "request_time_avg": math.fsum(q.end - q.start for q in reqs) / len(reqs),
                              "strategy_type": strategy["type_"]},
        "metrics": _metrics(ok, failed, start, end, lv.rate is not None),
        "requests": {"successful": [q.stats() for q in ok], "errored": [q.stats() for q in failed],
                     "incomplete": [], "total": None},
        "warnings": [],
        "start_time": start, "end_time": end, "duration": end - start, "warmup_duration": 0.0,
        "cooldown_duration": 0.0,
    }
