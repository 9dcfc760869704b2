"""`specmon experiment NAME [--json] [--resume]`: run an `[experiments.NAME]` A/B unattended, start to verdict.

Each step goes to stderr as it happens (with its time and, while it runs, `[profiles done/total · ETA]`: see
model.experiments.eta); at the end the summary (verdict, throughput mean ± spread
per level, acceptance, warnings) goes to stdout, or with --json one JSON object. Killed or interrupted, the
experiment keeps its finished levels and steps on disk; `--resume` continues it without repeating a finished level.
Exit 0 when every profile was measured, 1 when a profile failed or the experiment aborted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TextIO

from specmon.model.config import Config, load_config
from specmon.model.experiments.bands import experiment_summary
from specmon.model.experiments.experiment import ExperimentState, ExperimentStatus, ProfileStatus
from specmon.model.experiments.report import summary_to_dict, summary_to_markdown
from specmon.orchestration.measure.experiment import ExperimentStep, ExperimentUpdate, run_experiment
from specmon.orchestration.runs.manager import RunManager
from specmon.sources.experimentfiles import experiment_runs


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("experiment", help="run an [experiments.NAME] A/B unattended: launch, sweep, stop "
                              "each profile in turn, then the verdict", description=__doc__)
    p.add_argument("name", metavar="NAME", help="experiment name (an [experiments.NAME] table)")
    p.add_argument("--resume", action="store_true", help="continue the newest unfinished run of this experiment")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--results-dir", type=Path, default=Path("results"),
                   help="where experiments/NAME-TIME/ goes (default %(default)s)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    if not args.resume:
        config.experiment(args.name)   # an unknown name fails before anything starts
    try:
        state = asyncio.run(_run(config, args.name, args.results_dir, args.resume, sys.stderr))
    except KeyboardInterrupt:
        print(f"specmon: interrupted; finished levels are kept. `specmon experiment {args.name} --resume` continues "
              "(a server left ready is adopted)", file=sys.stderr)
        return 130
    summary = experiment_summary(experiment_runs(state), state)
    if args.json:
        print(json.dumps(summary_to_dict(summary, state), indent=2))
    else:
        print(summary_to_markdown(summary, state=state))
        print(f"results: {state.directory}  (`specmon report {state.directory}` draws the chart)")
    unmeasured = [p for p in state.spec.profiles if state.profile(p).status != ProfileStatus.DONE]
    return 0 if state.status == ExperimentStatus.FINISHED and not unmeasured else 1


async def _run(config: Config, name: str, results_dir: Path, resume: bool, out: TextIO) -> ExperimentState:
    manager = RunManager(config)

    def show(update: ExperimentUpdate) -> None:
        if isinstance(update, ExperimentStep):
            s = update.step
            took = f" ({s.seconds:.1f}s)" if s.seconds is not None else ""
            who = f"{s.profile}: " if s.profile else ""
            eta = f" [{update.eta.words()}]" if update.eta is not None and not update.state.finished else ""
            print(f"{s.at[11:19]} {who}{s.step}: {s.detail}{took}{eta}", file=out, flush=True)

    try:
        return await run_experiment(manager, config, name, results_dir=results_dir, resume=resume, on_update=show)
    finally:
        await manager.close()
