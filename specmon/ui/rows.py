"""Presentation rows: what each pane shows, as frozen values built from the engine's state.

The panes draw these and nothing else, so a pane can be tested (and snapshotted) by feeding fixed rows, and the
mapping from engine state to what a person sees is a pure function tested without a screen.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerRow:
    """One profile in the Servers pane, with its current run if any."""

    profile: str
    host: str = "local"
    run_id: str | None = None
    state: str = "idle"                 # engine run state, or "idle" when the profile has no run
    stalled: bool = False
    phase: str | None = None
    shards_done: int | None = None
    shards_total: int | None = None
    eta_s: float | None = None
    elapsed_s: float | None = None
    past_load_s: float | None = None
    kv_cache_tokens: int | None = None
    mem_fraction_static: float | None = None
    spec_algorithm: str | None = None
    spec_steps: int | None = None
    spec_accept_len: float | None = None
    last_activity_ago_s: float | None = None
    failure: str | None = None
    pid: int | None = None
    port: int | None = None


@dataclass(frozen=True)
class LogEntry:
    """One log line as the Log pane shows it; `kind` picks the highlight.

    kinds: "" (plain), "shard", "kv", "ready", "error", "marker" (lines skipped / link dropped).
    """

    text: str
    kind: str = ""
