"""The TUI's pure formatting rules: what a person reads in each pane."""

from __future__ import annotations

import re

import pytest

from specmon.errors import UserError
from specmon.model.config import parse_config, parse_levels
from specmon.model.config.keymap import character_key, keymap_problems
from specmon.model.runs.runstate import LogPhase
from specmon.ui import format as fmt
from specmon.ui.keys import BINDING_IDS, key_rows, validate_keymap


def test_durations_and_ages() -> None:
    assert fmt.fmt_duration(None) == "—"
    assert fmt.fmt_duration(7.4) == "0:07"
    assert fmt.fmt_duration(723) == "12:03"
    assert fmt.fmt_duration(3723) == "1:02:03"
    assert fmt.fmt_duration(-5) == "0:00"
    assert fmt.fmt_ago(3.9) == "<10s ago" and fmt.fmt_ago(9.9) == "<10s ago"
    assert fmt.fmt_ago(10) == "10s ago" and fmt.fmt_ago(59) == "50s ago"
    assert fmt.fmt_ago(125) == "2m ago"
    assert fmt.fmt_ago(7300) == "2h ago"
    assert fmt.fmt_elapsed_vs_past(41, 70) == "0:41/~1:10"
    assert fmt.fmt_elapsed_vs_past(41, None) == "0:41"


def test_counts_shards_and_spec() -> None:
    assert fmt.fmt_count(950) == "950"
    assert fmt.fmt_count(12_345) == "12.3k"
    assert fmt.fmt_count(1_203_456) == "1.2M"
    assert fmt.fmt_count(None) == "—"
    assert fmt.fmt_shards(5, 8) == "5/8"
    assert fmt.fmt_shards(None, None) == "—"
    assert fmt.shard_fraction(5, 8) == pytest.approx(0.625)
    assert fmt.shard_fraction(9, 8) == 1.0
    assert fmt.shard_fraction(3, None) is None
    assert fmt.fmt_spec(None, None) == "no spec"
    assert fmt.fmt_spec("eagle3", 3) == "EAGLE3×3"
    assert fmt.fmt_spec("EAGLE3", 3, 2.414) == "EAGLE3×3 acc 2.41"


def test_a_shard_bar_fills_by_half_cells_as_textuals_progress_bar() -> None:
    """A card draws its own shard bar (one widget a card, issue 37), cell for cell as the ProgressBar it replaced."""
    assert fmt.bar_cells(0.0, 10) == ("", "━" * 10)
    assert fmt.bar_cells(0.625, 35) == ("━" * 22, "╺" + "━" * 12)   # 21.875 cells: a whole one, the rest starts thin
    assert fmt.bar_cells(0.5, 41) == ("━" * 20 + "╸", "━" * 20)     # 20.5 cells: the last filled cell is a half
    assert fmt.bar_cells(1.0, 10) == ("━" * 10, "")


def test_state_labels() -> None:
    assert fmt.state_label("loading", phase=LogPhase.LOADING_WEIGHTS) == "LOADING WEIGHTS"
    assert fmt.state_label("loading", stalled=True, phase=LogPhase.LOADING_WEIGHTS) == "STALLED"
    # The log saying ready or failed is not yet the engine's verdict (ready needs one real completion).
    assert fmt.state_label("loading", phase=LogPhase.READY) == fmt.state_label("loading", phase=LogPhase.FAILED) == "LOADING"
    assert fmt.state_style("loading", stalled=True) == "warn"
    assert fmt.state_label("ready", stalled=True) == "READY"
    assert fmt.state_style("failed") == "bad"
    assert fmt.state_style("ready") == "good"


def test_downsample_keeps_the_last_point() -> None:
    points = [(float(i), float(i)) for i in range(1000)]
    picked = fmt.downsample(points, 200)
    assert len(picked) == 200 and picked[-1] == (999.0, 999.0) and picked[0] == (0.0, 0.0)
    assert fmt.downsample(points[:5], 200) == points[:5]


def test_log_filter() -> None:
    assert fmt.log_filter_matches("KV Cache is allocated", "kv cache")
    assert not fmt.log_filter_matches("Loading shards", "kv")
    assert fmt.log_filter_matches("Loading shards", "!kv")
    assert not fmt.log_filter_matches("KV Cache", "!KV")
    assert fmt.log_filter_matches("anything", "")


