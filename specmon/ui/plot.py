"""A sweep chart drawn with plotext, for the TUI's Sweep pane and `specmon compare`: each series a line at the
terminal's finest resolution (braille dots) with its own symbol at the measured levels, a log load axis ticked at
those levels, round value ticks from zero, and the crossover marked where the curves meet and labelled there."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specmon.model.charts.chart import (
    best_envelope,
    colour_index,
    round_ticks,
    series_symbol,
    spaced_labels,
    tick_text,
    value_at,
)
from specmon.model.sweeps.compare import load_words
from specmon.ui.rows import CrossoverMark

# Fixed series colours so a series keeps its colour as others are added (and snapshots stay stable).
SERIES_COLOURS = ("cyan", "orange", "green", "magenta", "blue", "red")
ENVELOPE_COLOUR = (255, 215, 0)   # gold: the best of every series at each level (a tuning grid's)

Points = Sequence[tuple[float, float]]


def draw_sweeps(plt: Any, series: Sequence[tuple[str, Points]], crossing: CrossoverMark | None, *, height: int,
                width: int, legend: bool = True, background: object = None, envelope: bool = False) -> bool:
    """Draw `series` (name, (load, value) points sorted by load; the i-th keeps the i-th symbol and colour even when
    it has no points) on plotext's `plt`, and the crossing if any: `height` is the rows the plot area has, its frame's two
    lines included (for the number of value ticks), `width` the chart's columns. Without `legend` the
    symbols go unnamed (a table beside the chart names them). `background` is the colour behind the crossing's
    label (default: plotext's canvas colour). With `envelope` the best value at each level is drawn under the
    series as a heavy line of its own colour, named "best" in the legend. Returns whether the crossing could be marked where the curves meet
    (False: it is a plain vertical line)."""
    drawn = [(index, name, points) for index, (name, points) in enumerate(series) if points]
    for index, _, points in drawn:   # the lines first, so no line covers another series' symbol
        if len(points) > 1:
            plt.plot([math.log10(x) for x, _ in points], [y for _, y in points], marker="braille",
                     color=SERIES_COLOURS[colour_index(index)])
    best = best_envelope([points for _, _, points in drawn]) if envelope else []
    if len(best) > 1:   # over the series' lines, under their symbols
        plt.plot([math.log10(x) for x, _ in best], [y for _, y in best], marker="hd", color=ENVELOPE_COLOUR,
                 label="best" if legend else None)
    for index, name, points in drawn:
        # Bold sets the symbols apart from the line's dots (and an SVG export then places each at its own cell).
        plt.scatter([math.log10(x) for x, _ in points], [y for _, y in points], marker=series_symbol(index)[0],
                    color=SERIES_COLOURS[colour_index(index)], style="bold", label=name if legend else None)
    if not drawn:
        return False
    # The load is drawn on a log axis by hand: plotext's own log scale re-applies itself on every rebuild of a
    # kept figure (a resize then fails with a math domain error).
    shown = sorted({x for _, _, points in drawn for x, _ in points})
    low, high = math.log10(shown[0]), math.log10(shown[-1])
    pad = (high - low) * 2 / max(10, width - 8) or 0.5   # two columns either side: the end symbols clear the axes
    plt.xlim(low - pad, high + pad)
    # About one tick every other row (6 at most), and never more ticks than rows: two labels on one row are drawn
    # one over the other, which one on top as plotext's hashing of the run falls.
    rows = max(2, height - 2)   # `height` counts the frame's two lines too
    ticks = round_ticks(max(y for _, _, points in drawn for _, y in points), min(6, rows, max(2, height // 2 + 2)))
    # The levels' labels that fit whole, the first and the last always (the plot's columns: the width less the value
    # labels and the frame).
    cells = max(1, width - len(tick_text(ticks[-1])) - 3)
    labels = [f"{x:g}" for x in shown]
    kept = spaced_labels([(math.log10(x) - low + pad) / (high - low + 2 * pad) * cells for x in shown], labels)
    plt.xticks([math.log10(shown[i]) for i in kept], [labels[i] for i in kept])
    plt.yticks(ticks, [tick_text(t) for t in ticks])
    plt.ylim(0, ticks[-1])
    if crossing is None or crossing.concurrency <= 0:
        return False
    curves = {name: points for _, name, points in drawn}
    heights = [y for name in (crossing.ahead_below, crossing.ahead_above) if name in curves
               and (y := value_at(curves[name], crossing.concurrency)) is not None]
    at = math.log10(crossing.concurrency)
    if not heights:
        plt.vline(at, "red")
        return False
    y = sum(heights) / len(heights)
    plt.plot([at, at], [0, y], marker="braille", color="red")   # a dotted drop to the load axis
    plt.text("✕", at, y, color="red", style="bold", background=background)
    # The load written one row under the cross, from the column after the drop: there the curves have left (they
    # meet at the cross), so the words cover none of the level symbols beside it.
    column = (high - low + 2 * pad) / max(1, width - len(tick_text(ticks[-1])) - 3)
    row = ticks[-1] / max(1, rows - 1)
    plt.text(load_words(crossing.concurrency, crossing.mode), at + column, y - row,
             color="red", style="bold", background=background, alignment="left")
    return True
