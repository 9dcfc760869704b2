"""Regenerate docs/demo.svg (the README's screenshot) from the app itself, driving the real demo.

    python3 docs/make_demo_svg.py [--out docs/demo.svg] [--size 160x48] [--levels 1,4,16,64] [--requests N]

It runs the built-in demo profiles on `specmon sim` (moved to free ports, state in a temp dir), waits until both
are READY, presses `s`, types its settings into the sweep form and starts the sweep, waits for it to finish, and
saves the screen as SVG with Textual's own screenshot export. Takes about two minutes.

Its settings go through the form's own check before anything starts. It fails (exit 1, one line saying what) when
the form refuses them, when a server is not ready or the sweep does not end "done" in time, and writes nothing then.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from specmon.model.config import Config, builtin_config
from specmon.ui.forms import SweepRequest, sweep_form_fields, sweep_request

# What the script types into the sweep form (input id -> text); the other fields keep the demo's [sweep] values
# (5 s per level, so no requests count: it would have to cover the highest level).
FORM_SETTINGS = {"levels": "1,2,4,8,16,32,64"}
READY_S, SWEEP_S = 120, 400


class Failed(Exception):
    """Something the script drives did not finish, or refused it: the one line it prints."""


def form_settings(config: Config, overrides: dict[str, str]) -> tuple[dict[str, str], SweepRequest]:
    """The form's fields as the script fills them and the sweep the form would start from them; Failed, with the
    form's reason, when it refuses them."""
    fields = sweep_form_fields(config.sweep) | overrides
    try:
        return fields, sweep_request(list(config.profiles), fields, config.sweep)
    except ValueError as exc:
        raise Failed(f"the sweep form refuses {overrides}: {exc}") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def shoot(out: Path, cols: int, rows: int, overrides: dict[str, str]) -> None:
    from textual.widgets import Input, Static

    from specmon.ui.app import SpecmonApp
    from specmon.ui.bridge import EngineBridge
    from specmon.ui.forms import SweepFormScreen
    from specmon.ui.logview import LogLines

    config = builtin_config()
    fields, _ = form_settings(config, overrides)   # refused settings fail here, before anything starts
    profiles = {}
    for name, profile in config.profiles.items():
        port = free_port()
        command = tuple(str(port) if arg == str(profile.port) else arg for arg in profile.command)
        profiles[name] = dataclasses.replace(profile, port=port, command=command)
    config = dataclasses.replace(config, profiles=profiles)
    work = Path(tempfile.mkdtemp(prefix="specmon-shot-"))
    engine = EngineBridge(config, autolaunch=list(profiles), results_dir=work / "results")
    app = SpecmonApp(config, engine=engine, demo=True, state_path=work / "ui.json")
    async with app.run_test(size=(cols, rows)) as pilot:
        try:
            deadline = time.monotonic() + READY_S
            while not all(row.state == "ready" for row in app.state.rows.values()):
                if time.monotonic() > deadline:
                    states = ", ".join(f"{name} {row.state}" for name, row in app.state.rows.items())
                    raise Failed(f"the demo servers were not ready in {READY_S} s ({states})")
                await pilot.pause(0.5)
            await pilot.press("s")
            await pilot.pause(0.5)
            form = app.screen
            if not isinstance(form, SweepFormScreen):
                raise Failed(f"s did not open the sweep form (the screen is {type(form).__name__})")
            for widget_id, text in fields.items():
                form.query_one(f"#{widget_id}", Input).value = text
            await pilot.click("#start")
            await pilot.pause(1.0)
            if app.screen is form:
                raise Failed(f"the sweep form refused {fields}: {form.query_one('#form-error', Static).content}")
            deadline = time.monotonic() + SWEEP_S
            while app.state.sweeping or not app.state.sweep_status:
                if time.monotonic() > deadline:
                    raise Failed(f"the sweep did not finish in {SWEEP_S} s ({app.state.sweep_status})")
                await pilot.pause(0.5)
            if not app.state.sweep_status.startswith("done"):
                raise Failed(f"the sweep ended {app.state.sweep_status!r}, not done")
            # Hide uvicorn's access lines (the sweep's requests) with the log filter, to show the launch log.
            await pilot.press("slash", *"!INFO:", "enter", "f")  # filter, then stop following ...
            log = app.query_one(LogLines)                         # ... and show the end of the weight load
            end = next((i for i, (text, _) in enumerate(log.lines) if "Load weight end" in text), None)
            if end is None:
                raise Failed("the log shows no 'Load weight end' line to scroll to")
            log.scroll_to(y=max(0, end - log.size.height + 4), animate=False)
            app.clear_notifications()
            app.flush()
            await pilot.pause(1.5)   # a chart redraw (at most one a second)
            app.save_screenshot(filename=out.name, path=str(out.parent))
        finally:
            await pilot.press("q")  # demo mode: q stops what the demo started (in a worker: wait for the exit)
            while app.is_running:
                await pilot.pause(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("demo.svg"))
    parser.add_argument("--size", default="160x48")
    parser.add_argument("--levels", default=FORM_SETTINGS["levels"], help="the form's levels field")
    parser.add_argument("--requests", help="the form's requests/level field (default: the demo's, empty)")
    args = parser.parse_args(argv)
    cols, rows = (int(v) for v in args.size.split("x"))
    overrides = {"levels": args.levels} | ({"requests": args.requests} if args.requests is not None else {})
    with tempfile.TemporaryDirectory() as home:
        os.environ["XDG_STATE_HOME"] = home
        os.environ["XDG_CONFIG_HOME"] = home
        try:
            asyncio.run(shoot(args.out.resolve(), cols, rows, overrides))
        except Failed as exc:
            print(f"make_demo_svg: {exc}; {args.out} not written", file=sys.stderr)
            return 1
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
