"""The serving view of a ready server: its own `/metrics` read as the figures a user watches, their recent history,
and the alerts they raise. Pure.

Names by server and version (`_total` dropped from counters, as `acceptance.parse_metrics` keys them):
- running:   `vllm:num_requests_running` (V0, V1), `sglang:num_running_reqs`
- waiting:   `vllm:num_requests_waiting`, `sglang:num_queue_reqs`
- KV use:    `vllm:kv_cache_usage_perc` (V1), `vllm:gpu_cache_usage_perc` (V0, and V1 until it was dropped),
             `sglang:token_usage`; all three are 0-1 ratios
- tokens/s:  the rate of `vllm:generation_tokens` / `sglang:generation_tokens` between two reads; a single read
             falls back to the server's own gauge (`sglang:gen_throughput`, V0 `vllm:avg_generation_throughput_toks_per_s`)
- prefix hit: V1 counters `vllm:prefix_cache_hits` / `vllm:prefix_cache_queries` (older V1: `vllm:gpu_prefix_cache_*`),
             over the interval (cumulative on a single read); V0 gauge `vllm:gpu_prefix_cache_hit_rate` (-1: caching
             off); `sglang:cache_hit_rate`
- preemptions: counter `vllm:num_preemptions` (SGLang: `sglang:num_retracted_requests`), as a rate per second
- acceptance: vLLM counters `vllm:spec_decode_num_accepted_tokens` / `_num_drafts` / `_num_draft_tokens`
             (length = 1 + accepted / drafts, rate = accepted / draft tokens); V0 gauge
             `vllm:spec_decode_draft_acceptance_rate`; SGLang gauges `sglang:spec_accept_length` / `spec_accept_rate`
A family a server does not export is None (shown as absent), never 0.

Every scraped number passes `sane_values` first (the one place): a value outside what its family can hold (a 0-1
ratio above 1, a negative count, NaN, anything above MAX_VALUE) is left out and named in the update's `ignored`, so
a hostile or broken server can neither crash a front end with an overflow nor put an impossible figure on a card.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from specmon.model.server.acceptance import MetricsSample, parse_metrics
from specmon.model.sweeps.sweepstats import SweepProgress
from specmon.model.text.numbers import sparkline

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
GEN_TOKENS = ("vllm:generation_tokens", "sglang:generation_tokens")
GEN_GAUGE = ("sglang:gen_throughput", "vllm:avg_generation_throughput_toks_per_s")
PREFIX_COUNTERS = (("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
                   ("vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries"))
PREFIX_GAUGE = ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate")
PREEMPTIONS = ("vllm:num_preemptions", "sglang:num_retracted_requests")
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
VLLM_DRAFTS = "vllm:spec_decode_num_drafts"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPT_RATE_GAUGE = ("sglang:spec_accept_rate", "vllm:spec_decode_draft_acceptance_rate")
ACCEPT_LEN_GAUGE = ("sglang:spec_accept_length",)

FAMILIES = frozenset([*RUNNING, *WAITING, *KV_USAGE, *GEN_TOKENS, *GEN_GAUGE, *PREFIX_GAUGE, *PREEMPTIONS,
                      *(n for pair in PREFIX_COUNTERS for n in pair), VLLM_ACCEPTED, VLLM_DRAFTS, VLLM_DRAFT_TOKENS,
                      *ACCEPT_RATE_GAUGE, *ACCEPT_LEN_GAUGE])

HISTORY_S = 120.0            # the sparklines' span
SPARK_SLICES = 8             # ... cut into this many slices of 15 s, each shown as its largest value
WAITING_ALERT_S = 30.0       # requests waiting this long without a break
KV_ALERT_PCT = 95.0          # KV use at or above this
KV_CLEAR_PCT = 5.0           # ... stays said until KV use is this far below it (a cache at the line crosses it often)
PREEMPT_CLEAR_S = 30.0       # preemptions stay said until none for this long

# What a family can hold. Above MAX_VALUE nothing is real: a server making a million tokens a second for thirty
# years counts 1e15; bounded so, a sum of every series and a rate over any interval stay finite.
MAX_VALUE = 1e15
RATIOS = frozenset([*KV_USAGE, "sglang:cache_hit_rate", *ACCEPT_RATE_GAUGE])
RANGES: Mapping[str, tuple[float, float]] = {
    **dict.fromkeys(RATIOS, (0.0, 1.0)),
    "vllm:gpu_prefix_cache_hit_rate": (-1.0, 1.0),   # -1: prefix caching off
}


def sane_values(values: Mapping[str, Sequence[float]]) -> tuple[dict[str, list[float]], tuple[str, ...]]:
    """The values each family can hold (every other family: 0..MAX_VALUE), and the rest as `name value` each."""
    kept: dict[str, list[float]] = {}
    refused: list[str] = []
    for name, series in values.items():
        lo, hi = RANGES.get(name, (0.0, MAX_VALUE))
        good = [v for v in series if lo <= v <= hi]   # NaN fails both tests
        refused += [f"{name} {v:g}" for v in series if not lo <= v <= hi]
        if good:
            kept[name] = good
    return kept, tuple(refused)


def read_sample(text: str, at: float) -> MetricsSample:
    """One answer of /metrics, reduced to the families read here (the rest is skipped unparsed), impossible values
    left out (`sane_values`)."""
    kept, refused = sane_values(parse_metrics(text, FAMILIES))
    return MetricsSample(at, kept, refused)


@dataclass(frozen=True)
class ServingFigures:
    """What the card shows; None where the server does not export it (or a rate needs a second read)."""

    running: float | None = None
    waiting: float | None = None
    kv_pct: float | None = None
    tok_s: float | None = None
    prefix_hit_pct: float | None = None
    preemptions: float | None = None       # the counter's value (since the server started)
    preempt_per_s: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None       # 0-1

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (None if (v := getattr(self, f.name)) is None else round(v, 4)) for f in fields(self)}


def _first_total(sample: MetricsSample, names: tuple[str, ...]) -> tuple[str, float] | None:
    for name in names:
        value = sample.total(name)
        if value is not None:
            return name, value
    return None


def _delta(prev: MetricsSample | None, cur: MetricsSample, name: str) -> float | None:
    """A counter's growth since `prev`; None without `prev`, or when it went backwards (a restarted server)."""
    b = cur.total(name)
    if prev is None or b is None:
        return None
    a = prev.total(name)
    return None if a is None or b < a else b - a


