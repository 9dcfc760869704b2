"""Result files of other load generators, read into specmon's model and written in their formats. Pure.

Read (the format is told from the content, never the file name):

- `vllm bench serve --save-result`: one flat JSON object per run (one level), keys `completed`, `failed`,
  `duration`, `output_throughput`, `total_token_throughput`, `mean/median/pNN_{ttft,tpot,itl,e2el}_ms`,
  `max_concurrency`, `request_rate` ("inf" or a number)...; `--append-result` puts several on separate lines, and a
  directory of such files (as `--result-dir` leaves them) is one sweep.
- SGLang `bench_serving`: one flat JSON object per line per run, keys as vLLM's but `total_throughput`,
  `mean/median/pNN_e2e_latency_ms`, `concurrency` (Little's law), no `failed`.
- guidellm's benchmarks report (`--output kind=json`): `{"benchmarks": [{"config": {"strategy": ...},
  "metrics": {NAME: {"successful"|"total": {"mean", "median", "percentiles": {"p90", "p99"...}}}}}]}`.

A level sits at its concurrency (vLLM/SGLang `max_concurrency`, guidellm `concurrent` streams, 1 for `synchronous`;
a run sent all at once with no cap, request rate inf, at its whole request count) or, for an open-loop run (a finite
`request_rate`; guidellm `constant`/`poisson`/`async`), at its offered rate with the cap as its concurrency (0 for
none), as specmon's own open-loop levels. Definitions line up with specmon's (specmon.model.sweeps.sweepstats) except
guidellm's: its "ITL" is per token, so it is specmon's TPOT, and it has no per-chunk ITL. What a file lacks is None
(shown as "-"); `lacks_note` says what, from the file's own levels.

Written: a `vllm bench sweep serve` folder (per load BENCH-.../run=N.json, `--save-result` objects, and the
summary.json `vllm bench sweep plot` reads) and SGLang JSONL lines, with their field names and units (a guidellm
report: specmon.model.sweeps.interop_guidellm); `cannot_hold` names what a format has no field for.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.logs.clean import one_line
from specmon.model.sweeps.compare import repeat_spreads
from specmon.model.sweeps.results import (
    ClientHealth,
    LevelResult,
    Stats,
    SweepMeta,
    SweepResult,
    parse_results,
    read_results,
    torn_note,
)
from specmon.model.text.textfile import NotTextError, loads, read_capped

TOOL_NAMES = {"vllm": "vllm bench serve", "sglang": "SGLang bench_serving", "guidellm": "guidellm"}
EXPECTED = ("a specmon sweep result, `vllm bench serve --save-result` JSON (or a directory of them, or a `vllm bench "
            "sweep serve` folder or summary.json), "
            "SGLang bench_serving JSONL or a guidellm benchmarks report (JSON, YAML or CSV)")

_META_TYPE = re.compile(r'"type"\s*:\s*"meta"')
# guidellm keeps every request in its report: a long run's file is large, but a result file, never gigabytes.
MAX_FILE_BYTES = 1 << 30
# Runs (levels) in one file or directory: a sweep has tens; a million parsed cost 1.4 GB, so more are refused before
# they are parsed (every vLLM and SGLang run has an output_throughput, every guidellm benchmark its type_).
MAX_RUNS = 10_000
_RUN_MARKS = ('"output_throughput"', '"generative_benchmark"')

# ---------------------------------------------------------------------------------------------------- reading
def read_any_results(path: str | os.PathLike[str]) -> SweepResult:
    """Read a result file of specmon, vLLM, SGLang or guidellm (or a directory of vLLM result files).

    Bad or unknown content raises UserError naming the file (and line or field) and what was expected.
    """
    p = Path(path)
    if p.is_dir():
        return _read_vllm_dir(p)
    text = _read_text(p)
    if _is_specmon(text):
        return read_results(p)   # it keeps the levels before a torn last line
    return parse_any_results(text, str(p))


def parse_any_results(text: str, path: str) -> SweepResult:
    """Parse a result file's text in whichever supported format it is (see `read_any_results`)."""
    if _is_specmon(text):
        return parse_results(text.splitlines(), path)
    _check_run_count(max(text.count(mark) for mark in _RUN_MARKS), path)
    if text.startswith(_GUIDELLM_CSV_START):
        _check_run_count(text.count("\n") - 3, path)   # a three-row header, then a benchmark a row
        return _guidellm_csv(text, path)
    if text.lstrip().startswith("["):   # a `vllm bench sweep serve` summary.json
        return _flat_result("vllm", _summary_runs(_json_value(text, path), path), path)
    tool, objs, torn = _detect(text, path)
    if tool == "guidellm":
        return _guidellm_result(objs[0][1], path)
    return _flat_result(tool, _where(objs, path), path, torn=torn)


def _check_run_count(runs: int, path: str) -> None:
    if runs > MAX_RUNS:
        raise UserError(f"{path}: about {runs:,} runs; specmon reads at most {MAX_RUNS:,} from one file or directory "
                        "(refused unread: a sweep has tens of levels; split the file)")


