"""App behaviour that needs no server: keys remapped from [keys], the help table, theme choice persisting,
maximise/restore, the too-small notice, and notifications when a run becomes ready or fails."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import FIXTURES, REPO
from textual.widgets import DataTable, Static
from ui_states import FAILED_ROWS, HELD_PORT, ROWS, demo_config, fed_app, screen_text

from specmon.errors import UserError
from specmon.model.charts.levelrow import LevelRow
from specmon.model.runs.runstate import LogPhase
from specmon.ui.app import LOG_LINES, SpecmonApp
from specmon.ui.help import HelpScreen
from specmon.ui.logview import LogLines, LogPane
from specmon.ui.rows import LogEntry, ServerRow
from specmon.ui.servers import RunCard
from specmon.ui.state import ChartMetric

pytestmark = pytest.mark.slow


async def test_remapped_key_runs_the_action_and_the_help_screen_lists_it(tmp_path: Path) -> None:
    app = SpecmonApp(demo_config(keys={"launch": "L", "help": "f2"}), state_path=tmp_path / "ui.json")
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await pilot.press("l")  # the default key no longer launches
        await pilot.pause()
        assert not app._notifications
        await pilot.press("L")  # the remapped one does (no engine here, so it says so)
        await pilot.pause()
        assert any("no engine" in str(n.message) for n in app._notifications)
        await pilot.press("f2")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert re.search(r"\bL +launch +Launch the selected profile", text), text
        assert re.search(r"\s/ +filter ", text) and re.search(r"\bf2 +help ", text), text
        # The table name was eaten as markup ("Run or resume an  A/B unattended").
        assert "Run or resume an [experiments] A/B" in text, text
        await pilot.press("end")
        await pilot.pause()
        assert re.search(r"\bQ +quit_stop ", screen_text(app))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


def test_unknown_binding_id_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"\[keys\] lunch: unknown binding id"):
        SpecmonApp(demo_config(keys={"lunch": "L"}), state_path=tmp_path / "ui.json")


async def test_theme_switch_persists_across_restarts(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.theme == "specmon-dark"
        await pilot.press("t")
        await pilot.pause()
        chosen = app.theme
        assert chosen != "specmon-dark" and chosen.startswith("specmon-")
    assert json.loads((tmp_path / "ui.json").read_text())["theme"] == chosen
    again = fed_app(tmp_path)
    async with again.run_test(size=(100, 30)):
        assert again.theme == chosen


async def test_a_broken_ui_state_file_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text("{not json")
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)):
        assert app.theme == "specmon-dark"


async def test_an_idle_screen_runs_no_animation_timers(tmp_path: Path) -> None:
    """The TUI is left open for hours on shared jump boxes: nothing may repaint on a timer while nothing moves.
    A card's shard bar without a total was an indeterminate ProgressBar, repainting 15 times a second even
    while hidden: most of the idle TUI's CPU (bench/tui_cost.py: 1.3 % -> 0.4 % of a core with no runs)."""
    app = SpecmonApp(demo_config(), state_path=tmp_path / "ui.json")
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert [w for w in app.query("*") if w.auto_refresh is not None] == []


