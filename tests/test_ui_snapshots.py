"""Layout snapshots of the TUI at 80×24 and 160×48, fed fixed model states (no clocks, no processes).

Update after an intended layout change with `pytest tests/test_ui_snapshots.py --snapshot-update` and review the
SVGs in tests/__snapshots__/. textual and pytest-textual-snapshot are pinned exactly in pyproject.toml because
snapshots change between Textual releases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_states import FAILED_ROWS, PROFILES, fed_app

from textual.pilot import Pilot

from specmon.ui.forms import SweepFormScreen


async def _settle(pilot: Pilot) -> None:
    await pilot.pause()
    pilot.app.flush()  # type: ignore[attr-defined]
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    assert snap_compare(fed_app(tmp_path), terminal_size=size, run_before=_settle)


def test_failed_card_with_a_long_reason_80x24(snap_compare, tmp_path: Path) -> None:
    """A held port's long reason: two lines on the card, ending in the key that shows it whole; the next card stays
    on screen."""
    assert snap_compare(fed_app(tmp_path, rows=FAILED_ROWS), terminal_size=(80, 24), run_before=_settle)


def test_help_screen_80x24(snap_compare, tmp_path: Path) -> None:
    assert snap_compare(fed_app(tmp_path), terminal_size=(80, 24), press=["question_mark"], run_before=_settle)


def test_light_theme_160x48(snap_compare, tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text('{"theme": "specmon-light"}')
    assert snap_compare(fed_app(tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_too_small_notice(snap_compare, tmp_path: Path) -> None:
    assert snap_compare(fed_app(tmp_path), terminal_size=(60, 20), run_before=_settle)


def test_high_contrast_theme_80x24(snap_compare, tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text('{"theme": "specmon-high-contrast"}')
    assert snap_compare(fed_app(tmp_path), terminal_size=(80, 24), run_before=_settle)


def test_sweep_form_80x24(snap_compare, tmp_path: Path) -> None:
    async def open_form(pilot: Pilot) -> None:
        await _settle(pilot)
        app = pilot.app
        await app.push_screen(SweepFormScreen(list(PROFILES), list(PROFILES), app.config.sweep))  # type: ignore[attr-defined]
        await pilot.pause()

    assert snap_compare(fed_app(tmp_path), terminal_size=(80, 24), run_before=open_form)
