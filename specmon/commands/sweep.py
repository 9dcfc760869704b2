"""`specmon sweep (PROFILE | --url URL) ...`: a closed-loop concurrency sweep (or, with --request-rate/--rates,
an open-loop request-rate sweep), results to a JSONL file.

Progress goes to stderr (a refreshing line on a terminal, a line per level otherwise), the table (or with --json
one JSON object) to stdout at the end. Ctrl-C stops cleanly: finished levels stay in the file and are shown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specmon.commands._args import nonneg_int, positive_float
from specmon.commands._lifecycle import config_for
from specmon.commands._table import category_table, table_text
from specmon.errors import UserError
from specmon.loadgen.workload import APIS
from specmon.model.config import parse_levels, parse_rates, served_model_names
from specmon.model.sweeps.results import LevelResult, SweepResult
from specmon.model.sweeps.sweepstats import ProgressPhase, SweepProgress, falling_behind
from specmon.model.text.numbers import counted
from specmon.model.workload.datasets import DATASETS
from specmon.model.workload.goodput import parse_slo
from specmon.orchestration.measure.comparison import ready_url
from specmon.orchestration.measure.sweep import (
    SweepNotice,
    SweepSpec,
    SweepUpdate,
    WorkloadOverrides,
    default_out_path,
    level_name,
    run_sweep,
    workload_from,
)
from specmon.orchestration.runs.manager import RunManager


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="measure throughput and latency at several concurrency levels or request rates",
        description="Run a closed-loop sweep over concurrency levels (or, with --request-rate/--rates, an "
        "open-loop sweep over request rates) against an OpenAI-compatible server (tokens counted from the "
        "server's usage, ITL per chunk and TPOT per token) and write JSONL results.",
    )
    p.add_argument("profile_name", nargs="?", metavar="PROFILE", help="profile whose server to sweep")
    p.add_argument("--url", help="server base URL instead of a profile, e.g. http://127.0.0.1:30000")
    p.add_argument("--model", help="model name to request (default: the first one /v1/models lists)")
    load = p.add_mutually_exclusive_group()
    load.add_argument("--levels", type=_levels, help="comma-separated concurrency levels, e.g. 1,2,5,10 (closed loop)")
    load.add_argument("--request-rate", type=positive_float, metavar="R",
                      help="open loop: send R requests/s on a Poisson schedule (one level)")
    load.add_argument("--rates", type=_rates, metavar="R,R,...",
                      help="open loop: one level per request rate, e.g. 1,2,4 (requests/s)")
    p.add_argument("--burstiness", type=positive_float, metavar="B",
                   help="open loop: gamma shape of the arrival gaps; 1 (default) is Poisson, <1 burstier, "
                   ">1 more even")
    p.add_argument("--max-concurrency", type=_positive_int, metavar="N",
                   help="open loop: at most N requests in flight; later arrivals wait for a free slot")
    p.add_argument("--seed", type=nonneg_int, metavar="N", help="seed of the arrival schedule, the prompt order and the lengths drawn (default 0)")
    p.add_argument("--slo", type=_slo, metavar="ttft:MS,tpot:MS,e2el:MS",
                   help="goodput targets in ms (any subset): report requests/s meeting every one, and their share")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--requests", type=_positive_int, metavar="N", help="measured requests per level")
    stop.add_argument("--duration", type=positive_float, metavar="S", help="seconds per level instead of a count")
    p.add_argument("--warmup", type=nonneg_int, metavar="N", help="warm-up requests before the first level")
    p.add_argument("--dataset", choices=DATASETS,
                   help="prompts: builtin (default: realistic prompts by category), random (synthetic words), or a "
                   "sharegpt, jsonl or specbench file given with --dataset-path")
    p.add_argument("--dataset-path", metavar="FILE", help="the file of a sharegpt, jsonl or specbench dataset")
    p.add_argument("--input-len", type=_positive_int, metavar="N", help="random prompts' length in tokens (approximate)")
    p.add_argument("--input-range", type=_fraction, metavar="R", help="random prompts' lengths uniform in N x [1-R, 1+R]")
    p.add_argument("--output-len", type=_positive_int, metavar="N",
                   help="output tokens per request (default: the dataset's lengths where it has them, else [sweep]'s)")
    p.add_argument("--output-range", type=_fraction, metavar="R", help="output lengths uniform in N x [1-R, 1+R]")
    p.add_argument("--api", choices=APIS, help="chat or completions endpoint")
    p.add_argument("--no-ignore-eos", action="store_true",
                   help="do not send ignore_eos/min_tokens (for servers that reject them, e.g. transformers serve); "
                   "outputs may then end before --output-len")
    p.add_argument("--timeout", type=positive_float, default=120.0, metavar="S",
                   help="a stream silent this long counts as a timeout (default 120)")
    p.add_argument("--deadline", type=positive_float, metavar="S",
                   help="a request still running this long after it was sent is cut and counts as a timeout "
                   "(default 10 x --timeout)")
    p.add_argument("--processes", type=_positive_int, metavar="N",
                   help="load generator processes sending each level together, one core each (default: [sweep] "
                   "processes, else one per 4 CPUs, 1 to 4): more for high concurrency or rates, where one process "
                   "falls behind its sockets (its levels show BOUND or SKEW)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY); never written to files")
    p.add_argument("--out", type=Path, metavar="FILE", help="results file (default results/<profile>-<UTC time>.jsonl)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if (args.profile_name is None) == (args.url is None):
        raise UserError("sweep: give a PROFILE or --url URL (exactly one)")
    config = config_for(args)
    if args.profile_name is not None:
        config.profile(args.profile_name)   # an unknown name fails before anything runs
        label = args.profile_name
    else:
        url = _checked_url(args.url)
        label = url.split("://", 1)[1].replace(":", "_")
    rates = (args.request_rate,) if args.request_rate is not None else args.rates
    workload = workload_from(config.sweep, WorkloadOverrides(
        levels=args.levels, rates=rates, burstiness=args.burstiness, max_concurrency=args.max_concurrency,
        slo=args.slo, seed=args.seed, requests_per_level=args.requests, duration_s=args.duration, warmup_requests=args.warmup,
        input_len=args.input_len, output_len=args.output_len, api=args.api, dataset=args.dataset,
        dataset_path=args.dataset_path, input_range=args.input_range, output_range=args.output_range,
        timeout_s=args.timeout, deadline_s=args.deadline, fixed_length=not args.no_ignore_eos,
        processes=args.processes), named=_flag)
    out_path = args.out or default_out_path(label)
    view = SweepPrinter(sys.stderr)
    levels: list[LevelResult] = []

    def on_update(u: SweepUpdate) -> None:
        if isinstance(u, LevelResult):
            levels.append(u)
        view.show(u)

    async def go() -> SweepResult:
        if args.profile_name is None:
            return await run_sweep(spec_for(url), on_update)
        # The profile's run owns its URL (through its transport; a forwarded port lives as long as the manager).
        manager = RunManager(config)
        try:
            served_as = served_model_names(config.profile(args.profile_name).command)
            return await run_sweep(spec_for(await ready_url(manager, args.profile_name), served_as), on_update)
        finally:
            await manager.close()

    def spec_for(server_url: str, served_as: tuple[str, ...] = ()) -> SweepSpec:
        return SweepSpec(url=server_url, workload=workload, out_path=out_path, model=args.model,
                         profile=args.profile_name, api_key_env=args.api_key_env, served_as=served_as)

    try:
        result = asyncio.run(go())
    except KeyboardInterrupt:
        view.end()
        print(f"specmon: interrupted; {counted(len(levels), 'finished level')} kept in {out_path}", file=sys.stderr)
        if levels:
            print(render_levels(levels))
        return 130
    view.end()
    if args.json:
        print(json.dumps({"path": result.path, "meta": result.meta.to_dict(),
                          "levels": [lv.to_dict() for lv in result.levels]}, indent=2))
    else:
        print(f"{result.label} ({result.meta.model}) -> {result.path}")
        print(render_levels(result.levels))
    if result.failure is not None:
        # Scripts chaining sweeps must not take a file of failures for a measurement.
        print(f"specmon: {result.failure}", file=sys.stderr)
        return 1
    return 0


def _flag(field: str) -> str:
    """A WorkloadOverrides field as this command's options name it (for the builder's refusals)."""
    return "--request-rate or --rates" if field == "rates" else "--" + field.replace("_", "-")


def _checked_url(text: str) -> str:
    """The --url as given, without a trailing slash; UserError for anything specmon would not send as typed.

    Credentials in the URL are refused rather than used: they would otherwise reach the results file's meta line,
    its file name and the terminal, and specmon never stores passwords (an API key goes in --api-key-env).
    """
    url = text.rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UserError(f"--url: {_quoted(text)} must start with http:// or https://")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError as exc:
        raise UserError(f"--url: not a valid URL ({exc})") from None
    if "@" in parts.netloc:
        raise UserError("--url: user name or password in the URL is not supported (it would be written to the "
                        "results file); pass an API key through --api-key-env instead")
    if not parts.hostname:
        raise UserError(f"--url: {_quoted(text)} names no host")
    return url


def _quoted(text: str) -> str:
    return repr(text) if len(text) <= 80 else repr(text[:77] + "...")


def render_levels(levels: list[LevelResult] | tuple[LevelResult, ...]) -> str:
    """The results table: one row per level; open-loop levels add the schedule columns, an SLO the goodput ones."""
    open_loop = any(lv.rate is not None for lv in levels)
    slo = any(lv.goodput is not None for lv in levels)
    head = ["rate" if open_loop else "C", "ok", "fail", "out tok/s", "req/s", "TTFT p50", "TTFT p99", "TPOT p50",
            "ITL p50", "ITL p99", "E2E p50", "tok/chunk", "conc", "client"]
    if open_loop:
        head += ["sent/s", "late p50", "late p99", "load"]
    if slo:
        head += ["good/s", "good %"]
    rows = []
    for lv in levels:
        row = [
            str(lv.concurrency) if lv.rate is None else f"{lv.rate:g}", str(lv.requests_ok),
            "-" if lv.requests_failed is None else str(lv.requests_failed),
            f"{lv.output_throughput:.1f}", f"{lv.request_throughput:.2f}", _ms(lv.ttft_ms.p50), _ms(lv.ttft_ms.p99),
            _ms(lv.tpot_ms.p50), _ms(lv.itl_ms.p50), _ms(lv.itl_ms.p99), _ms(lv.e2e_ms.p50),
            "-" if lv.tokens_per_chunk is None else f"{lv.tokens_per_chunk:.2f}",
            "-" if lv.achieved_concurrency is None else f"{lv.achieved_concurrency:.1f}",
            lv.client.flag or "ok",
        ]
        if open_loop:
            load = "OVER" if lv.over_capacity else ("BEHIND" if lv.behind else "ok")
            row += ["-" if lv.achieved_rate is None else f"{lv.achieved_rate:.2f}", _ms(lv.send_late_ms.p50),
                    _ms(lv.send_late_ms.p99), load]
        if slo:
            row += ["-" if lv.goodput is None else f"{lv.goodput:.2f}",
                    "-" if lv.good_share is None else f"{100 * lv.good_share:.0f}"]
        rows.append(tuple(row))
    notes = "latencies in ms; tokens from server usage; ITL per chunk, TPOT per token"
    if any(lv.client.skewed for lv in levels):
        notes += "; client SKEW = chunks waited that long (p99) for the load generator, a material share of the ITL"
    if open_loop:
        notes += "; rate offered and sent/s achieved in req/s; late = send lateness vs the schedule; " \
                 "load OVER = over capacity, BEHIND = generator fell behind"
    text = table_text(tuple(head), rows, align="right") + f"\n({notes})"
    by_category = category_table([("", levels)])
    return text if by_category is None else text + "\n" + by_category


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


class SweepPrinter:
    """A sweep's progress as `specmon sweep` prints it (`demo --headless` too): a refreshing status line on a
    terminal; on a pipe, one line per finished level and per warning. `prefix` starts every line (`NAME: `)."""

    def __init__(self, stream: Any, prefix: str = "") -> None:
        self._s = stream
        self._tty = bool(getattr(stream, "isatty", lambda: False)())
        self._live = False
        self.prefix = prefix

    def show(self, u: SweepUpdate) -> None:
        if isinstance(u, SweepProgress):
            if self._tty:
                self._s.write("\r\x1b[2K" + self.prefix + _progress_line(u))
                self._s.flush()
                self._live = True
            return
        self.end()
        if isinstance(u, LevelResult):
            self._s.write(f"{self.prefix}level {level_name(u)}: {u.output_throughput:.1f} out tok/s, "
                          f"{u.requests_ok} ok, {u.requests_failed} failed, {u.duration_s:.1f} s\n")
        elif isinstance(u, SweepNotice):
            self._s.write(f"{self.prefix}warning: {u.message}\n")
        self._s.flush()

    def end(self) -> None:
        if self._live:
            self._s.write("\r\x1b[2K")
            self._s.flush()
            self._live = False


def _progress_line(p: SweepProgress) -> str:
    if p.phase == ProgressPhase.WARMUP:
        return f"warm-up: {p.requests_done}/{p.requests_target} requests"
    target = f"/{p.requests_target}" if p.requests_target else f" in {p.elapsed_s:.0f}/{p.duration_target_s:.0f} s"
    ttft = "-" if p.ttft_p50_ms is None else f"{p.ttft_p50_ms:.0f} ms"
    where = f"C={p.concurrency}" if p.rate is None else f"{p.rate:g} req/s"
    behind = f", BEHIND: {p.backlog} due and not sent" if falling_behind(p) else ""
    return (f"level {p.level_index + 1}/{p.level_count} {where}: {p.requests_done}{target} done, "
            f"{p.in_flight} in flight, {p.output_tok_s:.0f} tok/s, TTFT p50 {ttft}, lag {p.loop_lag_ms or 0:.1f} ms"
            f"{behind}")


def _levels(text: str) -> tuple[int, ...]:
    try:
        return parse_levels(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _rates(text: str) -> tuple[float, ...]:
    try:
        return parse_rates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _slo(text: str) -> dict[str, float]:
    try:
        return parse_slo(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_int(text: str) -> int:
    v = nonneg_int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text!r}")
    return v


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= v < 1:
        raise argparse.ArgumentTypeError(f"must be a fraction in [0, 1) (0.2 means +-20 %), got {text!r}")
    return v

