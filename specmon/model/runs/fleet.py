"""A fleet of runs at a glance: the Servers pane's one-line summary and which runs need a look first.

    fleet_summary([("ready", False), ("loading", True), ("failed", False)])
        -> "1 ready · 1 failed · 1 stalled"     (with width=20: "1 ready·1 failed·1 stalled")
    needs_attention("loading", True) -> True      (failed, lost, exited or a stalled load)

    fleet_matches("gpu03", "llama-02", ["gpu03"], "ready", False) -> True   (the Servers pane's filter)
    filter_line(4, 64, "gpu03") -> "4 of 64 shown · filter: gpu03"

A run counts once: a stalled load is "stalled", not "loading". Profiles without a run ("idle") are counted as
"not running". The order is fixed (healthy first, then what needs a look), so the line does not jump as counts
change; states with no run are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from specmon.model.runs.runstatus import BROKEN, STARTING, RunStatus

STALLED = "stalled"
IDLE = "idle"
ORDER = (RunStatus.READY, RunStatus.LAUNCHING, RunStatus.LOADING, RunStatus.STOPPING, RunStatus.STOPPED,
         RunStatus.EXITED, RunStatus.FAILED, RunStatus.LOST, STALLED, IDLE)
WORDS = {IDLE: "not running"}


def bucket(state: str, stalled: bool) -> str:
    """The summary's word for one run: its state, or "stalled" for a stalled load."""
    return STALLED if stalled and state in STARTING else str(state)


def needs_attention(state: str, stalled: bool) -> bool:
    """A run a person must not miss: it failed, ended on its own, was lost, or its load stalled."""
    return state in BROKEN or bucket(state, stalled) == STALLED


def fleet_counts(runs: Iterable[tuple[str, bool]]) -> dict[str, int]:
    """How many runs are in each summary word, in the summary's order (unknown words last, as they come)."""
    counts = Counter(bucket(state, stalled) for state, stalled in runs)
    ordered = {str(word): counts.pop(str(word)) for word in ORDER if counts.get(str(word))}
    return ordered | dict(counts)


def fleet_summary(runs: Iterable[tuple[str, bool]], width: int | None = None) -> str:
    """`41 ready · 3 loading · 1 failed · 2 stalled`: every (state, stalled) pair counted once. Longer than
    `width`, the separators lose their spaces (`41 ready·3 loading·1 failed·2 stalled`) so one line still holds it
    where it can."""
    parts = [f"{n} {WORDS.get(word, word)}" for word, n in fleet_counts(runs).items()]
    text = " · ".join(parts)
    return "·".join(parts) if width is not None and len(text) > width else text


def fleet_matches(pattern: str, profile: str, hosts: Iterable[str], state: str, stalled: bool) -> bool:
    """The Servers pane's filter: `pattern` (case-insensitive, surrounding spaces ignored) is part of the profile's
    name, one of its hosts, or its summary word (`failed`, `stalled`, `not running`, ...: a stalled load is
    "stalled", as the summary counts it). An empty pattern matches every run."""
    needle = pattern.strip().casefold()
    word = bucket(state, stalled)
    return any(needle in text.casefold() for text in (profile, *hosts, word, WORDS.get(word, word)))


def filter_line(shown: int, total: int, pattern: str) -> str:
    """The line under the summary while a filter is set: `12 of 64 shown · filter: gpu03`."""
    return f"{shown} of {total} shown · filter: {pattern.strip()}"
