"""The Servers pane with a fleet of 64 runs on 16 hosts (ui_states.FLEET_ROWS, fed without an engine): the summary
line, failed and stalled runs at the top, and the keys walking the cards with the selection kept in view."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from ui_states import FLEET_PROFILES, fed_fleet_app, screen_text

from specmon.ui.servers import RunCard, ServersPane

pytestmark = pytest.mark.slow


async def _settle(pilot: Pilot) -> None:
    for _ in range(2):
        await pilot.pause()
        pilot.app.flush()  # type: ignore[attr-defined]
        await pilot.pause()


async def test_an_80x24_fleet_pane_opens_with_its_summary_and_the_runs_that_failed_or_stalled(tmp_path: Path) -> None:
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        text = screen_text(app)
        # On the first screen, without scrolling: the counts, then the failed run and the first stalled one (in
        # the profiles file's order they are the 38th and 42nd of 64 cards).
        assert "58 ready·3 loading·1 failed·2 stalled" in text
        assert "llama-37 FAILED" in text and "llama-41 STALLED" in text, text
        assert app.query_one(ServersPane).order[:3] == ["llama-37", "llama-41", "llama-50"]


async def test_walking_64_cards_with_j_and_k_keeps_the_selected_card_on_screen(tmp_path: Path) -> None:
    app = fed_fleet_app(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await _settle(pilot)
        pane = app.query_one(ServersPane)
        for presses, key in ((20, "j"), (45, "j"), (30, "k")):
            for _ in range(presses):
                await pilot.press(key)
            await _settle(pilot)
            card = next(c for c in app.query(RunCard) if c.profile == app.selected)
            visible = pane.scrollable_content_region
            assert visible.y <= card.region.y and card.region.bottom <= visible.bottom, \
                f"{app.selected} at rows {card.region.y}-{card.region.bottom}, the pane shows {visible.y}-{visible.bottom}"
            assert f"{app.selected} " in screen_text(app)
        assert app.selected in FLEET_PROFILES
