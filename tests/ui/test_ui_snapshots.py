"""Layout snapshots of the TUI, fed fixed model states (no clocks, no processes): every view (main, GPU/env,
experiment, help, sweep form, overlay) at 80×24, 100×30 and 160×48, and a few states beside them.

Update after an intended layout change with `pytest tests/ui/test_ui_snapshots.py --snapshot-update` and review the
SVGs in tests/__snapshots__/. textual and pytest-textual-snapshot are pinned exactly in pyproject.toml because
snapshots change between Textual releases.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input
from ui_states import (
    FAILED_ROWS,
    PROFILES,
    fed_app,
    fed_fleet_app,
    fed_goodput_app,
    fed_grid_app,
    fed_overlay_app,
    fleet_gpu_board,
)

from specmon.ui.forms import OverlayScreen, SweepFormScreen
from specmon.ui.gpuenv import GpusUpdated

pytestmark = pytest.mark.slow


async def _settle(pilot: Pilot) -> None:
    # A focused input's cursor blinks every 0.5 s: on a busy box (two suites at once) the overlay's snapshot was once
    # taken with it off. Held on, as it is in the first half second a user sees.
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False
    # Twice: a flush can ask for a relayout whose repaint lands a pause later (a busy CI box once caught the
    # experiment view between the two).
    for _ in range(2):
        await pilot.pause()
        pilot.app.flush()  # type: ignore[attr-defined]
        await pilot.pause()
    await pilot.wait_for_scheduled_animations()


SIZES = {"80x24": (80, 24), "100x30": (100, 30), "160x48": (160, 48)}
# As the engine bridge writes them: clock time, profile, step, detail.
STEPS = [f"12:0{n}:00 demo-{('baseline', 'eagle3')[n % 2]} level: pass {n // 2 + 1} C=16 644.8 tok/s (5.1s)"
         for n in range(8)]


async def _open_view(pilot: Pilot, view: str) -> None:
    """Bring `view` on screen the way a user does (its key), or as its key would (a dialog needing an engine)."""
    await _settle(pilot)
    app = pilot.app
    if view == "gpuenv":
        await pilot.press("e")   # below 150 columns: the hidden pane, full screen
    elif view == "experiment":
        app.set_experiment_steps(STEPS)  # type: ignore[attr-defined]
        app.set_sweep_status("experiment demo: pass 4/6, demo-eagle3 C=16", running=True)  # type: ignore[attr-defined]
    elif view == "help":
        await pilot.press("question_mark")
    elif view == "sweep_form":
        await app.push_screen(SweepFormScreen(list(PROFILES), list(PROFILES), app.config.sweep))  # type: ignore[attr-defined]
    elif view == "overlay":
        async def load(path: Path) -> None:
            return None

        await app.push_screen(OverlayScreen(load, "results/demo-eagle3-20261129T120000Z.jsonl"))
    await _settle(pilot)


# At 150 columns and more the GPU/env pane is part of the main view: no snapshot of its own there.
VIEWS = [(view, size) for view in ("main", "gpuenv", "experiment", "help", "sweep_form", "overlay") for size in SIZES
         if (view, size) != ("gpuenv", "160x48")]


@pytest.mark.parametrize(("view", "size"), VIEWS, ids=[f"{view}-{size}" for view, size in VIEWS])
def test_view(snap_compare, tmp_path: Path, view: str, size: str) -> None:
    async def run_before(pilot: Pilot) -> None:
        await _open_view(pilot, view)

    assert snap_compare(fed_app(tmp_path), terminal_size=SIZES[size], run_before=run_before)


CHART_SIZES = pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])


@CHART_SIZES
def test_goodput_chart(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    """`g`: goodput req/s against concurrency, the same look as the throughput chart (issue 26): a line per
    series with its own symbol at each level, round ticks, the goodput crossover marked where the curves meet and
    the verdict under the chart."""
    async def goodput(pilot: Pilot) -> None:
        await _settle(pilot)
        await pilot.press("g")
        pilot.app.clear_notifications()   # the toast naming the chart's metric would cover the verdict
        await _settle(pilot)

    assert snap_compare(fed_goodput_app(tmp_path), terminal_size=size, run_before=goodput)


@CHART_SIZES
def test_overlay_chart(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    """A result file overlaid on two crossing series: a third line with a third symbol."""
    assert snap_compare(fed_overlay_app(tmp_path), terminal_size=size, run_before=_settle)


@CHART_SIZES
def test_grid_experiment(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    """A tuning grid's experiment view (issue 36): seven series, each its own symbol and colour, the best value at
    each level drawn as a heavy yellow line beneath them, the table naming each series by its settings, and the
    progress line (variants done / total, the current variant and level, ETA) in the pane's title."""
    assert snap_compare(fed_grid_app(tmp_path), terminal_size=size, run_before=_settle)


