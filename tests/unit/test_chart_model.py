"""The sweep chart's pure rules (shared by the TUI and the report's image): round ticks from zero, the height of a
curve at the crossover on a log load axis."""

from __future__ import annotations

import pytest

from specmon.model.charts.chart import round_ticks, tick_text, value_at


@pytest.mark.parametrize(("top", "most", "ticks"), [
    (770.0, 5, [0, 200, 400, 600, 800]),     # the demo's chart (the odd 92.6, 199.8, ... ticks of issue 26)
    (770.0, 3, [0, 500, 1000]),
    (6.3, 6, [0, 2, 4, 6, 8]),               # goodput req/s
    (0.42, 4, [0, 0.2, 0.4, 0.6]),
    (1000.0, 6, [0, 200, 400, 600, 800, 1000]),
    (0.0, 5, [0, 1]),                        # nothing measured yet
])
def test_round_ticks_are_round_cover_the_top_and_keep_to_the_count(top: float, most: int, ticks: list[float]) -> None:
    assert round_ticks(top, most) == ticks
    assert len(ticks) <= max(2, most)


def test_tick_text() -> None:
    assert [tick_text(v) for v in (0, 250, 1.5, 12_000)] == ["0", "250", "1.5", "12k"]


def test_value_at_interpolates_on_a_log_load_axis() -> None:
    curve = [(1.0, 100.0), (4.0, 300.0), (16.0, 500.0)]
    assert value_at(curve, 2.0) == pytest.approx(200.0)      # half way between 1 and 4 on a log axis
    assert value_at(curve, 4.0) == pytest.approx(300.0)
    assert value_at(curve, 32.0) is None and value_at([], 2.0) is None and value_at(curve, 0.0) is None


def test_the_load_axis_writes_the_labels_that_fit_whole_and_always_its_ends() -> None:
    """Issue 35 #8: on a narrow chart the library dropped colliding labels of its own choosing: `1 2 4 16 32` under
    levels up to 64 (the top level's label gone, so the axis's range was wrong). Labels that would touch are left
    out from the middle; the first and last stay."""
    from specmon.model.charts.chart import spaced_labels

    labels = ["1", "2", "4", "8", "16", "32", "64"]
    assert spaced_labels([1, 4, 7, 10, 13, 16, 19], labels) == [0, 1, 2, 3, 4, 5, 6]   # 3 columns apart: all fit
    assert spaced_labels([1, 3, 6, 8, 11, 13, 16], labels) == [0, 1, 2, 3, 4, 6]     # 32 would touch 16
    assert spaced_labels([1, 2, 3, 4, 5, 6, 8], labels) == [0, 2, 6]                   # every other, then the end
    assert spaced_labels([0, 1], ["1", "2"]) == [0, 1]
