"""Numbers as people read them, shared by the TUI, the headless commands and the model's own messages. Pure."""

from __future__ import annotations

import math
from collections.abc import Iterable

NA = "—"
SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Iterable[float], width: int, top: float | None = None) -> str:
    """The last `width` values as block characters scaled to 0..`top` (default: their largest), padded on the left
    with spaces to `width` (a line whose length changes would ask for a relayout). A scale that is not a positive
    finite number shows every value as the lowest block."""
    shown = list(values)[-width:] if width > 0 else []
    peak = max(shown, default=0.0) if top is None else top
    if not (peak > 0 and math.isfinite(peak)):
        return (SPARK[0] * len(shown)).rjust(width)
    last = len(SPARK) - 1

    def block(v: float) -> str:   # a value past the top is the top; NaN the lowest (never int() of inf or NaN)
        part = v / peak
        return SPARK[last] if part >= 1 else SPARK[max(0, int(part * last + 0.5))] if part > 0 else SPARK[0]

    return "".join(block(v) for v in shown).rjust(width)


def fmt_count(n: float | None) -> str:
    """A count a person can read at a glance: `950`, `12.3k`, `1.25M`."""
    if n is None:
        return NA
    value = float(n)
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= limit:
            scaled = value / limit
            return f"{scaled:.3g}{suffix}" if scaled < 100 else f"{scaled:.0f}{suffix}"
    return f"{value:.0f}"


def counted(n: int, noun: str) -> str:
    """`1 finished level`, `2 finished levels`: a count and its noun (plural by an `s`)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def fmt_number(value: float | None, digits: int = 1) -> str:
    """A fixed-point number, NA when unknown."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NA
    return f"{value:,.{digits}f}"


def fmt_shards(done: int | None, total: int | None) -> str:
    """`5/8` shards, or NA before the loader said how many there are."""
    if not total:
        return NA
    return f"{done or 0}/{total}"


def fmt_ms(value: float | None) -> str:
    """Milliseconds with a sensible precision: `8.41ms`, `143ms`, `1.20s`."""
    if value is None:
        return NA
    if value >= 1000:
        return f"{value / 1000:.2f}s"
    if value >= 100:
        return f"{value:.0f}ms"
    return f"{value:.2f}ms"