@pytest.mark.parametrize(("typed", "problem"), [("8,4", "(8 then 4)"), ("4,4", "(4 then 4)")])
def test_levels_out_of_order_or_repeated_are_refused_as_in_toml(typed: str, problem: str) -> None:
    """The sweep form and --levels follow [sweep] levels' rule: `8,4` is not quietly run as 4 then 8."""
    with pytest.raises(ValueError, match=re.escape(f"levels must be strictly increasing {problem}")):
        parse_levels(typed)
    toml = '[profiles.a]\ncommand = "x"\n[sweep]\nlevels = [' + typed + "]\n"
    with pytest.raises(UserError, match=re.escape(f"levels must be strictly increasing {problem}")):
        parse_config(toml, "p.toml")


def test_form_fields() -> None:
    assert parse_levels("1, 4,16") == (1, 4, 16)
    with pytest.raises(ValueError, match="levels: 'x'"):
        parse_levels("1,x")
    with pytest.raises(ValueError, match="at least one"):
        parse_levels(" , ")
    assert fmt.parse_positive("", "requests", allow_empty=True) is None
    with pytest.raises(ValueError, match="requests: '0'"):
        fmt.parse_positive("0", "requests")


def test_transitions_ring_only_on_news() -> None:
    before = {"a": ("loading", False), "b": ("loading", False), "c": ("ready", False)}
    after = {"a": ("ready", False), "b": ("loading", True), "c": ("ready", False), "d": ("failed", False)}
    assert fmt.transitions(before, after) == [("a", "ready"), ("b", "stalled")]
    assert fmt.transitions({"a": ("loading", False)}, {"a": ("failed", False)}) == [("a", "failed")]


def test_keymap_validation_names_the_bad_key_with_its_line() -> None:
    config = parse_config('[profiles.x]\ncommand = ["srv"]\n\n[keys]\nlaunch = "L"\nstop = "ctrl+x"\n', "p.toml")
    where = lambda binding_id: config.where("keys", binding_id)  # noqa: E731
    assert validate_keymap({"launch": "L", "quit": "ctrl+x, f10"}, where) == {"launch": "L", "quit": "ctrl+x,f10"}
    assert validate_keymap({"help": "?"}, where) == {"help": "question_mark"}  # typed as a character, stored by name
    with pytest.raises(UserError, match=r"^p.toml:5: \[keys\] launch: key 'l' is also bound to"):
        validate_keymap({"launch": "l", "select_prev": "l"}, where)
    with pytest.raises(UserError, match=r"^p.toml:6: \[keys\] stop: 'ctrl\+' is not a key name"):
        validate_keymap({"stop": "ctrl+"}, where)


def test_key_names_match_textuals() -> None:
    """The model spells punctuation keys as Textual does, so a remap to "?" or "/" really binds that key."""
    from textual.keys import _character_to_key

    for char in map(chr, range(33, 127)):
        assert character_key(char) == _character_to_key(char), char
    assert not keymap_problems({})[1], "the default key table has a clash"


def test_binding_ids_and_help_rows() -> None:
    required = {"launch", "stop", "restart", "sweep", "cancel_sweep", "overlay", "filter", "follow", "maximize",
                "help", "palette", "theme", "quit", "quit_stop"}
    assert required <= BINDING_IDS
    rows = {row[2]: row[0] for row in key_rows({"launch": "L"})}
    assert rows["launch"] == "L" and rows["filter"] == "/" and rows["help"].startswith("?")


