"""The TUI driven by keys (Textual's Pilot) against real `specmon sim` servers through the real engine.

Each test launches fast simulated servers (a few seconds to ready) on free loopback ports, so what is
asserted is what a person would see: the card going from loading shards to READY, a crash reason, a sweep
drawing points after `s`, a result file overlaid with `o`, and the log's filter and follow.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from lifecycle_support import stall_timeout_for_this_box
from process_support import alive
from textual.pilot import Pilot
from textual.widgets import Input, Static

from specmon.model.config import Config, parse_config
from specmon.ui.app import SpecmonApp
from specmon.ui.bridge import EngineBridge
from specmon.ui.forms import SweepFormScreen, SweepRequest
from specmon.ui.logview import LogLines, LogPane
from specmon.ui.servers import RunCard
from specmon.ui.sweep import SweepPane

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def sim_config(ports: dict[str, int], extra: dict[str, str] | None = None, stall_s: float = 30) -> Config:
    """Profiles on `specmon sim`: 4 shards over ~2 s, then warm-up, so a load is seen in progress."""
    extra = extra or {}
    parts = []
    for name, port in ports.items():
        args = ["specmon", "sim", "--port", str(port), "--shards", "4", "--load-seconds", "2",
                "--kv-tokens", "300000", "--mem-fraction-static", "0.85", *extra.get(name, "").split()]
        parts.append(f"[profiles.{name}]\nport = {port}\nstall_timeout_s = {stall_s}\ncommand = {args!r}\n"
                     .replace("'", '"'))
    parts.append("[sweep]\nlevels = [1, 2]\nrequests_per_level = 4\nwarmup_requests = 0\noutput_len = 32\n")
    return parse_config("\n".join(parts), "test-profiles.toml")


def make_app(config: Config, tmp_path: Path) -> SpecmonApp:
    engine = EngineBridge(config, results_dir=tmp_path / "results")
    return SpecmonApp(config, engine=engine, state_path=tmp_path / "ui.json")


def children() -> str:
    """Command lines of this process's children (the load generator runs as one)."""
    return subprocess.run(["ps", "--ppid", str(os.getpid()), "-o", "args="], capture_output=True, text=True,
                          check=False).stdout


def card_text(app: SpecmonApp, profile: str) -> str:
    card = next(c for c in app.query(RunCard) if c.profile == profile)
    return str(card.render())


def log_lines(app: SpecmonApp) -> list[str]:
    return [text for text, _ in app.query_one(LogPane).query_one(LogLines).lines]


async def wait_until(pilot: Pilot, check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.1)


async def quit_with(pilot: Pilot, key: str) -> None:
    """Press q or Q and wait until the app has exited: quitting stops servers in a worker while the screen keeps
    painting, so leaving the test's `run_test` block at once would cut the stop short."""
    await pilot.press(key)
    await wait_until(pilot, lambda: not pilot.app.is_running, 60, f"{key} to stop the servers and exit")


async def test_load_progresses_to_ready_then_filter_and_follow(tmp_path: Path, free_port: int) -> None:
    app = make_app(sim_config({"sim-a": free_port}), tmp_path)
    seen: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")

            def record() -> bool:
                seen.append(card_text(app, "sim-a"))
                return "READY" in seen[-1]

            await wait_until(pilot, record, 60, "READY on the card")
            # On its way the card showed the load in progress: shards counted up before READY.
            in_progress = [s for s in seen if "LOADING" in s and "/4 " in s]
            assert in_progress, seen
            assert any(f"{n}/4" in s for s in in_progress for n in (0, 1, 2, 3)), in_progress
            assert "4/4" in seen[-1] and "KV 300k" in seen[-1] and "mem 0.85" in seen[-1]

            # The log shows the launch, with a READY line.
            await wait_until(pilot, lambda: any("ready to roll" in line for line in log_lines(app)), 10, "ready line")
            total = len(log_lines(app))
            # Highlighted as the engine's parser classified each line (the pane does not parse again).
            kinds = {e.kind for e in app.state.logs["sim-a"] if "ready to roll" in e.text or "KV Cache is allocated" in e.text}
            assert kinds == {"ready", "kv"}, kinds

            # `/` filter: only matching lines stay; an empty filter brings all back.
            await pilot.press("slash")
            await pilot.press(*"KV Cache")
            await pilot.press("enter")
            await pilot.pause()
            filtered = log_lines(app)
            assert filtered and all("kv cache" in line.lower() for line in filtered)
            assert "filter 'KV Cache'" in app.query_one(LogPane).border_title
            await pilot.press("slash", "ctrl+a", "ctrl+k", "enter")
            await pilot.pause()
            assert len(log_lines(app)) >= total

            # Follow off: the view stays where the user put it while lines arrive (a completion makes the server log).
            log = app.query_one(LogPane).query_one(LogLines)
            await pilot.press("f")
            assert "paused" in app.query_one(LogPane).border_title
            log.scroll_to(y=0, animate=False)
            await pilot.pause()
            before = len(log.lines)
            async with httpx.AsyncClient() as client:
                answer = await client.post(f"http://127.0.0.1:{free_port}/v1/completions", timeout=20,
                                           json={"model": "default", "prompt": "hi", "max_tokens": 8})
                assert answer.status_code == 200
            await wait_until(pilot, lambda: len(log.lines) > before, 15, "new log lines")
            assert log.scroll_y == 0
            # Follow on again: back at the end, and it stays there.
            await pilot.press("f")
            await pilot.pause()
            assert "follow" in app.query_one(LogPane).border_title
            assert log.scroll_y == log.max_scroll_y
        finally:
            await quit_with(pilot, "Q")


