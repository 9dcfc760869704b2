"""`specmon stop PROFILE|RUN_ID [--force]`: stop a run and wait until its port (and GPUs) are free."""

from __future__ import annotations

import argparse
import dataclasses

from specmon.commands._lifecycle import print_report, run_with_manager
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("stop", help="stop a run (SIGTERM, grace, SIGKILL, sweep)", description=__doc__)
    parser.add_argument("target", metavar="PROFILE|RUN_ID")
    parser.add_argument("--force", action="store_true", help="SIGKILL at once, no grace period")
    parser.add_argument("--grace", type=float, metavar="S", help="seconds between SIGTERM and SIGKILL (default 30)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        if args.grace is not None:
            manager.stop_timings = dataclasses.replace(manager.stop_timings, grace_s=max(0.0, args.grace))
        report = await manager.stop(args.target, force=args.force)
        print_report(report)
        return 0 if report.clean else 1

    return run_with_manager(args, body)