async def test_an_idle_screen_holds_no_running_timer(tmp_path: Path) -> None:
    """Nor may a widget wake on a timer for nothing: every card's shard bar (a Textual ProgressBar) kept a 1 s
    interval for an ETA the card does not show, eight wake-ups a second with eight runs."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        running = [(type(w).__name__, t.name) for w in app.query("*") for t in list(w._timers)
                   if t._repeat is None and t._active.is_set()]
        assert running == []


async def test_maximise_and_restore_and_too_small(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        app.query_one(LogPane).query_one("LogLines").focus()
        await pilot.press("m")
        await pilot.pause()
        assert app.screen.maximized is app.query_one(LogPane)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen.maximized is None
        await pilot.resize_terminal(70, 20)
        await pilot.pause()
        notice = app.query_one("#too-small", Static)
        assert notice.display and "70×20" in str(notice.render()) and "80×24" in str(notice.render())
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert not app.query_one("#too-small", Static).display


async def test_ready_and_failed_transitions_ring_and_toast(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    rang: list[int] = []
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        app.bell = lambda: rang.append(1)  # type: ignore[method-assign]
        while app.state.rows["demo-eagle3"].run_id is None:  # the fixed states are fed once the app runs
            await pilot.pause(0.05)
        eagle = ROWS[1]
        app.update_rows([ServerRow(**{**eagle.__dict__, "state": "ready", "shards_done": 8})])
        app.update_rows([ServerRow(**{**ROWS[0].__dict__, "state": "failed", "failure": "oom: CUDA out of memory"})])
        await pilot.pause()
        messages = [str(n.message) for n in app._notifications]
        assert "demo-eagle3: READY" in messages
        assert "demo-baseline: FAILED: oom: CUDA out of memory" in messages
        assert len(rang) == 2


async def test_notices_show_brackets_as_written_and_a_server_error_cannot_crash_the_app(tmp_path: Path) -> None:
    """Notices carry server error bodies and config names: Textual read them as markup, so `[sweep] processes` lost
    its `[sweep]` and a `[/INST]` in a server's error (a chat template echoed back) raised MarkupError and ended the
    app. They are plain text; so is the sweep pane's verdict line."""
    from specmon.ui.messages import EngineNotice
    from specmon.ui.sweep import SweepPane

    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        app.post_message(EngineNotice("demo-baseline: HTTP 500: bad [/INST]", severity="warning"))
        app.post_message(EngineNotice("C=1: add ([sweep] processes)", severity="warning"))
        await pilot.press("g")   # goodput, which these sweeps lack: the pane says where to ask for it
        text = await _settled(app, pilot)
        assert "demo-baseline: HTTP 500: bad [/INST]" in text   # a toast, one line
        assert "C=1: add ([sweep] processes)" in text
        assert app.query_one(SweepPane).verdict == "no goodput in these sweeps: sweep with --slo (or [sweep] slo)"
        assert "sweep with --slo (or [sweep] slo)" in text
        assert app.is_running


async def test_typed_brackets_in_the_log_filter_and_the_sweep_form_are_shown_not_read_as_markup(
        tmp_path: Path) -> None:
    """A filter regex such as `[/x]` went into the log pane's title as markup and ended the app (MarkupError); a
    sweep form's error echoing `levels: '[/x]'` did the same. Both are shown as typed."""
    from dataclasses import replace

    from textual.widgets import Input

    from specmon.ui.forms import SweepFormScreen

    app = fed_app(tmp_path)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press("/", *"[/x]", "enter")
        text = await _settled(app, pilot)
        assert "filter '[/x]'" in text and app.is_running
        form = SweepFormScreen(["demo-baseline"], ["demo-baseline"], replace(app.config.sweep, dataset="random"))
        await app.push_screen(form)
        await pilot.pause()
        form.query_one("#levels", Input).value = "[/x]"
        await pilot.click("#start")
        text = await _settled(app, pilot)
        assert "levels: '[/x]' is not a positive whole number" in text and app.is_running


async def test_command_palette_selects_a_profile_and_switches_theme(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.state.selected == "demo-baseline"
        await pilot.press("ctrl+p")
        await pilot.press(*"select demo-eagle3")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.state.selected == "demo-eagle3"
        assert "demo-eagle3" in app.query_one(LogPane).border_title
        await pilot.press("ctrl+p")
        await pilot.press(*"theme specmon-high")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.theme == "specmon-high-contrast"


def test_unknown_preselected_profile_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    from specmon.cli import main

    assert main(["--profile", "nope"]) == 2  # no profiles.toml: the built-in demo profiles
    err = capsys.readouterr().err.strip()
    assert err.startswith("specmon: error:") and "'nope'" in err and "demo-baseline" in err and "\n" not in err


async def _settled(app: SpecmonApp, pilot) -> str:  # type: ignore[no-untyped-def]
    await pilot.pause()
    app.flush()
    await pilot.pause()
    await pilot.pause()
    return screen_text(app)


async def test_footer_at_80x24_keeps_quit_help_sweep_and_launch(tmp_path: Path) -> None:
    """Issue 10 #3: at 80 columns the footer used to end at `/ ▏^p Palette`, hiding q and ?."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        footer = (await _settled(app, pilot)).splitlines()[-1]
        for hint in ("q Quit", "? Help", "s Sweep", "l Launch"):
            assert hint in footer, footer
        await pilot.resize_terminal(160, 48)
        footer = (await _settled(app, pilot)).splitlines()[-1]
        for hint in ("q Quit", "? Help", "f Follow", "m Max", "t Theme", "^p Palette"):
            assert hint in footer, footer


async def test_a_long_failed_reason_at_80x24_is_cut_on_its_card_and_shown_whole_one_key_away(tmp_path: Path) -> None:
    """A held port's reason (with the holder's whole command line) wrapped over eight lines of its card at 80x24
    and pushed the next card off the screen. Now the card keeps two lines and says which key shows the rest: `m`
    maximises the Servers pane, where the reason is whole; the profile's Log pane also holds it whole."""
    app = fed_app(tmp_path, rows=FAILED_ROWS)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _settled(app, pilot)
        assert "demo-eagle3 LOADING WEIGHTS" in screen and "l tries again" in screen, screen
        assert "… (m: whole)" in screen, screen
        assert app.state.logs["demo-baseline"][0].text == f"✗ FAILED: {HELD_PORT}"
        await pilot.press("m")
        await _settled(app, pilot)
        card = next(c for c in app.query(RunCard) if c.profile == "demo-baseline")
        body = str(card.render()).split("\n", 1)[1]   # the lines under its head line
        assert "".join(body.replace("✗", "").replace("l tries again", "").split()) == "".join(HELD_PORT.split())
        await pilot.press("escape")
        assert "… (m: whole)" in await _settled(app, pilot)


