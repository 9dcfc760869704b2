"""`specmon wait PROFILE`: babysit a load until ready (exit 0), failed (1), or stalled / timed out (3).

Works on a load started by any specmon process (reattach). The server's log lines go to stdout (resuming after
the last line an earlier `wait` / `launch --wait` showed); progress (shard n/N, ETA) goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time

from specmon.commands._lifecycle import (
    EXIT_FAILED,
    EXIT_READY,
    EXIT_STALLED,
    print_failure,
    progress_text,
    run_with_manager,
)
from specmon.orchestration.runs import RunManager
from specmon.orchestration.runview import RunView

HEARTBEAT_S = 10.0


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stall-timeout", type=float, metavar="S",
                        help="report a stall after S seconds without log output or progress (default: the profile's)")
    parser.add_argument("--timeout", type=float, metavar="S", help="give up (exit 3) after S seconds")
    parser.add_argument("--json", action="store_true", help="print the final run status as JSON on stdout "
                        "(no log lines)")
    parser.add_argument("-q", "--quiet", action="store_true", help="do not print the server's log lines")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("wait", help="wait until a launch is ready, failed or stalled",
                                   description=__doc__)
    parser.add_argument("target", metavar="PROFILE", help="profile name (its latest run) or run id")
    add_wait_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return run_with_manager(args, lambda manager: wait_for(manager, manager.find(args.target).run_id, args))


async def wait_for(manager: RunManager, run_id: str, args: argparse.Namespace) -> int:
    """Follow one run until a verdict; returns the exit code. Shared by `launch --wait`."""
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    view = await manager.attach(run_id, stall_timeout_s=args.stall_timeout)
    show_lines = not (args.json or args.quiet)
    printer = asyncio.create_task(_print_lines(manager, run_id)) if show_lines else None
    last_text, last_print = "", 0.0
    timed_out = False
    nxt: asyncio.Future[RunView] | None = None
    try:
        async with contextlib.aclosing(manager.watch(run_id)) as views:
            iterator = views.__aiter__()
            while True:
                if view.state not in ("launching", "loading") or view.stalled:
                    break
                text = progress_text(view)
                if text.split(", elapsed")[0] != last_text or time.monotonic() - last_print > HEARTBEAT_S:
                    print(text, file=sys.stderr, flush=True)
                    last_text, last_print = text.split(", elapsed")[0], time.monotonic()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    timed_out = True
                    break
                # One pending __anext__ lives across heartbeats: cancelling it (as wait_for does on a timeout)
                # would close the watch generator and end the wait with no verdict while the load goes on.
                if nxt is None:
                    nxt = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait({nxt}, timeout=min(left or HEARTBEAT_S, HEARTBEAT_S))
                if not done:
                    continue
                arrived, nxt = nxt, None
                try:
                    view = arrived.result()
                except StopAsyncIteration:
                    view = manager.view(run_id)
                    break
            if nxt is not None:
                nxt.cancel()
                await asyncio.gather(nxt, return_exceptions=True)
    finally:
        if printer is not None:
            # Let the lines that led to the verdict reach the screen (and be committed) first.
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(printer), 0.5 if view.active else 3.0)
            printer.cancel()
            await asyncio.gather(printer, return_exceptions=True)
    return _verdict(view, timed_out, args)


async def _print_lines(manager: RunManager, run_id: str) -> None:
    async for line in manager.log_lines(run_id, commit=True):
        if line.kind == "line":
            sys.stdout.write(line.text + "\n")
            sys.stdout.flush()   # flushed before its offset is saved: a kill -9 loses no line
        else:
            print(f"specmon: {line.text}", file=sys.stderr, flush=True)


def _verdict(view: RunView, timed_out: bool, args: argparse.Namespace) -> int:
    if view.state == "ready":
        code, verdict, reason = EXIT_READY, "ready", f"ready at {view.url} after {view.load_seconds or 0:.1f}s"
    elif view.stalled:
        code, verdict, reason = EXIT_STALLED, "stalled", view.stall_reason or "stalled"
    elif timed_out:
        code, verdict, reason = EXIT_STALLED, "timeout", f"not ready after {args.timeout:g}s ({progress_text(view)})"
    else:
        failure = view.failure
        code, verdict = EXIT_FAILED, view.state
        reason = f"{failure.kind}: {failure.message}" if failure else f"run is {view.state}"
    if args.json:
        print(json.dumps({**view.to_json(), "verdict": verdict, "reason": reason}, indent=2))
    if code == EXIT_FAILED and view.failure is not None:
        print_failure(view)
    else:
        print(f"specmon: {view.profile} {verdict}: {reason}", file=sys.stderr)
    return code
