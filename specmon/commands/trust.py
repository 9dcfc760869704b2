"""`specmon trust HOST`: show an SSH host's key (and its jump hosts' keys) and, if you say so, add it to
the [ssh] known_hosts file. A changed key is never replaced here: remove the old line yourself first."""

from __future__ import annotations

import argparse
import asyncio
import sys

from specmon.errors import UserError
from specmon.model.config import load_config
from specmon.sources.ssh import HostKey, trust
from specmon.sources.transport import TransportError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("trust", help="show an SSH host's key and add it to known_hosts if you agree",
                                   description=__doc__)
    parser.add_argument("host", metavar="HOST", help="an alias from the [ssh] config file, or [user@]host[:port]")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_config(args.config).ssh

    async def confirm(key: HostKey) -> bool:
        print(f"{key.alias}: {key.entry} presents {key.algorithm} key {key.fingerprint}")
        print(f"Add it to {settings.known_hosts}? [y/N] ", end="", flush=True)
        answer = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        return answer.strip().lower() in ("y", "yes")

    try:
        added = asyncio.run(trust(args.host, settings, confirm))
    except TransportError as exc:
        raise UserError(str(exc)) from None
    if not added:
        print(f"{args.host}: host keys already trusted; login works")
    else:
        print(f"{args.host}: added {len(added)} key(s) to {settings.known_hosts}; login works")
    return 0
