"""The TUI's rules on its plain state (specmon.ui.state), driven without Textual: what a user sees change, what rings,
what a key refuses, which runs a sweep offers."""

from __future__ import annotations

from specmon.model.charts.levelrow import LevelRow
from specmon.model.machine.env import EnvReport
from specmon.model.runs.runstatus import RunStatus
from specmon.model.server.serving import ServingUpdate
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress
from specmon.ui import state as screen
from specmon.ui.rows import LogEntry, ServerRow


def two_runs(selected: str = "base") -> screen.ScreenState:
    return screen.initial_state(["base", "eagle"], selected, log_lines=5)


def test_a_run_that_becomes_ready_rings_once_and_a_run_found_ready_at_start_does_not() -> None:
    state = two_runs()
    assert screen.rows_changed(state, [ServerRow("base", run_id="r1", state=RunStatus.READY)]) == []   # reattached
    assert screen.rows_changed(state, [ServerRow("eagle", run_id="r2", state=RunStatus.LOADING)]) == []
    toasts = screen.rows_changed(state, [ServerRow("eagle", run_id="r2", state=RunStatus.READY)])
    assert toasts == [screen.Toast("eagle: READY", "information", timeout=8, bell=True)]
    assert screen.rows_changed(state, [ServerRow("eagle", run_id="r2", state=RunStatus.READY)]) == []


def test_a_failure_rings_with_its_reason_and_its_whole_reason_goes_to_the_log_once() -> None:
    state = two_runs(selected="eagle")
    screen.rows_changed(state, [ServerRow("base", run_id="r1", state=RunStatus.LOADING)])
    reason = "CUDA out of memory. Tried to allocate 2.00 GiB " + "x" * 200
    failed = ServerRow("base", run_id="r1", state=RunStatus.FAILED, failure=reason)
    toasts = screen.rows_changed(state, [failed])
    assert [t.severity for t in toasts] == ["error"] and toasts[0].bell and reason in toasts[0].text
    assert [e.text for e in state.logs["base"]] == [f"✗ FAILED: {reason}"]
    screen.rows_changed(state, [failed])   # the same failure again: nothing new in the log
    assert len(state.logs["base"]) == 1
    assert state.pending_log == []   # base is not the selected profile: its Log pane is not shown


def test_log_lines_are_kept_per_profile_and_a_flood_keeps_only_what_the_pane_could_show() -> None:
    state = two_runs()
    assert screen.log_added(state, "eagle", [LogEntry("e1")]) is False
    assert screen.log_added(state, "base", [LogEntry(f"b{i}") for i in range(12)]) is True
    assert [e.text for e in state.logs["base"]] == ["b7", "b8", "b9", "b10", "b11"]
    assert [e.text for e in screen.take_pending_log(state)] == ["b7", "b8", "b9", "b10", "b11"]
    assert state.pending_log == []
    assert screen.log_cleared(state, "base") is True and list(state.logs["base"]) == []


def test_j_and_k_wrap_around_the_cards_as_they_stand_and_the_diff_compares_with_the_one_before() -> None:
    state = screen.initial_state(["a", "b", "c"], "c", log_lines=5)
    assert screen.stepped(state, ["c", "a", "b"], 1) == "a"      # a failed run moved first: order is the cards'
    assert screen.stepped(state, ["a", "b", "c"], 1) == "a"      # wraps at the end
    assert screen.stepped(state, ["a", "b", "c"], -1) == "b"
    assert screen.stepped(state, [], 1) is None
    assert screen.stepped(state, ["a", "b"], 1) == "a"           # a filter hides c: from the first card shown
    assert screen.stepped(state, ["a", "b"], -1) == "b"          # or the last, going back
    assert screen.diff_partner(state) == "a"                     # nothing selected before: the first other
    screen.log_added(state, "c", [LogEntry("x")])
    assert screen.select(state, "b") is True and state.previous == "c" and state.pending_log == []
    assert screen.select(state, "b") is False
    assert screen.diff_partner(state) == "c"


def test_the_sweep_form_offers_ready_servers_and_ticks_the_selected_one_unless_in_the_demo() -> None:
    state = two_runs()
    assert screen.sweep_choice(state, demo=False) == "no ready server to sweep"
    for name in ("base", "eagle"):
        screen.rows_changed(state, [ServerRow(name, run_id=name, state=RunStatus.READY)])
    assert screen.sweep_choice(state, demo=False) == screen.SweepChoice(["base", "eagle"], ["base"])
    assert screen.sweep_choice(state, demo=True) == screen.SweepChoice(["base", "eagle"], ["base", "eagle"])
    screen.sweep_status_changed(state, "level C=4", running=True)
    assert screen.sweep_choice(state, demo=False) == "a sweep is already running (c cancels it)"


