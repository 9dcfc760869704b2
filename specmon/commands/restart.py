"""`specmon restart PROFILE`: stop the profile's run, check the port is free, launch it again.

`specmon restart --profile NAME` / `--host HOST`: every profile with a live run in the scope, listed first and
restarted once you answer y (`--yes` skips the question; without a terminal it is needed); hosts at once, each
run's outcome printed. Exit 1 when one failed.
"""

from __future__ import annotations

import argparse
import sys

from specmon.commands._bulk import add_scope_arguments, run_scoped, scope_of
from specmon.commands._lifecycle import print_report, run_with_manager
from specmon.orchestration.runs.bulk import restart_all
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("restart", help="stop and launch a profile again, or every profile of a host",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", metavar="PROFILE", nargs="?")
    add_scope_arguments(parser, "restart")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    scope = scope_of(args, args.target)

    async def body(manager: RunManager) -> int:
        if scope is not None:
            return await run_scoped(manager, args, scope, "restart", lambda views: restart_all(manager, views))
        view = await manager.restart(args.target, on_stop=print_report)
        print(f"launched {view.profile} run {view.run_id} (pid {view.pid}, port {view.port}); log: {view.log_path}",
              file=sys.stderr)
        print(view.run_id)
        return 0

    return run_with_manager(args, body)