def _rate(prev: MetricsSample | None, cur: MetricsSample, names: tuple[str, ...]) -> float | None:
    found = _first_total(cur, names)
    if found is None or prev is None or cur.at <= prev.at:
        return None
    grown = _delta(prev, cur, found[0])
    return None if grown is None else grown / (cur.at - prev.at)


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or not den else num / den


def figures(cur: MetricsSample, prev: MetricsSample | None = None) -> ServingFigures:
    """The figures of one read; rates over the interval since `prev` (counters' cumulative values without it).
    Never NaN or infinite: a ratio over a vanishing denominator is absent."""
    kv = cur.first_mean(KV_USAGE)
    tok_s = _rate(prev, cur, GEN_TOKENS)
    if tok_s is None:
        tok_s = cur.first_mean(GEN_GAUGE)
    preempt = _first_total(cur, PREEMPTIONS)
    accept_len, accept_rate = _acceptance(cur, prev)
    return ServingFigures(
        running=_finite(cur.first_total(RUNNING)), waiting=_finite(cur.first_total(WAITING)),
        kv_pct=None if kv is None else _finite(kv * 100.0), tok_s=_finite(tok_s),
        prefix_hit_pct=_finite(_prefix_hit(cur, prev)), preemptions=None if preempt is None else _finite(preempt[1]),
        preempt_per_s=_finite(_rate(prev, cur, PREEMPTIONS)), accept_len=_finite(accept_len),
        accept_rate=_finite(accept_rate))


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _prefix_hit(cur: MetricsSample, prev: MetricsSample | None) -> float | None:
    for hits, queries in PREFIX_COUNTERS:
        if cur.total(queries) is None:
            continue
        grown = _delta(prev, cur, queries)
        if grown is not None:   # over the interval; an interval without queries keeps the cumulative figure
            if grown > 0:
                return _pct(_ratio(_delta(prev, cur, hits), grown))
        return _pct(_ratio(cur.total(hits), cur.total(queries)))
    gauge = cur.first_mean(PREFIX_GAUGE)
    return None if gauge is None or gauge < 0 else gauge * 100.0


