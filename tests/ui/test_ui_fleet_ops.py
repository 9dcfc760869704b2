"""The TUI's fleet stop (X): every live run of the selected card's profile or host, listed in a dialog, stopped or
restarted through the same orchestration as `specmon stop --host`. Real sim servers under Textual's Pilot."""

from __future__ import annotations

from pathlib import Path

import pytest
from process_support import alive
from test_ui_pilot import card_text, make_app, quit_with, sim_config, wait_until
from textual.widgets import Static

from specmon.ui.forms import FleetScreen

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


async def test_x_lists_the_runs_of_the_cards_profile_or_host_and_stops_them_all(
        tmp_path: Path, free_port_factory) -> None:  # type: ignore[no-untyped-def]
    app = make_app(sim_config({"a": free_port_factory(), "b": free_port_factory()}), tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        try:
            await pilot.press("l", "j", "l")
            for name in ("a", "b"):
                await wait_until(pilot, lambda name=name: "READY" in card_text(app, name), 60, f"{name} READY")
            pids = {name: app.state.rows[name].pid for name in ("a", "b")}
            runs = {name: app.state.rows[name].run_id for name in ("a", "b")}
            await pilot.press("k", "X")
            await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen), 30, "the fleet dialog")

            def listed() -> str:
                return str(app.screen.query_one("#fleet-title", Static).render()) + "\n" + \
                    str(app.screen.query_one("#fleet-runs", Static).render())

            shown = listed()   # the selected card's profile first: only a's run
            assert "every run of profile a: 1 live run" in shown and str(runs["a"]) in shown, shown
            assert str(runs["b"]) not in shown, shown
            await pilot.press("h")
            shown = listed()   # its host: both
            assert "every run of host local: 2 live runs" in shown, shown
            assert str(runs["a"]) in shown and str(runs["b"]) in shown, shown
            await pilot.press("r")   # restart both: new runs, READY again
            await wait_until(pilot, lambda: any("restart host local: 2 restarted" in str(n.message)
                                                for n in app._notifications), 60, "the restart toast")
            for name in ("a", "b"):
                await wait_until(pilot, lambda name=name: app.state.rows[name].run_id != runs[name]
                                 and "READY" in card_text(app, name), 60, f"{name} restarted")
            assert not alive(pids["a"]) and not alive(pids["b"])  # type: ignore[arg-type]
            pids = {name: app.state.rows[name].pid for name in ("a", "b")}

            await pilot.press("X", "h", "s")
            for name in ("a", "b"):
                await wait_until(pilot, lambda name=name: "STOPPED" in card_text(app, name), 60, f"{name} STOPPED")
            assert not alive(pids["a"]) and not alive(pids["b"])  # type: ignore[arg-type]
            await wait_until(pilot, lambda: any("stop host local: 2 stopped" in str(n.message)
                                                for n in app._notifications), 30, "the summary toast")

            await pilot.press("X")   # nothing left to stop: said, no dialog
            await wait_until(pilot, lambda: any("no live run of profile a or host local" in str(n.message)
                                                for n in app._notifications), 30, "the nothing-to-stop toast")
            assert not isinstance(app.screen, FleetScreen)
        finally:
            await quit_with(pilot, "Q")