def test_a_sweeps_skew_caution_is_toasted_once_and_short_and_failures_every_time() -> None:
    """Issue 35 #14: at 80x24 every SKEW level of a sweep raised a toast of ~10 lines (the whole caution) that hid
    the level table for the whole sweep. The table's client column marks each such level; the toast says it once,
    short, and points there. A caution no row carries (failed requests) is still said at each level."""
    import dataclasses

    from test_skew_everywhere import level

    from specmon.model.charts.levelrow import LevelRow
    from specmon.orchestration.measure.sweep import level_cautions

    skewed = [level(c, 100.0 * c, skew_ms=4.3) for c in (4, 8, 16, 32)]
    skewed[2] = dataclasses.replace(skewed[2], requests_failed=2, errors={"http_5xx": 2})
    said: set[str] = set()
    toasts = [t for lv in skewed for n in level_cautions(lv)
              if (t := fmt.sweep_caution("demo-baseline", n.message, n.flag, n.level, said)) is not None]
    assert toasts[0] == ("demo-baseline C=4: SKEW: chunks waited for the load generator (the client column marks "
                         "each such level)"), toasts
    assert len(toasts) == 2 and "C=16: 2 requests failed (http_5xx 2)" in toasts[1], toasts
    assert all(LevelRow.of_level(lv).client == "SKEW 4.3ms" for lv in skewed)   # each row keeps its caution


def test_a_cards_log_age_goes_where_it_fits_whole() -> None:
    """Issue 35 #19: `KV 400k mem 0.88 EAGLE3×3 acc 2.93 log <10s ago` wrapped at 80 and 160 columns."""
    progress, setup, activity = "16/16 load 0:17/~0:17", "KV 400k mem 0.88 EAGLE3×3 acc 2.93", "log <10s ago"
    assert fmt.card_detail_lines(progress, setup, activity, 38) == [
        ("16/16 load 0:17/~0:17 log <10s ago", True), ("KV 400k mem 0.88 EAGLE3×3 acc 2.93", False)]
    loading = "5/8 ETA 0:17 load 0:23/~0:39"
    assert fmt.card_detail_lines(loading, "KV — mem 0.80 EAGLE3×3", activity, 38) == [
        (loading, False), ("KV — mem 0.80 EAGLE3×3 log <10s ago", True)]
    assert fmt.card_detail_lines(loading, setup, activity, 30)[2] == (activity, True)   # a line of its own


def test_the_log_title_keeps_the_filter_in_view() -> None:
    """Issue 35 #19: at 80x24 the Log title was cut before its filter."""
    assert fmt.log_title("demo-baseline", True, "!INFO:", 60) == "Log demo-baseline · follow · filter '!INFO:'"
    assert fmt.log_title("demo-baseline", False, "!INFO:", 34) == "Log · filter '!INFO:' · paused"
    assert fmt.log_title("demo-baseline", True, "!INFO: and more", 30) == "Log · filter '!INFO: and more'"
    assert fmt.log_title("demo-baseline", True, "", 30) == "Log demo-baseline · follow"


def test_a_long_path_wraps_between_its_directories_never_inside_a_name() -> None:
    """Issue 35 #19: the GPU/env pane broke `/opt/venv/lib/python3.11/site-` `packages/sitecustomize.py`."""
    line = "  NCCL_ALGO=Ring by /opt/venv/lib/python3.11/site-packages/sitecustomize.py"
    assert fmt.wrap_paths(line, 30) == ["  NCCL_ALGO=Ring by /opt/venv/", "    lib/python3.11/",
                                        "    site-packages/", "    sitecustomize.py"]
    # A path that fits a line of its own: left to the pane, which wraps at spaces.
    assert fmt.wrap_paths("injected at start-up by /opt/venv/bin/python3:", 30) == [
        "injected at start-up by /opt/venv/bin/python3:"]
    assert fmt.wrap_paths(line, 0) == [line] and fmt.wrap_paths("short", 30) == ["short"]


def test_experiment_steps_wrap_whole_and_the_newest_stay_in_view() -> None:
    """Issue 35 #15: steps were cut at every width (`demo-baseline level: p…`)."""
    steps = [f"demo-baseline level: pass {n} C=16 644.8 tok/s (5.1s)" for n in range(5)]
    assert fmt.fit_steps(steps, 24, 7) == ["… 3 earlier steps", "demo-baseline level:", "  pass 3 C=16 644.8",
                                           "  tok/s (5.1s)", "demo-baseline level:", "  pass 4 C=16 644.8",
                                           "  tok/s (5.1s)"]
    assert fmt.fit_steps(steps[:1], 80, 3) == steps[:1]
    assert fmt.fit_steps(steps, 0, 0) == steps   # not laid out yet
