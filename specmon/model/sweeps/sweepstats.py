"""Per-level sweep statistics from per-request records. Pure and synchronous.

Metric definitions (those of `vllm bench serve` and SGLang `bench_serving`, so numbers compare):

- TTFT: request sent (its bytes handed to the socket) -> first SSE chunk carrying generated text (content,
  reasoning or completion text).
- E2E latency: request sent -> last chunk carrying generated text (the trailing usage-only chunk does not extend it).
- Output tokens: `usage.completion_tokens` from the final usage chunk (`stream_options.include_usage`), never
  chunk counts: under speculative decoding one chunk carries several tokens. When a server sends no usage the
  request falls back to its chunk count and the level's `usage_missing` counts it (the sweep warns).
- TPOT (time per output token), per request: (E2E - TTFT) / (output_tokens - 1); requests with < 2 tokens have none.
  Under speculation TPOT amortises bundled tokens, while ITL does not.
- ITL (inter-token latency as vLLM/SGLang name it): the gaps between consecutive text-carrying chunks, pooled over all
  successful requests. Under speculation it is a per-*chunk* gap, about accept-length x TPOT.
  Percentiles of ITL come from a log histogram with 1 % wide buckets (memory stays flat for any sweep size), so they
  are within 0.5 % of the exact value; its mean is exact.
- Decode tok/s, per request: (output_tokens - 1) / (E2E - TTFT) = 1000 / TPOT.
- Output throughput: sum of output tokens of successful requests / level duration; total throughput adds prompt
  tokens (`usage.prompt_tokens`); request throughput: successful requests / duration. The level duration runs from
  the first measured request sent to the last one finished (closed loop, drain tail included, as vLLM does; the
  generator starts a level's C streams 0.5 ms apart, so at C=256 the first wave ramps up over 128 ms).
- Tokens per chunk: sum of usage output tokens / sum of text chunks over requests that had usage: a client-side
  accept-length proxy (1.0 without speculation). Per prompt category (datasets with categories) the same ratio over
  that category's requests: acceptance per category. A server that streams one chunk per verify step (vLLM, SGLang
  at its default stream interval) makes it the accept length; one that merges steps into a chunk overstates it.
- Achieved concurrency: sum of request busy times / duration (Little's law, SGLang's "Concurrency").
- Percentiles are linear-interpolated (numpy's default), p50/p90/p99 plus the mean.
- Client-bound verdict: the level is flagged when the generator's event loop lagged more than
  LOOP_LAG_BOUND_MS at p99 or it used more than CPU_BOUND_FRACTION of a core: its timings then measure the client.

Open loop (a level at an offered request rate R, its requests sent on a schedule, see specmon.model.workload.arrivals):
- Send lateness, per request: time sent - time scheduled (or, when a max-concurrency cap held the request back,
  - the moment its slot came free: waiting for a slot is the cap working, recorded as `queued_ms`, not lateness).
  The level is flagged `behind` when lateness p99 exceeds LATE_BOUND_MS and LATE_GAP_SHARE of the mean gap
  between arrivals (1/R): the generator did not keep the schedule closely enough to give the load asked for.
- Backlog: requests due (their scheduled time, or their slot's) and not yet sent; `backlog_max` is the most at one
  moment over the level (from the records' send times and lateness). While a level runs, each progress summary
  carries the backlog and how late its oldest request is: past the `behind` bound (`falling_behind`), the sweep
  says so at once, not only when the level ends.
- Achieved rate: requests sent / time from the level's start to the last send (R when the schedule was kept).
- Served rate: successful completions per second between the first completion and the last scheduled arrival.
- TTFT growth: TTFT p50 of the last quarter of arrivals (in schedule order) over that of the first quarter.
- Over capacity: TTFT grew TTFT_GROWTH_BOUND-fold and by at least TTFT_GROWTH_MIN_MS over the level (a queue
  building up in the server), or the served rate is below OVER_CAPACITY_SHARE of R by more than three standard
  deviations of its count, or a max-concurrency cap held sends back so that the achieved rate fell that far.
- Goodput (with SLO targets, specmon.model.workload.goodput): good requests / level duration, and good / measured requests.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmon.model.sweeps.results import CategoryStats, ClientHealth, LevelResult, Stats
from specmon.model.workload.goodput import meets_slo

LOOP_LAG_BOUND_MS = 10.0
CPU_BOUND_FRACTION = 0.85
SKEW_SHARE = 0.1        # a level's chunk handling delay p99 past this share of its ITL p50 (and past SKEW_FLOOR_MS)
SKEW_FLOOR_MS = 1.0     # flags the level SKEW (a caution; not client-bound)
LATE_BOUND_MS = 10.0
LATE_GAP_SHARE = 0.25
OVER_CAPACITY_SHARE = 0.9
TTFT_GROWTH_BOUND = 2.0
TTFT_GROWTH_MIN_MS = 50.0


@dataclass(slots=True)
class RequestRecord:
    """One request as the load generator saw it. Written one JSON line per request to the records file.

    Times are seconds since the level started (start_s, end_s) or milliseconds (ttft_ms, e2e_ms);
    itl_us are the gaps between text-carrying chunks in microseconds.

    Nothing changes a record once made, but it is not a frozen dataclass: the load generator makes one a request,
    and a frozen one's __init__ (a call to object.__setattr__ a field) took 2.5 us against 0.6 (measured).
    """

    concurrency: int
    index: int
    start_s: float
    end_s: float
    ok: bool
    error: str | None = None           # one of results.ERROR_KINDS when not ok
    detail: str | None = None          # short human text for the error
    status: int | None = None          # HTTP status when one arrived
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    chunks: int = 0                    # chunks that carried generated text
    output_tokens: int | None = None   # usage.completion_tokens
    prompt_tokens: int | None = None   # usage.prompt_tokens
    itl_us: tuple[int, ...] = ()
    warmup: bool = False
    rate: float | None = None          # open loop: the level's offered rate
    late_ms: float | None = None       # open loop: sent this long after its scheduled time (slot wait excluded)
    queued_ms: float | None = None     # open loop with a cap: waited this long for a free slot
    category: str | None = None        # the prompt's category, for datasets that give one

    @property
    def usage(self) -> bool:
        return self.output_tokens is not None

    @property
    def counted_tokens(self) -> int:
        """Output tokens from usage, else (with usage missing) the chunk count."""
        return self.output_tokens if self.output_tokens is not None else self.chunks

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "concurrency": self.concurrency, "i": self.index, "start_s": round(self.start_s, 6),
            "end_s": round(self.end_s, 6), "ok": self.ok,
        }
        if self.warmup:
            d["warmup"] = True
        if not self.ok:
            d["error"] = self.error
            d["detail"] = self.detail
        if self.status is not None:
            d["status"] = self.status
        d["ttft_ms"] = None if self.ttft_ms is None else round(self.ttft_ms, 3)
        d["e2e_ms"] = None if self.e2e_ms is None else round(self.e2e_ms, 3)
        d["chunks"] = self.chunks
        d["output_tokens"] = self.output_tokens
        d["prompt_tokens"] = self.prompt_tokens
        d["itl_us"] = list(self.itl_us)
        if self.rate is not None:
            d["rate"] = self.rate
            d["late_ms"] = None if self.late_ms is None else round(self.late_ms, 3)
            if self.queued_ms:
                d["queued_ms"] = round(self.queued_ms, 3)
        if self.category is not None:
            d["category"] = self.category
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RequestRecord:
        return cls(
            concurrency=int(d["concurrency"]), index=int(d["i"]), start_s=float(d["start_s"]),
            end_s=float(d["end_s"]), ok=bool(d["ok"]), error=d.get("error"), detail=d.get("detail"),
            status=d.get("status"), ttft_ms=d.get("ttft_ms"), e2e_ms=d.get("e2e_ms"),
            chunks=int(d.get("chunks", 0)), output_tokens=d.get("output_tokens"),
            prompt_tokens=d.get("prompt_tokens"), itl_us=tuple(d.get("itl_us", ())),
            warmup=bool(d.get("warmup", False)), rate=d.get("rate"), late_ms=d.get("late_ms"),
            queued_ms=d.get("queued_ms"), category=d.get("category"),
        )


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) of already sorted values, linear interpolation; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    pos = (n - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, n - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


def stats_of(values: Iterable[float]) -> Stats:
    """Mean, p50, p90, p99 of the values (all None when there are none)."""
    s = sorted(values)
    if not s:
        return Stats()
    return Stats(math.fsum(s) / len(s), percentile(s, 50), percentile(s, 90), percentile(s, 99))


class LogHistogram:
    """Counts of non-negative values in 1 %-wide log buckets: constant memory, quantiles within 0.5 %.

    Values below `floor` (e.g. two chunks read in the same socket read) count as zero.
    """

    _LOG_RATIO = math.log(1.01)

    def __init__(self, floor: float = 1e-3) -> None:
        self._floor = floor
        self._buckets: dict[int, int] = {}
        self._zeros = 0
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        self.total += value
        if value < self._floor:
            self._zeros += 1
            return
        idx = math.floor(math.log(value) / self._LOG_RATIO)
        self._buckets[idx] = self._buckets.get(idx, 0) + 1

    def add_all(self, values: Iterable[float], scale: float = 1.0) -> None:
        """`add(v / scale)` for each of the values, in one call (a request's ITL gaps: ~15 a request)."""
        floor, buckets, log, ratio, whole = self._floor, self._buckets, math.log, self._LOG_RATIO, math.floor
        count, total, zeros = self.count, self.total, self._zeros
        for v in values:
            value = v / scale
            count += 1
            total += value   # (summed in order, as add does: the same total to the last bit)
            if value < floor:
                zeros += 1
                continue
            idx = whole(log(value) / ratio)
            buckets[idx] = buckets.get(idx, 0) + 1
        self.count, self.total, self._zeros = count, total, zeros

    def quantile(self, q: float) -> float | None:
        """The q-th percentile (0..100): the geometric middle of the bucket holding that rank."""
        if self.count == 0:
            return None
        rank = q / 100.0 * (self.count - 1)
        seen = self._zeros
        if rank < seen:
            return 0.0
        for idx in sorted(self._buckets):
            seen += self._buckets[idx]
            if rank < seen:
                return math.exp((idx + 0.5) * self._LOG_RATIO)
        return math.exp((max(self._buckets) + 0.5) * self._LOG_RATIO)

    def stats(self) -> Stats:
        if self.count == 0:
            return Stats()
        return Stats(self.total / self.count, self.quantile(50), self.quantile(90), self.quantile(99))

    def merge(self, other: LogHistogram) -> None:
        """Count `other`'s values too (the same floor): as if each had been added here."""
        for idx, n in other._buckets.items():
            self._buckets[idx] = self._buckets.get(idx, 0) + n
        self._zeros += other._zeros
        self.count += other.count
        self.total += other.total

    def to_dict(self) -> dict[str, Any]:
        return {"floor": self._floor, "zeros": self._zeros, "count": self.count, "total": self.total,
                "buckets": sorted(self._buckets.items())}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogHistogram:
        h = cls(float(d["floor"]))
        h._zeros, h.count, h.total = int(d["zeros"]), int(d["count"]), float(d["total"])
        h._buckets = {int(idx): int(n) for idx, n in d["buckets"]}
        return h


def client_skewed(handling_ms_p99: float | None, itl_p50_ms: float | None) -> bool:
    """True when chunks waited for their stream's code (after their arrival was stamped) long enough, against the
    level's ITL, that the stamps themselves may be late: a burst's later socket reads wait for the handling of the
    earlier ones before the event loop gets to them."""
    if handling_ms_p99 is None or itl_p50_ms is None:
        return False
    return handling_ms_p99 > max(SKEW_FLOOR_MS, SKEW_SHARE * itl_p50_ms)


def late_bound_ms(rate: float) -> float:
    """How late sends may be (p99 of a level, or the oldest unsent request now) before the generator counts as
    behind its schedule at this rate."""
    return max(LATE_BOUND_MS, LATE_GAP_SHARE * 1000.0 / rate)


def falling_behind(progress: SweepProgress) -> bool:
    """Whether an open-loop level in progress is behind its schedule now: its oldest request due and not yet sent is
    later than the level's `behind` bound."""
    return (progress.rate is not None and progress.backlog_late_ms is not None
            and progress.backlog_late_ms > late_bound_ms(progress.rate))


def client_bound(cpu_s: float, duration_s: float, loop_lag_ms_p99: float | None) -> bool:
    """True when the generator's own load makes a level's timings untrustworthy."""
    if loop_lag_ms_p99 is not None and loop_lag_ms_p99 > LOOP_LAG_BOUND_MS:
        return True
    return duration_s > 0 and cpu_s / duration_s > CPU_BOUND_FRACTION


@dataclass
class LevelAccumulator:
    """Folds request records of one level into running totals; memory does not grow with chunk counts.

    `rate` (open loop) adds the schedule figures; `slo` (targets in ms) adds goodput.
    """

    concurrency: int
    rate: float | None = None
    slo: Mapping[str, float] = field(default_factory=dict)
    requests_ok: int = 0
    requests_failed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    input_tokens: int = 0
    usage_missing: int = 0
    chunks_total: int = 0
    usage_tokens: int = 0          # tokens and chunks of requests that had usage: tokens/chunk
    usage_chunks: int = 0
    busy_s: float = 0.0
    first_start_s: float | None = None
    last_end_s: float | None = None
    itl: LogHistogram = field(default_factory=lambda: LogHistogram())
    ttft_live: LogHistogram = field(default_factory=lambda: LogHistogram())
    ttft: array = field(default_factory=lambda: array("d"))
    e2e: array = field(default_factory=lambda: array("d"))
    tpot: array = field(default_factory=lambda: array("d"))
    decode: array = field(default_factory=lambda: array("d"))
    good: int = 0
    late: array = field(default_factory=lambda: array("d"))
    due: array = field(default_factory=lambda: array("d"))     # open loop: each send's due time and its send time
    sent: array = field(default_factory=lambda: array("d"))
    last_send_s: float | None = None
    ok_ends: array = field(default_factory=lambda: array("d"))
    ttft_by_index: list[tuple[int, float]] = field(default_factory=list)
    categories: dict[str, list[int]] = field(default_factory=dict)   # category -> [requests, usage tokens, chunks]

    def add(self, r: RequestRecord) -> None:
        if r.warmup:
            return
        if self.rate is not None:
            self.last_send_s = r.start_s if self.last_send_s is None else max(self.last_send_s, r.start_s)
            if r.late_ms is not None:
                self.late.append(r.late_ms)
                self.due.append(r.start_s - r.late_ms / 1000.0)
                self.sent.append(r.start_s)
            if r.ok:
                self.ok_ends.append(r.end_s)
                if r.ttft_ms is not None:
                    self.ttft_by_index.append((r.index, r.ttft_ms))
        self.busy_s += max(0.0, r.end_s - r.start_s)
        self.first_start_s = r.start_s if self.first_start_s is None else min(self.first_start_s, r.start_s)
        self.last_end_s = r.end_s if self.last_end_s is None else max(self.last_end_s, r.end_s)
        self.chunks_total += r.chunks
        if not r.ok:
            self.requests_failed += 1
            kind = r.error or "unknown"
            self.errors[kind] = self.errors.get(kind, 0) + 1
            return
        self.requests_ok += 1
        tokens = r.counted_tokens
        self.output_tokens += tokens
        self.input_tokens += r.prompt_tokens or 0
        if r.usage:
            self.usage_tokens += tokens
            self.usage_chunks += r.chunks
            if r.category is not None:
                counts = self.categories.setdefault(r.category, [0, 0, 0])
                counts[0] += 1
                counts[1] += tokens
                counts[2] += r.chunks
        else:
            self.usage_missing += 1
        self.itl.add_all(r.itl_us, 1000.0)
        if r.ttft_ms is not None:
            self.ttft.append(r.ttft_ms)
            self.ttft_live.add(r.ttft_ms)
        tpot: float | None = None
        if r.e2e_ms is not None:
            self.e2e.append(r.e2e_ms)
            if r.ttft_ms is not None and tokens >= 2 and r.e2e_ms > r.ttft_ms:
                tpot = (r.e2e_ms - r.ttft_ms) / (tokens - 1)
                self.tpot.append(tpot)
                self.decode.append(1000.0 / tpot)
        if self.slo and meets_slo(self.slo, r.ttft_ms, tpot, r.e2e_ms):
            self.good += 1

    @property
    def tokens_per_chunk(self) -> float | None:
        return self.usage_tokens / self.usage_chunks if self.usage_chunks else None

    def merge(self, other: LevelAccumulator) -> None:
        """Fold in another accumulator of the same level (another process's share of its requests): the totals are
        those of one accumulator that had been given both's records."""
        for name in _COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _SERIES:
            getattr(self, name).extend(getattr(other, name))
        for kind, n in other.errors.items():
            self.errors[kind] = self.errors.get(kind, 0) + n
        for name, counts in other.categories.items():
            mine = self.categories.setdefault(name, [0, 0, 0])
            for k, n in enumerate(counts):
                mine[k] += n
        self.itl.merge(other.itl)
        self.ttft_live.merge(other.ttft_live)
        self.first_start_s = _least(self.first_start_s, other.first_start_s)
        self.last_end_s = _most(self.last_end_s, other.last_end_s)
        self.last_send_s = _most(self.last_send_s, other.last_send_s)

    def pieces(self, most: int) -> list[LevelAccumulator]:
        """This accumulator as pieces that merge back into it, none holding more than `most` values of a series
        (a level's per-request times): the first has the totals and the first `most` of each series, the others
        only their series' next `most`."""
        longest = max(len(getattr(self, name)) for name in _SERIES)
        pieces = [dataclasses.replace(self, **_slices(self, 0, most))]
        for start in range(most, longest, most):
            pieces.append(LevelAccumulator(self.concurrency, self.rate, self.slo, **_slices(self, start, most)))
        return pieces

    def to_dict(self) -> dict[str, Any]:
        """The totals and series (the SLO targets stay with whoever reads it: `from_dict` takes them)."""
        d: dict[str, Any] = {"concurrency": self.concurrency, "rate": self.rate}
        d.update({name: getattr(self, name) for name in _COUNTS})
        d.update({name: list(getattr(self, name)) for name in _SERIES})
        d.update(errors=self.errors, categories=self.categories, itl=self.itl.to_dict(),
                 ttft_live=self.ttft_live.to_dict(), first_start_s=self.first_start_s, last_end_s=self.last_end_s,
                 last_send_s=self.last_send_s)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], slo: Mapping[str, float] | None = None) -> LevelAccumulator:
        rate, first, last, last_send = d["rate"], d["first_start_s"], d["last_end_s"], d["last_send_s"]
        acc = cls(
            int(d["concurrency"]), None if rate is None else float(rate), dict(slo or {}),
            errors={str(k): int(n) for k, n in d["errors"].items()},
            categories={str(k): [int(n) for n in counts] for k, counts in d["categories"].items()},
            itl=LogHistogram.from_dict(d["itl"]), ttft_live=LogHistogram.from_dict(d["ttft_live"]),
            first_start_s=None if first is None else float(first), last_end_s=None if last is None else float(last),
            last_send_s=None if last_send is None else float(last_send),
            ttft_by_index=[(int(i), float(t)) for i, t in d["ttft_by_index"]],
        )
        for name in _TIMES:
            setattr(acc, name, array("d", d[name]))
        for name in _COUNTS:
            setattr(acc, name, type(getattr(acc, name))(d[name]))
        return acc

    def result(
        self, duration_s: float, cpu_s: float, loop_lag_ms_p99: float | None, started_at: str | None = None,
        cpu_wait_s: float | None = None, handling_ms_p99: float | None = None, burst_max: int | None = None,
        processes: int = 1,
    ) -> LevelResult:
        """The finished level. duration_s: first measured request sent -> last one finished. cpu_s: the CPU time of
        all `processes` generator processes that sent it (client-bound is judged per process)."""
        dur = max(duration_s, 1e-9)
        measured = self.requests_ok + self.requests_failed
        open_loop = self._open_loop_figures()
        itl = self.itl.stats()
        skewed = client_skewed(handling_ms_p99, itl.p50)
        client = ClientHealth(
            cpu_s=cpu_s, chunks=self.chunks_total, loop_lag_ms_p99=loop_lag_ms_p99,
            # A level with no successful request has no timings for the client to distort: requests that all
            # failed at once (a refused port, a 401) make any level look CPU-bound over its few milliseconds.
            # A skewed level is not client-bound: its chunks were stamped on arrival, so the wait after it does
            # not enter their times; SKEW says how long that wait was, as a caution with its figure.
            bound=self.requests_ok > 0 and client_bound(cpu_s / processes, duration_s, loop_lag_ms_p99),
            cpu_wait_s=cpu_wait_s, handling_ms_p99=handling_ms_p99, burst_max=burst_max, skewed=skewed,
            processes=processes,
        )
        return LevelResult(
            concurrency=self.concurrency,
            requests_ok=self.requests_ok,
            requests_failed=self.requests_failed,
            errors=dict(sorted(self.errors.items())),
            duration_s=duration_s,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            output_throughput=self.output_tokens / dur,
            total_throughput=(self.output_tokens + self.input_tokens) / dur,
            request_throughput=self.requests_ok / dur,
            ttft_ms=stats_of(self.ttft),
            tpot_ms=stats_of(self.tpot),
            itl_ms=itl,
            e2e_ms=stats_of(self.e2e),
            decode_tok_s=stats_of(self.decode),
            tokens_per_chunk=self.tokens_per_chunk,
            achieved_concurrency=self.busy_s / dur if duration_s > 0 else None,
            usage_missing=self.usage_missing,
            started_at=started_at,
            client=client,
            categories={name: CategoryStats(*counts) for name, counts in sorted(self.categories.items())},
            goodput=self.good / dur if self.slo else None,
            good_share=self.good / measured if self.slo and measured else None,
            **open_loop,
        )

    def _open_loop_figures(self) -> dict[str, Any]:
        """The schedule and capacity figures of an open-loop level (see the module docstring); {} in closed loop."""
        rate = self.rate
        if rate is None:
            return {}
        sent = self.requests_ok + self.requests_failed
        achieved = sent / self.last_send_s if self.last_send_s else None
        late = stats_of(self.late)
        behind = late.p99 is not None and late.p99 > late_bound_ms(rate)
        # Completions while arrivals were still coming in: [first completion, last send].
        served: float | None = None
        short = False   # served rate significantly (3 sigma of its count) and clearly (10 %) below the offered
        if self.ok_ends and self.last_send_s is not None:
            w0, w1 = min(self.ok_ends), self.last_send_s
            inside = sum(1 for t in self.ok_ends if w0 <= t <= w1)
            if w1 - w0 >= 0.25 * w1 and inside >= 10:
                served = inside / (w1 - w0)
                short = served < OVER_CAPACITY_SHARE * rate and rate - served > 3 * math.sqrt(inside) / (w1 - w0)
        growth: float | None = None
        grew = False
        if len(self.ttft_by_index) >= 8:
            ordered = [t for _, t in sorted(self.ttft_by_index)]
            q = len(ordered) // 4
            first, last = percentile(sorted(ordered[:q]), 50), percentile(sorted(ordered[-q:]), 50)
            if first is not None and last is not None and first > 0:
                growth = last / first
                grew = growth >= TTFT_GROWTH_BOUND and last - first >= TTFT_GROWTH_MIN_MS
        return {
            "rate": rate, "achieved_rate": achieved, "served_rate": served, "send_late_ms": late,
            "behind": behind, "backlog_max": most_waiting(self.due, self.sent),
            # A send held back by the max-concurrency cap (not by a late generator) also means the load exceeded it.
            "over_capacity": grew or short or (achieved is not None and achieved < OVER_CAPACITY_SHARE * rate
                                               and not behind),
            "ttft_growth": growth,
        }