def test_failed_card_with_a_long_reason_80x24(snap_compare, tmp_path: Path) -> None:
    """A held port's long reason: two lines on the card, ending in the key that shows it whole; the next card stays
    on screen."""
    assert snap_compare(fed_app(tmp_path, rows=FAILED_ROWS), terminal_size=(80, 24), run_before=_settle)


def test_no_gpus_160x48(snap_compare, tmp_path: Path) -> None:
    """A host without GPUs: the GPU/env column says why under its title and shows the selected profile's
    environment (it stood mostly empty at 160x48 before: issue 26)."""
    assert snap_compare(fed_app(tmp_path, gpus=False), terminal_size=(160, 48), run_before=_settle)


def test_light_theme_160x48(snap_compare, tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text('{"theme": "specmon-light"}')
    assert snap_compare(fed_app(tmp_path), terminal_size=(160, 48), run_before=_settle)


def test_too_small_notice(snap_compare, tmp_path: Path) -> None:
    assert snap_compare(fed_app(tmp_path), terminal_size=(60, 20), run_before=_settle)


def test_high_contrast_theme_80x24(snap_compare, tmp_path: Path) -> None:
    (tmp_path / "ui.json").write_text('{"theme": "specmon-high-contrast"}')
    assert snap_compare(fed_app(tmp_path), terminal_size=(80, 24), run_before=_settle)


@CHART_SIZES
def test_fleet_of_64_runs(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    """64 runs on 16 hosts: the summary line heads the Servers pane, the failed and stalled runs come first."""
    assert snap_compare(fed_fleet_app(tmp_path), terminal_size=size, run_before=_settle)


def test_fleet_of_64_runs_filtered_80x24(snap_compare, tmp_path: Path) -> None:
    """64 runs filtered by a host (`F gpu06 enter`): its four cards, the failed one first; the summary keeps the
    whole fleet's counts and says how many cards the filter shows."""
    async def filtered(pilot: Pilot) -> None:
        await pilot.press("F", *"gpu06", "enter")
        await _settle(pilot)

    assert snap_compare(fed_fleet_app(tmp_path), terminal_size=(80, 24), run_before=filtered)


@pytest.mark.parametrize("size", [SIZES["80x24"], SIZES["160x48"]], ids=["80x24", "160x48"])
def test_fleet_of_64_runs_grouped_by_host(snap_compare, tmp_path: Path, size: tuple[int, int]) -> None:
    """64 runs grouped by host (`G`): a header per host with its counts, hosts with a failed or stalled run first,
    the selected llama-00 kept in view."""
    async def grouped(pilot: Pilot) -> None:
        await pilot.press("G")
        await _settle(pilot)

    assert snap_compare(fed_fleet_app(tmp_path), terminal_size=size, run_before=grouped)


def test_fleet_gpu_view_paged_to_a_later_host_80x24(snap_compare, tmp_path: Path) -> None:
    """The GPU view full screen at 80x24, paged with `]` to the 11th of 16 hosts: its 8 GPUs and the four runs
    holding them, the head line saying which host of how many."""
    async def paged(pilot: Pilot) -> None:
        await pilot.press("e", *["right_square_bracket"] * 10)
        board, known = fleet_gpu_board("gpu11")   # as the engine's probe of that host posts it
        pilot.app.post_message(GpusUpdated("gpu11", board, known))
        await _settle(pilot)

    assert snap_compare(fed_fleet_app(tmp_path), terminal_size=(80, 24), run_before=paged)
