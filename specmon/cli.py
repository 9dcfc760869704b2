"""The `specmon` command line: global options and the list of subcommands.

Each subcommand lives in its own module under `specmon.commands` and exposes
`register(subparsers)`, which adds its parser and sets `func` to a callable taking
the parsed namespace and returning an exit code. A UserError anywhere becomes one
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from specmon import __version__
from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.sources.transport import TransportError

# Subcommand modules, in the order `specmon --help` lists them.
COMMAND_MODULES: tuple[str, ...] = ("profiles", "launch", "stop", "restart", "status", "forget", "wait", "metrics", "logs", "logscan", "sim",
                                    "sweep", "compare", "export", "experiment", "report", "gpus", "env", "diff", "demo", "trust")


def build_parser(commands: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser with these subcommands registered (all of them by default: `specmon --help` lists every one)."""
    parser = argparse.ArgumentParser(
        prog="specmon",
        description="Terminal monitor for LLM inference servers (SGLang, vLLM): launch, "
        "watch loads, run throughput sweeps, compare speculative decoding.",
    )
    parser.add_argument("--version", action="version", version=f"specmon {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="profiles file (default: $SPECMON_CONFIG, ./profiles.toml, "
        "$XDG_CONFIG_HOME/specmon/profiles.toml, else the built-in demo profiles)",
    )
    parser.add_argument("--profile", metavar="NAME", help="preselect this profile in the TUI")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in commands:
        importlib.import_module(f"specmon.commands.{name}").register(sub)
    return parser


def commands_needed(argv: Sequence[str]) -> tuple[str, ...]:
    """Which subcommand modules a command line needs: the one it names, none for the TUI, all to list them.

    Importing every module (httpx, plotext, the orchestration) took 2-3 s on a busy box before any command ran,
    and before the TUI's first frame; one command needs only its own.
    """
    args = iter(argv)
    for arg in args:
        if arg in ("--config", "--profile"):
            next(args, None)   # its value
        elif arg in ("-h", "--help"):
            return COMMAND_MODULES
        elif not arg.startswith("-"):
            # An unknown name gets argparse's error, which lists every command.
            return (arg,) if arg in COMMAND_MODULES else COMMAND_MODULES
    return ()


def _terminate_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM ends a command as Ctrl-C does: its event loop's main task is cancelled, so every `finally` runs and
    what it started on a host (an nvidia-smi, a tail) is ended there. Python's default for SIGTERM is to die on the
    spot, leaving those running. A command's loop may replace this with its own handler (`specmon sim`)."""
    signal.raise_signal(signal.SIGINT)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(commands_needed(argv))
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse reports a subcommand's unknown option under the top-level usage; the subcommand's is the help.
        command = args.command and next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        (command.choices[args.command] if command else parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    func = getattr(args, "func", None)
    try:
        if func is None:
            from specmon.ui.app import run_tui  # Textual is imported only for the TUI

            return run_tui(args)
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
        return int(func(args) or 0)
    except UserError as exc:
        print(f"specmon: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except TransportError as exc:   # a host that cannot be reached (or refused us) is the user's to fix
        print(f"specmon: error: {one_line(str(exc))}", file=sys.stderr)
        return UserError.exit_code
    except KeyboardInterrupt:
        print("specmon: interrupted", file=sys.stderr)
        return 130
