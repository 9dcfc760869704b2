"""The fleet summary line and which runs need a look first (specmon.model.runs.fleet): pure rules."""

from __future__ import annotations

from specmon.model.runs.fleet import filter_line, fleet_matches, fleet_summary, needs_attention


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


def test_the_filter_matches_a_runs_name_host_or_state_word_whatever_the_case() -> None:
    assert fleet_matches("gpu03", "llama-02", ["gpu03"], "ready", False)
    assert fleet_matches("LLAMA-1", "llama-17", ["gpu02"], "ready", False)
    assert fleet_matches("failed", "llama-37", ["gpu06"], "failed", False)
    assert fleet_matches(" gpu07 ", "llama-08", ["gpu01", "gpu07"], "loading", False)   # a second node's host
    assert not fleet_matches("gpu03", "llama-04", ["gpu05"], "ready", False)
    assert not fleet_matches("llama-1", "llama-01", ["gpu02"], "ready", False)


def test_the_filter_reads_states_as_the_summary_counts_them() -> None:
    """A stalled load is "stalled" (and not "loading"), a profile without a run "not running"."""
    assert fleet_matches("stalled", "a", ["h"], "loading", True)
    assert not fleet_matches("loading", "a", ["h"], "loading", True)
    assert fleet_matches("not running", "a", ["h"], "idle", False)


def test_an_empty_filter_matches_every_run_and_a_set_one_says_how_many_it_shows() -> None:
    assert fleet_matches("", "a", [], "ready", False) and fleet_matches("  ", "a", [], "failed", False)
    assert filter_line(4, 64, " gpu03") == "4 of 64 shown · filter: gpu03"