async def test_a_stopped_eagle3_card_keeps_its_speculative_setup(tmp_path: Path, free_port: int) -> None:
    """Issue 35 #13: an EAGLE-3 card showed `EAGLE3×3 acc …` while its server ran, and `no spec`, `mem —` once
    stopped and seen by the next session (which reads a run that ended from its record alone). What its log said
    stays true of the run: kept after the stop, and read from its log by the next session."""
    app = make_app(sim_config({"eagle": free_port}, {"eagle": "--spec eagle3 --decode-log-interval 4"}), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "eagle"), 60, "READY on the card")
            async with httpx.AsyncClient() as client:   # decoding makes the server log its acceptance
                answer = await client.post(f"http://127.0.0.1:{free_port}/v1/completions", timeout=20,
                                           json={"model": "default", "prompt": "hi", "max_tokens": 64})
                assert answer.status_code == 200
            await wait_until(pilot, lambda: " acc " in card_text(app, "eagle"), 30, "the acceptance on the card")
            live = card_text(app, "eagle")
            spec = live[live.index("EAGLE3"):].splitlines()[0].split(" log ")[0]   # `EAGLE3×3 acc 2.93`
            await pilot.press("S", "y")
            await wait_until(pilot, lambda: "STOPPED" in card_text(app, "eagle"), 60, "STOPPED on the card")
            await pilot.pause(1.5)   # the next refresh reads the stopped run from its record
            app.flush()
            stopped = card_text(app, "eagle")
            assert spec in stopped and "no spec" not in stopped, (live, stopped)
        finally:
            await quit_with(pilot, "Q")
    again = make_app(sim_config({"eagle": free_port}, {"eagle": "--spec eagle3 --decode-log-interval 4"}), tmp_path)
    async with again.run_test(size=(120, 40)) as pilot:
        try:
            # The next session reads the stopped run from its record; its log says what it was.
            await wait_until(pilot, lambda: "STOPPED" in card_text(again, "eagle"), 30, "the stopped run on its card")
            with contextlib.suppress(AssertionError):
                await wait_until(pilot, lambda: spec in card_text(again, "eagle"), 15, "its log read")
            reopened = card_text(again, "eagle")
            assert spec in reopened and "no spec" not in reopened, (live, reopened)
        finally:
            await quit_with(pilot, "q")


