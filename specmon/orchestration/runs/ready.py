"""Waiting for a launch to be ready: the one verb behind `specmon wait`, `launch --wait`, `demo --headless` and the
experiment runner.

    verdict = await wait_ready(manager, run_id, timeout_s=600, on_progress=callback)

`on_progress(view)` is called with the first view, on every change of the run, and at least every `heartbeat_s`
while nothing changes (so a front end can show elapsed time); it runs in the caller's event loop. The wait ends
with a `Verdict`: ready, failed (the run ended or failed before ready: failed, exited, lost, stopped), stalled
(the engine's stall warning; the server keeps loading), or timeout. Waiting never stops or changes the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from specmon.model.runs.runstatus import STARTING, RunStatus
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView

HEARTBEAT_S = 10.0
Outcome = Literal["ready", "failed", "stalled", "timeout"]


@dataclass(frozen=True)
class Verdict:
    """How a wait ended, with the run's last view and a one-line reason."""

    outcome: Outcome
    view: RunView
    reason: str

    @property
    def ready(self) -> bool:
        return self.outcome == "ready"


def verdict_of(view: RunView, stop_at_stall: bool = True) -> Verdict | None:
    """The verdict a view already carries, or None while the run is still launching or loading (stalled or
    not, with `stop_at_stall` False)."""
    if view.state == RunStatus.READY:
        return Verdict("ready", view, f"ready at {view.url} after {view.load_seconds or 0:.1f}s")
    if view.stalled and stop_at_stall:
        return Verdict("stalled", view, view.stall_reason or "stalled")
    if view.state not in STARTING:
        failure = view.failure
        reason = failure.text if failure else f"run is {view.state}"
        return Verdict("failed", view, reason)
    return None


async def wait_ready(manager: RunManager, run_id: str, *, timeout_s: float | None = None,
                     stall_timeout_s: float | None = None, stop_at_stall: bool = True,
                     heartbeat_s: float = HEARTBEAT_S,
                     on_progress: Callable[[RunView], None] | None = None) -> Verdict:
    """Follow one run (attaching if needed) until it is ready, failed, stalled, or `timeout_s` passed.

    With `stop_at_stall` False a stall is shown through `on_progress` (view.stalled) and the wait goes on. The time a
    Slurm run's job waits in the queue is not load time: `timeout_s` counts from the job's start.
    """
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    was_queued = False
    view = await manager.attach(run_id, stall_timeout_s=stall_timeout_s)
    nxt: asyncio.Future[RunView] | None = None
    async with contextlib.aclosing(manager.watch(run_id)) as views:
        iterator = views.__aiter__()
        try:
            while True:
                verdict = verdict_of(view, stop_at_stall)
                if verdict is not None:
                    return verdict
                # Queued, or the first view after the queue (its job just started: the load time starts now, not
                # at the last heartbeat while it waited, up to heartbeat_s earlier).
                if timeout_s is not None and (queued(view) or was_queued):
                    deadline = time.monotonic() + timeout_s
                was_queued = queued(view)
                if on_progress is not None:
                    on_progress(view)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return Verdict("timeout", view, f"not ready after {timeout_s:g}s")
                # One pending __anext__ lives across heartbeats: cancelling it (as asyncio.wait_for does on a
                # timeout) would close the watch generator and end the wait with no verdict while the load goes on.
                if nxt is None:
                    nxt = asyncio.ensure_future(iterator.__anext__())
                done, _ = await asyncio.wait({nxt}, timeout=heartbeat_s if left is None else min(left, heartbeat_s))
                if not done:
                    continue
                arrived, nxt = nxt, None
                try:
                    view = arrived.result()
                except StopAsyncIteration:
                    view = manager.view(run_id)
                    return verdict_of(view, stop_at_stall) or Verdict("failed", view, f"run is {view.state}")
        finally:
            if nxt is not None:
                nxt.cancel()
                await asyncio.gather(nxt, return_exceptions=True)


def queued(view: RunView) -> bool:
    """A Slurm run whose job has not started yet."""
    return view.job is not None and view.state == RunStatus.LAUNCHING


async def wait_all_ready(manager: RunManager, run_ids: Sequence[str], *, timeout_s: float | None = None,
                         stop_at_stall: bool = True,
                         on_progress: Callable[[RunView], None] | None = None) -> list[Verdict]:
    """Wait for several runs at once; stops at the first that is not ready (its verdict comes first).

    Returns every verdict when all are ready; otherwise the first bad verdict, the other waits cancelled.
    """
    tasks = [asyncio.ensure_future(wait_ready(manager, run_id, timeout_s=timeout_s, stop_at_stall=stop_at_stall,
                                              on_progress=on_progress))
             for run_id in run_ids]
    try:
        pending: set[asyncio.Future[Verdict]] = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                verdict = task.result()
                if not verdict.ready:
                    return [verdict]
        return [task.result() for task in tasks]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
