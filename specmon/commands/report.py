"""`specmon report RESULTS... [--format md|json|csv] [--out FILE]`: an experiment (or sweep files) as a report.

RESULTS is one experiment directory (or its experiment.json), or sweep result files (files of the same profile
count as repeats): specmon's, or closed-loop vLLM, SGLang or guidellm files as `compare` reads them. Markdown (the
default) gives the setup of each profile, the throughput table with mean ± spread, acceptance per level, warnings
and the verdict, and draws the chart (throughput vs concurrency with error bars and the crossover; acceptance vs
concurrency) as an image next to it with matplotlib (`PYTHON -m pip install matplotlib`, PYTHON the interpreter
running specmon, as the warning names it). Markdown goes to --out
(default: report.md in the experiment directory, else in the current one); json and csv go to stdout unless --out
is given. An existing file is replaced only with --force; a symlink never.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.charts.chart import series_symbol, value_at
from specmon.model.experiments.bands import (
    GridVerdict,
    band_range,
    best_envelope,
    choose_baseline,
    experiment_summary,
    grid_verdict,
    sweeps_as_grid,
)
from specmon.model.experiments.experiment import STATE_FILE, ExperimentState
from specmon.model.experiments.report import summary_to_csv, summary_to_dict, summary_to_markdown
from specmon.model.experiments.verdict import ExperimentSummary, ProfileRuns
from specmon.model.logs.clean import one_line
from specmon.model.sweeps.compare import load_words
from specmon.model.sweeps.results import SweepResult
from specmon.sources.experimentfiles import experiment_runs, load_state
from specmon.sources.resultfiles import read_any_results, serve_grid

FORMATS = ("md", "json", "csv")
IMAGE_FORMATS = ("png", "svg")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("report", help="write an experiment's (or sweep files') report: Markdown with a chart, "
                              "JSON or CSV", description=__doc__)
    p.add_argument("results", nargs="+", metavar="RESULTS", help="an experiment directory, or sweep result files "
                   "(specmon's, vLLM's, SGLang's or guidellm's)")
    p.add_argument("--format", choices=FORMATS, default="md", help="md (with a chart image), json or csv")
    p.add_argument("--out", type=Path, metavar="FILE", help="where to write (see above for the defaults)")
    p.add_argument("--image", choices=IMAGE_FORMATS, default="png", help="chart image format (default png)")
    p.add_argument("--force", action="store_true", help="replace an existing report (or image) file; a symlink is "
                   "never followed")
    p.add_argument("--baseline", metavar="NAME", help="a tuning grid's setting to beat (its name or its settings, "
                   "e.g. max_num_seqs=64); default: the grid's baseline, or a `vllm bench sweep serve` folder's first "
                   "setting")
    p.set_defaults(func=run)


def load_inputs(paths: Sequence[str], baseline: str | None = None) \
        -> tuple[list[ProfileRuns], ExperimentState | None, str | None]:
    """The runs to report: one experiment's, a `vllm bench sweep serve` folder's server settings (a grid), or sweep
    files grouped by profile (each file one repeat); and a tuning grid's baseline (None: an A/B comparison)."""
    # An experiment is a directory with its state file (another directory is a vLLM result folder, read below).
    experiments = [Path(p) for p in paths if (Path(p) / STATE_FILE).is_file() or Path(p).name == STATE_FILE]
    if experiments:
        if len(paths) > 1:
            raise UserError(f"{paths[1]}: give one experiment directory, or sweep result files, not both or several")
        state = load_state(experiments[0])
        runs = experiment_runs(state)
        grid = state.spec.baseline
        return runs, state, None if grid is None else choose_baseline([r.profile for r in runs], baseline, grid)
    combinations = serve_grid(paths[0]) if len(paths) == 1 else []
    if combinations:
        for result in combinations:
            for warning in result.warnings:
                print(f"specmon: warning: {result.label}: {one_line(warning, 20_000)}", file=sys.stderr)
        runs, chosen = sweeps_as_grid(combinations, baseline)
        return runs, None, chosen
    if baseline is not None:
        raise UserError("--baseline is for a tuning grid (an experiment with a grid, or a `vllm bench sweep serve` "
                        "folder of several server settings)")
    grouped: dict[str, list[SweepResult]] = {}
    for path in paths:
        result = read_any_results(path)   # specmon's, or a vLLM, SGLang or guidellm file (as compare reads them)
        if result.meta.mode == "rate":
            raise UserError(f"{path}: an open-loop sweep (levels at request rates); report sets levels by "
                            "concurrency: compare open-loop files with `specmon compare`")
        for warning in result.warnings:   # a torn last line, repeats, derived figures: said, as compare does
            print(f"specmon: warning: {one_line(warning, 20_000)}", file=sys.stderr)
        grouped.setdefault(result.label, []).append(result)
    runs = [ProfileRuns(label, [(i + 1, r) for i, r in enumerate(results)]) for label, results in grouped.items()]
    return runs, None, None