async def test_two_ready_cards_fit_an_80x24_pane_and_no_card_line_wraps(tmp_path: Path,
                                                                        free_port_factory: Callable[[], int]) -> None:
    """Issue 35 #19: at 80x24 with both demo servers READY (and the confound banner), the eagle3 card's last line
    was below the fold (a 100 % shard bar per card), and `KV 400k mem 0.88 EAGLE3×3 acc 2.93 log <10s ago` and
    `0 tok/s hit 0% preempt 0.0/s acc 2.50 (50%)` wrapped at 80 and 160 columns. Every card line fits its card, and
    both cards fit the pane."""
    ports = {"base": free_port_factory(), "eagle": free_port_factory()}
    config = sim_config(ports, {"eagle": "--spec eagle3 --decode-log-interval 4 --kv-tokens 250000"})
    app = make_app(config, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        try:
            await pilot.press("l", "j", "l")
            await wait_until(pilot, lambda: all("READY" in card_text(app, p) for p in ports), 60, "both READY")
            async with httpx.AsyncClient() as client:   # decoding makes the server log its acceptance
                answer = await client.post(f"http://127.0.0.1:{ports['eagle']}/v1/completions", timeout=20,
                                           json={"model": "default", "prompt": "hi", "max_tokens": 64})
                assert answer.status_code == 200
            await wait_until(pilot, lambda: card_text(app, "eagle").count(" acc ") == 2, 30,
                             "the acceptance of the log and of /metrics on the card")
            for size in ((80, 24), (160, 48)):
                await pilot.resize_terminal(*size)
                await pilot.pause(0.5)
                app.flush()
                await pilot.pause()
                pane = app.query_one("#servers")
                for card in app.query(RunCard):
                    lines = str(card.render()).splitlines()
                    assert all(len(line) <= card.content_size.width for line in lines), (size, lines)
                    assert card.region.bottom <= pane.content_region.bottom, (size, card.profile, card_text(app, card.profile))
        finally:
            await quit_with(pilot, "Q")


async def test_failure_shows_its_reason(tmp_path: Path, free_port: int) -> None:
    app = make_app(sim_config({"crashy": free_port}, {"crashy": "--crash-at-shard 2"}), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "FAILED" in card_text(app, "crashy"), 60, "FAILED on the card")
            shown = card_text(app, "crashy")
            assert "✗" in shown and "exception" in shown.lower(), shown
            # The log pane shows the traceback that killed it.
            await wait_until(pilot, lambda: any("Traceback" in line for line in log_lines(app)), 10, "traceback")
        finally:
            await quit_with(pilot, "Q")


async def test_a_failed_server_whose_process_hangs_says_so_on_its_card_and_stop_ends_it(tmp_path: Path,
                                                                                     free_port: int) -> None:
    """A server that printed its traceback and then hung (a dead rank, the others waiting forever) showed as FAILED
    while it still held its port and GPUs, and the stop key answered "has no running server". The card now says
    its process still runs and which key stops it; that key stops it."""
    app = make_app(sim_config({"hung": free_port}, {"hung": "--crash-at-shard 2 --hang-after-crash"}), tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "process still running" in card_text(app, "hung"), 60,
                             "the card to say the failed server's process still runs")
            pid = app.state.rows["hung"].pid
            assert "FAILED" in card_text(app, "hung") and f"(pid {pid}) · S stops it" in card_text(app, "hung")
            assert alive(pid)
            await pilot.press("S", "y")
            await wait_until(pilot, lambda: not alive(pid), 60, "S y to end the hung process")
            await wait_until(pilot, lambda: "still running" not in card_text(app, "hung"), 10, "the line to go")
            assert "FAILED" in card_text(app, "hung")   # the reason it failed stays
            assert not any("no running server" in str(n.message) for n in app._notifications)
        finally:
            await quit_with(pilot, "Q")


async def test_demo_q_also_stops_a_failed_server_whose_process_hangs(tmp_path: Path, free_port: int) -> None:
    """"demo: q stops the servers": a failed server still holding its port is one of them."""
    config = sim_config({"demo-a": free_port}, {"demo-a": "--crash-at-shard 2 --hang-after-crash"})
    engine = EngineBridge(config, autolaunch=["demo-a"], results_dir=tmp_path / "results")
    app = SpecmonApp(config, engine=engine, demo=True, state_path=tmp_path / "ui.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "process still running" in card_text(app, "demo-a"), 60, "still running")
        pid = app.state.rows["demo-a"].pid
        await quit_with(pilot, "q")
    assert not alive(pid)


async def test_stalled_load_is_flagged_with_a_toast(tmp_path: Path, free_port: int) -> None:
    # The stall time must outlast a healthy start's silence on this box now (python starts slowly under load). A
    # launch from the TUI is slower to speak than a bare sim start (the launch wrapper, and the app's own loop in
    # this process): at load 13, 3x the bare start (4 s) flagged the silent start instead of the stall at shard 2.
    stall = stall_timeout_for_this_box(2.0, factor=6.0)
    app = make_app(sim_config({"stuck": free_port}, {"stuck": "--stall-at-shard 2"}, stall_s=stall), tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "STALLED" in card_text(app, "stuck"), 60 + stall, "STALLED on the card")
            await wait_until(pilot, lambda: any("stuck: STALLED" in str(n.message) for n in app._notifications),
                             5, "a stalled toast")
            assert "/4" in card_text(app, "stuck")  # where it stopped stays visible
        finally:
            await quit_with(pilot, "Q")


async def test_sweep_by_keypress_draws_points_and_a_result_file_overlays(tmp_path: Path, free_port: int) -> None:
    app = make_app(sim_config({"sim-s": free_port}), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "sim-s"), 60, "READY")
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("enter")  # the form's defaults come from [sweep]: levels 1,2, 4 requests each
            await wait_until(pilot, lambda: not app.state.sweeping and "done" in app.state.sweep_status, 60, "sweep done")
            levels = [lv for lv in app.state.series["sim-s"] if lv.client != "live"]
            assert [lv.concurrency for lv in levels] == [1, 2]
            assert all((lv.output_throughput or 0) > 0 for lv in levels)
            # The chart and table redraw at most once a second, later on a busy box (one full run saw 1 row 1.2 s on).
            chart = app.query_one(SweepPane).query_one("#sweep-chart")
            table = app.query_one(SweepPane).query_one("#sweep-table")
            await wait_until(pilot, lambda: table.row_count == 2, 10, "both levels in the table")  # type: ignore[attr-defined]
            assert "sim-s" in str(chart.render())

            # Overlay the file the sweep wrote, under its own name.
            written = sorted((tmp_path / "results").glob("sim-s-*.jsonl"))
            result = next(p for p in written if not p.name.endswith(".requests.jsonl"))
            await pilot.press("o")
            await pilot.pause()
            await pilot.press(*str(result))
            await pilot.press("enter")
            await wait_until(pilot, lambda: result.stem in app.state.series, 10, "overlay series")
            await wait_until(pilot, lambda: table.row_count == 4, 10, "the overlay's levels in the table")  # type: ignore[attr-defined]
            assert result.stem in str(chart.render())

            # A long sweep, cancelled with `c`: the status says so and the load generator is gone.
            app._start_sweep(SweepRequest(("sim-s",), (64,), 5000, None, 256))  # what the form returns
            await wait_until(pilot, lambda: "C=64" in app.state.sweep_status, 30, "the long sweep running")
            assert "specmon.loadgen" in children()
            await pilot.press("c")
            await wait_until(pilot, lambda: not app.state.sweeping, 10, "the sweep to stop")
            assert "cancelled" in app.state.sweep_status
            await wait_until(pilot, lambda: "specmon.loadgen" not in children(), 10, "the load generator to exit")
        finally:
            await quit_with(pilot, "Q")


async def test_sweep_whose_every_request_failed_is_shown_as_failed(tmp_path: Path, free_port: int) -> None:
    """Every request failed (HTTP 400: the server's context is shorter than prompt + output): the TUI said
    "done: …" as for a measurement, where `specmon sweep` exits 1. Now the pane's status and an error toast say
    the sweep failed and why."""
    app = make_app(sim_config({"tiny": free_port}, {"tiny": "--context-length 16"}), tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "tiny"), 60, "READY")
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.state.sweeping and app.state.sweep_status != "", 60, "the sweep to end")
            assert app.state.sweep_status.startswith("failed: tiny: sweep measured nothing: all "), app.state.sweep_status
            assert "http_4xx" in app.state.sweep_status
            await wait_until(pilot, lambda: any("sweep failed: tiny: sweep measured nothing" in str(n.message)
                                                and n.severity == "error" for n in app._notifications),
                             5, "an error toast")
            app.flush()
            assert "Sweep · failed: tiny" in str(app.query_one(SweepPane).border_title)
        finally:
            await quit_with(pilot, "Q")