def _pct(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100.0


def _acceptance(cur: MetricsSample, prev: MetricsSample | None) -> tuple[float | None, float | None]:
    """(acceptance length, acceptance rate)."""
    if cur.total(VLLM_DRAFTS) is not None or cur.total(VLLM_DRAFT_TOKENS) is not None:
        drafts, accepted, tokens = (_delta(prev, cur, n) for n in (VLLM_DRAFTS, VLLM_ACCEPTED, VLLM_DRAFT_TOKENS))
        if not drafts:   # no drafts in the interval (or a single read): the cumulative figures
            drafts, accepted, tokens = (cur.total(n) for n in (VLLM_DRAFTS, VLLM_ACCEPTED, VLLM_DRAFT_TOKENS))
        length = _ratio(accepted, drafts)
        return None if length is None else 1.0 + length, _ratio(accepted, tokens)
    # SGLang's gauges read 0 before the first speculative batch: that is no figure yet.
    return cur.first_mean(ACCEPT_LEN_GAUGE) or None, cur.first_mean(ACCEPT_RATE_GAUGE) or None


@dataclass(frozen=True)
class Thresholds:
    """When the serving view raises an alert."""

    waiting_s: float = WAITING_ALERT_S
    kv_pct: float = KV_ALERT_PCT


def spark_slices(points: Sequence[tuple[float, ServingFigures]], span_s: float, names: tuple[str, ...],
                 count: int = SPARK_SLICES) -> dict[str, tuple[float, ...]]:
    """Each of `names` over the `span_s` before the last of `points` as `count` equal time slices, each its
    largest value (see ServingHistory.slices)."""
    if not points:
        return {name: () for name in names}
    start, width, last = _grid(points, span_s, count)
    slot = [min(last, int((at - start) / width)) for at, _ in points]
    out = {}
    for name in names:
        top: list[float | None] = [None] * count
        for i, (_, f) in zip(slot, points):
            value = getattr(f, name)
            if value is not None and i >= 0:
                held = top[i]
                if held is None or value > held:
                    top[i] = value
        first = next((i for i, v in enumerate(top) if v is not None), count)
        out[name] = tuple(v or 0.0 for v in top[first:])
    return out


def _grid(points: Sequence[tuple[float, ServingFigures]], span_s: float, count: int) -> tuple[float, float, int]:
    """Where the slices of `points` lie: the first's start, their width, the last's index."""
    return points[-1][0] - span_s, span_s / count, count - 1


def flat_slices(points: Sequence[tuple[float, ServingFigures]], span_s: float, names: tuple[str, ...],
                values: tuple[float | None, ...], count: int = SPARK_SLICES) -> dict[str, tuple[float, ...]] | None:
    """`spark_slices` of `points` whose figures `names` all hold `values` and no two of which are a slice's width
    apart or more (no slice between the first and the last is empty): each figure's value in every slice from the
    first point's on, worked out from the first and last points alone. None where that cannot be so (a point before
    the span)."""
    start, width, last = _grid(points, span_s, count)
    if points[0][0] < start:
        return None
    filled = count - min(last, int((points[0][0] - start) / width))
    return {name: () if value is None else (value or 0.0,) * filled for name, value in zip(names, values)}


class Sparks(Mapping[str, tuple[float, ...]]):
    """A read's sparklines (figure -> its slices), worked out from the history as it was at that read only when
    first asked for: each read of every run makes one, and only the cards in view draw theirs."""

    def __init__(self, points: Sequence[tuple[float, ServingFigures]], span_s: float,
                 names: tuple[str, ...], count: int = SPARK_SLICES,
                 slices: dict[str, tuple[float, ...]] | None = None) -> None:
        self._points, self._span_s, self._names, self._count = points, span_s, names, count
        self._slices = slices   # given where they were known at once (`ServingHistory.card_sparks`)

    def _computed(self) -> dict[str, tuple[float, ...]]:
        if self._slices is None:
            self._slices = spark_slices(self._points, self._span_s, self._names, self._count)
            self._points = ()
        return self._slices

    def __getitem__(self, name: str) -> tuple[float, ...]:
        return self._computed()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())

    def __repr__(self) -> str:
        return repr(self._computed())


