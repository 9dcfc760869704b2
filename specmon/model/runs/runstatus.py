"""A run's lifecycle status, defined once: the values, and the sets of them callers ask about.

    launching -> loading -> ready -> stopping -> stopped
    launching | loading -> failed          a fatal log signature, or the process ended before ready
    ready -> exited                        the process ended on its own after it had been ready
    any active -> lost                     gone without an exit code, PID reused, or the host rebooted

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