def run(args: argparse.Namespace) -> int:
    runs, state, baseline = load_inputs(args.results, args.baseline)
    summary = experiment_summary(runs, state, baseline)
    grid = grid_verdict(summary.profiles, baseline) if baseline is not None else None
    if args.format in ("json", "csv"):
        import json

        text = json.dumps(summary_to_dict(summary, state, baseline), indent=2) + "\n" if args.format == "json" \
            else summary_to_csv(summary)
        if args.out is None:
            sys.stdout.write(text)
        else:
            _check_target(args.out, args.force)
            _write(args.out, text)
            print(f"wrote {args.out}", file=sys.stderr)
        return 0
    out: Path = args.out or ((state.directory if state else Path(".")) / "report.md")
    image = out.with_suffix("." + args.image)
    for path in (out, image):
        _check_target(path, args.force)
    try:
        draw_chart(summary, image, grid)
    except ModuleNotFoundError:
        # The interpreter running specmon, not whichever `pip` PATH finds (a venv not activated: the system's).
        print(f"specmon: the chart needs matplotlib ({shlex.quote(sys.executable)} -m pip install matplotlib); "
              "writing the report without it", file=sys.stderr)
        image_name = None
    else:
        image_name = image.name
    _write(out, summary_to_markdown(summary, image_name, state, baseline=baseline))
    print(f"wrote {out}" + (f" and {image}" if image_name else ""), file=sys.stderr)
    return 0


def _check_target(path: Path, force: bool) -> None:
    """A symlink is refused always (it would write through to another file); an existing file unless --force."""
    if path.is_symlink():
        raise UserError(f"{path}: a symlink; not written through (give a plain path with --out)")
    if path.exists() and not force:
        raise UserError(f"{path}: exists; not overwritten (--force replaces it, or choose another --out)")


def _write(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, text)   # 0600: the setups hold command lines and environments
    except OSError as exc:
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600, an existing file too): it holds command lines or
    environments."""
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def _draw_grid(ax: Any, grid: GridVerdict, summary: ExperimentSummary, levels: list[int]) -> None:
    """The best envelope over the variants, and each load band shaded (alternately) and named at the top."""
    envelope = best_envelope(grid, summary.profiles)
    if envelope:
        ax.plot([c for c, _, _ in envelope], [y for _, y, _ in envelope], color="black", linewidth=4, alpha=0.35,
                zorder=0, label="best envelope", gid="best-envelope")
    # Band edges half way (on the log axis) between the last level of one band and the first of the next.
    for i, band in enumerate(grid.bands):
        lo, hi = band.levels[0], band.levels[-1]
        k = levels.index(lo)
        left = (levels[k - 1] * lo) ** 0.5 if k > 0 else lo / 1.3
        j = levels.index(hi)
        right = (hi * levels[j + 1]) ** 0.5 if j + 1 < len(levels) else hi * 1.3
        ax.axvspan(left, right, color="tab:blue" if i % 2 == 0 else "tab:orange", alpha=0.08, gid=f"band-{i}")
        ax.annotate(f"{band_range(band)}\n{grid.labels.get(band.leader, band.leader)}", ((left * right) ** 0.5, 1.0),
                    xycoords=("data", "axes fraction"), xytext=(0, -4), textcoords="offset points", ha="center",
                    va="top", fontsize=8, gid=f"band-label-{i}")
    ax.set_xlim(min(levels) / 1.3, max(levels) * 1.3)
    ax.set_ylim(top=ax.get_ylim()[1] * 1.15)   # room for the band names above the curves


def series_id(profile: str) -> str:
    """The SVG id of a profile's throughput series (so a reader or a test can find it in the image)."""
    return f"throughput-{profile}"