class ServingHistory:
    """One run's reads of /metrics: the latest figures, the last minutes of each (sparklines), and its alerts.

    `add` takes each successful read, `failed` each read that got no answer, `end` says the server is ending or gone
    (its silence is then no news); `alerts` says what is wrong now. An alert is said once until it clears: KV use
    must fall KV_CLEAR_PCT below the threshold, preemptions stop for PREEMPT_CLEAR_S (a server working at its limit
    crosses the line every few reads).
    """

    def __init__(self, thresholds: Thresholds = Thresholds(), span_s: float = HISTORY_S) -> None:
        self.thresholds = thresholds
        self.span_s = span_s
        self.points: deque[tuple[float, ServingFigures]] = deque()
        self.latest: ServingFigures | None = None
        self._prev: MetricsSample | None = None
        self._waiting_since: float | None = None
        self.answered = False          # /metrics answered at least once
        self.failing: str | None = None   # why the last read got no answer (None: it answered)
        self.failed_at: float | None = None
        self.ignored: tuple[str, ...] = ()   # the latest read's values left out as impossible (`sane_values`)
        self.ended = False
        self.broken: str | None = None   # why the last read could not be taken in (a fault of ours, not the server's)
        self._kv_high = False
        self._preempted: tuple[float, float] | None = None   # (when, rate) of the latest read with preemptions
        # The card's sparkline figures as every read since `since` held them, no read a slice's width after the one
        # before: (values, since). An idle server's reads all hold the same: its sparklines are known without work.
        self._flat: tuple[tuple[float | None, ...], float] | None = None

    def add(self, sample: MetricsSample) -> ServingFigures:
        now = figures(sample, self._prev)
        values = _spark_values(now)
        if self._flat is None or values != self._flat[0] or \
                (self.points and sample.at - self.points[-1][0] >= self.span_s / SPARK_SLICES):
            self._flat = (values, sample.at)
        self._prev = sample
        self.latest = now
        self.answered = True
        self.failing = None
        self.failed_at = None
        self.ignored = sample.refused
        self.broken = None
        limit = self.thresholds.kv_pct
        if now.kv_pct is None or now.kv_pct < limit - KV_CLEAR_PCT:
            self._kv_high = False
        elif now.kv_pct >= limit:
            self._kv_high = True
        if now.preempt_per_s:
            self._preempted = (sample.at, now.preempt_per_s)
        elif self._preempted is not None and sample.at - self._preempted[0] >= PREEMPT_CLEAR_S:
            self._preempted = None
        if not now.waiting:
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = sample.at
        self.points.append((sample.at, now))
        while self.points and self.points[0][0] < sample.at - self.span_s:
            self.points.popleft()
        return now

    def failed(self, at: float, reason: str) -> None:
        if self.failing is None:
            self.failed_at = at
        self.failing = reason

    def end(self) -> None:
        """The server is ending or gone (stopped, killed, its time limit): /metrics not answering is expected."""
        self.ended = True

    def series(self, name: str) -> list[float]:
        """The values of one figure over the span (absent reads left out)."""
        return [v for _, f in self.points if (v := getattr(f, name)) is not None]

    def slices(self, name: str, count: int = SPARK_SLICES) -> tuple[float, ...]:
        """One figure over the span as `count` equal time slices ending at the latest read, each its largest
        value (a queue that built up and drained within a slice still shows); slices before the first read are
        left out, so a young run's line grows from the left."""
        return self.sparks((name,), count)[name]

    def sparks(self, names: tuple[str, ...], count: int = SPARK_SLICES) -> dict[str, tuple[float, ...]]:
        """`slices` of several figures."""
        return spark_slices(self.points, self.span_s, names, count)

    def card_sparks(self) -> Sparks:
        """The card's sparklines (SPARK_FIGURES) as the history is now: worked out when first drawn, or at once where
        every read over the span held the same figures (an idle server's: then telling whether they changed since the
        last read costs nothing, where working them out from two minutes of reads cost each read of each run)."""
        if self._flat is not None and self.points and self._flat[1] <= self.points[0][0]:
            ends = (self.points[0], self.points[-1])
            slices = flat_slices(ends, self.span_s, SPARK_FIGURES, self._flat[0])
            if slices is not None:
                return Sparks((), self.span_s, SPARK_FIGURES, slices=slices)
        return Sparks(tuple(self.points), self.span_s, SPARK_FIGURES)

    def alerts(self, now: float) -> list[str]:
        """What is wrong now, one line each."""
        out: list[str] = []
        if self.broken is not None:
            out.append(f"serving view failed ({self.broken}); still reading")
        if self.failing is not None and not self.ended:
            out.append(f"/metrics {'stopped answering' if self.answered else 'does not answer'} ({self.failing})")
        f = self.latest
        if f is None:
            return out
        t = self.thresholds
        if self._waiting_since is not None and now - self._waiting_since >= t.waiting_s:
            out.append(f"{f.waiting or 0:.0f} waiting for {now - self._waiting_since:.0f}s")
        if self._kv_high and f.kv_pct is not None:
            out.append(f"KV {f.kv_pct:.0f}% ({'≥' if f.kv_pct >= t.kv_pct else 'was ≥'} {t.kv_pct:.0f}%)")
        if self._preempted is not None:
            at, rate = self._preempted
            out.append(f"preemptions rising ({f.preempt_per_s:.1f}/s)" if f.preempt_per_s else
                       f"preemptions ({rate:.1f}/s {max(0.0, now - at):.0f}s ago)")
        return out


