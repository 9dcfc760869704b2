"""Which recorded runs a fleet command acts on (`specmon stop --profile NAME`, `--host HOST`, the TUI's fleet stop).

    scope = RunScope(profile="llama", host=None)
    scope.takes(profile="llama", hosts=("gpu1",), mine=True, live=True) -> True

A run is taken when it may still hold its port and GPUs (`live`: up, or failed by its log while its process runs
on) and matches every part of the scope given: its profile (a name belongs to a profiles file, so only runs that
file launched: `mine`), its host (any of a multi-node run's hosts; runs of every profiles file, as `specmon status
--host` lists them). A run that ended is never taken: there is nothing left to stop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class RunScope:
    """A profile, a host, or both (a run must match both)."""

    profile: str | None = None
    host: str | None = None

    def __post_init__(self) -> None:
        if self.profile is None and self.host is None:
            raise ValueError("a run scope needs a profile or a host")

    def takes(self, *, profile: str, hosts: Iterable[str], mine: bool, live: bool) -> bool:
        """Whether a run of `profile` on `hosts` (launched from this profiles file: `mine`) is in the scope."""
        if not live:
            return False
        if self.profile is not None and not (mine and profile == self.profile):
            return False
        return self.host is None or self.host in hosts

    def describe(self) -> str:
        """`profile llama`, `host gpu1`, `profile llama on host gpu1`: what the confirmation and summary say."""
        parts = ([f"profile {self.profile}"] if self.profile is not None else []) + \
            ([f"host {self.host}"] if self.host is not None else [])
        return " on ".join(parts)
