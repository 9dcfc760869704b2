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
