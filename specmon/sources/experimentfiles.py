"""An experiment's directory read from disk: its state file, its result files as far as they were written, and its
acceptance lines (the layout and every rule on their text: model.experiments.experiment). Files are read through
sources.resultfiles.read_text, so what cannot be read is one UserError naming the file."""

from __future__ import annotations

from pathlib import Path

from specmon.errors import UserError
from specmon.model.experiments.experiment import (
    ACCEPTANCE_FILE,
    MAX_STATE_BYTES,
    STATE_FILE,
    ExperimentState,
    acceptance_from_text,
    counted,
    state_from_text,
)
from specmon.model.experiments.verdict import ProfileRuns
from specmon.model.server.acceptance import LevelAcceptance
from specmon.model.sweeps.results import SweepResult, whole_lines
from specmon.sources.resultfiles import read_text


def load_state(path: Path) -> ExperimentState:
    """Read an experiment directory (or its experiment.json); UserError naming the file when unreadable."""
    file = path / STATE_FILE if path.is_dir() else path
    return state_from_text(read_text(file, "an experiment state", MAX_STATE_BYTES), str(file))


def find_unfinished(results_dir: Path, name: str) -> ExperimentState | None:
    """The newest experiment NAME under `results_dir/experiments/` that has not finished, if any; when there is
    none but a state file could not be read, that file's UserError (it may be the one to resume)."""
    root = results_dir / "experiments"
    candidates = sorted(root.glob(f"{name}-*/{STATE_FILE}")) if root.is_dir() else []
    unreadable: UserError | None = None
    for file in reversed(candidates):
        try:
            state = load_state(file)
        except UserError as exc:
            unreadable = unreadable or exc
            continue
        if state.spec.name == name and not state.finished:
            return state
    if unreadable is not None:
        raise unreadable
    return None


def pass_results(state: ExperimentState, profile: str) -> list[tuple[int, SweepResult]]:
    """(pass number, result file) of every file the profile has written so far, in order, with the levels that
    count (model.experiments.experiment.counted)."""
    results = {}
    for f in state.profile(profile).files:
        file = state.directory / f.path
        results[f.path] = whole_lines(read_text(file), str(file)) if file.exists() else None
    return counted(state, profile, results)


def done_levels(state: ExperimentState, profile: str) -> set[tuple[int, int]]:
    """(pass, concurrency) pairs whose level line is on disk and counts (see pass_results)."""
    return {(pass_no, level.concurrency) for pass_no, result in pass_results(state, profile) for level in result.levels}


def read_acceptance(directory: Path) -> dict[tuple[str, int, int], LevelAcceptance]:
    """(profile, pass, concurrency) -> acceptance, from acceptance.jsonl ({} before its first line)."""
    file = directory / ACCEPTANCE_FILE
    return acceptance_from_text(read_text(file, "acceptance lines", MAX_STATE_BYTES)) if file.exists() else {}


def experiment_runs(state: ExperimentState) -> list[ProfileRuns]:
    """Every profile's result files, acceptance and setup, ready for `verdict.summarize`."""
    acceptance = read_acceptance(state.directory)
    runs = []
    for name in state.spec.profiles:
        mine = {(p, c): a for (prof, p, c), a in acceptance.items() if prof == name}
        runs.append(ProfileRuns(name, pass_results(state, name), mine, state.setups.get(name, {})))
    return runs
