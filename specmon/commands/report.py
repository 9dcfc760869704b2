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

from specmon.errors import UserError
from specmon.model.charts.chart import series_symbol, value_at
from specmon.model.experiments.bands import experiment_summary
from specmon.model.experiments.experiment import STATE_FILE, ExperimentState, experiment_runs, load_state
from specmon.model.experiments.report import summary_to_csv, summary_to_dict, summary_to_markdown
from specmon.model.experiments.verdict import ExperimentSummary, ProfileRuns
from specmon.model.logs.clean import one_line
from specmon.model.sweeps.compare import load_words
from specmon.model.sweeps.interop import read_any_results
from specmon.model.sweeps.results import SweepResult

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
    p.set_defaults(func=run)


def load_inputs(paths: Sequence[str]) -> tuple[list[ProfileRuns], ExperimentState | None]:
    """The runs to report: one experiment's, or sweep files grouped by profile (each file one repeat)."""
    # An experiment is a directory with its state file (another directory is a vLLM result folder, read below).
    experiments = [Path(p) for p in paths if (Path(p) / STATE_FILE).is_file() or Path(p).name == STATE_FILE]
    if experiments:
        if len(paths) > 1:
            raise UserError(f"{paths[1]}: give one experiment directory, or sweep result files, not both or several")
        state = load_state(experiments[0])
        return experiment_runs(state), state
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
    return runs, None


def run(args: argparse.Namespace) -> int:
    runs, state = load_inputs(args.results)
    summary = experiment_summary(runs, state)
    if args.format in ("json", "csv"):
        import json

        text = json.dumps(summary_to_dict(summary, state), indent=2) + "\n" if args.format == "json" \
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
        draw_chart(summary, image)
    except ModuleNotFoundError:
        # The interpreter running specmon, not whichever `pip` PATH finds (a venv not activated: the system's).
        print(f"specmon: the chart needs matplotlib ({shlex.quote(sys.executable)} -m pip install matplotlib); "
              "writing the report without it", file=sys.stderr)
        image_name = None
    else:
        image_name = image.name
    _write(out, summary_to_markdown(summary, image_name, state))
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


def series_id(profile: str) -> str:
    """The SVG id of a profile's throughput series (so a reader or a test can find it in the image)."""
    return f"throughput-{profile}"


def draw_chart(summary: ExperimentSummary, path: Path) -> None:
    """Throughput vs concurrency (mean, error bars = spread, the crossover ± its uncertainty) and, below, accept
    length vs concurrency from each source. PNG or SVG by the file's suffix."""
    import matplotlib

    matplotlib.use("Agg")   # no display: draw to a file
    import matplotlib.pyplot as plt

    speculative = [p for p in summary.profiles if p.levels and any(lv.acceptance and lv.acceptance.sources
                                                                    for lv in p.levels) and p.speculative]
    rows = 2 if speculative else 1
    fig, axes = plt.subplots(rows, 1, figsize=(8, 4.2 * rows), squeeze=False, sharex=True)
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
        ax.errorbar(xs, ys, yerr=err, marker=series_symbol(index)[1], markersize=7, capsize=4, label=p.profile,
                    gid=series_id(p.profile))
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
    ax.legend(fontsize=8, loc="upper left")
    ax.grid(True, alpha=0.3)
    if speculative:
        acc = axes[1][0]
        for p in speculative:
            for source, style in (("log", "o-"), ("metrics", "s--"), ("client", "^:"), ("file", "d-.")):
                pts = [(lv.concurrency, lv.acceptance.sources[source]) for lv in p.levels
                       if lv.acceptance is not None and source in lv.acceptance.sources]
                if pts:
                    acc.plot([c for c, _ in pts], [v for _, v in pts], style, label=f"{p.profile} {source}",
                             gid=f"accept-{p.profile}-{source}")
        acc.set_ylabel("accept length (tokens/step)")
        acc.legend(fontsize=8)
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
