"""Engine updates as Textual Messages: what the bridge posts to the app (the app never hands itself to the engine).

The messages queue in the app's own message loop, so the bridge's tasks never call into widgets, and neither module
imports the other. Textual combines a message with the one queued right after it when `can_replace` says the later
one supersedes it (as toolong does for its log lines). Only updates that carry nothing but newer figures do so:
rows whose only change is the time that passed, a chart series redrawn, the sweep's status line. A state change is
never combined away, so every toast and bell it causes still happens; log lines and notices are never combined.
(The GPU pane's board arrives as `ui.gpuenv.GpusUpdated`, which follows the same rule.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from textual.message import Message
from textual.notifications import SeverityLevel

from specmon.model.charts.levelrow import LevelRow
from specmon.model.server.serving import ServingUpdate
from specmon.model.sweeps.sweepstats import SweepProgress
from specmon.ui.rows import CrossoverMark, LogEntry, ServerRow


def _without_age(row: ServerRow) -> ServerRow:
    """The row with the fields that change only because time passes blanked out."""
    return dataclasses.replace(row, elapsed_s=None, eta_s=None, last_activity_ago_s=None)


class RowsChanged(Message):
    """New presentation rows for some profiles (the app rings and toasts on ready / failed / stalled)."""

    def __init__(self, rows: Sequence[ServerRow]) -> None:
        super().__init__()
        self.rows = tuple(rows)

    def can_replace(self, message: Message) -> bool:
        # Superseded only by rows of the same profiles that differ in their ageing figures alone.
        return (isinstance(message, RowsChanged) and len(message.rows) == len(self.rows)
                and all(_without_age(a) == _without_age(b) for a, b in zip(self.rows, message.rows)))


class ServingChanged(Message):
    """Ready runs' serving views (their /metrics) read again: the reads that ended in one loop turn, in order (at 64
    runs one message instead of one per run: each costs the app's message pump about as much as its handling).
    Superseded by a later message that has every one of its profiles, unless one of its reads raised an alert or
    carries a note (their toasts must still happen)."""

    def __init__(self, *updates: ServingUpdate) -> None:
        super().__init__()
        self.updates = updates

    def can_replace(self, message: Message) -> bool:
        if not isinstance(message, ServingChanged):
            return False
        mine = {update.profile for update in self.updates}
        return all(u.profile in mine and not u.raised and u.note is None for u in message.updates)


class LogAdded(Message):
    """New log lines of a profile's run, in order (never combined: every line is kept)."""

    def __init__(self, profile: str, entries: Sequence[LogEntry]) -> None:
        super().__init__()
        self.profile = profile
        self.entries = tuple(entries)


class LogCleared(Message):
    """A profile's log starts over (its new run's log follows)."""

    def __init__(self, profile: str) -> None:
        super().__init__()
        self.profile = profile


class SeriesChanged(Message):
    """One chart series replaced (a live sweep, an experiment's means, an overlaid result file), with the crossovers
    (of output throughput, and of goodput)."""

    def __init__(self, name: str, levels: Sequence[LevelRow], crossover: CrossoverMark | None,
                 goodput_crossover: CrossoverMark | None = None) -> None:
        super().__init__()
        self.name = name
        self.levels = list(levels)
        self.crossover = crossover
        self.goodput_crossover = goodput_crossover

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SeriesChanged) and message.name == self.name


class ChartCleared(Message):
    """Every series leaves the chart (an experiment starts on a fresh one)."""


class GridVerdictChanged(Message):
    """A tuning grid's verdict so far (its bands), shown under the chart in full where the pane's title is too
    narrow for it."""

    def __init__(self, verdict: str, brief: str) -> None:
        super().__init__()
        self.verdict = verdict
        self.brief = brief     # the same, shorter (GridVerdict.brief), for a narrow pane


class SweepStatusChanged(Message):
    """The sweep's (or experiment's) one-line status and whether one is running; during a sweep's level, the
    profile being swept and the client's live summary of the level (shown beside that server's own view)."""

    def __init__(self, status: str, running: bool, live: tuple[str, SweepProgress] | None = None) -> None:
        super().__init__()
        self.status = status
        self.running = running
        self.live = live

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SweepStatusChanged)


class ExperimentStepsChanged(Message):
    """The experiment's step list so far (newest last)."""

    def __init__(self, steps: Sequence[str]) -> None:
        super().__init__()
        self.steps = tuple(steps)

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, ExperimentStepsChanged)


class EngineNotice(Message):
    """Something to read as a toast (a refused launch, a skipped profile, a sweep warning, a verdict)."""

    def __init__(self, text: str, *, severity: SeverityLevel = "information", timeout: float | None = None,
                 title: str = "", bell: bool = False) -> None:
        super().__init__()
        self.text = text
        self.severity: SeverityLevel = severity
        self.timeout = timeout
        self.title = title
        self.bell = bell