def figure_texts(f: ServingFigures | None) -> list[tuple[str, str]]:
    """(label, value) of each figure, as the card and `specmon metrics` print them; "—" where absent."""
    def num(v: float | None, spec: str, unit: str = "") -> str:
        return "—" if v is None else f"{v:{spec}}{unit}"

    f = f or ServingFigures()
    accept = "—" if f.accept_len is None and f.accept_rate is None else \
        num(f.accept_len, ".2f") + ("" if f.accept_rate is None else f" ({f.accept_rate * 100:.0f}%)")
    return [("running", num(f.running, ".0f")), ("waiting", num(f.waiting, ".0f")), ("KV", num(f.kv_pct, ".0f", "%")),
            ("tok/s", num(f.tok_s, ".0f")), ("prefix hit", num(f.prefix_hit_pct, ".0f", "%")),
            ("preempt", num(f.preempt_per_s, ".1f", "/s")), ("accept", accept)]


SPARK_FIGURES = ("running", "waiting", "kv_pct", "tok_s")
_spark_values = attrgetter(*SPARK_FIGURES)   # a read's figures that the card's sparklines show, as one tuple


@dataclass(frozen=True)
class ServingUpdate:
    """One run's serving view now."""

    profile: str
    run_id: str
    figures: ServingFigures | None = None
    history: Mapping[str, tuple[float, ...]] = field(default_factory=dict)   # figure -> its sparkline's slices
    alerts: tuple[str, ...] = ()
    note: str | None = None          # e.g. "no /metrics (HTTP 404)": said once, reading stopped
    raised: tuple[str, ...] = ()     # alerts that appeared with this read (for a toast)
    ignored: tuple[str, ...] = ()    # values of this read left out as impossible, `name value` each

    def to_dict(self) -> dict[str, object]:
        return {"profile": self.profile, "run_id": self.run_id,
                **(self.figures.to_dict() if self.figures else {}), "alerts": list(self.alerts),
                **({"note": self.note} if self.note else {}), **({"ignored": list(self.ignored)} if self.ignored else {})}

    def ignored_text(self, most: int = 3) -> str | None:
        """`ignored impossible values: vllm:kv_cache_usage_perc 1e+308, … (+2 more)`; None when there are none."""
        if not self.ignored:
            return None
        more = len(self.ignored) - most
        return "ignored impossible values: " + ", ".join(self.ignored[:most]) + (f" (+{more} more)" if more > 0 else "")


