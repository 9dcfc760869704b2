"""`specmon env PROFILE|RUN [--json] [--all]`: a server's environment in four views (profile launch env, start-up
injections of its python, /proc/PID/environ of its processes, NCCL's own log lines), launch args and versions."""

from __future__ import annotations

import argparse
import json

from specmon.commands._lifecycle import run_with_manager
from specmon.model.logs.clean import escape_controls
from specmon.model.machine.env import report_lines
from specmon.orchestration.inspect.environment import env_report
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("env", help="a profile's or run's effective environment, args and versions",
                                   description=__doc__)
    parser.add_argument("target", metavar="PROFILE|RUN", help="a profile name (and its live run) or a run id")
    parser.add_argument("--all", action="store_true",
                        help="every variable, not only NCCL_, CUDA_, TORCH_, PYTORCH_, SGLANG_, VLLM_, NVSHMEM_, "
                        "OMP_ and *_VISIBLE_DEVICES (secrets stay redacted)")
    parser.add_argument("--json", action="store_true", help="one JSON object (see docs/cli.md)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    async def body(manager: RunManager) -> int:
        report = await env_report(manager, args.target)
        if args.json:
            print(json.dumps(report.to_json(args.all), indent=2))
        else:
            # Names and values come from the host and its start-up hooks: escaped, one line each.
            print("\n".join(escape_controls(line) for line in report_lines(report, args.all)))
        return 0

    return run_with_manager(args, body)
