"""Sweeping several ready servers one after another and comparing them: the verb behind the TUI's sweep form,
`demo --headless` and the experiment runner.

    comparison = await sweep_profiles(views, workload, results_dir=Path("results"), on_update=callback)
    url = await ready_url(manager, "profile")     the URL of the profile's ready run (`specmon sweep PROFILE`)

Each run is swept in the order given (never two at once: they would share the GPU or the client's CPU), against
the URL its run owns, into `results_dir/<profile>-<UTC time>.jsonl`. `on_update` gets one stream of typed
updates, in the caller's event loop: per profile SweepStarted, then SweepUpdated with every SweepUpdate (see
orchestration.measure.sweep; an exception raised for one of these is logged and ignored), then SweepFinished with its
result. Cancelling the awaiting task stops the sweep in progress; finished levels stay on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specmon.errors import UserError
from specmon.loadgen.workload import Workload
from specmon.model.runs.runstatus import RunStatus
from specmon.model.sweeps.compare import Comparison, compare_results
from specmon.model.sweeps.results import SweepResult
from specmon.orchestration.measure.sweep import SweepSpec, SweepUpdate, default_out_path, run_sweep
from specmon.orchestration.runs.manager import RunManager
from specmon.orchestration.runs.view import RunView


@dataclass(frozen=True)
class SweepStarted:
    """The sweep of `profile` begins."""

    profile: str


@dataclass(frozen=True)
class SweepUpdated:
    """Progress, a finished level or a notice from the sweep of `profile`."""

    profile: str
    update: SweepUpdate


@dataclass(frozen=True)
class SweepFinished:
    """The sweep of `profile` is over; its levels are in `result` (and on disk)."""

    profile: str
    result: SweepResult


ComparisonUpdate = SweepStarted | SweepUpdated | SweepFinished


async def ready_url(manager: RunManager, profile_name: str) -> str:
    """The URL of the profile's ready run: what a sweep of the profile measures. UserError when the profile has
    no run, or its latest is not READY (stopped, failed, still loading): whatever answers on its port then is
    not the profile's server, and its figures must not be filed under the profile's name."""
    profile = manager.config.profile(profile_name)
    hint = f"`specmon launch {profile.name} --wait` starts one; `--url URL` measures any server on purpose"
    try:
        run_id = manager.index.find(profile.name).run_id
    except UserError:
        raise UserError(f"profile {profile.name} has no ready run (none launched from {manager.config.source}): "
                        f"{hint}") from None
    view = next((v for v in await manager.refresh() if v.run_id == run_id), None) or manager.view(run_id)
    if view.state != RunStatus.READY:
        raise UserError(f"profile {profile.name} has no ready run (its latest, {run_id}, is {view.state}): {hint}")
    return await manager.url_of(profile.name)   # as clients reach it (a remote run: through the host's forward)


async def sweep_profiles(
    runs: Sequence[RunView],
    workload: Workload,
    *,
    results_dir: Path = Path("results"),
    on_update: Callable[[ComparisonUpdate], None] | None = None,
) -> Comparison:
    """Sweep each run's server with one workload; returns the results compared (the first run is the reference)."""
    results: list[SweepResult] = []
    for view in runs:
        profile = view.profile
        spec = SweepSpec(url=view.url, workload=workload, out_path=default_out_path(profile, results_dir),
                         profile=profile)
        if on_update is not None:
            on_update(SweepStarted(profile))

        def updated(update: SweepUpdate, profile: str = profile) -> None:
            if on_update is not None:
                on_update(SweepUpdated(profile, update))

        result = await run_sweep(spec, on_update=updated)
        results.append(result)
        if on_update is not None:
            on_update(SweepFinished(profile, result))
    return compare_results(results)