async def test_launch_on_a_held_port_shows_failed_with_who_holds_it_on_the_card(tmp_path: Path,
                                                                                  free_port: int) -> None:
    """Issue 10 #1: a launch refused before it started (here: the port is held by another program) left the card
    `IDLE · not running` with no reason. It is FAILED now, with the one-line reason naming the holder, and a toast."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", free_port))
    holder.listen()
    config = sim_config({"sim-h": free_port})
    app = SpecmonApp(config, engine=EngineBridge(config, autolaunch=["sim-h"], results_dir=tmp_path / "results"),
                     state_path=tmp_path / "ui.json")
    try:
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            try:
                await wait_until(pilot, lambda: "FAILED" in card_text(app, "sim-h"), 30, "the FAILED card")
                card = " ".join(card_text(app, "sim-h").split())
                assert f"port {free_port} is already in use" in card and "l tries again" in card, card
                # The whole reason: on the card while the Servers pane is maximised (the key the card names).
                if "(m: whole)" in card:
                    await pilot.press("m")
                    await wait_until(pilot, lambda: "free:" in card_text(app, "sim-h"), 10, "the whole reason")
                card = " ".join(card_text(app, "sim-h").split())
                assert f"by pid {os.getpid()}" in card and "free:" in card, card
                assert any("FAILED to start" in str(n.message) for n in app._notifications)
                assert "sim-h" not in app.engine.started_here  # type: ignore[union-attr]
            finally:
                await quit_with(pilot, "q")
    finally:
        holder.close()


async def test_cancelled_sweep_draws_no_unfinished_point_and_keeps_the_last_complete_series(tmp_path: Path,
                                                                                             free_port: int) -> None:
    """Issue 10 #4: after `c` the chart showed the unfinished level's live point, and the previous complete series
    (with the crossover computed from it) was gone."""
    app = make_app(sim_config({"sim-s": free_port}), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "sim-s"), 60, "READY")
            app._start_sweep(SweepRequest(("sim-s",), (1, 2), 4, None, 16))
            await wait_until(pilot, lambda: not app.state.sweeping and "done" in app.state.sweep_status, 60, "sweep done")
            complete = list(app.state.series["sim-s"])
            assert [lv.concurrency for lv in complete] == [1, 2]

            # A second sweep, cancelled part way through its only level (its live point already drawn).
            app._start_sweep(SweepRequest(("sim-s",), (48,), 4800, None, 64))
            await wait_until(pilot, lambda: any(lv.client == "live" and lv.concurrency == 48
                                                for lv in app.state.series.get("sim-s", [])), 60, "the live C=48 point")
            await pilot.press("c")
            await wait_until(pilot, lambda: not app.state.sweeping, 10, "the sweep to stop")
            await pilot.pause(0.2)
            assert not any(lv.client == "live" for lv in app.state.series["sim-s"]), app.state.series["sim-s"]
            assert app.state.series["sim-s"] == complete  # the last complete series is back on the chart
            app.flush()
            await pilot.pause()
            table = app.query_one(SweepPane).query_one("#sweep-table")
            assert table.row_count == 2  # type: ignore[attr-defined]
            assert "cancelled" in app.state.sweep_status
        finally:
            await quit_with(pilot, "Q")


async def test_quit_after_a_restart_starts_stopping_at_once_and_says_so(tmp_path: Path,
                                                                         free_port_factory: Callable[[], int]) -> None:
    """Issue 10 #2: after `R` `y`, `q` stalled 15-33 s with both cards still READY (the old run's stop waited for
    the new run's port). Now the cards say STOPPING at once, a toast says "stopping 2 servers…", and quit takes
    the servers' own shutdown time."""
    config = sim_config({"demo-a": free_port_factory(), "demo-b": free_port_factory()})
    engine = EngineBridge(config, autolaunch=["demo-a", "demo-b"], results_dir=tmp_path / "results")
    app = SpecmonApp(config, engine=engine, demo=True, state_path=tmp_path / "ui.json")
    seen: list[str] = []
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        for name in ("demo-a", "demo-b"):
            await wait_until(pilot, lambda name=name: "READY" in card_text(app, name), 60, f"{name} READY")
        first = app.state.rows["demo-a"].run_id
        await pilot.press("R", "y")
        await wait_until(pilot, lambda: app.state.rows["demo-a"].run_id != first and "READY" in card_text(app, "demo-a"),
                         60, "the restarted run READY")
        runs = [app.state.rows[n].run_id for n in ("demo-a", "demo-b")]
        started = time.monotonic()
        await pilot.press("q")
        cards: list[tuple[float, str, str]] = []   # (seconds after q, card a, card b)
        while app.is_running:
            cards.append((time.monotonic() - started, card_text(app, "demo-a"), card_text(app, "demo-b")))
            seen.append("".join(str(n.message) for n in app._notifications))
            await pilot.pause(0.05)
            assert time.monotonic() - started < 60, cards[-1]
        elapsed = time.monotonic() - started
    assert any("stopping 2 servers…" in s for s in seen), seen[-3:]
    # Both cards leave READY at once, and the stopping shows: a sim can stop within one 50 ms look, so a card may
    # go from STOPPING to STOPPED between two looks (CI once saw demo-a STOPPED beside demo-b STOPPING).
    def stopping_or_stopped(card: str) -> bool:
        return "STOPPING" in card or "STOPPED" in card
    left_ready = next((t for t, a, b in cards if stopping_or_stopped(a) and stopping_or_stopped(b)), None)
    assert left_ready is not None and left_ready < 2.0, cards[-3:]
    assert any("STOPPING" in a + b for _, a, b in cards), cards[-3:]
    assert elapsed < 10, elapsed   # the sims stop in about a second; the stall was >= 15 s
    from specmon.orchestration.runs.manager import RunManager

    later = RunManager(config)
    try:
        assert all(later.view(run_id).state == "stopped" for run_id in runs if run_id)
    finally:
        await later.close()