_COUNTS = ("requests_ok", "requests_failed", "output_tokens", "input_tokens", "usage_missing", "chunks_total",
           "usage_tokens", "usage_chunks", "busy_s", "good")
_TIMES = ("ttft", "e2e", "tpot", "decode", "late", "due", "sent", "ok_ends")   # arrays of floats
_SERIES = (*_TIMES, "ttft_by_index")


def _slices(acc: LevelAccumulator, start: int, most: int) -> dict[str, Any]:
    return {name: getattr(acc, name)[start:start + most] for name in _SERIES}


def _least(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


def _most(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def most_waiting(due: Sequence[float], sent: Sequence[float]) -> int:
    """The most requests due and not yet sent at one moment, from each request's due and send times (a send at the
    moment it is due never waits)."""
    events = sorted([(t, 1) for t in due] + [(t, -1) for t in sent])
    waiting = most = 0
    for _, step in events:
        waiting += step
        most = max(most, waiting)
    return most


def level_from_records(
    records: Iterable[RequestRecord], cpu_s: float = 0.0, loop_lag_ms_p99: float | None = None,
    slo: Mapping[str, float] | None = None,
) -> LevelResult:
    """Recompute one level from its records (e.g. re-read from a records file); duration from their times."""
    acc: LevelAccumulator | None = None
    for r in records:
        if acc is None:
            acc = LevelAccumulator(r.concurrency, rate=r.rate, slo=dict(slo or {}))
        acc.add(r)
    if acc is None or acc.first_start_s is None or acc.last_end_s is None:
        raise ValueError("no measured requests")
    return acc.result(acc.last_end_s - acc.first_start_s, cpu_s, loop_lag_ms_p99)


class ProgressPhase(str, enum.Enum):
    """Which part of a level a progress update is from. A `str` enum: the child protocol's `phase` keeps its word."""

    WARMUP = "warmup"       # warm-up requests, not measured
    MEASURING = "level"     # the level's measured requests

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class SweepProgress:
    """A live summary of the level in progress, sent by the generator about 4 times a second."""

    concurrency: int
    level_index: int                  # 0-based position in the sweep's levels
    level_count: int
    phase: ProgressPhase
    elapsed_s: float
    requests_done: int                # finished (ok or failed) measured requests
    requests_failed: int
    requests_target: int | None       # None in duration mode
    duration_target_s: float | None
    in_flight: int
    output_tok_s: float               # running estimate: usage tokens, plus in-flight chunks x tokens/chunk
    ttft_p50_ms: float | None
    tokens_per_chunk: float | None
    loop_lag_ms: float | None         # worst loop lag over the last interval
    cpu_fraction: float | None        # generator CPU over the last interval, fraction of one core
    rate: float | None = None         # open loop: the level's offered rate (concurrency is then the cap, or 0)
    sent: int | None = None           # open loop: requests sent so far
    backlog: int | None = None        # open loop: requests due and not yet sent
    backlog_late_ms: float | None = None   # open loop: how late the oldest of them is (None: no backlog)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SweepProgress:
        fields: dict[str, Any] = {k: d.get(k) for k in cls.__dataclass_fields__}
        return cls(**{**fields, "phase": ProgressPhase(fields["phase"])})
