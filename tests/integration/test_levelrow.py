"""Typed chart rows (specmon.model.charts.levelrow): one row type built from a finished level, a live level, a peer
file's level and an experiment's repeats, read by the TUI's chart and table (and demo --headless, compare's chart)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import FIXTURES
from test_skew_everywhere import level
from textual.widgets import DataTable
from ui_states import demo_config

from specmon.model.charts.chart import SERIES_SYMBOLS, best_envelope, colour_index, series_symbol
from specmon.model.charts.levelrow import (
    LevelRow,
    distinct_width,
    fit_columns,
    is_rate_series,
    rows_of,
    series_points,
)
from specmon.model.experiments.verdict import summarize_passes
from specmon.model.sweeps.results import SweepMeta
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress
from specmon.sources.resultfiles import read_any_results
from specmon.ui.app import SpecmonApp

GUIDELLM = FIXTURES / "interop" / "guidellm-sim-concurrent.json"


def test_a_finished_level_is_a_row_with_its_figures_and_client_flag() -> None:
    row = LevelRow.of_level(level(16, 690.04, skew_ms=4.0))
    assert row.cells("base") == ("base", "16", "690.0", "30.00ms", "1.00", "20.00ms", "9.00ms", "SKEW 4.0ms")
    assert LevelRow.of_level(level(16, 690.0, skew_ms=4.0, bound=True)).client == "BOUND"
    assert LevelRow.of_level(level(16, 690.0)).client == "ok"
    assert (row.load, row.value("throughput"), row.value("goodput")) == (16.0, 690.04, None)


def test_a_peer_files_level_shows_no_client_verdict_it_never_recorded() -> None:
    rows = rows_of(read_any_results(GUIDELLM).levels)
    assert rows and {row.client for row in rows} == {"—"}
    assert all(row.output_throughput for row in rows)


def test_the_live_level_is_marked_live_with_its_running_estimates() -> None:
    progress = SweepProgress(concurrency=8, level_index=1, level_count=3, phase=ProgressPhase.MEASURING, elapsed_s=2.0,
                             requests_done=5, requests_failed=0, requests_target=16, duration_target_s=None,
                             in_flight=8, output_tok_s=412.5, ttft_p50_ms=31.0, tokens_per_chunk=2.5,
                             loop_lag_ms=0.4, cpu_fraction=0.2)
    assert LevelRow.of_live(progress).cells("eagle") == ("eagle", "8", "412.5", "—", "2.50", "31.00ms", "—", "live")


def test_an_experiments_level_is_the_mean_over_its_repeats_flagged_when_a_repeat_was() -> None:
    summary = summarize_passes("eagle", [(1, [level(4, 300.0), level(8, 400.0, skew_ms=2.5)]),
                                         (2, [level(4, 320.0), level(8, 420.0)])])
    rows = [LevelRow.of_repeats(lv) for lv in summary.levels]
    assert [(r.concurrency, r.output_throughput, r.client) for r in rows] == [(4, 310.0, "ok"), (8, 410.0, "SKEW 2.5ms")]
    assert summary.meta is None   # no result file was read: no made-up one either


def test_series_points_sort_by_load_and_skip_rows_without_the_value() -> None:
    rows = [LevelRow(4, 3.0), LevelRow(1, 1.0, goodput=0.5), LevelRow(2)]
    assert series_points(rows) == [(1.0, 1.0), (4.0, 3.0)] and series_points(rows, "goodput") == [(1.0, 0.5)]
    assert not is_rate_series([rows]) and is_rate_series([[LevelRow(0, 1.0, rate=2.0)]])
    assert series_points([LevelRow(0, 9.0, rate=2.0), LevelRow(0, 5.0, rate=0.5)]) == [(0.5, 5.0), (2.0, 9.0)]


@pytest.mark.slow
async def test_the_sweep_table_shows_an_overlaid_files_skew_with_its_figure(tmp_path: Path) -> None:
    """A result file whose C=16 level was skewed, overlaid with `o`'s engine call: the TUI's table says SKEW and the
    wait; a guidellm file's levels say — (no client health recorded), not ok."""
    from specmon.ui.bridge import EngineBridge

    path = tmp_path / "eagle.jsonl"
    meta = SweepMeta(url="http://127.0.0.1:1", model="m", workload={"levels": [4, 16]}, profile="eagle")
    path.write_text("\n".join(json.dumps(d) for d in (meta.to_dict(), level(4, 300.0).to_dict(),
                                                      level(16, 500.0, skew_ms=4.0).to_dict())) + "\n")
    config = demo_config()
    app = SpecmonApp(config, engine=EngineBridge(config, results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    async with app.run_test(size=(160, 48)) as pilot:
        await app.engine.overlay(path)  # type: ignore[union-attr]
        await pilot.pause()
        app.flush()
        await pilot.pause()
        table = app.query_one("#sweep-table", DataTable)
        client = [str(c.label) for c in table.columns.values()].index("client")
        assert [table.get_row_at(i)[client] for i in range(table.row_count)] == ["ok", "SKEW 4.0ms"]
        await app.engine.overlay(GUIDELLM)  # type: ignore[union-attr]
        await pilot.pause()
        app.flush()
        await pilot.pause()
        assert [table.get_row_at(i)[client] for i in range(2, table.row_count)] == ["—"] * (table.row_count - 2)


def test_fit_columns_keeps_only_the_columns_that_fit_whole() -> None:
    """Issue 35 #8: the table's columns are left out, never cut (2 cells of padding each); a long series name gives
    way (down to 12 cells) where that brings in another column."""
    assert fit_columns([15, 2, 5, 7], 41) == (15, 4)
    assert fit_columns([15, 2, 5, 7], 36) == (14, 4)     # 16 + 4 + 7 + 9 = 36: the name gives a cell
    assert fit_columns([15, 2, 5, 7], 30) == (15, 3)     # even at 12 cells the last would not fit: the name stays
    assert fit_columns([26, 2, 5, 7, 7], 41) == (19, 4)  # an overlay's long name gives way to TTFT
    assert fit_columns([15, 2, 5, 7], 10) == (15, 1)     # the series' name stays, even cut by the table
    assert fit_columns([15, 2, 5, 7], 0) == (15, 4)      # not laid out yet: all


def test_a_grids_names_are_cut_only_while_they_stay_apart() -> None:
    """A tuning grid's series differ at their end: cut to the table's usual 10 cells, `steps=1 topk=1` and
    `steps=1 topk=4` would both read `steps=1 t…`."""
    grid = ["baseline", "steps=1 topk=1", "steps=1 topk=4", "steps=3 topk=1"]
    assert distinct_width(grid, 10) == len("steps=1 topk=1")
    assert distinct_width(["demo-baseline", "demo-eagle3-20261128T101500Z"], 10) == 10   # apart at 10: cut
    assert distinct_width(["a", "b"], 10) == 10


def test_a_grid_of_twelve_series_looks_twelve_ways_and_its_best_envelope_is_the_top_per_level() -> None:
    looks = {(series_symbol(i)[0], colour_index(i)) for i in range(2 * len(SERIES_SYMBOLS))}
    assert len(looks) == 12
    assert [colour_index(i) for i in range(len(SERIES_SYMBOLS))] == list(range(len(SERIES_SYMBOLS)))   # as before
    assert best_envelope([[(1, 100.0), (4, 350.0)], [(1, 140.0), (4, 330.0), (16, 500.0)]]) == \
        [(1, 140.0), (4, 350.0), (16, 500.0)]


def test_an_experiments_level_row_has_the_ttft_and_tpot_its_report_has() -> None:
    """Issue 35 #15: the experiment view's table showed TTFT and TPOT as — though the report had them."""
    from specmon.model.experiments.verdict import LevelSummary

    row = LevelRow.of_repeats(LevelSummary(concurrency=16, values=(640.0, 650.0), ttft_p50_ms=36.5, tpot_p50_ms=23.2))
    assert row.cells("eagle3")[5:7] == ("36.50ms", "23.20ms")
