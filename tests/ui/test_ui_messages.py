"""Engine updates reach the app as Messages (specmon/ui/messages.py): a burst of updates that only age the cards is
combined into one, while every state change still rings and toasts; the /metrics reads that end together reach the
app as one message; log lines, notices and the sweep's final status arrive in order."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import pytest
from textual.message import Message
from ui_states import FLEET_ROWS, ROWS, fed_app, fed_fleet_app, fleet_config, screen_text

from specmon.model.charts.levelrow import LevelRow
from specmon.model.server.serving import ServingFigures, ServingUpdate
from specmon.ui.bridge import EngineBridge
from specmon.ui.messages import EngineNotice, LogAdded, LogCleared, RowsChanged, SeriesChanged, SweepStatusChanged
from specmon.ui.messages import ServingChanged as Reads
from specmon.ui.rows import LogEntry, ServerRow

pytestmark = pytest.mark.slow


def aged(row: ServerRow, seconds: float) -> ServerRow:
    return dataclasses.replace(row, elapsed_s=(row.elapsed_s or 0) + seconds,
                               last_activity_ago_s=(row.last_activity_ago_s or 0) + seconds)


def test_only_ageing_rows_of_the_same_profiles_are_superseded() -> None:
    older = RowsChanged(ROWS)
    assert older.can_replace(RowsChanged([aged(r, 1.0) for r in ROWS]))
    ready = dataclasses.replace(ROWS[1], state="ready")
    assert not older.can_replace(RowsChanged([ROWS[0], ready]))                  # a state change
    assert not older.can_replace(RowsChanged([ROWS[0], dataclasses.replace(ROWS[1], stalled=True)]))
    assert not older.can_replace(RowsChanged([ROWS[0], dataclasses.replace(ROWS[1], shards_done=6)]))
    assert not older.can_replace(RowsChanged(ROWS[:1]))                           # other profiles
    assert not older.can_replace(SweepStatusChanged("x", running=True))
    assert SeriesChanged("a", [], None).can_replace(SeriesChanged("a", [LevelRow(1)], None))
    assert not SeriesChanged("a", [], None).can_replace(SeriesChanged("b", [], None))
    assert not LogAdded("a", []).can_replace(LogAdded("a", []))
    assert not EngineNotice("x").can_replace(EngineNotice("x"))


def read(profile: str, tok_s: float, raised: tuple[str, ...] = ()) -> ServingUpdate:
    """One /metrics read of a profile's run, as the serving watcher reports it."""
    return ServingUpdate(profile, f"r-{profile}", ServingFigures(running=1, waiting=0, kv_pct=12.0, tok_s=tok_s),
                         raised=raised)


def test_reads_are_superseded_only_by_later_reads_of_every_one_of_their_runs() -> None:
    """Reads that wait in the app's queue give way to newer reads of the same runs; never to reads of only some of
    them (the others' figures would be lost), and never when one raised an alert (its toast must still ring)."""
    both = Reads(read("demo-baseline", 100.0), read("demo-eagle3", 200.0))
    assert both.can_replace(Reads(read("demo-baseline", 90.0), read("demo-eagle3", 190.0)))
    assert both.can_replace(Reads(read("demo-eagle3", 190.0)))
    assert not Reads(read("demo-baseline", 100.0)).can_replace(both)   # eagle3's read would be lost
    alerting = Reads(read("demo-eagle3", 190.0, raised=("waiting 31 s",)), read("demo-baseline", 90.0))
    assert not both.can_replace(alerting)
    assert not both.can_replace(RowsChanged(ROWS))


