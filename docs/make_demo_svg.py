"""Regenerate docs/demo.svg (the README's screenshot) from the app itself, driving the real demo.

    python3 docs/make_demo_svg.py [--out docs/demo.svg] [--size 160x48]

It runs the built-in demo profiles on `specmon sim` (moved to free ports, state in a temp dir), waits until both
are READY, presses `s` and starts the sweep from the form, waits for it to finish, and saves the screen as SVG
with Textual's own screenshot export. Takes about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import tempfile
import time
from pathlib import Path

from specmon.model.config import builtin_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def shoot(out: Path, cols: int, rows: int) -> None:
    from textual.widgets import RichLog

    from specmon.ui.app import SpecmonApp
    from specmon.ui.bridge import EngineBridge

    config = builtin_config()
    profiles = {}
    for name, profile in config.profiles.items():
        port = free_port()
        command = tuple(str(port) if arg == str(profile.port) else arg for arg in profile.command)
        profiles[name] = dataclasses.replace(profile, port=port, command=command)
    sweep = dataclasses.replace(config.sweep, levels=(1, 4, 16, 64), requests_per_level=16, output_len=64)
    config = dataclasses.replace(config, profiles=profiles, sweep=sweep)
    work = Path(tempfile.mkdtemp(prefix="specmon-shot-"))
    engine = EngineBridge(config, autolaunch=list(profiles), results_dir=work / "results")
    app = SpecmonApp(config, engine=engine, demo=True, state_path=work / "ui.json")
    async with app.run_test(size=(cols, rows)) as pilot:
        try:
            deadline = time.monotonic() + 120
            while not all(row.state == "ready" for row in app.rows.values()):
                assert time.monotonic() < deadline, "demo servers not ready in 120 s"
                await pilot.pause(0.5)
            await pilot.press("s")
            await pilot.pause(0.5)
            await pilot.press("enter")
            await pilot.pause(1.0)
            while app.sweeping:
                assert time.monotonic() < deadline + 300, "sweep did not finish"
                await pilot.pause(0.5)
            # Hide uvicorn's access lines (the sweep's requests) with the log filter, to show the launch log.
            await pilot.press("slash", *"!INFO:", "enter", "f")  # filter, then stop following ...
            log = app.query_one(RichLog)                          # ... and show the end of the weight load
            end = next(i for i, line in enumerate(log.lines) if "Load weight end" in line.text)
            log.scroll_to(y=max(0, end - log.size.height + 4), animate=False)
            await pilot.pause(9)  # let the toasts fade
            app.flush()
            await pilot.pause(0.5)
            app.save_screenshot(filename=out.name, path=str(out.parent))
        finally:
            await pilot.press("q")  # demo mode: q stops what the demo started (in a worker: wait for the exit)
            while app.is_running:
                await pilot.pause(0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("demo.svg"))
    parser.add_argument("--size", default="160x48")
    args = parser.parse_args()
    cols, rows = (int(v) for v in args.size.split("x"))
    with tempfile.TemporaryDirectory() as home:
        os.environ["XDG_STATE_HOME"] = home
        os.environ["XDG_CONFIG_HOME"] = home
        asyncio.run(shoot(args.out.resolve(), cols, rows))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
