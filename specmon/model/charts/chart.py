"""What a sweep chart shows, whoever draws it (the TUI's terminal chart, the report's image): one symbol per series
at its measured levels, round value ticks from zero, and the height of a curve at the crossover (loads on a log
axis), so the crossing can be marked where the curves meet."""

from __future__ import annotations

import math
from collections.abc import Sequence

# Each series' symbol at its measured levels: the terminal glyph and the matplotlib marker of the same shape, so
# the TUI and the report look alike. A series keeps its symbol as others are added.
SERIES_SYMBOLS = (("●", "o"), ("■", "s"), ("▲", "^"), ("◆", "D"), ("✚", "P"), ("★", "*"))


def series_symbol(index: int) -> tuple[str, str]:
    """(terminal glyph, matplotlib marker) of the `index`-th series."""
    return SERIES_SYMBOLS[index % len(SERIES_SYMBOLS)]


def colour_index(index: int, colours: int = len(SERIES_SYMBOLS)) -> int:
    """The `index`-th series' colour among `colours`: past the symbols' cycle (a grid's 7th to 12th series) each
    repeated symbol takes the next colour, so no two of 12 series look alike."""
    return (index + index // len(SERIES_SYMBOLS)) % colours


def best_envelope(curves: Sequence[Sequence[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The best value at each load any curve measured (a tuning grid's best setting per level), sorted by load."""
    best: dict[float, float] = {}
    for points in curves:
        for x, y in points:
            best[x] = max(y, best.get(x, y))
    return sorted(best.items())


def round_ticks(top: float, most: int) -> list[float]:
    """Ticks 0, s, 2s, ... up to the first at or above `top`, with s a round step (1, 2 or 5 × 10^k) and at most
    `most` ticks (at least two)."""
    if not math.isfinite(top) or top <= 0:
        return [0.0, 1.0]
    intervals = max(1, most - 1)
    raw = top / intervals
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


def tick_text(value: float) -> str:
    """A tick's label: 0, 250, 1.5, 12k."""
    if value >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}"


def value_at(points: Sequence[tuple[float, float]], load: float) -> float | None:
    """A curve's value at `load`, interpolated between its measured levels on a log load axis (as the chart draws
    it); None outside the measured range or for no points."""
    if not points or load <= 0:
        return None
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= load <= x1 and x0 > 0:
            if x1 == x0:
                return y0
            t = (math.log10(load) - math.log10(x0)) / (math.log10(x1) - math.log10(x0))
            return y0 + t * (y1 - y0)
    return points[0][1] if len(points) == 1 and points[0][0] == load else None


def spaced_labels(columns: Sequence[float], labels: Sequence[str]) -> list[int]:
    """The indices of the axis labels to write, centred at `columns` (in order), so that no two touch: the first and
    the last always (on a log load axis they say its range), those between where they fit with a space either side.
    A chart's library would drop colliding labels of its own choosing (the top level's among them) or run them
    together into another number."""
    if len(labels) <= 2:
        return list(range(len(labels)))

    def span(i: int) -> tuple[float, float]:
        start = columns[i] - len(labels[i]) / 2
        return start, start + len(labels[i])

    kept = [0]
    last = span(len(labels) - 1)
    for i in range(1, len(labels) - 1):
        start, end = span(i)
        if start >= span(kept[-1])[1] + 1 and end + 1 <= last[0]:   # a free column either side
            kept.append(i)
    return [*kept, len(labels) - 1]
