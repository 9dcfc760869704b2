"""Sweeping several ready servers one after another and comparing them: the verb behind the TUI's sweep form,
`demo --headless` and the experiment runner.

    comparison = await sweep_profiles(views, workload, results_dir=Path("results"), on_update=callback)

Each run is swept in the order given (never two at once: they would share the GPU or the client's CPU), against
the URL its run owns, into `results_dir/<profile>-<UTC time>.jsonl`. Callbacks run in the caller's event loop:
`on_start(profile)` before a sweep, `on_update(profile, update)` with every SweepUpdate (see orchestration.measure.sweep),
`on_result(profile, result)` after it. Cancelling the awaiting task stops the sweep in progress; finished levels
stay on disk.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from specmon.loadgen.workload import Workload
from specmon.model.sweeps.compare import Comparison, compare_results
from specmon.model.sweeps.results import SweepResult
from specmon.orchestration.measure.sweep import SweepSpec, SweepUpdate, default_out_path, run_sweep
from specmon.orchestration.runs.view import RunView


async def sweep_profiles(
    runs: Sequence[RunView],
    workload: Workload,
    *,
    results_dir: Path = Path("results"),
    on_start: Callable[[str], None] | None = None,
    on_update: Callable[[str, SweepUpdate], None] | None = None,
    on_result: Callable[[str, SweepResult], None] | None = None,
) -> Comparison:
    """Sweep each run's server with one workload; returns the results compared (the first run is the reference)."""
    results: list[SweepResult] = []
    for view in runs:
        profile = view.profile
        spec = SweepSpec(url=view.url, workload=workload, out_path=default_out_path(profile, results_dir),
                         profile=profile)
        if on_start is not None:
            on_start(profile)

        def updated(update: SweepUpdate, profile: str = profile) -> None:
            if on_update is not None:
                on_update(profile, update)

        result = await run_sweep(spec, on_update=updated)
        results.append(result)
        if on_result is not None:
            on_result(profile, result)
    return compare_results(results)