def update_of(profile: str, run_id: str, history: ServingHistory, now: float, raised: tuple[str, ...] = (),
              note: str | None = None) -> ServingUpdate:
    return ServingUpdate(profile, run_id, history.latest,
                         history.card_sparks(),
                         tuple(history.alerts(now)), note, raised, history.ignored)


SPARK_TOPS = {"kv_pct": 100.0}   # a sparkline's scale where it is not its own largest value

Part = tuple[str, bool]   # a piece of a card's line, and whether it is a sparkline (the card shows those dim)


def card_figure_lines(update: ServingUpdate, sparks: bool = True) -> list[tuple[Part, ...]]:
    """A ready run's figures as its card shows them, in pieces. Plain, two lines: `run 3 wait 0 KV 41% 812 tok/s` and
    `hit 12% preempt 0.0/s acc 2.84 (46%)` (acceptance only where the server has it; each line fits the 38 cells of
    an 80-column card, where `812 tok/s hit … acc 2.84 (46%)` wrapped). With `sparks`, three
    lines of at most two sparklines each, so that they fit a card (three on one line never did, at any width):
    `run 3 ▁▃█ wait 0 …`, `KV 41% … 812 tok/s …`, `hit 12% preempt 0.0/s acc …`; each sparkline (of its slices)
    padded to its full width (a line whose length changes would ask for a relayout of the whole screen)."""
    texts = dict(figure_texts(update.figures))

    def spark(name: str) -> tuple[Part, ...]:
        if not sparks:
            return ()
        return (" ", False), (sparkline(update.history.get(name, ()), SPARK_SLICES, SPARK_TOPS.get(name)), True)

    accept = f" acc {texts['accept']}" if texts["accept"] != "—" else ""
    rest = f"hit {texts['prefix hit']} preempt {texts['preempt']}{accept}"
    if sparks:
        return [(("run " + texts["running"], False), *spark("running"), (" wait " + texts["waiting"], False),
                 *spark("waiting")),
                (("KV " + texts["KV"], False), *spark("kv_pct"), (f" {texts['tok/s']} tok/s", False), *spark("tok_s")),
                ((rest, False),)]
    return [((f"run {texts['running']} wait {texts['waiting']} KV {texts['KV']} {texts['tok/s']} tok/s", False),),
            ((rest, False),)]


def sweep_live_line(client: SweepProgress, server: ServingUpdate | None) -> str:
    """The level in progress as the client drives it beside the server's own view of it (its /metrics), so that
    queueing shows as it starts: `client C=16: 16 in flight · server: running 12 waiting 4 KV 97% ⚠ KV 97% (≥ 95%)`."""
    load = f"rate {client.rate:g}/s" if client.rate is not None else f"C={client.concurrency}"
    alerts = "" if server is None or not server.alerts else " ⚠ " + " · ".join(server.alerts)
    if server is None or (server.figures is None and server.note is None and not alerts):
        seen = "reading /metrics…"
    elif server.note is not None:
        seen = server.note
    elif server.figures is None:
        seen = alerts.removeprefix(" ⚠ ")
    else:
        texts = dict(figure_texts(server.figures))
        seen = f"running {texts['running']} waiting {texts['waiting']} KV {texts['KV']}{alerts}"
    return f"client {load}: {client.in_flight} in flight · server: {seen}"
