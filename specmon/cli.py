"""The `specmon` command line: global options and the list of subcommands.

Each subcommand lives in its own module under `specmon.commands` and exposes
`register(subparsers)`, which adds its parser and sets `func` to a callable taking
the parsed namespace and returning an exit code. A UserError anywhere becomes one
line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import NoReturn

from specmon import __version__
from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.sources.transport import TransportError

# Subcommand modules, in the order `specmon --help` lists them.
COMMAND_MODULES: tuple[str, ...] = ("profiles", "launch", "stop", "restart", "status", "forget", "wait", "metrics", "logs", "logscan", "sim",
                                    "sweep", "compare", "export", "experiment", "report", "gpus", "env", "diff", "demo", "trust")


class Parser(argparse.ArgumentParser):
    """argparse's parser whose argument errors are the one line that matters and where to read more, not the whole
    usage first (12-19 lines above the error). Subcommand parsers are of this class too (add_subparsers' default)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\nhint: see `{self.prog} --help`\n")


def build_parser(commands: Sequence[str] = COMMAND_MODULES) -> argparse.ArgumentParser:
    """The parser with these subcommands registered (all of them by default: `specmon --help` lists every one)."""
    parser = Parser(
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


READER_GONE_EXIT = 128 + signal.SIGPIPE   # 141: what a shell reports for a command its reader left (`| head`)


def watch_reader() -> threading.Event | None:
    """When stdout is a pipe, notice the moment its reader goes away (`specmon logs -f | head -1`), even while nothing
    is written: a daemon thread waits for the pipe's error condition, sets the returned event and interrupts the
    main thread as Ctrl-C does, so a streaming command ends through its usual cleanup (asyncio cancels its tasks).
    None when stdout is no pipe (a terminal or a file has no reader to lose)."""
    try:
        fd = sys.stdout.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
    except (AttributeError, OSError, ValueError):   # stdout replaced or closed
        return None
    gone = threading.Event()
    main_thread = threading.main_thread().ident

    def wait() -> None:
        while not _reader_left(fd, None):
            pass
        gone.set()
        if main_thread is not None:
            signal.pthread_kill(main_thread, signal.SIGINT)

    threading.Thread(target=wait, name="stdout-reader", daemon=True).start()
    return gone


def _reader_left(fd: int, timeout_ms: int | None = 0) -> bool:
    """Whether the pipe `fd` writes to has lost its reader (waiting up to `timeout_ms`; None: until it has)."""
    poller = select.poll()
    poller.register(fd, 0)   # no events asked: poll answers only POLLERR, the read end closed (or POLLNVAL)
    return bool(poller.poll(timeout_ms))


def _reader_gone() -> int:
    """End quietly once stdout's reader went away: what is still buffered goes nowhere, not into a traceback at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return READER_GONE_EXIT


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
    gone = watch_reader() if func is not None else None
    try:
        if func is None:
            from specmon.ui.app import run_tui  # Textual is imported only for the TUI

            return run_tui(args)
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
        code = int(func(args) or 0)
        return _reader_gone() if gone is not None and gone.is_set() else code
    except BrokenPipeError:
        if gone is not None and _reader_left(sys.stdout.fileno()):   # a write found it before the watch did
            return _reader_gone()
        raise
    except UserError as exc:
        print(f"specmon: error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except TransportError as exc:   # a host that cannot be reached (or refused us) is the user's to fix
        print(f"specmon: error: {one_line(str(exc))}", file=sys.stderr)
        return UserError.exit_code
    except KeyboardInterrupt:
        if gone is not None and gone.is_set():
            return _reader_gone()
        print("specmon: interrupted", file=sys.stderr)
        return 130
