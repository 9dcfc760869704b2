"""`specmon wait PROFILE`: babysit a load until ready (exit 0), failed (1), or stalled / timed out (3).

Works on a load started by any specmon process (reattach). The server's log lines go to stdout (resuming after
the last line an earlier `wait` / `launch --wait` showed); progress (shard n/N, ETA) goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time

from specmon.commands._args import positive_float
from specmon.commands._lifecycle import (
    EXIT_FAILED,
    EXIT_READY,
    EXIT_STALLED,
    print_failure,
    progress_text,
    run_with_manager,
)
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.ready import HEARTBEAT_S, Verdict, wait_ready
from specmon.orchestration.runs.view import RunView, node_prefix
from specmon.sources import timelimit


def add_wait_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--stall-timeout", type=positive_float, metavar="S",
                        help="report a stall after S seconds without log output or progress (default: the profile's)")
    parser.add_argument("--timeout", type=positive_float, metavar="S", help="give up (exit 3) after S seconds")
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
    return run_with_manager(args, lambda manager: wait_for(manager, manager.index.find(args.target).run_id, args))


async def wait_for(manager: RunManager, run_id: str, args: argparse.Namespace) -> int:
    """Follow one run until a verdict; returns the exit code. Shared by `launch --wait`."""
    show_lines = not (args.json or args.quiet)
    printer = asyncio.create_task(_print_lines(manager, run_id)) if show_lines else None
    last_text, last_print = "", 0.0

    def on_progress(view: RunView) -> None:
        # A line when the progress changes, else one per heartbeat (only "elapsed" moved).
        nonlocal last_text, last_print
        text = progress_text(view)
        head = re.sub(r", (elapsed|queued) [^,]*", "", text)
        if head != last_text or time.monotonic() - last_print > HEARTBEAT_S:
            print(text, file=sys.stderr, flush=True)
            last_text, last_print = head, time.monotonic()

    try:
        verdict = await wait_ready(manager, run_id, timeout_s=args.timeout, stall_timeout_s=args.stall_timeout,
                                   heartbeat_s=HEARTBEAT_S, on_progress=on_progress)
    finally:
        if printer is not None:
            # Let the lines that led to the verdict reach the screen (and be committed) first.
            active = manager.view(run_id).active
            with contextlib.suppress(asyncio.TimeoutError):
                await timelimit.wait_for(asyncio.shield(printer), 0.5 if active else 3.0)
            printer.cancel()
            await asyncio.gather(printer, return_exceptions=True)
    return _report(verdict, args)


async def _print_lines(manager: RunManager, run_id: str) -> None:
    async for line in manager.log_lines(run_id, commit=True):
        if line.kind == "line":
            sys.stdout.write(node_prefix(line.node) + line.text + "\n")
            sys.stdout.flush()   # flushed before its offset is saved: a kill -9 loses no line
        else:
            print(f"specmon: {node_prefix(line.node)}{line.text}", file=sys.stderr, flush=True)


def _report(verdict: Verdict, args: argparse.Namespace) -> int:
    view, outcome, reason = verdict.view, verdict.outcome, verdict.reason
    if outcome == "timeout":
        reason = f"{reason} ({progress_text(view)})"
    code = {"ready": EXIT_READY, "stalled": EXIT_STALLED, "timeout": EXIT_STALLED}.get(outcome, EXIT_FAILED)
    # A failed wait is named by the run's state (failed, exited, lost, stopped), as `status` names it.
    name = view.state if outcome == "failed" else outcome
    if args.json:
        print(json.dumps({**view.to_json(), "verdict": name, "reason": reason}, indent=2))
    if code == EXIT_FAILED and view.failure is not None:
        print_failure(view)
    else:
        print(f"specmon: {view.profile} {name}: {reason}", file=sys.stderr)
    return code
