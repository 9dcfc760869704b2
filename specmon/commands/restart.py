"""`specmon restart PROFILE`: stop the profile's run, check the port is free, launch it again."""

from __future__ import annotations

import argparse
import sys

from specmon.commands._lifecycle import print_report, run_with_manager
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("restart", help="stop and launch a profile again", description=__doc__)
    parser.add_argument("profile", metavar="PROFILE")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        view = await manager.restart(args.profile, on_stop=print_report)
        print(f"launched {view.profile} run {view.run_id} (pid {view.pid}, port {view.port}); log: {view.log_path}",
              file=sys.stderr)
        print(view.run_id)
        return 0

    return run_with_manager(args, body)
