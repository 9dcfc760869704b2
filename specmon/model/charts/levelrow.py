"""A sweep level as the chart and the level table show it: one frozen row built from a finished level (a result
file's, or another tool's file read by specmon.model.sweeps.formats), the level still running (the generator's ~4 Hz
summary) or an experiment's level over its repeats. The TUI's Sweep pane, `demo --headless` and `compare`'s chart
read rows, never level records. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from specmon.model.experiments.verdict import LevelSummary
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import SweepProgress, falling_behind
from specmon.model.text.numbers import NA, fmt_ms, fmt_number

LEVEL_COLUMNS: tuple[str, ...] = ("series", "C", "out tok/s", "ITL p99", "tok/chunk", "TTFT p50", "TPOT p50", "client")

# What a chart's y axis can show: the row's figure and the axis name.
CHART_METRICS = {"throughput": "out tok/s", "goodput": "goodput req/s"}


@dataclass(frozen=True)
class LevelRow:
    """One level of a series. `rate` is the offered request rate of an open-loop level (its x value; the
    concurrency is then the cap), None in a closed-loop one. `client` is the table's last column: "live" (still
    running: running estimates), "OVER" (open loop: the server did not keep up with the offered rate), "BEHIND"
    (open loop: the generator did not keep its schedule), the client flag (ClientHealth.flag: BOUND, or SKEW with
    its figure), NA when the file's tool recorded no client health, else "ok"."""

    concurrency: int
    output_throughput: float | None = None
    rate: float | None = None
    goodput: float | None = None
    itl_p99_ms: float | None = None
    tokens_per_chunk: float | None = None
    ttft_p50_ms: float | None = None
    tpot_p50_ms: float | None = None
    client: str = "ok"

    @classmethod
    def of_level(cls, level: LevelResult) -> LevelRow:
        """A finished level: specmon's own, or another tool's file's (its client health unrecorded)."""
        if level.over_capacity:
            client = "OVER"
        elif level.behind:
            client = "BEHIND"
        else:
            client = level.client.flag or ("ok" if level.client.recorded else NA)
        return cls(concurrency=level.concurrency, output_throughput=level.output_throughput, rate=level.rate,
                   goodput=level.goodput, itl_p99_ms=level.itl_ms.p99, tokens_per_chunk=level.tokens_per_chunk,
                   ttft_p50_ms=level.ttft_ms.p50, tpot_p50_ms=level.tpot_ms.p50, client=client)

    @classmethod
    def of_live(cls, progress: SweepProgress) -> LevelRow:
        """The level in progress, from the generator's running summary."""
        return cls(concurrency=progress.concurrency, output_throughput=progress.output_tok_s, rate=progress.rate,
                   tokens_per_chunk=progress.tokens_per_chunk, ttft_p50_ms=progress.ttft_p50_ms,
                   client="BEHIND" if falling_behind(progress) else "live")

    @classmethod
    def of_repeats(cls, level: LevelSummary) -> LevelRow:
        """An experiment's level: the mean output tok/s over its repeats so far and their TTFT and TPOT (as its
        report gives them; no ITL p99 is kept over repeats), flagged when any repeat was."""
        tpc = level.acceptance.client_tokens_per_chunk if level.acceptance is not None else None
        return cls(concurrency=level.concurrency, output_throughput=level.mean, tokens_per_chunk=tpc,
                   ttft_p50_ms=level.ttft_p50_ms, tpot_p50_ms=level.tpot_p50_ms, client=level.client_flag or "ok")

    @property
    def load(self) -> float:
        """The row's place on the x axis: the offered rate (open loop) or the concurrency."""
        return self.rate if self.rate is not None else float(self.concurrency)

    def value(self, metric: str = "throughput") -> float | None:
        """The chart's y value: output tok/s ("throughput") or requests/s meeting the SLO ("goodput")."""
        if metric not in CHART_METRICS:
            raise ValueError(f"unknown chart metric {metric!r}")
        return self.goodput if metric == "goodput" else self.output_throughput

    def cells(self, series: str) -> tuple[str, ...]:
        """The row of the level table (LEVEL_COLUMNS)."""
        return (
            series,
            f"{self.rate:g}/s" if self.rate is not None else str(self.concurrency),
            fmt_number(self.output_throughput),
            fmt_ms(self.itl_p99_ms),
            fmt_number(self.tokens_per_chunk, 2),
            fmt_ms(self.ttft_p50_ms),
            fmt_ms(self.tpot_p50_ms),
            self.client,
        )


def rows_of(levels: Iterable[LevelResult]) -> list[LevelRow]:
    """The rows of finished levels, in their order."""
    return [LevelRow.of_level(level) for level in levels]


def series_points(rows: Iterable[LevelRow], metric: str = "throughput") -> list[tuple[float, float]]:
    """(load, value) points of a series, sorted by load, leaving out rows without the value."""
    return sorted((row.load, value) for row in rows if (value := row.value(metric)) is not None)


def is_rate_series(series: Iterable[Sequence[LevelRow]]) -> bool:
    """Whether the chart's rows are open-loop levels (x = request rate) rather than concurrency levels."""
    return any(row.rate is not None for rows in series for row in rows)


def distinct_width(names: Sequence[str], floor: int = 12) -> int:
    """The narrowest width, `floor` or more, at which `names` cut with an ellipsis (the end giving way) all stay
    distinct: a tuning grid's `steps=1 topk=1` and `steps=1 topk=4` cut to `steps=1 topk…` would read as one."""
    widest = max((len(n) for n in names), default=0)
    for width in range(floor, widest):
        if len({n if len(n) <= width else n[:width - 1] for n in names}) == len(set(names)):
            return width
    return max(floor, widest)


def fit_columns(widths: Sequence[int], room: int, gap: int = 2, min_first: int = 12) -> tuple[int, int]:
    """How a table's columns (most telling first, each `widths[i]` cells of text plus `gap` of padding) fit in `room`
    cells: (the first column's width, how many columns show). Columns after those that fit whole are left out rather
    than cut, since a figure cut short reads as another figure (C=16 shown as `1`). The first column (the series'
    name) gives up cells, down to `min_first` (its names then end in an ellipsis: they are names, not figures), only
    where that brings in another column. A `room` of 0 or less (not laid out yet) keeps them all, whole."""
    if room <= 0 or not widths:
        return (widths[0] if widths else 0), len(widths)

    def count(first: int) -> int:
        used = first + gap
        for shown, width in enumerate(widths[1:], start=1):
            used += width + gap
            if used > room:
                return shown
        return len(widths)

    whole = count(widths[0])
    shrunk = count(min(widths[0], min_first))
    if shrunk <= whole:
        return widths[0], whole
    others = sum(width + gap for width in widths[1:shrunk])
    return max(min_first, min(widths[0], room - others - gap)), shrunk
