"""The serving view in the TUI (Textual Pilot) against a real `specmon sim` through the real engine: a READY card
shows the server's own /metrics figures, they move during a sweep, and driving the sim past its capacity raises an
alert on the card and as a toast."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from lifecycle_support import kill_marked, marked_pids
from sshd_support import Sshd
from test_ui_pilot import card_text, make_app, quit_with, wait_until

from specmon.model.config import parse_config
from specmon.model.server.acceptance import MetricsSample
from specmon.model.server.serving import ServingFigures, read_sample
from specmon.orchestration.inspect import serving as serving_watcher
from specmon.ui.forms import SweepRequest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_card_follows_metrics_through_a_sweep_and_alerts_past_capacity(tmp_path: Path, free_port: int) -> None:
    # Capacity: 4 running requests and a small KV cache; the sweep asks for 24 at once, so requests queue.
    args = ["specmon", "sim", "--port", str(free_port), "--shards", "2", "--load-seconds", "1",
            "--max-running-requests", "4", "--kv-tokens", "6000"]
    config = parse_config(f"[profiles.sim-m]\nport = {free_port}\ncommand = {json.dumps(args)}\n"
                          "metrics_interval_s = 0.25\nalert_waiting_s = 1\n", "test-profiles.toml")
    app = make_app(config, tmp_path)
    seen: list[ServingFigures] = []
    toasts: list[str] = []
    app.notify = lambda message, **kw: toasts.append(str(message))   # type: ignore[method-assign,assignment]

    def figures() -> ServingFigures | None:
        update = app.state.serving.get("sim-m")
        if update is not None and update.figures is not None and (not seen or seen[-1] is not update.figures):
            seen.append(update.figures)
        return None if update is None else update.figures

    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "sim-m"), 60, "READY")
            await wait_until(pilot, lambda: figures() is not None, 20, "the first /metrics read")
            idle = figures()
            assert idle is not None and (idle.running, idle.waiting) == (0.0, 0.0)
            await pilot.pause(0.6)
            assert "run 0" in card_text(app, "sim-m") and "wait 0" in card_text(app, "sim-m")

            app._start_sweep(SweepRequest(("sim-m",), (24,), 40, None, 128))
            await wait_until(pilot, lambda: (figures() is not None and any(f.waiting for f in seen)
                                             and any(f.running for f in seen) and any(f.kv_pct for f in seen)),
                             60, "running, waiting and KV to move")
            assert max(f.running or 0 for f in seen) <= 4
            await wait_until(pilot, lambda: any("waiting for" in t for t in toasts), 30, "the waiting alert's toast")
            await pilot.pause(0.6)
            assert "⚠" in card_text(app, "sim-m") and "waiting for" in card_text(app, "sim-m")
            await wait_until(pilot, lambda: not app.state.sweeping, 90, "the sweep to end")
            await wait_until(pilot, lambda: (f := figures()) is not None and f.waiting == 0 and f.running == 0,
                             20, "the queue to drain")
            await pilot.pause(0.6)
            assert "⚠" not in card_text(app, "sim-m")
        finally:
            await quit_with(pilot, "Q")


LIVE = re.compile(r"client C=(\d+): (\d+) in flight · server: running (\d+) waiting (\d+) KV (\d+)%")


async def test_sweep_pane_shows_the_servers_queue_beside_the_clients_concurrency(tmp_path: Path,
                                                                                 free_port: int) -> None:
    """During a sweep the line under the chart puts the client's level beside the server's /metrics: at C=2 the
    server runs them (it holds no more than two); at C=24, past its 4-request batch, requests wait on the server."""
    args = ["specmon", "sim", "--port", str(free_port), "--shards", "2", "--load-seconds", "1",
            "--max-running-requests", "4"]
    config = parse_config(f"[profiles.sim-q]\nport = {free_port}\ncommand = {json.dumps(args)}\n"
                          "metrics_interval_s = 0.25\n", "test-profiles.toml")
    app = make_app(config, tmp_path)
    seen: list[tuple[int, ...]] = []

    def live() -> str:
        line = app.query_one("#sweep-live")
        text = str(line.render()) if line.display else ""
        if (m := LIVE.search(text)) and (not seen or seen[-1] != tuple(map(int, m.groups()))):
            seen.append(tuple(map(int, m.groups())))
        return text

    async with app.run_test(size=(160, 48)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "sim-q"), 60, "READY")
            assert live() == ""                                      # no sweep: no line
            app._start_sweep(SweepRequest(("sim-q",), (2, 24), 24, None, 64))
            await wait_until(pilot, lambda: bool(live()) and any(c == 24 and waiting >= 10 for c, _, _, waiting, _ in seen),
                             90, "requests waiting on the server at C=24")
            # At C=2 the server holds at most the client's two (one may wait a step for admission).
            low = [s for s in seen if s[0] == 2]
            assert low and all(running + waiting <= 2 for _, _, running, waiting, _ in low), low
            assert any(running == 2 for _, _, running, _, _ in low), low
            assert max(running for c, _, running, _, _ in seen if c == 24) <= 4
            await wait_until(pilot, lambda: not app.state.sweeping, 90, "the sweep to end")
            await pilot.pause(0.6)
            assert live() == ""                                      # the sweep is over: the line goes
        finally:
            await quit_with(pilot, "Q")


async def test_remote_card_reads_metrics_over_the_one_ssh_connection(sshd: Sshd, tmp_path: Path,
                                                                    free_port: int) -> None:
    """A remote READY run's /metrics is read 5 times a second through the host's SSH connection: the loopback sshd
    sees no login after the first, however many reads."""
    command = [sys.executable, "-m", "specmon.sim", "--port", str(free_port), "--shards", "2", "--load-seconds", "1"]
    text = (f'[profiles.far]\nhost = "gpu1"\nport = {free_port}\ncommand = {json.dumps(command)}\n'
            "metrics_interval_s = 0.2\n\n" + sshd.ssh_table(keepalive_s=5.0))
    before = logins(sshd)
    app = make_app(parse_config(text, str(tmp_path / "profiles.toml")), tmp_path)
    run_ids: list[str] = []

    def reads() -> int:   # as the server saw them: its access log (the sshd's host is this machine)
        runs = app.engine.manager.index.store.all()   # type: ignore[attr-defined]
        log = Path(runs[0].log_path) if runs else None
        return log.read_text().count("GET /metrics") if log is not None and log.exists() else 0

    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "far"), 60, "READY")
            run_ids += [v.run_id for v in app.engine.manager.index.store.all()]  # type: ignore[attr-defined]
            await wait_until(pilot, lambda: reads() >= 2, 20, "the first reads of /metrics")
            at_ready, first = logins(sshd), reads()
            await wait_until(pilot, lambda: reads() >= first + 20, 30, "20 more reads")
            await pilot.pause(0.6)
            assert "run 0" in card_text(app, "far")
            assert logins(sshd) == at_ready == before + 1, "a read of /metrics opened an SSH connection"
        finally:
            await quit_with(pilot, "Q")
    kill_marked(run_ids)


def logins(sshd: Sshd) -> int:
    return len(re.findall(r"Accepted publickey", sshd.log.read_text(errors="replace")))


async def test_a_server_without_metrics_says_so_once(tmp_path: Path, free_port: int) -> None:
    args = ["specmon", "sim", "--port", str(free_port), "--shards", "2", "--load-seconds", "1", "--no-metrics"]
    config = parse_config(f"[profiles.bare]\nport = {free_port}\ncommand = {json.dumps(args)}\n"
                          "metrics_interval_s = 0.2\n", "test-profiles.toml")
    app = make_app(config, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "bare"), 60, "READY")
            await wait_until(pilot, lambda: "no /metrics (HTTP 404)" in card_text(app, "bare"), 20, "the note")
            await pilot.pause(1.5)   # 7 intervals: no more asking
            log = Path(app.engine.manager.index.store.all()[0].log_path).read_text()   # type: ignore[attr-defined]
            assert log.count("GET /metrics") == 1
            assert "--enable-metrics" in card_text(app, "bare")
        finally:
            await quit_with(pilot, "Q")


async def test_metrics_that_stop_answering_while_the_process_runs_raise_an_alert(tmp_path: Path,
                                                                                 free_port: int) -> None:
    """The server's process is frozen (SIGSTOP): it still runs, its /metrics no longer answers; the card and a
    toast say so; thawed, the alert clears."""
    args = ["specmon", "sim", "--port", str(free_port), "--shards", "2", "--load-seconds", "1"]
    config = parse_config(f"[profiles.froze]\nport = {free_port}\ncommand = {json.dumps(args)}\n"
                          "metrics_interval_s = 0.5\n", "test-profiles.toml")
    app = make_app(config, tmp_path)
    toasts: list[str] = []
    app.notify = lambda message, **kw: toasts.append(str(message))   # type: ignore[method-assign,assignment]
    async with app.run_test(size=(120, 40)) as pilot:
        frozen: list[int] = []
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "froze"), 60, "READY")
            await wait_until(pilot, lambda: "run 0" in card_text(app, "froze"), 20, "the serving view")
            frozen = marked_pids(app.engine.manager.index.store.all()[0].run_id)   # type: ignore[attr-defined]
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            await wait_until(pilot, lambda: any("/metrics stopped answering" in t for t in toasts), 30, "the toast")
            await pilot.pause(0.6)
            assert "/metrics stopped answering" in card_text(app, "froze")
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            frozen = []
            await wait_until(pilot, lambda: "stopped answering" not in card_text(app, "froze"), 30, "it to clear")
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
            await quit_with(pilot, "Q")


def _sim_profile(name: str, port: int, *extra: str, interval: float = 0.25) -> str:
    args = ["specmon", "sim", "--port", str(port), "--shards", "2", "--load-seconds", "1", *extra]
    return f"[profiles.{name}]\nport = {port}\ncommand = {json.dumps(args)}\nmetrics_interval_s = {interval}\n"


async def test_a_hostile_metrics_answer_cannot_end_the_tui(tmp_path: Path, free_port: int) -> None:
    """A server whose /metrics says KV 1e308: the card's sparkline took int() of infinity and the TUI ended with an
    OverflowError. Now the card says what it ignored and goes on."""
    hostile = tmp_path / "hostile.prom"
    hostile.write_text('vllm:num_requests_running{engine="0"} 0\nvllm:kv_cache_usage_perc{engine="0"} 1e308\n')
    app = make_app(parse_config(_sim_profile("bad", free_port, "--flavor", "vllm", "--metrics-from", str(hostile)),
                                "test-profiles.toml"), tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "bad"), 60, "READY")
            await wait_until(pilot, lambda: "ignored impossible values" in card_text(app, "bad"), 20, "the note")
            await pilot.pause(1.0)   # four more reads, each drawn
            assert app.is_running
            card = card_text(app, "bad")
            assert "run 0" in card and "KV —" in card and "inf" not in card, card
        finally:
            await quit_with(pilot, "Q")


async def test_a_fault_in_the_serving_view_is_shown_and_reading_goes_on(tmp_path: Path, free_port: int,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader of a run's /metrics used to end at the first exception, silently, its card's figures frozen. One
    answer that cannot be taken in (forced: no real one is left that fails so) is shown on the card, and the next
    reads go on."""
    failed: list[int] = []

    def read_sample_failing_once(text: str, at: float) -> MetricsSample:
        if not failed:
            failed.append(1)
            raise OverflowError("intermediate overflow in fsum")
        return read_sample(text, at)

    monkeypatch.setattr(serving_watcher, "read_sample", read_sample_failing_once)
    app = make_app(parse_config(_sim_profile("odd", free_port, interval=0.5), "test-profiles.toml"), tmp_path)
    toasts: list[str] = []
    app.notify = lambda message, **kw: toasts.append(str(message))   # type: ignore[method-assign,assignment]
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "odd"), 60, "READY")
            # Said as an alert (the card shows it until the next read, which a busy box may paint over first).
            await wait_until(pilot, lambda: any("odd: serving view failed (OverflowError" in t for t in toasts), 20,
                             "the fault said")
            await wait_until(pilot, lambda: "run 0" in card_text(app, "odd") and "failed" not in card_text(app, "odd"),
                             20, "the next read")
        finally:
            await quit_with(pilot, "Q")


async def test_a_server_that_is_killed_raises_no_metrics_alert(tmp_path: Path, free_port: int) -> None:
    """kill -9 of a READY server: its /metrics stops answering because it ended, which the card shows as its state;
    a "/metrics stopped answering" alert and toast said otherwise."""
    app = make_app(parse_config(_sim_profile("gone", free_port), "test-profiles.toml"), tmp_path)
    toasts: list[str] = []
    app.notify = lambda message, **kw: toasts.append(str(message))   # type: ignore[method-assign,assignment]
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "gone"), 60, "READY")
            await wait_until(pilot, lambda: "run 0" in card_text(app, "gone"), 20, "the serving view")
            for pid in marked_pids(app.engine.manager.index.store.all()[0].run_id):   # type: ignore[attr-defined]
                os.kill(pid, signal.SIGKILL)
            await wait_until(pilot, lambda: "READY" not in card_text(app, "gone"), 30, "the card to leave READY")
            await pilot.pause(1.0)
            assert not [t for t in toasts if "/metrics" in t], toasts
            assert "stopped answering" not in card_text(app, "gone")
        finally:
            await quit_with(pilot, "Q")