async def test_the_reads_of_one_loop_turn_reach_the_app_as_one_message_and_every_card_and_alert_shows(
        tmp_path: Path) -> None:
    """Issue 37: at 64 runs every read that changed a card was a message of its own, and the app's message pump
    cost about as much again as handling them. The reads that end in one turn of the loop (the answers of a host's
    runs come in one packet of its SSH connection) now go as one message, in order; each card shows its own
    figures and an alert raised by any of them still toasts."""
    app = fed_fleet_app(tmp_path)
    bridge = EngineBridge(fleet_config(), results_dir=tmp_path / "results")
    posted: list[Message] = []
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        while "llama-01" not in app.state.rows:   # the fixed states are fed once the app runs
            await pilot.pause(0.05)

        class Target:   # the app, as the bridge knows it; what is posted is kept to be counted
            def post_message(self, message: Message) -> bool:
                posted.append(message)
                return app.post_message(message)

        bridge._target = Target()  # type: ignore[assignment]
        reads = [ServingUpdate(row.profile, str(row.run_id), ServingFigures(running=1, waiting=0, kv_pct=12.0,
                                                                            tok_s=1000.0 + i))
                 for i, row in enumerate(FLEET_ROWS[:3])]
        reads[2] = dataclasses.replace(reads[2], raised=("waiting 31 s",))
        for update in reads:
            bridge._serving.on_update(update)   # as the watcher's readers do, in one turn
        await asyncio.sleep(0)
        await pilot.pause(0.5)
        assert len(posted) == 1, f"{len(posted)} messages for the reads of one loop turn"
        # The selected card grows by a line for its figures, drawn in a later frame: on a loaded box (CI beside other
        # work) that frame came after the 0.5 s above. Wait for it, with a guard, not for a fixed time.
        shown = [f"1{i:03d} tok/s" for i in range(3)]
        deadline = time.monotonic() + 30.0
        while not all(s in screen_text(app) for s in shown) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        text = screen_text(app)
        for s in shown:
            assert s in text, text
        assert "llama-02: waiting 31 s" in [str(n.message) for n in app._notifications]


async def test_a_burst_of_ageing_rows_is_one_repaint_but_every_transition_still_toasts(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    rang: list[int] = []
    handled: list[tuple[str, ...]] = []
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        while app.state.rows["demo-eagle3"].run_id is None:   # the fixed states are fed once the app runs
            await pilot.pause(0.05)
        app.bell = lambda: rang.append(1)  # type: ignore[method-assign]
        update_rows = app.update_rows

        def counting(rows: object) -> None:
            handled.append(tuple(r.state for r in rows))  # type: ignore[attr-defined]
            update_rows(rows)  # type: ignore[arg-type]

        app.update_rows = counting  # type: ignore[method-assign]
        # Posted in one go, as a busy engine would: 20 ageing updates, then READY, then FAILED, each followed by
        # more ageing. Nothing awaits in between, so all of them are queued together.
        eagle = ROWS[1]
        burst = [RowsChanged([ROWS[0], aged(eagle, i)]) for i in range(20)]
        ready = dataclasses.replace(eagle, state="ready", shards_done=8)
        burst += [RowsChanged([ROWS[0], aged(ready, i)]) for i in range(5)]
        failed = dataclasses.replace(ready, state="failed", failure="oom: CUDA out of memory")
        burst += [RowsChanged([ROWS[0], aged(failed, i)]) for i in range(5)]
        for message in burst:
            app.post_message(message)
        await pilot.pause()
        texts = [str(n.message) for n in app._notifications]
        assert "demo-eagle3: READY" in texts
        assert "demo-eagle3: FAILED: oom: CUDA out of memory" in texts
        assert len(rang) == 2
        assert handled == [("ready", "loading"), ("ready", "ready"), ("ready", "failed")], handled
        assert app.state.rows["demo-eagle3"].elapsed_s == aged(failed, 4).elapsed_s   # the newest figures are shown


async def test_log_lines_after_a_clear_and_notices_and_final_status_arrive_in_order(tmp_path: Path) -> None:
    app = fed_app(tmp_path)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        while not app.state.logs["demo-baseline"]:
            await pilot.pause(0.05)
        app.post_message(LogCleared("demo-baseline"))
        for i in range(30):
            app.post_message(LogAdded("demo-baseline", [LogEntry(f"line {i}")]))
        app.post_message(SweepStatusChanged("demo-baseline C=4 (1/2) level", running=True))
        app.post_message(EngineNotice("demo-baseline: client-bound at C=4", severity="warning"))
        app.post_message(SweepStatusChanged("done: a.jsonl", running=False))
        await pilot.pause()
        assert [e.text for e in app.state.logs["demo-baseline"]] == [f"line {i}" for i in range(30)]
        assert app.state.sweep_status == "done: a.jsonl" and not app.state.sweeping
        assert any("client-bound at C=4" in str(n.message) for n in app._notifications)