def _is_specmon(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not _META_TYPE.search(first):   # cheap first: a one-line guidellm report is the whole file
        return False
    try:
        obj = loads(first)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("type") == "meta"


def _read_text(p: Path) -> str:
    try:
        return read_capped(p, MAX_FILE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{p}: no such file") from None
    except NotTextError as exc:
        raise UserError(f"{p}: {exc}; expected {EXPECTED}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{p}: cannot read ({exc})") from None


def _where(objs: Sequence[tuple[int, Mapping[str, Any]]], path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Each object with the place an error about it names: the file, and its line when it holds several."""
    return [(f"{path}:{n}" if len(objs) > 1 else path, o) for n, o in objs]


def _detect(text: str, path: str) -> tuple[str, list[tuple[int, Mapping[str, Any]]], tuple[str, ...]]:
    """Which peer tool wrote `text`, its JSON objects with their line numbers (one, or one per line), and the note
    on a last line cut short (a JSONL whose append was interrupted: the whole lines before it are read)."""
    stripped = text.strip()
    if not stripped:
        raise UserError(f"{path}: empty file; expected {EXPECTED}")
    objs: list[tuple[int, Mapping[str, Any]]] = []
    torn: tuple[str, ...] = ()
    try:
        whole = loads(stripped)
        if isinstance(whole, dict):
            objs = [(1, whole)]
    except ValueError:
        lines = text.splitlines()
        last = max(n for n, line in enumerate(lines, 1) if line.strip())
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except ValueError:
                if objs and n == last and not text.endswith("\n"):
                    torn = (torn_note(path, n),)
                    break
                if objs:
                    raise UserError(f"{path}:{n}: not JSON; expected one JSON object per line") from None
                break
            if not isinstance(obj, dict):
                objs = []
                break
            objs.append((n, obj))
    if not objs and re.match(r"(---\s*)?benchmarks:", stripped):
        objs = [(1, _guidellm_yaml(stripped, path))]
    if objs and isinstance(objs[0][1].get("benchmarks"), list):
        return "guidellm", objs, torn
    tools = {_flat_tool(o) for _, o in objs}
    if len(tools) == 1 and None not in tools:
        return str(tools.pop()), objs, torn
    raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED}")


def _guidellm_yaml(text: str, path: str) -> Mapping[str, Any]:
    """A guidellm report written as YAML (`--output-path x.yaml`): the same tree as its JSON."""
    import yaml  # type: ignore[import-untyped]  # a declared dependency, imported only for guidellm YAML

    try:
        obj = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not YAML ({str(exc).splitlines()[0]}); expected {EXPECTED}") from None
    if not isinstance(obj, dict):
        raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED}")
    return obj


def _flat_tool(obj: Mapping[str, Any]) -> str | None:
    """vLLM or SGLang, from the keys only each writes; None when the object is neither's summary."""
    if "output_throughput" not in obj and "mean_ttft_ms" not in obj:
        return None
    if "total_token_throughput" in obj or "endpoint_type" in obj or "mean_e2el_ms" in obj or "tokenizer_id" in obj:
        return "vllm"
    if "total_throughput" in obj or "mean_e2e_latency_ms" in obj or "server_info" in obj:
        return "sglang"
    return None


# `vllm bench sweep serve` leaves, per parameter combination, a folder of run=N.json (one per --num-runs repeat),
# warmup.json, *.failure.json and summary.json (the list of its runs, as `vllm bench sweep plot` reads them).
_NOT_RUNS = ("warmup.json", "summary.json")


def _read_vllm_dir(d: Path) -> SweepResult:
    """A `--result-dir` of `vllm bench serve` files, or a `vllm bench sweep serve` output folder (its summaries; runs
    of a combination without one), at any depth: one sweep, repeats kept."""
    summaries = sorted(d.rglob("summary.json"))
    runs: list[tuple[str, Mapping[str, Any]]] = []
    torn: tuple[str, ...] = ()
    _check_run_count(len(summaries), str(d))
    for f in summaries:
        text = _read_text(f)
        _check_run_count(len(runs) + text.count(_RUN_MARKS[0]), str(d))
        # One server configuration per sweep: a combination folder's SERVE- part tells them apart (runs of another
        # are left out as another workload, not pooled as repeats).
        serve = _serve_part(f.parent.name)
        runs += [(where, {**o, _SERVE_KEY: serve} if serve else o)
                 for where, o in _summary_runs(_json_value(text, str(f)), str(f))]
    summed = {f.parent for f in summaries}
    files = sorted(f for f in d.rglob("*.json") if f.parent not in summed and f.name not in _NOT_RUNS
                   and not f.name.endswith((".pytorch.json", ".failure.json")))
    _check_run_count(len(runs) + len(files), str(d))
    for f in files:
        text = _read_text(f)
        _check_run_count(len(runs) + text.count(_RUN_MARKS[0]), str(d))
        tool, objs, cut = _detect(text, str(f))
        if tool != "vllm":
            raise UserError(f"{f}: not a `vllm bench serve --save-result` file (a directory is read as one vLLM "
                            f"sweep); found {TOOL_NAMES.get(tool, tool)} output")
        runs += _where(objs, str(f))
        torn += cut
    if not runs:
        raise UserError(f"{d}: no result files in it; expected a directory of `vllm bench serve --save-result` "
                        "files or a `vllm bench sweep serve` output folder")
    return _flat_result("vllm", runs, str(d), label=d.name, torn=torn)


def _serve_part(folder: str) -> str | None:
    """A combination folder's server part: `SERVE-a=1-b=2-BENCH-c=4` (older vLLM) or `SERVE--a=1-BENCH--c=4`
    (the parts joined by `-` after `SERVE-`/`BENCH-`), no BENCH part where only server settings vary; None where the
    folder is no combination of server settings."""
    if not folder.startswith("SERVE-"):
        return None
    return folder.split("-BENCH-")[0]


def serve_label(serve: str) -> str:
    """`SERVE--max_num_seqs=64-max_num_batched_tokens=8192` -> `serve max_num_seqs=64 max_num_batched_tokens=8192`,
    named as a grid's variants are (`BASE SETTINGS`: the verdict shows the settings); a named combination (vLLM's
    `_benchmark_name`) keeps its name."""
    text = serve[len("SERVE-"):].lstrip("-")
    return "serve " + " ".join(re.split(r"-(?=[A-Za-z_][\w.-]*=)", text)) if text else serve


def serve_grid(path: str | os.PathLike[str]) -> list[SweepResult]:
    """A `vllm bench sweep serve` output folder of several server settings as a grid: one sweep per combination,
    labelled with its settings (`serve_label`), in the order vLLM ran them (the date of each one's first run;
    the folder name where no run has a date). [] for anything else (a file, one combination, no combinations)."""
    d = Path(path)
    if not d.is_dir():
        return []
    summaries = sorted(d.rglob("summary.json"))
    _check_run_count(len(summaries), str(d))
    groups: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for f in summaries:
        serve = _serve_part(f.parent.name)
        if serve is not None:
            groups.setdefault(serve, []).extend(_summary_runs(_json_value(_read_text(f), str(f)), str(f)))
    if len(groups) < 2:
        return []
    first_run = {serve: min(str(o.get("date") or "~") for _, o in runs) for serve, runs in groups.items()}
    order = sorted(groups, key=lambda s: (first_run[s], s))
    return [_flat_result("vllm", groups[s], str(d), label=serve_label(s)) for s in order]


def _json_value(text: str, path: str) -> Any:
    try:
        return loads(text)
    except ValueError as exc:
        raise UserError(f"{path}: not JSON ({exc}); expected {EXPECTED}") from None


def _summary_runs(value: Any, path: str) -> list[tuple[str, Mapping[str, Any]]]:
    """A sweep summary.json: a list of `vllm bench serve` results (each with run_number and the overrides)."""
    if not isinstance(value, list) or not all(isinstance(o, Mapping) and _flat_tool(o) == "vllm" for o in value):
        raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED} (a list: a `vllm bench sweep "
                        "serve` summary.json of `vllm bench serve` results)")
    return [(f"{path}[{i}]", o) for i, o in enumerate(value)]


# --- vLLM and SGLang: one flat object per run --------------------------------------------------------------
# The latency metrics, by specmon's name: vLLM's and SGLang's key stems.
_FLAT_METRICS = {"ttft_ms": ("ttft", "ttft"), "tpot_ms": ("tpot", "tpot"), "itl_ms": ("itl", "itl"),
                 "e2e_ms": ("e2el", "e2e_latency")}


# What makes two runs one workload (a file appending runs of other datasets or lengths holds several sweeps).
_SERVE_KEY = "serve_combination"   # a `vllm bench sweep serve` folder's server parameters (its SERVE- name)
_WORKLOAD_KEYS = ("dataset_name", "random_input_len", "random_output_len", "random_range_ratio", "model_id",
                  _SERVE_KEY)
_RANDOM_LENGTHS = ("random_input_len", "random_output_len", "random_range_ratio")


def _flat_result(tool: str, runs: Sequence[tuple[str, Mapping[str, Any]]], path: str,
                 label: str | None = None, torn: tuple[str, ...] = ()) -> SweepResult:
    per_run = _per_run_labels([o for _, o in runs])
    same, other = _first_workload(runs, per_run)
    runs, at_once = _open_loop_end(tool, same, path)
    levels = _one_axis([(where, _flat_level(tool, o, where)) for where, o in runs], path)
    first = runs[0][1]
    model = first.get("model_id") if tool == "vllm" else _sglang_model(first)
    workload = _axis_workload(levels)
    for key in ("dataset_name", "random_input_len", "random_output_len", "num_prompts", "backend", "burstiness"):
        if first.get(key) is not None:
            workload[key] = first[key]
    meta = SweepMeta(url="", model=_shown(model), workload=workload,
                     profile=label or Path(path).stem, created_at=_vllm_date(first.get("date")), tool=tool)
    notes = (torn + _derived(tool, runs) + _repeats(levels) + _per_run_said(runs, per_run)
             + _other_workloads(first, other, per_run) + at_once)
    # The notes quote the file's own labels and models: no control sequence of theirs may reach a terminal.
    return SweepResult(path=path, meta=meta, levels=tuple(levels), notes=tuple(one_line(n, 20_000) for n in notes))


def _shown(v: Any) -> str | None:
    """A name another tool's file gives (a model, a target URL) as one line with no terminal control in it (an OSC 52
    or a clear-screen in a model name reaches compare's output, the TUI's toasts, a report); None if not a string."""
    return one_line(v, 500) if isinstance(v, str) and v else None


def _workload_key(o: Mapping[str, Any], per_run: frozenset[str]) -> tuple[Any, ...]:
    # The random lengths shape the load only when the prompts are random (SGLang and vLLM write their defaults
    # beside any other dataset, and specmon's export writes a prompt set's real mean lengths there, level by level).
    random = not isinstance(o.get("dataset_name"), str) or o["dataset_name"].startswith("random")
    return tuple(o.get(k) if random or k not in _RANDOM_LENGTHS else None for k in _WORKLOAD_KEYS) \
        + _metadata(o, per_run)


# vLLM's string-valued keys that differ between the runs of one sweep (the rest, and what `--metadata k=v` adds, are
# the same for every run of it: `deployment=base` and `deployment=kvcache` are two sweeps, not repeats).
_PER_RUN_STRINGS = ("date", "request_rate")
# A label named as a stamp of one run (when, where, which attempt) never makes another workload, whatever its value.
_PER_RUN_NAME = re.compile(r"(time|timestamp|ts|date|datetime|(start|end)_?time|started|finished|run|run_?(id|name|no)|"
                           r"id|uuid|host|hostname|node|node_?name|machine|pod|job|job_?id|repeat|iteration|iter|"
                           r"trial|attempt|(git_)?commit)", re.IGNORECASE)
# vLLM's own string keys: they name the API and model used, part of the workload however they vary.
_VLLM_STRINGS = ("endpoint_type", "backend", "label", "model_id", "tokenizer_id")


def _labels(o: Mapping[str, Any]) -> dict[str, str]:
    """A vLLM run's string labels (what `--metadata k=v` adds, the backend, the label): none for SGLang."""
    return {k: v for k, v in o.items() if isinstance(v, str) and k not in _PER_RUN_STRINGS} \
        if _flat_tool(o) == "vllm" else {}


def _per_run_labels(objs: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The `--metadata` labels that stamp a run rather than shape its load: named so (timestamp, run_id, host...),
    or, in a file of three runs or more, with a value of its own on every run (a label that groups no two runs
    describes runs, not a workload; with two, `deployment=a` and `deployment=b` are as likely two workloads)."""
    names = {k for o in objs for k in _labels(o) if k not in _VLLM_STRINGS and k not in _WORKLOAD_KEYS}
    per_run = {k for k in names if _PER_RUN_NAME.fullmatch(k)}
    if len(objs) > 2:
        for k in names - per_run:
            values = [o.get(k) for o in objs]
            if None not in values and len(set(values)) == len(values):
                per_run.add(k)
    return frozenset(per_run)


def _metadata(o: Mapping[str, Any], per_run: frozenset[str] = frozenset()) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in _labels(o).items() if k not in per_run))


def _per_run_said(runs: Sequence[tuple[str, Mapping[str, Any]]], per_run: frozenset[str]) -> tuple[str, ...]:
    """Which per-run labels differed between the runs kept (they are not another workload: said, not acted on)."""
    differed = sorted(k for k in per_run if len({str(o.get(k)) for _, o in runs}) > 1)
    if not differed:
        return ()
    return (f"runs kept as one workload although these labels differ from run to run (a run's stamp, not its load): "
            f"{', '.join(differed)}",)


def _open_loop_end(tool: str, runs: list[tuple[str, Mapping[str, Any]]],
                   path: str) -> tuple[list[tuple[str, Mapping[str, Any]]], tuple[str, ...]]:
    """An open-loop sweep's runs without its uncapped `inf` end (`--request-rate 10,30,inf`): that run sent every
    request at once, a point on no request-rate axis; it is left out and said. A capped `inf` run is closed loop (a
    concurrency), and a file mixing those with open-loop runs stays refused."""
    def uncapped_inf(o: Mapping[str, Any], where: str) -> bool:
        return _rate(o, where) is None and _cap(o, where) is None

    if not any(_rate(o, where) is not None for where, o in runs):
        return runs, ()
    ends = [(where, o) for where, o in runs if uncapped_inf(o, where)]
    if not ends:
        return runs, ()
    said = ", ".join(where for where, _ in ends)
    return [r for r in runs if r not in ends], (
        f"left out {len(ends)} run(s) at request rate inf with no max_concurrency ({said}): every request sent at "
        "once, no point on the request-rate axis of the other runs",)


def _first_workload(runs: Sequence[tuple[str, Mapping[str, Any]]], per_run: frozenset[str]) \
        -> tuple[list[tuple[str, Mapping[str, Any]]], list[tuple[str, Mapping[str, Any]]]]:
    """The runs of the first run's workload, and the others (another dataset, lengths or model: not its repeats)."""
    key = _workload_key(runs[0][1], per_run)
    return ([r for r in runs if _workload_key(r[1], per_run) == key],
            [r for r in runs if _workload_key(r[1], per_run) != key])


def _other_workloads(first: Mapping[str, Any], other: Sequence[tuple[str, Mapping[str, Any]]],
                     per_run: frozenset[str]) -> tuple[str, ...]:
    if not other:
        return ()
    shared = set(_metadata(first, per_run))
    what = "; ".join(f"{where}: "
                     + " ".join([*(str(o.get(k)) for k in _WORKLOAD_KEYS if o.get(k) is not None),
                                 *(f"{k}={v}" for k, v in _metadata(o, per_run) if (k, v) not in shared)])
                     for where, o in other)
    return (f"left out {len(other)} run(s) of another workload than the first line's (dataset, lengths, model, "
            f"--metadata; not repeats of it: put them in a file of their own to compare them): {what}",)


def _repeats(levels: Sequence[LevelResult]) -> tuple[str, ...]:
    """Loads run more than once (vLLM's --num-runs, appended files): kept, and said with their spread."""
    said = repeat_spreads(levels)
    return (f"repeats kept: {'; '.join(said)}; compare shows each load's mean",) if said else ()


def _one_axis(levels: Sequence[tuple[str, LevelResult]], path: str) -> list[LevelResult]:
    """The levels in order of load; UserError when open-loop and fixed-concurrency runs are mixed."""
    rated = [where for where, lv in levels if lv.rate is not None]
    if rated and len(rated) < len(levels):
        fixed = next(where for where, lv in levels if lv.rate is None)
        raise UserError(f"{path}: mixes open-loop runs ({rated[0]}: a request rate) and fixed-concurrency runs "
                        f"({fixed}: request_rate inf); their levels are not on one axis, compare them as two files")
    return sorted((lv for _, lv in levels), key=lambda lv: lv.load)


def _axis_workload(levels: Sequence[LevelResult]) -> dict[str, Any]:
    """The levels as specmon's workload names them: an open-loop sweep's rates, else its concurrencies."""
    if levels and levels[0].rate is not None:
        caps = {lv.concurrency for lv in levels}
        return {"mode": "rate", "rates": sorted({lv.rate for lv in levels if lv.rate is not None}),
                "max_concurrency": (caps.pop() or None) if len(caps) == 1 else None}
    return {"levels": sorted({lv.concurrency for lv in levels})}


def _flat_level(tool: str, o: Mapping[str, Any], where: str) -> LevelResult:
    completed = _int(o, "completed", where)
    failed = _failed(o, completed, where) if tool == "vllm" else None   # SGLang counts only completed requests
    duration = _positive(o, "duration", where)
    out_tokens = _int(o, "total_output_tokens", where)
    in_tokens = _int(o, "total_input_tokens", where, default=0)
    total_key = "total_token_throughput" if tool == "vllm" else "total_throughput"
    rate = _rate(o, where)
    cap = _cap(o, where)
    sent = _sent(o, completed, failed, where)
    if rate is None and cap is None and sent < 1:
        raise UserError(f"{where}: no max_concurrency, no request rate and no request: no level to place")
    # With no request completed, vLLM writes 0.0 for every latency (the mean of nothing): absent, not zero.
    stats = {name: _flat_stats(o, stems[0] if tool == "vllm" else stems[1], where) if completed else Stats()
             for name, stems in _FLAT_METRICS.items()}
    # SGLang's 0.4-era lines have no request or total throughput: both are exactly derivable (DERIVED says so).
    request_tput = _opt(o, "request_throughput", where)
    total_tput = _opt(o, total_key, where)
    return LevelResult(
        # Sent all at once with no cap (rate inf), a run's concurrency is its whole request count.
        concurrency=cap or (0 if rate is not None else sent), rate=rate,
        requests_ok=completed, requests_failed=failed, duration_s=duration,
        output_tokens=out_tokens, output_throughput=_num(o, "output_throughput", where),
        request_throughput=completed / duration if request_tput is None else request_tput,
        ttft_ms=stats["ttft_ms"], tpot_ms=stats["tpot_ms"], itl_ms=stats["itl_ms"], e2e_ms=stats["e2e_ms"],
        tokens_per_chunk=None, client=ClientHealth(), input_tokens=in_tokens,
        total_throughput=(in_tokens + out_tokens) / duration if total_tput is None else total_tput,
        achieved_concurrency=_opt(o, "concurrency", where) if tool == "sglang" else None,
        goodput=_opt(o, "request_goodput", where) if tool == "vllm" else None,
        accept_length=_opt(o, "spec_decode_acceptance_length" if tool == "vllm" else "accept_length", where),
        accept_rate=_percent(o, "spec_decode_acceptance_rate", where) if tool == "vllm" else None,
    )


def _failed(o: Mapping[str, Any], completed: int, where: str) -> int | None:
    """A vLLM run's failed requests: `failed`, else (older files have none) the prompts sent less those completed,
    else unknown (None, never 0)."""
    if o.get("failed") is not None:
        return _int(o, "failed", where)
    if o.get("num_prompts") is None:
        return None
    sent = _int(o, "num_prompts", where)
    if sent < completed:
        raise UserError(f"{where}: num_prompts is {sent}, below completed {completed}; expected the number of prompts "
                        "sent")
    return sent - completed


def _sent(o: Mapping[str, Any], completed: int, failed: int | None, where: str) -> int:
    """How many requests a run sent: completed + failed where known, else its num_prompts, else those completed."""
    if failed is not None:
        return completed + failed
    return _int(o, "num_prompts", where) if o.get("num_prompts") is not None else completed


def _derived(tool: str, runs: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, ...]:
    """The figures a flat file lacks that were derived exactly from its counts (said with the results)."""
    total_key = "total_token_throughput" if tool == "vllm" else "total_throughput"
    said = []
    if tool == "vllm" and any(o.get("failed") is None and o.get("num_prompts") is not None for _, o in runs):
        said.append("failed requests derived as num_prompts - completed (the file has no failed)")
    if any(o.get("request_throughput") is None for _, o in runs):
        said.append("request throughput derived as completed / duration (the file has none)")
    if any(o.get(total_key) is None for _, o in runs):
        said.append("total throughput derived as (input + output tokens) / duration (the file has none)")
    return tuple(said)


def _percent(o: Mapping[str, Any], key: str, where: str) -> float | None:
    v = _opt(o, key, where)
    if v is not None and v > 100:
        raise UserError(f"{where}: {key} is {v:g}; expected a percentage from 0 to 100")
    return None if v is None else v / 100.0


def _rate(o: Mapping[str, Any], where: str) -> float | None:
    """The run's offered request rate; None for one sent all at once ("inf", or SGLang's replayed "trace")."""
    if o.get("ramp_up_strategy") is not None:
        raise UserError(f"{where}: a ramp-up run (ramp_up_strategy {o['ramp_up_strategy']!r}) has no one request "
                        "rate to place it at")
    rate = o.get("request_rate")
    if rate is None or rate in ("inf", "trace"):
        return None
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise UserError(f"{where}: request_rate must be a number > 0 or \"inf\", got {rate!r}")
    return None if math.isinf(rate) else float(rate)


def _cap(o: Mapping[str, Any], where: str) -> int | None:
    cap = o.get("max_concurrency")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_CONCURRENCY):
        raise UserError(f"{where}: max_concurrency must be an integer from 1 to {MAX_CONCURRENCY} or null, "
                        f"got {_plain(cap) if isinstance(cap, float) else repr(cap)}")
    return cap


def _flat_stats(o: Mapping[str, Any], stem: str, where: str) -> Stats:
    p50 = _opt(o, f"median_{stem}_ms", where)
    return Stats(_opt(o, f"mean_{stem}_ms", where), p50 if p50 is not None else _opt(o, f"p50_{stem}_ms", where),
                 _opt(o, f"p90_{stem}_ms", where), _opt(o, f"p99_{stem}_ms", where))


def _sglang_model(o: Mapping[str, Any]) -> Any:
    """The served model: `server_info.model_path`; behind SGLang's prefill/decode router `server_info` holds each
    side's own server_info under `prefill` and `decode` instead: their model when all of them name the same one."""
    info = o.get("server_info")
    if not isinstance(info, Mapping):
        return None
    if "model_path" in info:
        return info["model_path"]
    sides = [s for key in ("prefill", "decode") if isinstance(info.get(key), list) for s in info[key]]
    models = {s.get("model_path") for s in sides if isinstance(s, Mapping)}
    return models.pop() if len(models) == 1 else None


def _vllm_date(v: Any) -> str:
    # vLLM writes its local time as %Y%m%d-%H%M%S (zone unknown): ISO-8601 without a zone.
    m = re.fullmatch(r"(\d{4})(\d\d)(\d\d)-(\d\d)(\d\d)(\d\d)", v) if isinstance(v, str) else None
    return "{}-{}-{}T{}:{}:{}".format(*m.groups()) if m else ""


# --- guidellm: one report, a list of benchmarks -------------------------------------------------------------
_GUIDELLM_RATE_KINDS = ("constant", "poisson", "async")


def _guidellm_result(report: Mapping[str, Any], path: str) -> SweepResult:
    benchmarks = report.get("benchmarks")
    if not isinstance(benchmarks, list) or not benchmarks:
        raise UserError(f"{path}: benchmarks: an empty list; a guidellm report needs at least one benchmark")
    levels = [_guidellm_level(b, f"{path}: benchmarks[{i}]") for i, b in enumerate(benchmarks)]
    if any(lv.rate is not None for lv in levels):
        # A `sweep` profile brackets its rates with a synchronous and a throughput benchmark: they sit on the rate
        # axis at the request rate they achieved, as guidellm itself places them.
        levels = [lv if lv.rate is not None else replace(lv, rate=lv.request_throughput) for lv in levels]
    levels.sort(key=lambda lv: lv.load)
    target = _guidellm_first(report, benchmarks, "target")
    model = _guidellm_first(report, benchmarks, "model")
    meta = SweepMeta(url=_shown(target) or "", model=_shown(model), workload=_axis_workload(levels), profile=Path(path).stem,
                     created_at=levels[0].started_at or "", tool="guidellm")
    return SweepResult(path=path, meta=meta, levels=tuple(levels))


# guidellm's CSV report (`--output kind=csv`, 0.8): a three-row header (group, field, unit or statistic) over one
# row per benchmark; distributions of successful requests only, percentiles as a list in _G_PERCENTILES order.
_GUIDELLM_CSV_START = "Run Info,"
_G_PERCENTILES = ("p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999")


def _guidellm_csv(text: str, path: str) -> SweepResult:
    rows = list(csv.reader(io.StringIO(text)))
    if len(rows) < 4:
        raise UserError(f"{path}: a guidellm CSV report with no benchmark row (a three-row header, then one row each)")
    heads = list(zip(rows[0], rows[1], rows[2]))
    levels = []
    model = target = None
    for n, row in enumerate(rows[3:], 4):
        cell: dict[tuple[str, ...], str] = dict(zip(heads, row))
        where = f"{path}:{n}"
        backend = _csv_json(cell, ("Run Info", "Backend", ""))
        model = model or (backend.get("model") if isinstance(backend, Mapping) else None)
        target = target or (backend.get("target") if isinstance(backend, Mapping) else None)
        levels.append(_guidellm_csv_level(cell, where))
    if any(lv.rate is not None for lv in levels):
        levels = [lv if lv.rate is not None else replace(lv, rate=lv.request_throughput) for lv in levels]
    levels.sort(key=lambda lv: lv.load)
    meta = SweepMeta(url=_shown(target) or "", model=_shown(model),
                     workload=_axis_workload(levels), profile=Path(path).stem, tool="guidellm")
    note = ("token totals are mean x count (a guidellm CSV holds no totals)",)
    return SweepResult(path=path, meta=meta, levels=tuple(levels), notes=note)


def _csv_cell(cell: Mapping[tuple[str, ...], str], key: tuple[str, str, str], where: str) -> float:
    if key not in cell or cell[key] == "":
        raise UserError(f"{where}: column {' / '.join(k for k in key if k)}: missing; expected a guidellm 0.8 CSV report")
    try:
        v = float(cell[key])
    except ValueError:
        raise UserError(f"{where}: column {' / '.join(k for k in key if k)}: {cell[key]!r} is not a number") from None
    return _bounded(v, " / ".join(k for k in key if k), where, "a number")


def _csv_json(cell: Mapping[tuple[str, ...], str], key: tuple[str, str, str]) -> Any:
    """A cell guidellm writes as JSON (the backend's settings, a percentile list); None when it is not."""
    try:
        return loads(cell.get(key) or "null")
    except ValueError:
        return None


def _csv_stats(cell: Mapping[tuple[str, ...], str], group: str, field: str, where: str, scale: float = 1.0) -> Stats:
    if (group, field, "Mean") not in cell:
        return Stats()
    pct = _csv_json(cell, (group, field, "Percentiles"))
    named = dict(zip(_G_PERCENTILES, pct)) if isinstance(pct, list) and len(pct) == len(_G_PERCENTILES) else {}
    at = f"{where}: {group} / {field}"
    p90, p99 = (_bounded(named[k], f"{k}", at, "a number") * scale if k in named else None for k in ("p90", "p99"))
    return Stats(_csv_cell(cell, (group, field, "Mean"), where) * scale,
                 _csv_cell(cell, (group, field, "Median"), where) * scale, p90, p99)


def _guidellm_csv_level(cell: Mapping[tuple[str, ...], str], where: str) -> LevelResult:
    strategy = cell.get(("Benchmark", "Strategy", ""), "")
    kind, _, value = strategy.partition("@")
    rate: float | None = None
    try:
        number = float(value) if value else None
    except ValueError:
        number = None
    if kind == "synchronous":
        concurrency = 1
    elif kind == "concurrent" and number is not None and number.is_integer() and 1 <= number <= MAX_CONCURRENCY:
        concurrency = int(number)
    elif kind == "throughput":
        concurrency = 0
    elif kind in _GUIDELLM_RATE_KINDS and number is not None and 0 < number <= ABSURD:
        rate, concurrency = number, 0
    else:
        raise UserError(f"{where}: column Benchmark / Strategy: {strategy!r}; expected synchronous, throughput, "
                        "concurrent@N or constant/poisson/async@RATE")
    ok = round(_csv_cell(cell, ("Request Counts", "Successful", ""), where))
    failed = round(_csv_cell(cell, ("Request Counts", "Errored", ""), where))
    tokens = "Token Metrics"
    return LevelResult(
        concurrency=concurrency or (0 if rate is not None else ok + failed), rate=rate, requests_ok=ok,
        requests_failed=failed, duration_s=_csv_cell(cell, ("Timings", "Duration", "Sec"), where),
        output_tokens=round(_csv_cell(cell, (tokens, "Successful Output Tokens", "Mean"), where) * ok),
        input_tokens=round(_csv_cell(cell, (tokens, "Successful Input Tokens", "Mean"), where) * ok),
        output_throughput=_csv_cell(cell, ("Token Throughput", "Successful Output Tokens/Sec", "Mean"), where),
        request_throughput=_csv_cell(cell, ("Server Throughput", "Successful Requests/Sec", "Mean"), where),
        total_throughput=_csv_cell(cell, ("Token Throughput", "Successful Total Tokens/Sec", "Mean"), where),
        ttft_ms=_csv_stats(cell, "Time to First Token", "Successful ms", where),
        tpot_ms=_csv_stats(cell, "Inter Token Latency", "Successful ms", where),   # guidellm's ITL: specmon's TPOT
        itl_ms=Stats(),
        e2e_ms=_csv_stats(cell, "Request Latency", "Successful Sec", where, scale=1000.0),
        tokens_per_chunk=_csv_cell(cell, ("Token Streaming", "Successful Output Tokens/Iter", "Mean"), where)
        if ("Token Streaming", "Successful Output Tokens/Iter", "Mean") in cell else None,
        achieved_concurrency=_csv_cell(cell, ("Server Throughput", "Successful Concurrency", "Mean"), where)
        if ("Server Throughput", "Successful Concurrency", "Mean") in cell else None,
        client=ClientHealth(),
    )


# Where each guidellm layout keeps the target and model: 0.8's report config (as given) and each benchmark's backend
# config (auto-detected), 0.5's `args`, the 0.3-era worker's backend_*.
def _guidellm_first(report: Mapping[str, Any], benchmarks: Sequence[Any], name: str) -> str | None:
    places = [_dig(report, "config", "spec", "backend", name), _dig(report, "args", name)]
    for b in benchmarks:
        places += [_dig(b, "config", "backend", name), _dig(b, "worker", f"backend_{name}")]
    return next((v for v in places if isinstance(v, str) and v), None)


def _guidellm_level(b: Any, where: str) -> LevelResult:
    if not isinstance(b, Mapping):
        raise UserError(f"{where}: expected an object")
    strategy = _dig(b, "config", "strategy") or _dig(b, "args", "strategy")   # v0.8 / v0.3 layouts
    if not isinstance(strategy, Mapping):
        raise UserError(f"{where}.config.strategy: missing (a guidellm benchmark names its strategy)")
    at = f"{where}.config.strategy"
    kind = strategy.get("type_")
    cap = _cap(strategy, at)
    rate: float | None = None
    if kind == "synchronous":
        concurrency = 1
    elif kind == "concurrent":
        concurrency = _int(strategy, "streams", at)
    elif kind == "throughput":   # everything at once, up to its cap
        concurrency = cap or 0
    elif kind in _GUIDELLM_RATE_KINDS:
        rate = _num(strategy, "rate", at)
        concurrency = cap or 0
    else:
        raise UserError(f"{at}.type_: unknown strategy {kind!r}")
    m = b.get("metrics")
    if not isinstance(m, Mapping):
        raise UserError(f"{where}.metrics: missing")
    totals = m.get("request_totals") or b.get("request_totals")
    if not isinstance(totals, Mapping):
        raise UserError(f"{where}.metrics.request_totals: missing")
    ok = _int(totals, "successful", f"{where}.metrics.request_totals")
    failed = _int(totals, "errored", f"{where}.metrics.request_totals", default=0)
    start = b.get("start_time")
    return LevelResult(
        concurrency=concurrency or (0 if rate is not None else ok + failed), rate=rate, requests_ok=ok, requests_failed=failed,
        duration_s=_num(b, "duration", where, default=0.0) or _span(b, where),
        output_tokens=round(_g_sum(m, "output_token_count", where)),
        input_tokens=round(_g_sum(m, "prompt_token_count", where)),
        # Over the successful requests, as specmon's own levels and guidellm's CSV count them (guidellm's console
        # table shows the "total" figure, which counts errored and cut-off requests too).
        output_throughput=_g_mean(m, "output_tokens_per_second", where),
        request_throughput=_g_mean(m, "requests_per_second", where),
        total_throughput=_g_mean(m, "tokens_per_second", where),
        ttft_ms=_g_stats(m, "time_to_first_token_ms", where),
        tpot_ms=_g_stats(m, "inter_token_latency_ms", where),   # guidellm's ITL is per token: specmon's TPOT
        itl_ms=Stats(),
        e2e_ms=_g_stats(m, "request_latency", where, scale=1000.0),   # seconds
        tokens_per_chunk=_g_opt_mean(m, "output_tokens_per_iteration", where),
        achieved_concurrency=_g_opt_mean(m, "request_concurrency", where),
        client=ClientHealth(),
        started_at=_iso(start) if isinstance(start, (int, float)) and not isinstance(start, bool) else None,
    )


def _span(b: Mapping[str, Any], where: str) -> float:
    return _num(b, "end_time", where) - _num(b, "start_time", where)


def _g_dist(m: Mapping[str, Any], name: str, where: str, status: str) -> Mapping[str, Any] | None:
    d = m.get(name)
    if d is None:
        return None
    if not isinstance(d, Mapping) or not isinstance(d.get(status), Mapping):
        raise UserError(f"{where}.metrics.{name}.{status}: expected an object with mean, median, percentiles")
    return d[status]


def _g_mean(m: Mapping[str, Any], name: str, where: str) -> float:
    d = _g_dist(m, name, where, "successful")
    if d is None:
        raise UserError(f"{where}.metrics.{name}: missing (a guidellm report carries it for every benchmark)")
    return _num(d, "mean", f"{where}.metrics.{name}.successful")


def _g_opt_mean(m: Mapping[str, Any], name: str, where: str) -> float | None:
    d = _g_dist(m, name, where, "successful")
    return None if d is None else _opt(d, "mean", f"{where}.metrics.{name}.successful")


def _g_sum(m: Mapping[str, Any], name: str, where: str) -> float:
    d = _g_dist(m, name, where, "successful")
    if d is None:
        raise UserError(f"{where}.metrics.{name}: missing (a guidellm report carries it for every benchmark)")
    return _num(d, "total_sum", f"{where}.metrics.{name}.successful")


def _g_stats(m: Mapping[str, Any], name: str, where: str, scale: float = 1.0) -> Stats:
    d = _g_dist(m, name, where, "successful")
    if d is None:
        return Stats()
    at = f"{where}.metrics.{name}.successful"
    pct = d.get("percentiles") or {}
    if not isinstance(pct, Mapping):
        raise UserError(f"{at}.percentiles: expected an object")

    def scaled(v: float | None) -> float | None:
        return None if v is None else v * scale

    return Stats(scaled(_opt(d, "mean", at)), scaled(_opt(d, "median", at)), scaled(_opt(pct, "p90", f"{at}.percentiles")),
                 scaled(_opt(pct, "p99", f"{at}.percentiles")))


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def lacks_note(result: SweepResult) -> str | None:
    """What a reader of `result` should know: which tool's file it was and what that file does not hold (computed
    from its levels: a vLLM file run with --metric-percentiles 90 has p90, one without e2el has no E2E)."""
    tool = result.meta.tool
    if tool is None or tool not in TOOL_NAMES:
        return None
    levels = result.levels
    lacks = []
    for name, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        stats = [getattr(lv, name) for lv in levels]
        if all(s == Stats() for s in stats):
            lacks.append(label if tool != "guidellm" or name != "itl_ms" else "ITL per chunk (guidellm's ITL is "
                         "specmon's TPOT)")
        else:
            missing = [k for k in ("mean", "p50", "p90", "p99") if all(getattr(s, k) is None for s in stats)]
            if missing:
                lacks.append(f"{label} {'/'.join(missing)}")
    if any(lv.requests_failed is None for lv in levels):
        lacks.append("failed requests (only completed ones are counted)" if tool == "sglang" else
                     "failed requests (neither failed nor num_prompts)")
    for present, what in ((any(lv.tokens_per_chunk is not None for lv in levels), "tokens per chunk"),
                          (any(lv.achieved_concurrency is not None for lv in levels), "achieved concurrency"),
                          (any(lv.accept_length is not None for lv in levels), "speculative accept length")):
        if not present:
            lacks.append(what)
    lacks.append("client health")
    return f"{result.path}: read as {TOOL_NAMES[tool]} output; it has no {', '.join(lacks)} (shown as -)"


# --- field checks --------------------------------------------------------------------------------------------
_MISSING = object()
# No figure of a benchmark reaches this (a count, tokens, milliseconds, tokens/s): beyond it a value is a broken file.
ABSURD = 1e12
# A cap on concurrent requests beyond any load generator's (max_concurrency 1e18 is a broken file).
MAX_CONCURRENCY = 10_000_000


def _value(d: Mapping[str, Any], key: str, where: str, default: Any, expected: str) -> Any:
    """d[key], or `default` where it is absent or null; a required one missing names the field."""
    v = d.get(key)
    if v is None:
        if default is _MISSING:
            raise UserError(f"{where}: {key}: missing; expected {expected}")
        return default
    return v


def _bounded(v: Any, key: str, where: str, expected: str) -> float:
    """A number from a file: finite, >= 0 and below ABSURD, else one line naming the file (line) and field."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise UserError(f"{where}: {key} must be {expected}, got {v!r}")
    if not math.isfinite(v) or v < 0 or v > ABSURD:
        raise UserError(f"{where}: {key} is {_plain(v)}; expected {expected} (a finite number from 0 to {ABSURD:g})")
    return float(v)


def _plain(v: float) -> str:
    """A refused number as the file wrote it (NaN, Infinity), never Python's nan/inf."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _num(d: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> float:
    return _bounded(_value(d, key, where, default, "a number"), key, where, "a number")


def _positive(d: Mapping[str, Any], key: str, where: str) -> float:
    v = _num(d, key, where)
    if v <= 0:
        raise UserError(f"{where}: {key} is {v:g}; expected a time > 0 (seconds)")
    return v


def _int(d: Mapping[str, Any], key: str, where: str, default: Any = _MISSING) -> int:
    v = _value(d, key, where, default, "an integer")
    n = _bounded(v, key, where, "a count (an integer >= 0)")
    if not n.is_integer():
        raise UserError(f"{where}: {key} must be a count (an integer >= 0), got {v!r}")
    return int(n)


def _opt(d: Mapping[str, Any], key: str, where: str) -> float | None:
    v = d.get(key)
    return None if v is None else _bounded(v, key, where, "a number or null")


# ---------------------------------------------------------------------------------------------------- writing
def vllm_runs(result: SweepResult) -> list[tuple[str, dict[str, Any]]]:
    """A `vllm bench sweep serve` output folder of `result`: per load, BENCH-<overrides>/run=N.json (a `vllm bench
    serve --save-result` object, one per repeat, with run_number and the overrides as the sweep adds them) and
    BENCH-<overrides>/summary.json (the list of its runs: what `vllm bench sweep plot` reads). Paths are relative.

    Fields vLLM writes that specmon does not measure (std, peak output tok/s, peak concurrent requests) are left out
    rather than made up.
    """
    meta = result.meta
    model = meta.model or ""
    date = _compact_date(meta.created_at)
    backend = "openai-chat" if meta.workload.get("api", "chat") == "chat" else "openai"
    folders: dict[str, list[dict[str, Any]]] = {}
    for lv in result.levels:
        obj: dict[str, Any] = {
            "date": date, "endpoint_type": backend, "backend": backend, "label": meta.label, "model_id": model,
            "tokenizer_id": model,
            # Unknown failures (another tool's file that did not count them) are left out, as older vLLM files do.
            **({} if lv.requests_failed is None else {"num_prompts": lv.requests_ok + lv.requests_failed}),
            "request_rate": "inf" if lv.rate is None else lv.rate,
            "burstiness": float(meta.workload.get("burstiness") or 1.0), "max_concurrency": lv.concurrency or None,
            "duration": lv.duration_s, "completed": lv.requests_ok,
            **({} if lv.requests_failed is None else {"failed": lv.requests_failed}),
            "total_input_tokens": lv.input_tokens, "total_output_tokens": lv.output_tokens,
            "request_throughput": lv.request_throughput, "request_goodput": lv.goodput,
            "output_throughput": lv.output_throughput, "total_token_throughput": lv.total_throughput,
        }
        for name, (stem, _) in _FLAT_METRICS.items():
            obj.update(_flat_keys(getattr(lv, name), stem))
        if lv.accept_length is not None:
            obj["spec_decode_acceptance_length"] = lv.accept_length
        if lv.accept_rate is not None:
            obj["spec_decode_acceptance_rate"] = lv.accept_rate * 100.0
        overrides = ({"request_rate": lv.rate} if lv.rate is not None else {}) | {"max_concurrency": lv.concurrency or None}
        folder = "BENCH-" + "-".join(f"{k}={'none' if v is None else f'{v:g}'}" for k, v in overrides.items())
        runs = folders.setdefault(folder, [])
        runs.append(obj | {"run_number": len(runs)} | overrides)
    out: list[tuple[str, Any]] = []
    for folder, runs in folders.items():
        out += [(f"{folder}/run={run['run_number']}.json", run) for run in runs]
        out.append((f"{folder}/summary.json", runs))
    return out


# What each format has no field for, when the result holds it (said in one line at export).
def cannot_hold(result: SweepResult, fmt: str) -> list[str]:
    levels = result.levels
    has = {
        "tokens per chunk": fmt != "guidellm" and any(lv.tokens_per_chunk is not None for lv in levels),
        "achieved concurrency": fmt == "vllm" and any(lv.achieved_concurrency is not None for lv in levels),
        "goodput": fmt in ("sglang", "guidellm") and any(lv.goodput is not None for lv in levels),
        "failed requests": fmt == "sglang" and any(lv.requests_failed for lv in levels),
        "acceptance rate": fmt in ("sglang", "guidellm") and any(lv.accept_rate is not None for lv in levels),
        "accept length": fmt == "guidellm" and any(lv.accept_length is not None for lv in levels),
        "over-capacity and behind-schedule flags": any(lv.over_capacity or lv.behind for lv in levels),
        "acceptance by prompt category": any(lv.categories for lv in levels),
        "errors by kind": fmt != "guidellm" and any(lv.errors for lv in levels),
        "client health": any(lv.client.chunks for lv in levels),
        "decode tok/s": any(lv.decode_tok_s.mean is not None for lv in levels),
    }
    return [name for name, held in has.items() if held]


def sglang_lines(result: SweepResult) -> list[dict[str, Any]]:
    """One SGLang `bench_serving` JSONL object per level (its keys; `server_info` null: specmon keeps a summary)."""
    meta = result.meta
    w = meta.workload
    backend = "sglang-oai-chat" if w.get("api", "chat") == "chat" else "sglang-oai"
    random = _peer_dataset(w.get("dataset", "random")) == "random" and w.get("input_len") is not None
    out = []
    for lv in result.levels:
        obj: dict[str, Any] = {
            "tag": meta.label, "backend": backend, "dataset_name": _peer_dataset(w.get("dataset", "random")),
            "request_rate": math.inf if lv.rate is None else lv.rate, "max_concurrency": lv.concurrency or None,
            "sharegpt_output_len": None,
            # Honest lengths: the configured ones for random prompts; for a prompt set (the built-in prompts, a
            # file), the mean the requests really had, from the token counts.
            "random_input_len": w.get("input_len") if random else _mean_len(lv.input_tokens, lv.requests_ok),
            "random_output_len": w.get("output_len") if random else _mean_len(lv.output_tokens, lv.requests_ok),
            "random_range_ratio": w.get("input_range", 0.0), "server_info": None,
            "duration": lv.duration_s, "completed": lv.requests_ok, "total_input_tokens": lv.input_tokens,
            "total_output_tokens": lv.output_tokens,
            "request_throughput": lv.request_throughput,
            "input_throughput": lv.input_tokens / lv.duration_s if lv.duration_s > 0 else 0.0,
            "output_throughput": lv.output_throughput, "total_throughput": lv.total_throughput,
        }
        for name, (_, stem) in _FLAT_METRICS.items():
            obj.update(_flat_keys(getattr(lv, name), stem))
        obj["concurrency"] = lv.achieved_concurrency
        if lv.accept_length is not None:
            obj["accept_length"] = lv.accept_length
        out.append(obj)
    return out


def _mean_len(tokens: int, requests: int) -> int | None:
    return round(tokens / requests) if requests else None


def _peer_dataset(name: object) -> str:
    """specmon's dataset as the peers name theirs: random and sharegpt alike, a prompt file (and the built-in
    set) as "custom"."""
    return name if name in ("random", "sharegpt") else "custom"


def _flat_keys(s: Stats, stem: str) -> dict[str, float | None]:
    # vLLM's names for a run with --metric-percentiles 90,99 (SGLang writes these and more).
    return {f"mean_{stem}_ms": s.mean, f"median_{stem}_ms": s.p50, f"p90_{stem}_ms": s.p90, f"p99_{stem}_ms": s.p99}


def _compact_date(iso: str) -> str:
    # vLLM's %Y%m%d-%H%M%S from specmon's ISO-8601 UTC time.
    digits = re.sub(r"\D", "", iso)[:14]
    return f"{digits[:8]}-{digits[8:14]}" if len(digits) == 14 else ""


