"""Comparing sweeps: align levels by concurrency, throughput ratio per level, crossover concurrency. Pure.

The question this answers: "at which concurrency does speculation stop paying?". With a baseline sweep `a` and a
speculative sweep `b`, `crossover(a, b)` is the concurrency where b's output throughput stops being above a's (or
starts being), linearly interpolated between the two measured levels that bracket the sign change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specmon.model.results import LevelResult


@dataclass(frozen=True)
class AlignedLevel:
    """One concurrency with each sweep's level there (None where that sweep did not run it)."""

    concurrency: int
    levels: tuple[LevelResult | None, ...]

    def ratio(self, i: int = 1, base: int = 0) -> float | None:
        """Output throughput of sweep i divided by that of sweep `base`; None if either is missing or zero."""
        a, b = self.levels[base], self.levels[i]
        if a is None or b is None or a.output_throughput <= 0:
            return None
        return b.output_throughput / a.output_throughput


@dataclass(frozen=True)
class Crossover:
    """Where sweep b's output throughput crosses sweep a's."""

    concurrency: float
    b_ahead_before: bool   # True: b led below the crossover (speculation paid, then stopped paying)


def align(*sweeps: Sequence[LevelResult]) -> list[AlignedLevel]:
    """All concurrencies of all sweeps, ascending; a repeated concurrency within a sweep keeps the last level."""
    by_c = [{lv.concurrency: lv for lv in levels} for levels in sweeps]
    all_c = sorted(set().union(*(m.keys() for m in by_c)))
    return [AlignedLevel(c, tuple(m.get(c) for m in by_c)) for c in all_c]


def find_crossover(a: Sequence[LevelResult], b: Sequence[LevelResult]) -> Crossover | None:
    """The first concurrency where b - a output throughput changes sign, over concurrencies both sweeps ran.

    Linear interpolation in concurrency between the bracketing levels; a level where both are exactly equal and
    the sign differs on either side is the crossover itself. None when one stays ahead throughout.
    """
    common = [row for row in align(a, b) if row.levels[0] is not None and row.levels[1] is not None]
    diffs = [(row.concurrency, row.levels[1].output_throughput - row.levels[0].output_throughput)  # type: ignore[union-attr]
             for row in common]
    prev: tuple[int, float] | None = None   # last level with a non-zero difference
    tie_at: int | None = None                # a level with exactly equal throughput since then
    for c, d in diffs:
        if d == 0:
            tie_at = tie_at if tie_at is not None else c
            continue
        if prev is not None and (prev[1] > 0) != (d > 0):
            c0, d0 = prev
            x = float(tie_at) if tie_at is not None else c0 + (c - c0) * d0 / (d0 - d)
            return Crossover(x, b_ahead_before=d0 > 0)
        prev, tie_at = (c, d), None
    return None


def crossover(a: Sequence[LevelResult], b: Sequence[LevelResult]) -> float | None:
    """The interpolated concurrency where b's output throughput crosses a's, or None if it never does."""
    x = find_crossover(a, b)
    return None if x is None else x.concurrency
