"""Stopping or restarting many runs at once: `specmon stop --profile NAME | --host HOST`, `restart` the same, and
the TUI's fleet stop.

    views = await select(manager, RunScope(host="gpu1"))     the live runs in the scope, checked now
    outcomes = await stop_all(manager, views, force=False)    -> list[RunOutcome], in the views' order
    outcomes = await restart_all(manager, views)              each selected profile stopped and launched again

Which runs is the pure rule of `model.runs.selection`. Hosts are worked on at once, each host's runs
`connections.LANES_PER_HOST` at a time (`connections.per_host`), so a host that is slow or gone holds up only its own runs.
A run whose host did not answer the check is not tried again (each try would wait for it once more): its outcome
says why. One run's failure is its outcome and never keeps the others from being stopped.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.runs.selection import RunScope
from specmon.orchestration.runs.connections import per_host
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView, StopReport
from specmon.sources.transport import TransportError

STOPPED, GONE, RESTARTED, FAILED = "stopped", "already gone", "restarted", "failed"


@dataclass(frozen=True)
class RunOutcome:
    """What a fleet command did to one run: `result` (stopped, already gone, restarted, failed) and how or why."""

    run_id: str
    profile: str
    host: str
    result: str
    detail: str
    new_run_id: str | None = None   # restarted: the run launched in its place

    @property
    def ok(self) -> bool:
        return self.result != FAILED

    def text(self) -> str:
        """`llama run 20261205-…: stopped in 2.1s (SIGTERM)`."""
        return one_line(f"{self.profile} run {self.run_id} on {self.host}: {self.result}"
                        + (f": {self.detail}" if self.result == FAILED else f" {self.detail}" if self.detail else ""))


def hosts_of(view: RunView) -> tuple[str, ...]:
    """Every host a run lives on (a multi-node run's nodes')."""
    return tuple(dict.fromkeys((view.host, *(node.host for node in view.nodes))))


async def select(manager: RunManager, scope: RunScope) -> list[RunView]:
    """The runs in `scope` that may still be running, checked now (every profiles file's runs: the scope's rule
    decides). A profile name this profiles file does not know is a UserError naming the file."""
    if scope.profile is not None:
        manager.config.profile(scope.profile)
    views = await manager.refresh(all_configs=True)
    return [v for v in views if scope.takes(profile=v.profile, hosts=hosts_of(v), mine=v.belongs_to(manager.index.config_key),
                                            live=v.active or v.still_running)]


def outcome_of(view: RunView, report: StopReport) -> RunOutcome:
    """A stop's report as the run's outcome."""
    def made(result: str, detail: str) -> RunOutcome:
        return RunOutcome(view.run_id, view.profile, view.host, result, detail)

    if report.already is not None or (report.stopped and not report.pids and report.job is None and not report.nodes):
        return made(GONE, f"({report.already or 'no process was left'})")
    if not report.clean:
        return made(FAILED, "; ".join(report.blockers) or "not fully stopped")
    how = f"scancel job {report.job}" if report.job else "SIGKILL needed" if report.killed else "SIGTERM"
    return made(STOPPED, f"in {report.seconds:.1f}s ({how})")


def _failed(view: RunView, exc: Exception) -> RunOutcome:
    reason = str(exc) if isinstance(exc, (UserError, TransportError)) else f"{type(exc).__name__}: {exc}"
    return RunOutcome(view.run_id, view.profile, view.host, FAILED, one_line(reason, 300))


def _unanswered(manager: RunManager, view: RunView) -> RunOutcome | None:
    """The outcome of a run whose host did not answer the check: not tried."""
    reason = next((manager.unanswered[h] for h in hosts_of(view) if h in manager.unanswered), None)
    return None if reason is None else RunOutcome(view.run_id, view.profile, view.host, FAILED,
                                                  one_line(f"not tried: {reason}", 300))


async def stop_all(manager: RunManager, views: Sequence[RunView], *, force: bool = False) -> list[RunOutcome]:
    """Stop every run of `views`; returns the outcomes in the views' order."""
    async def stop(view: RunView) -> RunOutcome:
        outcome = _unanswered(manager, view)
        if outcome is None:
            try:
                outcome = outcome_of(view, await manager.stop(view.run_id, force=force))
            except Exception as exc:   # this run's outcome; the others go on
                outcome = _failed(view, exc)
        return outcome

    return await per_host(views, hosts_of, stop)


async def restart_all(manager: RunManager, views: Sequence[RunView]) -> list[RunOutcome]:
    """Restart the profile of every run of `views` (stop its runs, check the port, launch it again), each profile
    once. A run launched from another profiles file cannot be launched from this one: its outcome says so."""
    firsts: dict[str, RunView] = {}
    for view in views:
        if view.belongs_to(manager.index.config_key):
            firsts.setdefault(view.profile, view)

    async def restart(view: RunView) -> RunOutcome:
        outcome = _unanswered(manager, view)
        if outcome is None:
            try:
                new = await manager.restart(view.profile)
                outcome = RunOutcome(view.run_id, view.profile, view.host, RESTARTED,
                                     f"as run {new.run_id} (pid {new.pid}, port {new.port})", new.run_id)
            except Exception as exc:   # this profile's outcome; the others go on
                outcome = _failed(view, exc)
        return outcome

    done = dict(zip(firsts, await per_host(list(firsts.values()), hosts_of, restart)))
    outcomes = []
    for view in views:
        outcome = done.get(view.profile) if view.belongs_to(manager.index.config_key) else RunOutcome(
            view.run_id, view.profile, view.host, FAILED,
            f"launched from {view.config or 'an unknown profiles file'}: restart it with that file")
        assert outcome is not None
        outcomes.append(dataclasses.replace(outcome, run_id=view.run_id, host=view.host))
    return outcomes


def summary(outcomes: Sequence[RunOutcome]) -> str:
    """`2 stopped, 1 already gone, 1 failed`: how many runs had each outcome, in the order they first came."""
    return ", ".join(f"{n} {result}" for result, n in Counter(o.result for o in outcomes).items())
