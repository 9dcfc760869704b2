"""`specmon sim`: run the simulated SGLang/vLLM server in the foreground."""

from __future__ import annotations

import argparse

from specmon.sim.options import DESCRIPTION, add_arguments, config_from_args


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("sim", help="run the simulated SGLang/vLLM server", description=DESCRIPTION)
    add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from specmon.sim.server import run as run_server  # aiohttp is imported only when serving

    return run_server(config_from_args(args))