async def test_footer_keeps_a_remapped_essential_key(tmp_path: Path) -> None:
    app = SpecmonApp(demo_config(keys={"quit": "ctrl+x"}), state_path=tmp_path / "ui.json")
    async with app.run_test(size=(80, 24)) as pilot:
        footer = (await _settled(app, pilot)).splitlines()[-1]
        assert "^x Quit" in footer and "? Help" in footer, footer


async def test_help_at_80x24_is_readable_and_end_scrolls_to_the_last_key(tmp_path: Path) -> None:
    """Issue 10 #3: the help box was cut (`…; esc clos`) and End did not scroll it."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settled(app, pilot)
        await pilot.press("question_mark")
        text = await _settled(app, pilot)
        assert "esc closes" in text
        assert "Quit+stop" not in text and "quit_stop" not in text  # the last row is below the fold at first
        await pilot.press("end")
        text = await _settled(app, pilot)
        assert re.search(r"Q +quit_stop +Stop the servers started here, then quit", text), text
        assert re.search(r"q +quit +Quit; servers keep running \(the demo stops its own\)", text), text


async def test_narrow_log_shortens_timestamps_to_the_time_of_day(tmp_path: Path) -> None:
    """Issue 10 #3: in the 34-column log pane of an 80-column terminal the date ate the line."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await _settled(app, pilot)
        assert "[15:00:01] server_args" in text and "2026-11-29" not in text, text
        await pilot.resize_terminal(240, 48)
        text = await _settled(app, pilot)
        assert "[2026-11-29 15:00:01] server_args" in text, text


async def test_j_onto_a_run_with_a_2000_line_log_draws_only_the_lines_in_view(tmp_path: Path) -> None:
    """Issue 37: the Log pane wrote the selected run's whole log (up to 2000 lines, each rendered by Rich) into a
    RichLog at every `j`: with real SGLang logs that was most of a `j`. Now a line is drawn when it comes into view;
    the view still ends at the log's last line, and scrolling up shows the older ones."""
    real = (FIXTURES / "real-logs" / "sglang-full-startup-tp4-ready-health-llms-in-clouds.log").read_text().splitlines()
    log = [LogEntry(f"{n:04d} {real[n % len(real)]}") for n in range(LOG_LINES)]
    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        app.add_log("demo-baseline", log)
        app.add_log("demo-eagle3", log)
        await _settled(app, pilot)
        drawn = 0
        render = app.console.render

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal drawn
            drawn += 1
            return render(*args, **kwargs)

        app.console.render = counted  # type: ignore[method-assign]
        await pilot.press("j")
        text = await _settled(app, pilot)
        assert "demo-eagle3" in app.query_one(LogPane).border_title
        assert drawn < 200, drawn   # ~40 lines in view (a RichLog: 2000)
        assert f"{LOG_LINES - 1:04d} {real[(LOG_LINES - 1) % len(real)]}"[:60] in text
        app.query_one(LogPane).query_one(LogLines).scroll_home(animate=False)
        text = await _settled(app, pilot)
        assert f"0000 {real[0]}"[:60] in text