def test_launch_and_stop_are_refused_with_the_reason_a_user_needs() -> None:
    assert screen.launch_refusal(ServerRow("a", run_id="r", state=RunStatus.LOADING)) == "a is already loading"
    assert screen.launch_refusal(ServerRow("a", run_id="r", state=RunStatus.FAILED)) is None
    assert screen.stop_refusal(ServerRow("a")) == "a has no running server"
    assert screen.stop_refusal(ServerRow("a", run_id="r", state=RunStatus.FAILED)) == "a has no running server"
    assert screen.stop_refusal(ServerRow("a", run_id="r", state=RunStatus.FAILED, still_running=True)) is None
    assert screen.stop_refusal(ServerRow("a", run_id="r", state=RunStatus.READY)) is None


def test_the_goodput_chart_warns_when_no_sweep_shown_has_goodput_and_shows_its_own_crossover() -> None:
    state = two_runs()
    screen.series_changed(state, "base", [LevelRow(1, 90.0)], crossover=None, goodput_crossover=None)
    toast = screen.chart_metric_toggled(state)
    assert state.chart_metric is screen.ChartMetric.GOODPUT and toast.severity == "warning"
    assert screen.chart_metric_toggled(state).text == "chart: output tok/s"
    screen.series_changed(state, "base", [LevelRow(1, 90.0, goodput=3.0)], crossover=None, goodput_crossover=None)
    assert screen.chart_metric_toggled(state) == screen.Toast("chart: goodput (req/s meeting the SLO)", timeout=2)
    screen.chart_cleared(state)
    assert state.series == {} and state.grid_verdict == ("", "")


def test_set_ups_are_read_only_while_two_runs_are_compared_and_an_old_runs_set_up_is_not_shown() -> None:
    state = two_runs()
    screen.rows_changed(state, [ServerRow("base", run_id="r1", state=RunStatus.READY)])
    assert screen.setups_to_read(state, set()) == []     # one run: nothing to compare
    screen.rows_changed(state, [ServerRow("eagle", run_id="r2", state=RunStatus.LOADING)])
    assert screen.setups_to_read(state, set()) == [("base", "r1"), ("eagle", "r2")]
    assert screen.setups_to_read(state, {"r1"}) == [("eagle", "r2")]   # base's is being read
    report = EnvReport("run r1 (profile base)", "local")
    state.setups["base"] = ("r0", report)   # read for the run before
    assert screen.shown_setups(state) == {}
    state.setups["base"] = ("r1", report)
    assert screen.shown_setups(state) == {"base": report}


def test_a_serving_alert_rings_once_per_read_that_raised_it() -> None:
    state = two_runs()
    raised = ServingUpdate("base", "r1", alerts=("KV cache 97% full",), raised=("KV cache 97% full",))
    assert screen.serving_changed(state, raised) == [screen.Toast("base: KV cache 97% full", "warning", timeout=10,
                                                                  bell=True)]
    assert screen.serving_changed(state, ServingUpdate("base", "r1", alerts=("KV cache 97% full",))) == []
    assert state.serving["base"].alerts == ("KV cache 97% full",)


def test_a_fleets_newer_figures_wait_for_their_release_but_a_new_run_or_the_swept_run_do_not() -> None:
    fleet = [f"llama-{i:02d}" for i in range(screen.FLEET_MIN)]
    state = screen.initial_state(fleet, "llama-00", log_lines=5)
    for name in fleet:
        screen.serving_changed(state, ServingUpdate(name, "r1"))
    assert not state.held   # each run's first view is shown at once
    newer = ServingUpdate("llama-03", "r1", history={"tok_s": (1.0,)})
    screen.serving_changed(state, newer)
    assert state.held == {"llama-03": newer} and state.serving["llama-03"] is not newer
    assert screen.release_held(state, now=100.0) is None and state.serving["llama-03"] is newer   # the first release
    screen.serving_changed(state, ServingUpdate("llama-05", "r1", history={"tok_s": (2.0,)}))
    assert screen.release_held(state, now=101.0) == screen.FLEET_FIGURES_S - 1   # not due yet: when it will be
    assert screen.release_held(state, now=101.6, early=0.5) is None   # due within `early`: shown now
    assert state.serving["llama-05"].history == {"tok_s": (2.0,)}
    restarted = ServingUpdate("llama-04", "r2")   # a new run's view is never the old run's figures
    screen.serving_changed(state, restarted)
    assert state.serving["llama-04"] is restarted
    swept = ServingUpdate("llama-06", "r1", history={"tok_s": (3.0,)})
    screen.serving_changed(state, swept)
    level = SweepProgress(8, 0, 1, ProgressPhase.MEASURING, 1.5, 10, 0, 40, None, 8, 123.4, 50.0, 2.5, 0.2, 0.3)
    screen.sweep_status_changed(state, "C=8", True, ("llama-06", level))
    assert state.serving["llama-06"] is swept and not state.held   # the swept run's figures beside its level's
    two = two_runs()   # two servers are not a fleet: every read is shown
    screen.serving_changed(two, ServingUpdate("eagle", "r1"))
    screen.serving_changed(two, ServingUpdate("eagle", "r1", history={"tok_s": (3.0,)}))
    assert not two.held and two.serving["eagle"].history == {"tok_s": (3.0,)}


