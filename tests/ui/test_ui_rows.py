"""From engine state to what the Servers and Log panes show (pure functions, fixed views and times)."""

from __future__ import annotations

import dataclasses

from paths import FIXTURES

from specmon.model.logs.events import LogSignature
from specmon.model.runs.failure import Failure
from specmon.model.runs.runstate import LogPhase, RunState
from specmon.model.runs.runstatus import RunStatus
from specmon.orchestration.runs.view import LogLine, RunView
from specmon.ui.format import state_label
from specmon.ui.rows import entry_from_line, row_from_view

T0 = 1_790_000_000.0


def view(**changes: object) -> RunView:
    base = RunView(run_id="r1", profile="eagle", host="local", state="loading", stalled=False, pid=42, port=30002,
                   url="http://127.0.0.1:30002", started_at=T0, ready_at=None, load_seconds=None, shards=(5, 8),
                   kv_cache_tokens=None, exit_code=None, failure=None, eta_s=17.0, phase=LogPhase.LOADING_WEIGHTS,
                   stall_reason=None, log_path="/x/server.log", run_dir="/x",
                   run_state=RunState(mem_fraction_static=0.8, speculative_algorithm="EAGLE3",
                                      speculative_num_steps=3, last_activity=T0 + 20))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_loading_run_row() -> None:
    row = row_from_view(view(past_load_s=39.0), now=T0 + 23)
    assert (row.state, row.phase, row.shards_done, row.shards_total, row.eta_s) == (
        "loading", LogPhase.LOADING_WEIGHTS, 5, 8, 17.0)
    assert state_label(row.state, row.stalled, row.phase) == "LOADING WEIGHTS"   # as the card says it
    assert row.elapsed_s == 23 and row.past_load_s == 39.0 and row.last_activity_ago_s == 3
    assert (row.mem_fraction_static, row.spec_algorithm, row.spec_steps) == (0.8, "EAGLE3", 3)


def test_ready_run_keeps_its_load_time_and_failed_run_says_why() -> None:
    ready = row_from_view(view(state="ready", ready_at=T0 + 41, load_seconds=41.0, shards=(8, 8)), now=T0 + 500)
    assert ready.elapsed_s == 41.0
    failed = row_from_view(view(state="failed", failure=Failure(LogSignature.OOM, "CUDA out of memory")), now=T0 + 30)
    assert failed.failure == "oom: CUDA out of memory"
    stalled = row_from_view(view(stalled=True, stall_reason="no log output for 300 s"), now=T0 + 400)
    assert stalled.stalled and stalled.failure == "no log output for 300 s"


def test_log_entries() -> None:
    assert entry_from_line(LogLine("lines 10-4000 skipped (log rotated)", 0, kind="note")).kind == "marker"  # type: ignore[union-attr]
    shard = entry_from_line(LogLine("\x1b[32mLoading safetensors checkpoint shards:  50% Completed | 4/8 [00:11<00:11]", 10,
                                    highlight="shard"))
    assert shard is not None and shard.kind == "shard" and not shard.text.startswith("\x1b")
    # specmon's own successful health polls are not shown; a failing one is.
    ok = '[2026-11-29 15:47:31] INFO:     127.0.0.1:40954 - "GET /health HTTP/1.1" 200 OK'
    assert entry_from_line(LogLine(ok, 20)) is None
    assert entry_from_line(LogLine(ok.replace("200 OK", "503 Service Unavailable"), 30)) is not None
    # Nor its /metrics reads (the serving view, once a second): this line is from vllm-project/vllm#8612.
    metrics = 'INFO:     127.0.0.1:44772 - "GET /metrics HTTP/1.1" 200 OK'
    assert entry_from_line(LogLine(metrics, 40)) is None
    assert entry_from_line(LogLine(metrics.replace("200 OK", "404 Not Found"), 50)) is not None


def test_a_run_that_died_while_loading_shows_how_long_it_got() -> None:
    died = view(state="failed", failure=Failure(LogSignature.EXCEPTION, "SafetensorError"))
    assert row_from_view(died, now=T0 + 500).elapsed_s == 20  # its last log line came 20 s in


def test_log_pane_lines_carry_no_control_sequences() -> None:
    """The Log pane showed a line's OSC title sequence (ESC]0;TITLE BEL) and C1 codes to the terminal."""
    raw = ("[2025-03-08 12:29:21 TP0] \x1b]0;PWNED\x07Load weight\x1b]8;;http://evil\x1b\\ing\x9b2J \x1b[1mdone"
           "\x1b[0m\x08\x07")
    entry = entry_from_line(LogLine(raw, 10))
    assert entry is not None
    assert entry.text == "[2025-03-08 12:29:21 TP0] Load weighting done\\x08\\x07"


def test_a_reason_that_starts_with_its_kind_is_not_said_twice() -> None:
    """Cards and `launch --wait` said "failed: exited: exited with code 1", and "loading, ready" for a load the
    log calls ready before a test completion confirmed it."""
    from specmon.commands._lifecycle import progress_text

    exited = view(state="failed", failure=Failure(RunStatus.EXITED, "exited with code 1"), phase=LogPhase.FAILED)
    assert row_from_view(exited, now=T0 + 30).failure == "exited with code 1"
    assert progress_text(exited) == "eagle: failed, exited with code 1"
    assert "eagle: loading, log says ready, checking" in progress_text(view(phase=LogPhase.READY))
    assert "loading, ready," not in progress_text(view(phase=LogPhase.READY))


def test_a_cards_serving_lines_fit_its_width_sparklines_only_where_they_fit() -> None:
    """At 80x24 the Servers pane gives a card about 36 cells: the figures with their sparklines wrapped, leaving a
    line of bare sparkline blocks; there the figures go without sparklines, and a wide card keeps them."""

    from rich.text import Text

    from specmon.model.server.serving import SPARK_SLICES, ServingUpdate, figures, read_sample
    from specmon.ui.servers import serving_lines

    capture = (FIXTURES / "metrics" / "sglang-llama31-8b-production-metrics.prom").read_text()
    history = {name: tuple(float(i) for i in range(SPARK_SLICES)) for name in ("running", "waiting", "kv_pct", "tok_s")}
    update = ServingUpdate("p", "r", figures(read_sample(capture, 0.0)), history)
    wide = serving_lines(update, 72)
    # Two sparklines a line (three on one line fit no card: issue 35 #18), the rest of the figures under them.
    assert all(line.count("▁") >= 2 for line in wide[:2]) and "run 162 " in Text.from_markup(wide[0]).plain
    assert Text.from_markup(wide[2]).plain.startswith("hit ")
    narrow = serving_lines(update, 34)   # two sparklines a line need 35 cells here
    plain = [Text.from_markup(line).plain for line in narrow]
    assert all(len(line) <= 34 for line in plain), plain
    assert plain[0] == "run 162 wait 2826 KV 28% 87 tok/s" and "▁" not in "".join(plain)
