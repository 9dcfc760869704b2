"""The TUI (Textual Pilot) with a remote profile on the loopback sshd, through a two-hop ProxyJump: launch with
`l`, the card goes to READY showing its host and link, then a sweep by `s` runs over the local forward."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from lifecycle_support import kill_marked
from sshd_support import Sshd
from test_ssh_transport import _relay_alias
from test_ui_pilot import card_text, make_app, wait_until

from specmon.model.config import parse_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def test_remote_profile_launch_ready_and_sweep_over_the_forward(sshd: Sshd, tmp_path: Path,
                                                                     free_port: int) -> None:
    command = [sys.executable, "-m", "specmon.sim", "--port", str(free_port), "--shards", "4", "--load-seconds", "2"]
    text = (f'[profiles.far]\nhost = "gpu2"\nport = {free_port}\ncommand = {json.dumps(command)}\n\n'
            "[sweep]\nlevels = [1, 2]\nrequests_per_level = 4\nwarmup_requests = 0\noutput_len = 32\n\n"
            + sshd.ssh_table(keepalive_s=5.0))
    app = make_app(parse_config(text, str(tmp_path / "profiles.toml")), tmp_path)
    run_ids: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            await pilot.press("l")
            await wait_until(pilot, lambda: "READY" in card_text(app, "far"), 60, "READY")
            card = card_text(app, "far")
            assert f"gpu2:{free_port}" in card and "connected" in card
            run_ids += [v.run_id for v in app.engine.manager.index.store.all()]  # type: ignore[attr-defined]
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.state.sweeping and "done" in app.state.sweep_status, 60, "sweep done")
            levels = [lv for lv in app.state.series["far"] if lv.client != "live"]
            assert [lv.concurrency for lv in levels] == [1, 2]
            assert all((lv.output_throughput or 0) > 0 for lv in levels)
            written = sorted((tmp_path / "results").glob("far-*.jsonl"))
            result = next(p for p in written if not p.name.endswith(".requests.jsonl"))
            meta = json.loads(result.read_text().splitlines()[0])
            url = meta.get("url") or meta.get("meta", {}).get("url")
            # Measured through the forward on 127.0.0.1 here, not at the server's own port.
            assert url.startswith("http://127.0.0.1:") and not url.endswith(f":{free_port}"), url
        finally:
            await pilot.press("Q")
    kill_marked(run_ids)


async def test_a_blackholed_host_delays_only_its_own_card(sshd: Sshd, tmp_path: Path,
                                                          free_port_factory: Callable[[], int]) -> None:
    """Three hosts with a ready run each; the third's link then hangs (the relay holds every byte, sockets open).
    While it hangs, keys are answered at once, a run launched on a healthy host reaches READY, the healthy cards
    stay READY and connected, and the hung host's card says its link is down."""
    relay = await _relay_alias(sshd, "slowlink")
    hosts = {"near1": "gpu1", "near2": "bastion", "far": "slowlink", "late": "gpu1"}
    text = ""
    for profile, host in hosts.items():
        port = free_port_factory()
        command = [sys.executable, "-m", "specmon.sim", "--port", str(port), "--load-seconds", "1"]
        text += f'[profiles.{profile}]\nhost = "{host}"\nport = {port}\ncommand = {json.dumps(command)}\n\n'
    keepalive_s, connect_timeout_s = 1.0, 5.0
    app = make_app(parse_config(text + sshd.ssh_table(keepalive_s, connect_timeout_s),
                                str(tmp_path / "profiles.toml")), tmp_path)
    run_ids: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        try:
            launch_s = 0.0
            for profile in ("near1", "near2", "far"):
                await pilot.press(*(["j"] if profile != "near1" else []), "l")
                assert app.state.selected == profile
                t0 = time.monotonic()
                await wait_until(pilot, lambda p=profile: "READY" in card_text(app, p), 60, f"{profile} READY")
                launch_s = max(launch_s, time.monotonic() - t0)
            relay.blackhole()
            t0 = time.monotonic()
            await pilot.press("j")   # to "late": answered while the link hangs
            key_s = time.monotonic() - t0
            assert app.state.selected == "late"
            await pilot.press("l")
            # A hung link costs its own card the keepalive window (3 unanswered keepalives); nothing else waits on it.
            bound = 3 * launch_s + connect_timeout_s + 12 * keepalive_s
            await wait_until(pilot, lambda: "READY" in card_text(app, "late") and "⚡" in card_text(app, "far"),
                             bound, f"late READY and far's link down within {bound:.0f} s (launches took "
                             f"up to {launch_s:.1f} s): late: {card_text(app, 'late')!r} far: {card_text(app, 'far')!r}")
            late_s = time.monotonic() - t0
            for profile in ("near1", "near2", "late"):
                card = card_text(app, profile)
                assert "READY" in card and "connected" in card and "⚡" not in card, card
            print(f"launch up to {launch_s:.1f} s; key while hung {key_s * 1000:.0f} ms; late READY and far down "
                  f"after {late_s:.1f} s; far: {card_text(app, 'far')!r}")
            assert key_s < connect_timeout_s, f"a key press took {key_s:.1f} s while one link hung"
            run_ids += [v.run_id for v in app.engine.manager.index.store.all()]  # type: ignore[attr-defined]
        finally:
            relay.restore()
            await pilot.press("Q")
    await relay.close()
    kill_marked(run_ids)