async def test_quit_while_a_launch_is_in_flight_waits_for_it_then_stops_its_server(tmp_path: Path,
                                                                                    free_port: int) -> None:
    """`q` (demo: stop the servers) pressed while a launch is under way: quitting used to stop only the runs whose
    launch had returned, and the app's exit then cancelled the launch half-way, leaving a server running with a
    record that said "launching". Now quit waits for the launch, and its server is stopped like the others."""
    from specmon.orchestration.runs.manager import RunManager

    config = sim_config({"demo-a": free_port})
    bridge = EngineBridge(config, results_dir=tmp_path / "results")
    launch = asyncio.create_task(bridge.launch("demo-a"))   # the app's worker for `l`
    while not bridge.manager.index.store.all():   # the launch is under way: its record is written, its pid not yet
        assert not launch.done(), launch
        await asyncio.sleep(0.002)
    await bridge.close(stop_started=True)
    launch.cancel()   # the app's exit cancels its workers
    with contextlib.suppress(asyncio.CancelledError):
        await launch
    later = RunManager(config)
    try:
        assert [(v.profile, v.state) for v in await later.refresh()] == [("demo-a", "stopped")]
    finally:
        for view in await later.refresh():
            if view.active:
                await later.stop(view.run_id, force=True)
        await later.close()


