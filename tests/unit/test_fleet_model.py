"""The fleet summary line and which runs need a look first (specmon.model.runs.fleet): pure rules."""

from __future__ import annotations

from specmon.model.runs.fleet import fleet_summary, needs_attention


def test_the_summary_counts_each_run_once_with_a_stalled_load_as_stalled() -> None:
    runs = [("ready", False)] * 41 + [("loading", False)] * 3 + [("failed", False)] + [("loading", True)] * 2
    assert fleet_summary(runs) == "41 ready · 3 loading · 1 failed · 2 stalled"


def test_the_summary_keeps_one_order_whatever_order_the_runs_come_in() -> None:
    runs = [("lost", False), ("idle", False), ("launching", True), ("ready", False), ("stopped", False)]
    assert fleet_summary(runs) == "1 ready · 1 stopped · 1 lost · 1 stalled · 1 not running"
    assert fleet_summary(reversed(runs)) == fleet_summary(runs)


def test_a_summary_too_long_for_its_line_drops_the_spaces_around_its_separators() -> None:
    runs = [("ready", False)] * 58 + [("loading", False)] * 3 + [("failed", False)] + [("loading", True)] * 2
    assert fleet_summary(runs, width=40) == "58 ready·3 loading·1 failed·2 stalled"
    assert fleet_summary(runs, width=80) == "58 ready · 3 loading · 1 failed · 2 stalled"


def test_failed_ended_lost_and_stalled_runs_need_a_look_and_healthy_ones_do_not() -> None:
    assert [needs_attention(s, stalled) for s, stalled in
            [("failed", False), ("exited", False), ("lost", False), ("loading", True), ("launching", True)]] == [True] * 5
    assert [needs_attention(s, stalled) for s, stalled in
            [("ready", False), ("loading", False), ("stopped", False), ("idle", False), ("stopping", False)]] == [False] * 5