async def test_narrow_sweep_table_shows_throughput_ttft_and_tpot(tmp_path: Path) -> None:
    """Issue 10 #3: at 80 columns the table showed only series, C, out tok/s and ITL p99."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await _settled(app, pilot)
        assert re.search(r"series +C +tok/s +TTFT +TPOT", text), text
        assert re.search(r"baseline +64 +770\.0 +84\.00ms +83\.12ms", text), text


def _table_on_screen(app: SpecmonApp) -> list[list[str]]:
    """The level table as the terminal shows it: each line's words (header first), the scrollbar's blocks left out."""
    table = app.query_one("#sweep-table", DataTable)
    region, lines = table.region, screen_text(app).splitlines()
    shown = [lines[y][region.x:region.right] for y in range(region.y, region.bottom)]
    return [[word for word in line.split() if word.strip("▁▂▃▄▅▆▇█▉▊▋▌▍▎▏")] for line in shown if line.strip()]


async def test_the_sweep_table_never_shows_a_figure_cut_short(tmp_path: Path) -> None:
    """Issue 35 #8: at 80x24, after `t` and an overlay with a long name, the table cut its columns at its edge: C=16
    showed as `1`, a TTFT of 12.87ms as `12`, the header as `ITL99  tok/`. Columns that do not fit are left out
    whole; every figure shown is the row's figure, in the table and in the maximised pane."""
    from ui_states import OVERLAY

    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settled(app, pilot)
        await pilot.press("t")
        app.set_series("demo-eagle3-20261128T101500Z", OVERLAY)
        await _settled(app, pilot)
        for maximised in (False, True):
            if maximised:
                app.set_focus(app.query_one("#sweep-table", DataTable))
                await pilot.press("m")
                await _settled(app, pilot)
            table = app.query_one("#sweep-table", DataTable)
            shown = _table_on_screen(app)
            headers = [str(column.label) for column in table.columns.values()]
            assert shown[0] == headers and len(headers) >= 3, shown   # series, C and tok/s at least, each whole
            for i, words in enumerate(shown[1:]):
                row = [str(cell) for cell in table.get_row_at(i)]
                assert words[2:] == row[1:], (maximised, words, row)   # symbol, name, then the figures whole


async def test_overlay_dialog_stays_open_with_the_error_and_typing_never_reaches_the_main_screen(tmp_path: Path) -> None:
    """Issue 10 #6: a non-result file closed the dialog with a toast naming the path twice, and the next path typed
    went to the main screen as keys (`s` opened the sweep form)."""
    from specmon.ui.bridge import EngineBridge
    from specmon.ui.forms import OverlayScreen, SweepFormScreen

    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    not_results = tmp_path / "notes.txt"
    not_results.write_text("hello\n")
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        try:
            for bad, shown in ((tmp_path / "missing.jsonl", "missing.jsonl: no such file"),
                               (not_results, "notes.txt: not a result file specmon reads")):
                await pilot.press("o")
                await pilot.pause()
                await pilot.press(*str(bad), "enter")
                for _ in range(50):
                    await pilot.pause(0.05)
                    if shown in screen_text(app):
                        break
                assert isinstance(app.screen, OverlayScreen)  # still open, the error in it
                text = screen_text(app)
                assert shown in text, text
                assert not app._notifications
                await pilot.press("s", "S", "l")  # the user goes on typing: into the dialog, not onto the main screen
                await pilot.pause()
                assert isinstance(app.screen, OverlayScreen) and not isinstance(app.screen, SweepFormScreen)
                app.screen.query_one("#form-error").focus()  # even with the input unfocused, no key leaks
                await pilot.press("s")
                await pilot.pause()
                assert isinstance(app.screen, OverlayScreen)
                await pilot.press("escape")
                await pilot.pause()
            assert len(app.screen_stack) == 1 and not app.state.series
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