async def test_demo_adopts_servers_left_by_a_killed_demo_and_q_stops_them(tmp_path: Path, free_port: int) -> None:
    """A demo killed by a signal leaves its servers running (as every launch does); the next demo shows them
    rather than failing on busy ports, and its `q` ("demo: q stops the servers") stops them too."""
    from specmon.orchestration.runs.manager import RunManager

    config = sim_config({"demo-a": free_port})
    earlier = RunManager(config)
    left = await earlier.launch("demo-a")
    await earlier.close()   # the earlier specmon is gone; its server is not
    engine = EngineBridge(config, autolaunch=["demo-a"], results_dir=tmp_path / "results")
    app = SpecmonApp(config, engine=engine, demo=True, state_path=tmp_path / "ui.json")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: "READY" in card_text(app, "demo-a"), 60, "READY on the card")
        assert app.state.rows["demo-a"].run_id == left.run_id   # the same run, not a second launch
        await quit_with(pilot, "q")
    later = RunManager(config)
    try:
        assert later.view(left.run_id).state == "stopped"
    finally:
        if later.view(left.run_id).active:
            await later.stop(left.run_id, force=True)
        await later.close()


async def test_quit_and_stop_after_reattaching_says_what_it_left_running(tmp_path: Path, free_port: int,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 35 #12: `Q` (stop the servers started here, then quit) in a session that found a server running and
    reattached it quit in under a second and left it running, silently. It still leaves it (not started here), and
    says so on the terminal, with the command that stops it."""
    from specmon.orchestration.runs.manager import RunManager

    config = sim_config({"sim-r": free_port})
    earlier = RunManager(config)
    left = await earlier.launch("sim-r")
    await earlier.close()   # the earlier specmon is gone; its server is not
    app = make_app(config, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.state.rows["sim-r"].run_id == left.run_id, 60, "the run reattached")
        await quit_with(pilot, "Q")
    said = " ".join(capsys.readouterr().err.split())   # printed once the screen is gone (wrapped to the terminal)
    later = RunManager(config)
    try:
        assert later.view(left.run_id).active   # not started here: left running, as before
        assert f"left running (not started here; reattached): sim-r (run {left.run_id})" in said, said
        assert "stop it with: specmon stop sim-r" in said, said
    finally:
        await later.stop(left.run_id, force=True)
        await later.close()


@pytest.mark.parametrize(("levels", "requests", "problem"), [
    ("8,4", "", "levels must be strictly increasing (8 then 4)"),
    ("4,4", "", "levels must be strictly increasing (4 then 4)"),
    ("1,64", "16", "requests per level (16) is below the highest level C=64"),
])
async def test_sweep_form_refuses_levels_it_would_not_run_as_typed(
        tmp_path: Path, free_port: int, levels: str, requests: str, problem: str) -> None:
    """`8,4` used to run 4 then 8, `4,4` one level, and 16 requests a "C=64" level that never had 64 in flight:
    the form keeps itself open with the reason instead."""
    app = make_app(sim_config({"sim-f": free_port}), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        form = SweepFormScreen(["sim-f"], ["sim-f"], app.config.sweep)
        await app.push_screen(form)
        await pilot.pause()
        form.query_one("#levels", Input).value = levels
        form.query_one("#requests", Input).value = requests
        await pilot.click("#start")
        await pilot.pause()
        assert app.screen is form
        assert problem in str(form.query_one("#form-error", Static).render())


async def open_experiment_dialog(pilot: Pilot) -> None:
    """`x`, and wait for its dialog (it first looks for unfinished runs to offer)."""
    from specmon.ui.forms import ExperimentScreen

    await pilot.press("x")
    await wait_until(pilot, lambda: isinstance(pilot.app.screen, ExperimentScreen), 10, "the experiment dialog")
    await pilot.pause()


def experiment_options(app: SpecmonApp) -> list[str]:
    from textual.widgets import OptionList

    options = app.screen.query_one(OptionList)
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def test_q_after_a_cancelled_experiment_stops_the_server_it_launched(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """Seen in the newcomer walk: `x`, then `c` while a profile was being swept, then the demo's `q`: the server
    the experiment had launched kept running (its port held), since only runs launched by key were this session's."""
    free_port, other = free_port_factory(), free_port_factory()
    profiles = "".join(f'[profiles.{name}]\nport = {port}\ncommand = ["specmon", "sim", "--port", "{port}", '
                       '"--shards", "2", "--load-seconds", "1"]\n' for name, port in (("exp-base", free_port),
                                                                                      ("exp-other", other)))
    config = parse_config(profiles + '[experiments.ab]\nprofiles = ["exp-base", "exp-other"]\nlevels = [1]\n'
                          "repeats = 1\nduration_s = 120\nwarmup_requests = 0\noutput_len = 32\n",
                          "test-profiles.toml")
    app = make_app(config, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        await open_experiment_dialog(pilot)
        assert experiment_options(app) == ["run ab (exp-base vs exp-other: 1 levels × 1 repeats)"]   # nothing to resume
        await pilot.press("enter")
        await wait_until(pilot, lambda: "exp-base ready" in "\n".join(app.state.experiment_steps), 60, "the server ready")
        await pilot.press("c")
        # 7 s for the whole test on a quiet box; CI under load once waited past 30 s here (cause not found).
        await wait_until(pilot, lambda: not app.state.sweeping, 90, "the experiment to be cancelled")
        assert socket.create_connection(("127.0.0.1", free_port), timeout=5)   # left up by the cancel, as designed
        await open_experiment_dialog(pilot)   # the cancelled run can be resumed now
        assert experiment_options(app)[1] == "resume ab (continue its last unfinished run)", experiment_options(app)
        await pilot.press("escape")
        await quit_with(pilot, "Q")
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", free_port)) != 0, "the experiment's server still holds its port"


async def test_experiment_by_key_shows_its_steps_and_builds_the_overlay(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """`x` runs the A/B: steps, both curves, and one crossover figure: the one drawn is the one the verdict names,
    both from the result files (the chart kept the in-memory means: C≈5.69 drawn beside C≈5.68 in the verdict)."""
    from specmon.model.experiments.verdict import summarize
    from specmon.model.sweeps.compare import load_words
    from specmon.sources.experimentfiles import experiment_runs, load_state

    ports = {"exp-base": free_port_factory(), "exp-eagle": free_port_factory()}
    # A cheap draft (the demo's): EAGLE-3 ahead at C=1, behind at C=16, so the curves cross in between.
    base = sim_config(ports, extra={"exp-eagle": "--spec eagle3 --spec-step-cost 0.65"})
    text_config = "\n".join(
        f"[profiles.{p.name}]\nport = {p.port}\ncommand = {list(p.command)!r}\n".replace("'", '"')
        for p in base.profiles.values())
    config = parse_config(text_config + '\n[experiments.ab]\nprofiles = ["exp-base", "exp-eagle"]\nlevels = [1, 16]\n'
                          "repeats = 1\nrequests_per_level = 16\nwarmup_requests = 0\noutput_len = 32\n",
                          "test-profiles.toml")
    app = make_app(config, tmp_path)
    async with app.run_test(size=(150, 45), notifications=True) as pilot:
        try:
            await open_experiment_dialog(pilot)
            await pilot.press("enter")   # the first entry: run ab
            await wait_until(pilot, lambda: app.state.sweeping, 10, "the experiment to start")
            await wait_until(pilot, lambda: not app.state.sweeping, 100, "the experiment to finish")
            assert "experiment ab finished" in app.state.sweep_status, app.state.sweep_status
            assert "is faster" in app.state.sweep_status
            steps = "\n".join(app.state.experiment_steps)
            for step in ("exp-base launch", "exp-base ready", "exp-base level: C=16", "exp-base stopped",
                         "exp-eagle launch", "done: finished"):
                assert step in steps, steps
            # The overlay built up: both profiles on the chart, one point per level.
            assert [lv.concurrency for lv in app.state.series["exp-base"]] == [1, 16]
            assert [lv.concurrency for lv in app.state.series["exp-eagle"]] == [1, 16]
            # With the figures its report has (issue 35 #15: TTFT and TPOT were shown as —).
            assert all(lv.ttft_p50_ms is not None and lv.tpot_p50_ms is not None for lv in app.state.series["exp-base"])
            # One crossover: the chart's is the verdict's, which is the result files' (read back here).
            (directory,) = (tmp_path / "results" / "experiments").iterdir()
            state = load_state(directory)
            expected = summarize(experiment_runs(state), state.spec.repeats).crossover
            assert expected is not None and app.state.crossover is not None, app.state.sweep_status
            assert app.state.crossover.concurrency == expected.concurrency
            figure = load_words(expected.concurrency)
            assert figure in app.state.sweep_status, app.state.sweep_status
            await wait_until(pilot, lambda: figure in app.query_one(SweepPane).verdict, 30, f"the chart's verdict to name {figure}")
            pane = app.query_one(SweepPane)
            panel = pane.query_one("#experiment-steps", Static)
            # The step list repaints at most once a second, later on a busy box: wait for it rather than a fixed pause.
            await wait_until(pilot, lambda: "done: finished" in str(panel.render()), 30, "the step list to show done")
            assert panel.display
            assert "exp-eagle" in str(pane.query_one("#sweep-chart").render())
        finally:
            await pilot.press("Q")


async def test_a_grid_by_key_shows_variants_done_of_total_and_an_eta(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """`x` on a tuning grid (issue 36): while it runs, the pane's title counts the profiles done of the total (the
    baseline and each variant), names the variant under way by its settings and gives the whole grid's ETA; the
    series are named by their settings; at the end the title and the line under the chart hold the bands."""
    ports = {"exp-base": free_port_factory(), "exp-eagle": free_port_factory()}
    base = sim_config(ports, extra={"exp-eagle": "--spec eagle3"})
    text_config = "\n".join(
        f"[profiles.{p.name}]\nport = {p.port}\ncommand = {list(p.command)!r}\n".replace("'", '"')
        for p in base.profiles.values())
    config = parse_config(text_config + '\n[experiments.tune]\nbase = "exp-eagle"\nbaseline = "exp-base"\n'
                          'vary = { "--spec-steps" = [1, 5] }\nlevels = [1, 4]\nrepeats = 1\nduration_s = 1\n'
                          "warmup_requests = 0\noutput_len = 32\n", "test-profiles.toml")
    app = make_app(config, tmp_path)
    seen: list[str] = []
    async with app.run_test(size=(150, 45), notifications=True) as pilot:
        try:
            await open_experiment_dialog(pilot)
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.state.sweeping, 10, "the grid to start")

            def progress() -> bool:
                seen.append(app.state.sweep_status)
                return bool(re.search(r"^grid tune [12]/3 done · ETA 0:\d\d: spec-steps=[15] ", app.state.sweep_status))

            await wait_until(pilot, progress, 100, "the title to count variants done and give an ETA")
            await wait_until(pilot, lambda: not app.state.sweeping, 100, "the grid to finish")
            assert "grid tune 0/3 done · ETA " in "\n".join(seen), seen
            assert set(app.state.series) == {"baseline", "spec-steps=1", "spec-steps=5"}, list(app.state.series)
            assert app.state.sweep_status.startswith("grid tune finished: C 1"), app.state.sweep_status   # the bands
            # ... and under the chart, in full (the title's end gives way on a narrow screen).
            bands = app.state.sweep_status.removeprefix("grid tune finished: ")
            await wait_until(pilot, lambda: app.query_one(SweepPane).verdict == bands, 30, "the bands under the chart")
        finally:
            await pilot.press("Q")
