"""A run's lifecycle status, defined once: the values, the verdicts that lead to them, and the sets callers ask about.

    launching -> loading -> ready -> stopping -> stopped
    launching | loading -> failed
    ready -> exited
    any active -> lost

This is the one description of the run verdicts (the watcher, the reconciler, Slurm jobs and multi-node runs
all reach them by these rules):
    ready    the server's ready signal in its log (for server = "other": /health answered 200) AND one real
             completion (max_tokens 1) answered
    failed   a fatal log signature, or the process ended before ready (its exit code recorded, an unasked 0
             included), or Slurm ended the job before ready
    exited   the process ended on its own after it had been ready
    stopped  the process ended after a stop request
    lost     the wrapper is gone without an exit code (killed), its pid was reused, or the host rebooted
A multi-node run has one status from its nodes' (`model.runs.multinode.overall`): failed when any node failed, was
lost or exited on its own (the lowest such rank names the failure); stopping while a stop is under way or once one
node stopped (the rest are going); stopped when every node stopped; otherwise rank 0's status: ready with rank 0's
ready line and completion (worker nodes print no ready line: they count as ready once rank 0 is).
A failed, exited or lost run keeps why (model.runs.failure: its kind says whether its log, its end or Slurm told).
`stalled` is no status but a warning flag on a loading run: no log bytes for the stall time; the next byte clears it.

`RunStatus` is a `str` enum: a member equals its string and JSON writes it as one, so record files, `status
--json` and `SPECMON_STATE` keep the words older specmon wrote and read.
"""

from __future__ import annotations

import enum


class RunStatus(str, enum.Enum):
    """Where a run is in its life (see the module docstring)."""

    LAUNCHING = "launching"   # started, its process not yet known (or its Slurm job still queued)
    LOADING = "loading"       # the server's process runs and loads
    READY = "ready"           # the log's ready signal and one completion answered
    STOPPING = "stopping"     # a stop was asked for and is under way
    STOPPED = "stopped"       # ended after a stop request
    EXITED = "exited"         # ended on its own after it had been ready
    FAILED = "failed"         # a fatal log signature, or ended before ready
    LOST = "lost"             # gone without an exit code, its pid reused, or its host rebooted

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> RunStatus:
        """The status a word names; ValueError naming it when it names none."""
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"unknown state {text!r}") from None


STARTING = frozenset({RunStatus.LAUNCHING, RunStatus.LOADING})    # on the way to ready (the ETA and stall count)
UP = STARTING | {RunStatus.READY}                                  # a stop request has something to stop
ACTIVE = UP | {RunStatus.STOPPING}                                 # the server process may still be running
BUSY = STARTING | {RunStatus.STOPPING}                             # changing on its own: worth a fast refresh
TERMINAL = frozenset(RunStatus) - ACTIVE                           # over: nothing of it runs any more
BROKEN = frozenset({RunStatus.FAILED, RunStatus.EXITED, RunStatus.LOST})   # over without being asked to