async def test_overlay_reads_other_tools_files_a_guidellm_report_and_a_vllm_directory(tmp_path: Path) -> None:
    """Issue 14: the overlay takes guidellm's real report and a directory of `vllm bench serve` files, with the
    throughput each tool saved."""
    from specmon.ui.bridge import EngineBridge

    fixtures = FIXTURES / "interop"
    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    report = json.loads((fixtures / "guidellm-sim-concurrent.json").read_text())
    guidellm = {b["config"]["strategy"]["streams"]: b["metrics"]["output_tokens_per_second"]["total"]["mean"]
                for b in report["benchmarks"]}
    vllm = {o["max_concurrency"]: o["output_throughput"]
            for o in (json.loads(f.read_text()) for f in (fixtures / "vllm-llama-base").glob("*.json"))}
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        try:
            for path, name, tool, want in ((fixtures / "guidellm-sim-concurrent.json", "guidellm-sim-concurrent",
                                            "guidellm output", guidellm),
                                           (fixtures / "vllm-llama-base", "vllm-llama-base", "vllm bench serve output",
                                            vllm)):
                await pilot.press("o")
                await pilot.pause()
                await pilot.press(*str(path), "enter")
                for _ in range(100):
                    await pilot.pause(0.05)
                    if name in app.state.series:
                        break
                assert {lv.concurrency: lv.output_throughput for lv in app.state.series[name]} == pytest.approx(
                    want, abs=5e-4)
                assert any(f"({tool}): {len(want)} levels" in str(n.message) for n in app._notifications)
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


