"""How long an experiment (a tuning grid's every variant, or an A/B) has left: its loads and its sweeps. Pure.

    eta = experiment_eta(state, now, history)        # history: profile -> the load times it is compared with
    eta.words()                                      # "2/7 done · ETA 6 min 40 s"

The runner supplies, for each profile, what its load is compared with before this experiment (its own past loads,
else its grid base's, else its `expected_load_s`; see orchestration.measure.experiment). A variant of a grid also counts
the loads of the variants measured so far in this experiment (they load the same model with other settings); the
baseline and an A/B's profiles count only their own.

A level is expected to take what that concurrency took so far in this experiment (any profile), else the mean of
every level measured, else the sweep's `duration_s`; the stop after a profile what stops took so far. The
profiles on one host run one after another; hosts run side by side, so the experiment ends with its slowest host.
A load with nothing to compare it with is counted apart (`+ 2 loads`); the time is unknown (None) while a level
has no estimate (a sweep of N requests per level, before its first level).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from specmon.model.experiments.experiment import FINISHED, MEASURING, ExperimentState, ProfileStatus, Step
from specmon.model.runs.slurm import duration

_LEVEL_C = re.compile(r"^C=(\d+):")   # a level step's detail starts with its concurrency


@dataclass(frozen=True)
class ExperimentEta:
    done: int                     # profiles finished (measured, failed or skipped)
    total: int
    remaining_s: float | None     # None: not known yet
    current: str | None = None    # the profile being launched or swept
    loads_unknown: int = 0        # loads left out of remaining_s: nothing to compare them with yet

    def words(self, clock: Callable[[float], str] = lambda s: duration(int(round(s)))) -> str:
        """`2/7 done · ETA 6 min 40 s`; `ETA 1 min 10 s + 2 loads` while loads have no estimate; `ETA ?`. `clock`
        writes the seconds (the TUI's `1:05`, as its Servers pane writes a load's ETA)."""
        eta = "?" if self.remaining_s is None else clock(self.remaining_s)
        loads = f" + {self.loads_unknown} load{'s' if self.loads_unknown > 1 else ''}" if self.loads_unknown else ""
        return f"{self.done}/{self.total} done · ETA {eta}{loads}"


def _at(step: Step) -> float | None:
    try:
        return datetime.fromisoformat(step.at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def experiment_eta(state: ExperimentState, now: float, history: Mapping[str, Sequence[float]]) -> ExperimentEta:
    """The experiment's progress and time left at `now` (epoch seconds); see the module docstring."""
    spec = state.spec
    steps = state.steps
    loads: dict[str, list[float]] = {}
    levels: dict[int, list[float]] = {}
    done_levels: dict[tuple[str, int], int] = {}
    stops: list[float] = []
    last: dict[str, Step] = {}
    for s in steps:
        if s.profile is None:
            continue
        last[s.profile] = s
        if s.step == "ready" and s.seconds is not None:
            loads.setdefault(s.profile, []).append(s.seconds)
        elif s.step == "stopped" and s.seconds is not None:
            stops.append(s.seconds)
        elif s.step == "level" and (m := _LEVEL_C.match(s.detail)):
            c = int(m.group(1))
            done_levels[(s.profile, c)] = done_levels.get((s.profile, c), 0) + 1
            if s.seconds is not None:
                levels.setdefault(c, []).append(s.seconds)
    every_level = [x for xs in levels.values() for x in xs]
    fallback_level = statistics.fmean(every_level) if every_level else spec.sweep.duration_s

    def load_estimate(profile: str) -> float | None:
        pool = list(history.get(profile, ())) + loads.get(profile, [])
        if spec.baseline is not None and profile != spec.baseline:   # a variant: the other variants' loads too
            pool += [x for p, xs in loads.items() if p not in (spec.baseline, profile) for x in xs]
        return _median(pool)

    unknown_loads = 0

    def left(profile: str) -> float | None:
        nonlocal unknown_loads
        status = state.profile(profile).status
        if status in FINISHED:
            return 0.0
        recent = last.get(profile)
        since = None if recent is None or (t := _at(recent)) is None else max(0.0, now - t)
        total = 0.0
        if status != ProfileStatus.SWEEPING:
            load = load_estimate(profile)
            launching = status == ProfileStatus.LAUNCHING and recent is not None and recent.step == "launch"
            if load is None:   # counted apart: the sweeps' time is still worth showing
                unknown_loads += 1
            else:
                total += max(0.0, load - (since or 0.0)) if launching else load
        in_level = status == ProfileStatus.SWEEPING and recent is not None and recent.step in ("level", "sweep", "adopt")
        for c in spec.sweep.levels:
            runs = max(0, spec.repeats - done_levels.get((profile, c), 0))
            if not runs:
                continue
            each = statistics.fmean(levels[c]) if c in levels else fallback_level
            if each is None:
                return None
            if in_level and since is not None:   # the level under way has run since the profile's last step
                total += max(0.0, each - since)
                runs -= 1
                in_level = False
            total += runs * each
        return total + (_median(stops) or 0.0)

    by_host: dict[str, float] = {}
    unknown = False
    for profile in spec.profiles:
        rest = left(profile)
        if rest is None:
            unknown = True
            continue
        host = str(state.setups.get(profile, {}).get("host", ""))
        by_host[host] = by_host.get(host, 0.0) + rest
    done = sum(1 for p in spec.profiles if state.profile(p).status in FINISHED)
    current = next((p for p in spec.profiles if state.profile(p).status in MEASURING), None)
    remaining = None if unknown else max(by_host.values(), default=0.0)
    return ExperimentEta(done, len(spec.profiles), remaining, current, 0 if unknown else unknown_loads)
