"""Shared by `stop` and `restart` given --profile / --host: the runs in the scope listed, a confirmation asked, each
run's outcome printed. The work is `orchestration.runs.bulk`'s; this only presents."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, Sequence

from specmon.commands._table import table_text
from specmon.errors import UserError
from specmon.model.runs.selection import RunScope
from specmon.orchestration.runs.bulk import RunOutcome, select, summary
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView


def add_scope_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """--profile, --host and --yes of a verb that can act on many runs."""
    # Also accepted before the command (`specmon --profile NAME stop`), where it is a global option.
    parser.add_argument("--profile", metavar="NAME", default=argparse.SUPPRESS,
                        help=f"{verb} every live run of this profile (lists them and asks first)")
    parser.add_argument("--host", metavar="HOST",
                        help=f"{verb} every live run on this host, of any profiles file (lists them and asks first)")
    parser.add_argument("--yes", "-y", action="store_true",
                        help="do not ask (needed when stdin is not a terminal)")


def scope_of(args: argparse.Namespace, target: str | None) -> RunScope | None:
    """The scope asked for (None: one run, `target`); a usage error when both or neither are given."""
    profile, host = getattr(args, "profile", None), args.host
    if profile is None and host is None:
        if target is None:
            raise UserError("name a profile or run, or give --profile NAME or --host HOST")
        return None
    if target is not None:
        raise UserError(f"give either {target!r} or --profile/--host, not both")
    return RunScope(profile=profile, host=host)


def _row(view: RunView, mine: bool) -> tuple[str, ...]:
    where = view.host + "".join(f",{node.host}" for node in view.nodes if node.host != view.host)
    state = f"{view.state}, still running" if view.still_running else str(view.state)
    return (view.profile, view.run_id, where, state, str(view.port),
            "" if mine else f"(from {view.config or 'an unknown profiles file'})")


def confirmed(question: str, yes: bool) -> bool:
    """y/N on a terminal; `--yes` skips it; without a terminal (a script, a pipe) a UserError: never guessed."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise UserError(f"{question} needs --yes: stdin is not a terminal to ask on")
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        answer = ""
    return answer.strip().lower() in ("y", "yes")


async def run_scoped(manager: RunManager, args: argparse.Namespace, scope: RunScope, verb: str,
                     act: Callable[[Sequence[RunView]], Awaitable[list[RunOutcome]]]) -> int:
    """List the runs in `scope`, ask, `act` on them, print each outcome. Exit 0 when every run's outcome is good
    (or there was none), 1 when one failed or the answer was no."""
    views = await select(manager, scope)
    for reason in manager.unanswered.values():
        print(f"specmon: warning: {reason} (its runs are listed as last recorded)", file=sys.stderr)
    if not views:
        print(f"no live run of {scope.describe()}: nothing to {verb}")
        return 0
    header = ("PROFILE", "RUN", "HOST", "STATE", "PORT", "NOTE")
    print(table_text(header, [_row(v, v.belongs_to(manager.index.config_key)) for v in views]))
    count = f"{len(views)} run{'s' if len(views) > 1 else ''}"
    if not confirmed(f"{verb.capitalize()} {count} of {scope.describe()}?", args.yes):
        print("nothing done")
        return 1
    outcomes = await act(views)
    for outcome in outcomes:
        print(outcome.text())
    print(summary(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1