async def test_sweep_pane_says_in_words_who_leads_on_each_side_of_the_crossover(tmp_path: Path) -> None:
    """Issue 10 #5: the chart showed only "crossover C≈N"; which way it went had to be read off the curves."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await _settled(app, pilot)
        assert "eagle3 ahead below C≈5, baseline ahead above" in text, text


async def test_chart_marks_levels_round_ticks_and_the_crossover_where_the_curves_meet(tmp_path: Path) -> None:
    """Issue 26: the curves were runs of low-resolution dots, the levels unmarked, the y ticks odd (92.6, 199.8, ...)
    and the crossover a full-height line with its figure only in the title. Now each series is a braille line with
    its own symbol at each level (the table names the symbol), the ticks are 0, 200, ... 800, and the crossover is a
    cross labelled "C≈5" on the chart (on the row under it) with the verdict under the chart."""
    from specmon.ui.sweep import SweepPane

    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settled(app, pilot)
        chart = app.query_one(SweepPane).query_one("#sweep-chart").render()
        lines = str(chart).splitlines()
        assert [line.split("┤")[0].strip() for line in lines if "┤" in line] == ["800", "600", "400", "200", "0"]
        text = "\n".join(lines)
        assert text.count("●") == 4 + 2 and text.count("■") == 4 + 2   # 4 levels each, and 2 in the legend
        assert any(ch in text for ch in "⠁⠂⠄⡀⢀⣀⠉⠒⠤") and text.count("✕") == 1
        cross = next(i for i, line in enumerate(lines) if "✕" in line)
        assert "C≈5" in lines[cross + 1], text                      # labelled just under the cross
        assert "crossover" not in text                              # no title: the mark says it
        assert app.query_one(SweepPane).verdict == "eagle3 ahead below C≈5, baseline ahead above"
        table = app.query_one("#sweep-table", DataTable)
        assert str(table.get_row_at(0)[0]).startswith("● ") and str(table.get_row_at(4)[0]).startswith("■ ")


async def test_sweep_pane_takes_two_thirds_once_it_has_something_to_draw(tmp_path: Path) -> None:
    """Issue 26: at 160×48 the log took most of the upper half and the chart and table shared a cramped lower half.
    Before any sweep the Sweep pane is the smaller part; with a series it has about two thirds of the height, while
    the top row keeps the two READY server cards whole, serving view included (its sparklines wrapped there and cut
    the second card's last lines); at 80×24 the top row keeps its 11 rows."""
    from test_servermetrics import capture

    from specmon.model.server.serving import SPARK_SLICES, ServingUpdate, figures, read_sample
    from specmon.ui import messages
    from specmon.ui.servers import ServersPane
    from specmon.ui.sweep import SweepPane

    app = SpecmonApp(demo_config(), state_path=tmp_path / "ui.json")
    async with app.run_test(size=(160, 48)) as pilot:
        await _settled(app, pilot)
        top, sweep = app.query_one("#top").size.height, app.query_one(SweepPane).size.height
        assert sweep < top, (top, sweep)
        assert "no sweep yet" in str(app.query_one("#sweep-chart").render())   # not an empty frame
        # As the demo's two READY servers: KV sizes 10 % apart (a warning line above the cards), EAGLE-3 with its
        # accept length on the second.
        ready = [ServerRow(**{**row.__dict__, "state": "ready", "phase": LogPhase.READY, "shards_done": 16, "shards_total": 16,
                              "kv_cache_tokens": kv, "mem_fraction_static": 0.88, "spec_accept_len": accept})
                 for row, kv, accept in zip(ROWS, (450_000, 400_000), (None, 2.93))]
        app.update_rows(ready)
        sample = figures(read_sample(capture("sglang-llama31-8b-production-metrics.prom"), 0.0))
        history = {name: tuple(float(i) for i in range(SPARK_SLICES)) for name in ("running", "waiting", "kv_pct", "tok_s")}
        for row in ready:
            app.post_message(messages.ServingChanged(ServingUpdate(row.profile, str(row.run_id), sample, history)))
        app.set_series("demo-baseline", [LevelRow(1, 90.0)])
        await _settled(app, pilot)
        top, sweep = app.query_one("#top").size.height, app.query_one(SweepPane).size.height
        assert sweep >= 2 * top - 1 and top >= 11, (top, sweep)
        servers = app.query_one(ServersPane)
        assert "wait 2826" in screen_text(app) and servers.max_scroll_y == 0, screen_text(app)
        await pilot.resize_terminal(80, 24)
        await _settled(app, pilot)
        assert app.query_one("#top").size.height == 11


async def test_open_loop_overlays_chart_against_rate_and_g_toggles_goodput(tmp_path: Path) -> None:
    """Issue 14: open-loop result files draw against the request rate (table "rate", "4/s", OVER where the server
    fell behind the offered rate); g charts goodput and its crossover; a concurrency sweep is not mixed in."""
    from test_open_loop import rate_file

    from specmon.loadgen.workload import Workload
    from specmon.model.config.keymap import KEYS
    from specmon.model.sweeps.results import SweepMeta
    from specmon.model.sweeps.sweepstats import LevelAccumulator
    from specmon.ui.bridge import EngineBridge
    from specmon.ui.sweep import SweepPane

    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    base = rate_file(tmp_path / "base.jsonl", "base", [(1, 100, 1.0), (2, 200, 2.0), (4, 380, 3.0), (8, 400, 2.0)])
    spec = rate_file(tmp_path / "spec.jsonl", "eagle3", [(1, 150, 1.5), (2, 290, 2.5), (4, 500, 2.0), (8, 520, 1.0)])
    closed = tmp_path / "closed.jsonl"
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", workload=Workload(levels=(1,)).to_dict()).to_dict()
    closed.write_text(json.dumps(meta) + "\n" + json.dumps(LevelAccumulator(1).result(1.0, 0.0, None).to_dict()) + "\n")
    assert [k.keys for k in KEYS if k.id == "goodput"] == ["g"]
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        try:
            for path in (base, spec):
                await app.engine.overlay(path)  # type: ignore[union-attr]
            text = await _settled(app, pilot)
            pane = app.query_one(SweepPane)
            # Throughput: eagle3 ahead at every rate, no crossover; x axis in req/s.
            assert pane.verdict == "" and "request rate (req/s)" in text
            table = app.query_one("#sweep-table", DataTable)
            assert [str(c.label) for c in table.columns.values()][1] == "rate"
            assert table.get_row_at(0)[1] == "1/s"
            await pilot.press("g")
            text = await _settled(app, pilot)
            assert app.state.chart_metric is ChartMetric.GOODPUT and "goodput req/s" in text
            assert pane.verdict == "spec ahead below ≈2.67 req/s, base ahead above"   # series: file stems
            await pilot.press("g")
            await _settled(app, pilot)
            assert app.state.chart_metric is ChartMetric.THROUGHPUT and pane.verdict == ""
            await app.engine.overlay(closed)  # type: ignore[union-attr]
            await pilot.pause()
            assert "closed" not in app.state.series
            assert any("is a concurrency sweep and the chart shows open-loop" in str(n.message)
                       for n in app._notifications)
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


async def test_overlay_of_a_file_with_a_torn_last_line_says_so_and_draws_the_whole_levels(tmp_path: Path) -> None:
    """A result file cut inside its last line (a full disk, a kill) overlaid with `o`: compare and report say so and
    use the rest; the TUI drew the rest and said nothing, so the cut level vanished unsaid."""
    from specmon.loadgen.workload import Workload
    from specmon.model.sweeps.results import SweepMeta
    from specmon.model.sweeps.sweepstats import LevelAccumulator
    from specmon.ui.bridge import EngineBridge

    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    torn = tmp_path / "torn.jsonl"
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", workload=Workload(levels=(1, 2, 4)).to_dict()).to_dict()
    levels = [json.dumps(LevelAccumulator(c).result(1.0, 0.0, None).to_dict()) for c in (1, 2, 4)]
    torn.write_text(json.dumps(meta) + "\n" + levels[0] + "\n" + levels[1] + "\n" + levels[2][: len(levels[2]) // 2])
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        try:
            await pilot.press("o")
            await pilot.pause()
            await pilot.press(*str(torn), "enter")
            for _ in range(100):
                await pilot.pause(0.05)
                if "torn" in app.state.series:
                    break
            assert [lv.concurrency for lv in app.state.series["torn"]] == [1, 2]
            assert [str(n.message) for n in app._notifications if n.severity == "warning"] == [
                f"{torn}:4: last line is cut short (an interrupted write); left out, the lines before it are used"], \
                [str(n.message) for n in app._notifications]
        finally:
            await app.engine.close(False)  # type: ignore[union-attr]


@pytest.mark.parametrize("dataset", ["builtin", "random"])
async def test_sweep_form_asks_for_an_input_length_only_for_random_prompts(tmp_path: Path, dataset: str) -> None:
    """The form showed "input tokens 128" for the built-in prompt set, which ignores it (the CLI refuses
    `--input-len` with it); it names the prompts instead, and asks for a length only where one is used."""
    from dataclasses import replace

    from textual.widgets import Input, Label

    from specmon.ui.forms import SweepFormScreen

    config = demo_config()
    app = SpecmonApp(config, state_path=tmp_path / "ui.json")
    async with app.run_test(size=(80, 24)) as pilot:
        form = SweepFormScreen(["demo-baseline"], ["demo-baseline"], replace(config.sweep, dataset=dataset))
        await app.push_screen(form)
        await pilot.pause()
        asked = [w.id for w in form.query(Input)]
        if dataset == "random":
            assert "input_len" in asked and not form.query("#prompts")
        else:
            assert "input_len" not in asked and "input tokens" not in screen_text(app)
            assert "builtin, sent with their own lengths" in str(form.query_one("#prompts", Label).render())


async def test_the_experiment_steps_keep_the_newest_in_view_at_80x24(tmp_path: Path) -> None:
    """The steps list showed its first three lines for the whole run at 80×24: the step running now was never seen."""
    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        # As the engine bridge writes them; at 80 columns the list drops the clock time so the step shows.
        steps = [f"12:00:{n:02} demo-baseline level: C={2 ** n} (5.0s)" for n in range(11)]
        app.set_experiment_steps([*steps, "12:01:00 demo-eagle3 launch: started"])
        app.flush()
        await pilot.pause()
        await pilot.pause()
        text = screen_text(app)
        # Each step wraps whole (issue 35 #15), so three of the newest fit; the verdict line under the pane takes a row.
        assert "demo-eagle3 launch" in text and "… 9 earlier steps" in text, text


async def test_a_ready_cards_sparklines_show_at_160x48_and_each_card_line_fits(tmp_path: Path) -> None:
    """Issue 35 #18: the README promises sparklines on READY cards with /metrics; at 160x48 none showed (three on
    one line never fit a card) and with `m` only 4 cells of one. At 160x48 each busy figure has its sparkline, whole
    (8 slices), and no card line wraps; at 80x24, where the line they add does not fit, the figures go without."""
    from specmon.model.server.serving import SPARK_SLICES, ServingUpdate, figures, read_sample
    from specmon.model.text.numbers import SPARK
    from specmon.ui.messages import ServingChanged

    capture = (FIXTURES / "metrics" / "sglang-llama31-8b-production-metrics.prom").read_text()
    history = {name: tuple(float(i) for i in range(SPARK_SLICES)) for name in ("running", "waiting", "kv_pct", "tok_s")}
    update = ServingUpdate("demo-baseline", "r-0001", figures(read_sample(capture, 0.0)), history)
    app = fed_app(tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        app.post_message(ServingChanged(update))
        text = await _settled(app, pilot)
        card = next(c for c in app.query(RunCard) if c.profile == "demo-baseline")
        body = str(card.render()).splitlines()
        # running, waiting, KV (of 100 %), tok/s: each whole (8 slices) on screen, in the Servers pane
        region = app.query_one("#servers").region
        servers = "\n".join(line[region.x:region.right] for line in text.splitlines()[region.y:region.bottom])
        assert len(re.findall(f"[{SPARK}]{{{SPARK_SLICES}}}", servers)) == 4, body
        assert all(len(line) <= card.content_size.width for line in body), body
        await pilot.resize_terminal(80, 24)
        await _settled(app, pilot)
        body = str(card.render()).splitlines()
        assert "run 162 wait 2826 KV 28% 87 tok/s" in body and "▁" not in "".join(body), body


async def test_at_80x24_the_log_title_shows_the_filter_its_placeholder_fits_and_help_says_how_focus_moves(
        tmp_path: Path) -> None:
    """Issue 35 #19: at 80x24 the Log title `Log demo-baseline · follow · filter '!INFO:'` was cut before the
    filter, the filter box's placeholder was cut (`empty: al`), and the help never said how focus moves between
    panes (which pane `m` maximises)."""
    from textual.widgets import Input

    app = fed_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settled(app, pilot)
        await pilot.press("slash")
        box = app.query_one("#log-filter", Input)
        await _settled(app, pilot)
        assert len(box.placeholder) < box.content_size.width, (box.placeholder, box.content_size.width)
        assert box.placeholder in screen_text(app)
        await pilot.press(*"!INFO:", "enter")
        text = await _settled(app, pilot)
        assert "filter '!INFO:'" in text.splitlines()[1], text.splitlines()[1]
        await pilot.press("question_mark")
        text = re.sub(r"\s*█\s*█\s*", " ", " ".join((await _settled(app, pilot)).split()))   # the dialog's edges
        assert "Focus: Tab and Shift+Tab move it between panes, a click gives it to a pane; m maximises the " \
               "focused pane." in text, text


async def test_the_env_under_a_gpu_less_board_never_breaks_a_name_in_a_path(tmp_path: Path) -> None:
    """Issue 35 #19: at 160x48 the GPU/env pane showed `/opt/venv/lib/python3.11/site-` over `packages/...`."""
    app = fed_app(tmp_path, gpus=False)
    async with app.run_test(size=(160, 48)) as pilot:
        await _settled(app, pilot)
        text = await _settled(app, pilot)
        region = app.query_one("#gpuenv").region
        pane = [line[region.x:region.right] for line in text.splitlines()[region.y:region.bottom]]
        assert any("site-packages/" in line for line in pane), pane
        assert any("/opt/venv/bin/python3:" in line for line in pane), pane


async def test_the_experiment_dialog_title_and_steps_show_whole_at_every_width(tmp_path: Path) -> None:
    """Issue 35 #15: the experiment dialog's title and the step lines were cut at every width (`demo-baseline
    level: p…`). The title wraps; each step wraps whole, the newest in view."""
    from test_ui_snapshots import STEPS

    from specmon.model.config import load_config
    from specmon.ui.forms import ExperimentScreen

    demo = load_config(REPO / "specmon" / "demo_profiles.toml")
    for size in ((80, 24), (100, 30), (160, 48)):
        app = fed_app(tmp_path)
        async with app.run_test(size=size) as pilot:
            await _settled(app, pilot)
            app.set_experiment_steps(STEPS)
            text = await _settled(app, pilot)
            panel = app.query_one("#experiment-steps", Static)
            region = panel.content_region
            shown = [line[region.x:region.right].rstrip() for line in text.splitlines()[region.y:region.bottom]]
            assert not any(line.endswith("…") for line in shown), (size, shown)
            assert " ".join(" ".join(shown).split()).endswith(STEPS[-1][STEPS[-1].index(" ") + 1:]), (size, shown)
            await app.push_screen(ExperimentScreen(list(demo.experiments.values())))
            text = await _settled(app, pilot)
            title = app.screen.query_one("#experiment-title").region
            shown = " ".join(" ".join(line[title.x:title.right].split())
                             for line in text.splitlines()[title.y:title.bottom])
            assert shown.endswith("sweeps it, stops it (servers holding those ports are stopped first)"), (size, shown)


def test_the_tui_and_its_engine_open_without_the_load_generator() -> None:
    """Issue 37 (time to the first frame): what the app and its engine bridge import before the first frame took the
    sweep and experiment runners with them, and through them the load generator's aiohttp (a tenth of a second and
    more on a busy box, of a ~1 s start). Those are imported when a sweep or an experiment starts."""
    probe = ("import sys\nimport specmon.ui.app, specmon.ui.bridge\n"
             "print(sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith(('specmon.loadgen', "
             "'specmon.orchestration.measure'))))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120,
                            cwd=REPO).stdout.strip()
    assert loaded == "[]", loaded
