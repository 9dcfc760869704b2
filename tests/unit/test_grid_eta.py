"""The whole experiment's ETA (model.experiments.eta): loads from past loads of the base profile and the variants
measured so far, sweeps from levels x repeats x each level's time, hosts side by side. Constructed histories. Pure."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from specmon.model.config import ExperimentSpec, SweepDefaults
from specmon.model.experiments.eta import experiment_eta
from specmon.model.experiments.experiment import ExperimentState, Step

T0 = 1_800_000_000.0
BASELINE = "demo-baseline"
VARIANTS = ("demo-eagle3 steps=1", "demo-eagle3 steps=3", "demo-eagle3 steps=5")


def at(t: float) -> str:
    return datetime.fromtimestamp(T0 + t, timezone.utc).isoformat().replace("+00:00", "Z")


def grid(steps: list[Step], statuses: dict[str, str], *, duration_s: float | None = 2.0,
         hosts: dict[str, str] | None = None, baseline: str | None = BASELINE) -> ExperimentState:
    names = (BASELINE, *VARIANTS)
    spec = ExperimentSpec("g", names, SweepDefaults(levels=(1, 4), duration_s=duration_s), repeats=2,
                          baseline=baseline)
    state = ExperimentState(Path("/nonexistent"), spec, at(0), steps=tuple(steps),
                            setups={n: {"host": (hosts or {}).get(n, "local")} for n in names})
    for name, status in statuses.items():
        state = state.with_profile(name, status=status)
    return state


def measured(profile: str, t: float, load: float, level_s: float = 2.5) -> list[Step]:
    """A profile launched at t, ready after `load`, swept (2 passes x C=1,4 at `level_s` each), stopped in 3 s."""
    out = [Step(at(t), profile, "launch"), Step(at(t + load), profile, "ready", "", load)]
    t += load
    for _ in range(2):
        for c in (1, 4):
            t += level_s
            out.append(Step(at(t), profile, "level", f"C={c}: 100.0 tok/s", level_s))
    return out + [Step(at(t + 3), profile, "stopped", "", 3.0)]


def test_from_the_start_the_whole_grid_is_estimated_from_past_loads_and_the_sweep_spec() -> None:
    # Nothing measured yet: each load from its history (the variants': the base's past loads), each level 2 s.
    state = grid([Step(at(0), None, "start")], {})
    history = {BASELINE: (10.0, 12.0, 11.0), **{v: (20.0, 30.0) for v in VARIANTS}}
    eta = experiment_eta(state, T0, history)
    assert (eta.done, eta.total) == (0, 4)
    assert eta.remaining_s == 11.0 + 3 * 25.0 + 4 * (2 * 2 * 2.0)
    assert eta.words() == "0/4 done · ETA 1 min 58 s"


def test_loads_measured_in_the_grid_refine_the_variants_and_levels_their_own_time() -> None:
    steps = [Step(at(0), None, "start"), *measured(BASELINE, 0, 10.0), *measured(VARIANTS[0], 30, 40.0)]
    state = grid(steps, {BASELINE: "done", VARIANTS[0]: "done"})
    history = {BASELINE: (10.0,), **{v: (20.0,) for v in VARIANTS}}
    eta = experiment_eta(state, T0 + 83, history)
    # Each left variant: median of its history 20 and the measured variant's 40 = 30 s; levels 2.5 s; stop 3 s.
    assert eta.remaining_s == 2 * (30.0 + 4 * 2.5 + 3.0)
    assert eta.words().startswith("2/4 done")


def test_a_load_under_way_counts_down_and_a_level_under_way_counts_what_is_left_of_it() -> None:
    steps = [Step(at(0), None, "start"), *measured(BASELINE, 0, 10.0), Step(at(30), VARIANTS[0], "launch")]
    statuses = {BASELINE: "done", VARIANTS[0]: "launching"}
    history = {BASELINE: (10.0,), **{v: (20.0,) for v in VARIANTS}}
    loading = experiment_eta(grid(steps, statuses), T0 + 38, history)
    later = experiment_eta(grid(steps, statuses), T0 + 48, history)
    assert loading.current == VARIANTS[0]
    assert loading.remaining_s is not None and later.remaining_s is not None
    assert loading.remaining_s - later.remaining_s == 10.0         # the load's 12 s left became 2 s
    # Swept: one level done, 1 s into the next (2.5 s each): 1.5 + 2 x 2.5 + stop 3, then two more variants.
    sweeping = steps + [Step(at(50), VARIANTS[0], "ready", "", 20.0), Step(at(50), VARIANTS[0], "sweep"),
                        Step(at(52.5), VARIANTS[0], "level", "C=1: 90.0 tok/s", 2.5)]
    eta = experiment_eta(grid(sweeping, {**statuses, VARIANTS[0]: "sweeping"}), T0 + 53.5, history)
    assert eta.remaining_s == 1.5 + 2 * 2.5 + 3.0 + 2 * (20.0 + 4 * 2.5 + 3.0)


def test_hosts_run_side_by_side_and_unknowns_say_so() -> None:
    history = {BASELINE: (10.0,), **{v: (20.0,) for v in VARIANTS}}
    hosts = {BASELINE: "a", VARIANTS[0]: "a", VARIANTS[1]: "b", VARIANTS[2]: "b"}
    eta = experiment_eta(grid([], {}, hosts=hosts), T0, history)
    assert eta.remaining_s == 2 * (20.0 + 8.0)                      # host b's two variants, not all four
    # A sweep of N requests per level, before its first level: unknown. Loads with no history: counted apart.
    assert experiment_eta(grid([], {}, duration_s=None), T0, history).words() == "0/4 done · ETA ?"
    assert experiment_eta(grid([], {}), T0, {}).words() == "0/4 done · ETA 32 s + 4 loads"
    # The baseline's load is never guessed from the variants' (another server), nor an A/B's from each other's.
    steps = measured(VARIANTS[0], 0, 40.0)
    assert experiment_eta(grid(steps, {VARIANTS[0]: "done"}), T0 + 60, {}).words() == "1/4 done · ETA 1 min 59 s + 1 load"
    assert experiment_eta(grid(steps, {VARIANTS[0]: "done"}, baseline=None), T0 + 60, {}).loads_unknown == 3
    assert experiment_eta(grid(steps, {VARIANTS[0]: "done"}), T0 + 60, {BASELINE: (10.0,)}).remaining_s == \
        10.0 + 10.0 + 3.0 + 2 * (40.0 + 10.0 + 3.0)