def draw_chart(summary: ExperimentSummary, path: Path, grid: GridVerdict | None = None) -> None:
    """Throughput vs concurrency (mean, error bars = spread, the crossover ± its uncertainty) and, below, accept
    length vs concurrency from each source. A tuning grid's chart shows every variant thin, the best envelope (the
    best setting's mean at each level) as a thick line, and its load bands shaded and named. PNG or SVG by the
    file's suffix."""
    import matplotlib

    matplotlib.use("Agg")   # no display: draw to a file
    import matplotlib.pyplot as plt

    speculative = [p for p in summary.profiles if p.levels and any(lv.acceptance and lv.acceptance.sources
                                                                    for lv in p.levels) and p.speculative]
    rows = 2 if speculative else 1
    # A grid's legends (up to 25 settings) stand right of the plots, clear of the curves and the band names.
    fig, axes = plt.subplots(rows, 1, figsize=(11 if grid else 8, 4.2 * rows), squeeze=False, sharex=True)
    legend: dict[str, Any] = dict(loc="upper left", bbox_to_anchor=(1.01, 1.0)) if grid else {}
    ax = axes[0][0]
    levels = sorted({lv.concurrency for p in summary.profiles for lv in p.levels})
    curves: dict[str, list[tuple[float, float]]] = {}
    for index, p in enumerate(summary.profiles):
        if not p.levels:
            continue
        xs = [lv.concurrency for lv in p.levels]
        ys = [lv.mean for lv in p.levels]
        curves[p.profile] = sorted(zip(map(float, xs), ys))
        err = [lv.spread or 0.0 for lv in p.levels]
        # The TUI's look: a line per profile with its own symbol at each measured level.
        name = p.profile if not grid or p.profile == grid.baseline else grid.labels.get(p.profile, p.profile)
        if grid and p.profile == grid.baseline:
            name = f"baseline: {name}"
        ax.errorbar(xs, ys, yerr=err, marker=series_symbol(index)[1], markersize=5 if grid else 7, capsize=4,
                    label=name, gid=series_id(p.profile), linewidth=1 if grid else 1.5, alpha=0.75 if grid else 1)
    if grid is not None:
        _draw_grid(ax, grid, summary, levels)
    x = summary.crossover
    if x is not None:
        ax.axvspan(max(levels[0], x.concurrency - x.plus_minus), x.concurrency + x.plus_minus, color="grey",
                   alpha=0.15)
        heights = [y for name in (x.ahead_below, x.ahead_above) if name in curves
                   and (y := value_at(curves[name], x.concurrency)) is not None]
        label = f"crossover {load_words(x.concurrency)}"
        if heights:   # marked where the curves meet, with a drop to the concurrency axis, and labelled there
            y = sum(heights) / len(heights)
            ax.plot([x.concurrency], [y], marker="x", markersize=10, markeredgewidth=2, color="crimson",
                    linestyle="none", gid="crossover")
            ax.vlines(x.concurrency, 0, y, colors="crimson", linestyles=":")
            ax.annotate(label, (x.concurrency, y), xytext=(8, -14), textcoords="offset points", color="crimson",
                        fontsize=9)
        else:
            ax.axvline(x.concurrency, color="crimson", linestyle=":", label=label, gid="crossover")
    ax.set_ylim(bottom=0)
    ax.set_ylabel("output tok/s (mean ± spread)")
    ax.legend(fontsize=8, **(legend or {"loc": "upper left"}))
    ax.grid(True, alpha=0.3)
    if speculative:
        acc = axes[1][0]
        for p in speculative:
            for source, style in (("log", "o-"), ("metrics", "s--"), ("client", "^:"), ("file", "d-.")):
                pts = [(lv.concurrency, lv.acceptance.sources[source]) for lv in p.levels
                       if lv.acceptance is not None and source in lv.acceptance.sources]
                if pts:
                    name = grid.labels.get(p.profile, p.profile) if grid else p.profile
                    acc.plot([c for c, _ in pts], [v for _, v in pts], style, label=f"{name} {source}",
                             gid=f"accept-{p.profile}-{source}")
        acc.set_ylabel("accept length (tokens/step)")
        acc.legend(fontsize=7 if grid else 8, **legend)
        acc.grid(True, alpha=0.3)
    bottom = axes[-1][0]
    if levels:
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(levels, [str(c) for c in levels])
        bottom.minorticks_off()
    bottom.set_xlabel("concurrency")
    # The verdict under the chart, as the TUI shows it under its chart.
    fig.text(0.5, 0.01, summary.verdict, ha="center", va="bottom", fontsize=9, wrap=True, gid="verdict")
    fig.tight_layout(rect=(0, 0.06 / rows, 1, 1))
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    except OSError as exc:
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