def fleet_rows() -> list[ServerRow]:
    """Six runs on three hosts; one failed (on h2), one stalled (on h3)."""
    rows = [ServerRow(f"llama-{i:02d}", host=f"h{i % 3 + 1}", run_id=f"r{i}", state=RunStatus.READY) for i in range(6)]
    rows[4] = ServerRow("llama-04", host="h2", run_id="r4", state=RunStatus.FAILED, failure="OOM")
    rows[2] = ServerRow("llama-02", host="h3", run_id="r2", state=RunStatus.LOADING, stalled=True)
    return rows + [ServerRow("qwen-1", host="h1", run_id="r9", state=RunStatus.READY)]


def test_g_cycles_the_cards_from_ungrouped_to_by_host_to_by_profile_and_back() -> None:
    state = screen.initial_state(["a"], None, log_lines=5)
    assert [screen.grouping_cycled(state) for _ in range(3)] == [
        screen.Grouping.HOST, screen.Grouping.PROFILE, screen.Grouping.NONE]
    assert state.grouping is screen.Grouping.NONE


def test_cards_grouped_by_host_keep_the_trouble_first_and_each_header_counts_its_group() -> None:
    rows = fleet_rows()
    order = ["llama-04", "llama-02", "llama-00", "llama-01", "llama-03", "llama-05", "qwen-1"]   # as the pane sorts
    groups = screen.card_groups(rows, order, screen.Grouping.HOST)
    # Hosts with a failed or stalled run first (h2, h3), the failed run first within its host; then h1.
    assert [(g.name, g.profiles) for g in groups] == [
        ("h2", ("llama-04", "llama-01")), ("h3", ("llama-02", "llama-05")), ("h1", ("llama-00", "llama-03", "qwen-1"))]
    assert [g.header for g in groups] == ["h2 · 1 ready · 1 failed", "h3 · 1 ready · 1 stalled", "h1 · 3 ready"]
    # Every card shown is in exactly one group: walking the groups in turn is walking every card.
    assert sorted(p for g in groups for p in g.profiles) == sorted(order)


def test_cards_grouped_by_profile_gather_the_numbered_copies_of_a_set_up() -> None:
    rows = fleet_rows()
    order = ["llama-04", "llama-02", "llama-00", "qwen-1"]   # a filter showed these four
    groups = screen.card_groups(rows, order, screen.Grouping.PROFILE)
    assert [(g.name, g.profiles, g.header) for g in groups] == [
        ("llama", ("llama-04", "llama-02", "llama-00"), "llama · 1 ready · 1 failed · 1 stalled"),
        ("qwen", ("qwen-1",), "qwen · 1 ready")]
    assert [screen.profile_family(p) for p in ("llama-02", "demo-eagle3", "base", "qwen_7b")] == [
        "llama", "demo-eagle", "base", "qwen_7b"]
    # Ungrouped: one group without a header, the cards as given.
    assert screen.card_groups(rows, order, screen.Grouping.NONE) == [screen.CardGroup("", tuple(order), "")]


def test_brackets_page_through_the_hosts_of_the_cards_shown_in_name_order_and_wrap() -> None:
    hosts = [f"gpu{h}" for h in (2, 10, 1)]   # gpu1, gpu2, gpu10 in name order (not gpu1, gpu10, gpu2)
    rows = [ServerRow(f"r{i}", host=hosts[i % 3], run_id=f"id{i}", state=RunStatus.READY) for i in range(6)]
    state = screen.initial_state([r.profile for r in rows], "r0", log_lines=5)
    screen.rows_changed(state, rows)
    order = ["r5", "r0", "r1", "r2", "r3", "r4"]   # the pane's order (one at the top that needs a look)
    assert screen.card_hosts(state, order) == ["gpu1", "gpu2", "gpu10"]
    assert screen.host_page(state, order) == "host 2 of 3"   # r0 is on gpu2
    visited = []
    for _ in range(3):
        profile = screen.host_stepped(state, order, 1)
        assert profile is not None
        screen.select(state, profile)
        visited.append((profile, screen.host_page(state, order)))
    # Each host's first card in the pane's order; every host reached, back where it began.
    assert visited == [("r1", "host 3 of 3"), ("r5", "host 1 of 3"), ("r0", "host 2 of 3")]
    assert screen.host_stepped(state, order, -1) == "r5"
    # A filter showing one host's cards: a single page, no "host 1 of 1".
    assert screen.host_page(state, ["r0", "r3"]) == "" and screen.host_stepped(state, ["r0", "r3"], 1) == "r0"
