"""App behaviour that needs no server: keys remapped from [keys], the help table, theme choice persisting,
maximise/restore, the too-small notice, and notifications when a run becomes ready or fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static
from ui_states import ROWS, demo_config, fed_app

from specmon.errors import UserError
from specmon.ui.app import SpecmonApp
from specmon.ui.help import HelpScreen
from specmon.ui.logview import LogPane
from specmon.ui.rows import ServerRow


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
        table = app.screen.query_one(DataTable)
        rows = {table.get_row_at(i)[2]: table.get_row_at(i)[0] for i in range(table.row_count)}
        assert rows["launch"] == "L" and rows["quit_stop"] == "Q" and rows["filter"] == "/"
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


async def test_maximise_and_restore_and_too_small(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        app.query_one(LogPane).query_one("RichLog").focus()
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
        while app.rows["demo-eagle3"].run_id is None:  # the fixed states are fed once the app runs
            await pilot.pause(0.05)
        eagle = ROWS[1]
        app.update_rows([ServerRow(**{**eagle.__dict__, "state": "ready", "shards_done": 8})])
        app.update_rows([ServerRow(**{**ROWS[0].__dict__, "state": "failed", "failure": "oom: CUDA out of memory"})])
        await pilot.pause()
        messages = [str(n.message) for n in app._notifications]
        assert "demo-eagle3: READY" in messages
        assert "demo-baseline: FAILED: oom: CUDA out of memory" in messages
        assert len(rang) == 2


async def test_command_palette_selects_a_profile_and_switches_theme(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.selected == "demo-baseline"
        await pilot.press("ctrl+p")
        await pilot.press(*"select demo-eagle3")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await pilot.pause()
        assert app.selected == "demo-eagle3"
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
