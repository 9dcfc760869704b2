"""`specmon stop PROFILE|RUN_ID [--force]`: stop a run and wait until its port (and GPUs) are free.

`specmon stop --profile NAME` / `--host HOST` (both: runs matching both): every live run of the profile or on the
host, listed first and stopped once you answer y (`--yes` skips the question; without a terminal it is needed).
Hosts are stopped at once, so one slow host does not delay the rest; each run's outcome is printed (stopped,
already gone, failed: why). Exit 1 when one failed.
"""

from __future__ import annotations

import argparse

from specmon.commands._bulk import add_scope_arguments, run_scoped, scope_of
from specmon.commands._lifecycle import print_report, run_with_manager
from specmon.orchestration.runs.bulk import stop_all
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.terminate import StopTimings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("stop", help="stop a run (SIGTERM, grace, SIGKILL, sweep), or every run of a "
                                   "profile or host", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="PROFILE|RUN_ID", nargs="?")
    parser.add_argument("--force", action="store_true", help="SIGKILL at once, no grace period")
    parser.add_argument("--grace", type=float, metavar="S", help="seconds between SIGTERM and SIGKILL (default 30)")
    add_scope_arguments(parser, "stop")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scope = scope_of(args, args.target)

    async def body(manager: RunManager) -> int:
        if scope is not None:
            return await run_scoped(manager, args, scope, "stop",
                                    lambda views: stop_all(manager, views, force=args.force))
        report = await manager.stop(args.target, force=args.force)
        print_report(report)
        return 0 if report.clean else 1

    timings = StopTimings() if args.grace is None else StopTimings(grace_s=max(0.0, args.grace))
    return run_with_manager(args, body, stop_timings=timings)
