"""The TUI (Textual Pilot) with a remote profile on the loopback sshd, through a two-hop ProxyJump: launch with
`l`, the card goes to READY showing its host and link, then a sweep by `s` runs over the local forward."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from lifecycle_support import kill_marked
from sshd_support import Sshd
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
            run_ids += [v.run_id for v in app.engine.manager.runs()]  # type: ignore[attr-defined]
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.sweeping and "done" in app.sweep_status, 60, "sweep done")
            levels = [lv for lv in app.series["far"] if lv.client != "live"]
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
