"""guidellm's benchmarks report, read (JSON, YAML or CSV) and written (JSON). Pure.

Read: `{"benchmarks": [{"config": {"strategy": ...}, "metrics": {NAME: {"successful"|"total": {"mean", "median",
"percentiles": {"p90", "p99"...}}}}}]}` (0.8; 0.5's and the 0.3-era layouts keep the strategy and backend elsewhere),
the same tree as YAML, or the CSV `--output kind=csv` writes. A benchmark sits at its concurrency (`concurrent`
streams, 1 for `synchronous`) or, open loop (`constant`/`poisson`/`async`), at its rate. guidellm's "ITL" is per token:
specmon's TPOT; it has no per-chunk ITL.

Written: the report, from the sweep's per-request records (specmon.model.sweeps.formats.guidellm_report).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.sweeps.formats.base import (
    ABSURD,
    EXPECTED,
    MAX_CONCURRENCY,
    NO_PEER_FIELD,
    PeerFormat,
    axis_workload,
    bounded,
    cap,
    check_run_count,
    count,
    dig,
    iso,
    num,
    opt,
    shown,
)
from specmon.model.sweeps.formats.guidellm_report import NOT_MEASURED, guidellm_report
from specmon.model.sweeps.results import ClientHealth, LevelResult, Stats, SweepMeta, SweepResult
from specmon.model.sweeps.sweepstats import RequestRecord
from specmon.model.text.textfile import loads

_RATE_KINDS = ("constant", "poisson", "async")
# guidellm's CSV report (`--output kind=csv`, 0.8): a three-row header (group, field, unit or statistic) over one
# row per benchmark; distributions of successful requests only, percentiles as a list in _PERCENTILES order.
_CSV_START = "Run Info,"
_PERCENTILES = ("p001", "p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99", "p999")
_YAML_START = re.compile(r"(---\s*)?benchmarks:")


class Guidellm(PeerFormat):
    name = "guidellm"
    tool = "guidellm"
    run_mark = '"generative_benchmark"'   # every benchmark's type_
    per_run = False
    no_field_for = NO_PEER_FIELD | {"goodput", "acceptance rate", "accept length"}
    out_folder = False
    out_suffix = ".guidellm.json"
    needs_records = True
    itl_lacked = "ITL per chunk (guidellm's ITL is specmon's TPOT)"

    def claims(self, obj: Mapping[str, Any]) -> bool:
        return isinstance(obj.get("benchmarks"), list)

    def read_layout(self, text: str, path: str) -> SweepResult | None:
        if not text.startswith(_CSV_START):
            return None
        check_run_count(text.count("\n") - 3, path)   # a three-row header, then a benchmark a row
        return _csv_result(text, path)

    def other_syntax(self, text: str, path: str) -> Mapping[str, Any] | None:
        """A report written as YAML (`--output-path x.yaml`): the same tree as its JSON."""
        if not _YAML_START.match(text):
            return None
        import yaml  # type: ignore[import-untyped]  # a declared dependency, imported only for guidellm YAML

        try:
            obj = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise UserError(f"{path}: not YAML ({str(exc).splitlines()[0]}); expected {EXPECTED}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED}")
        return obj

    def read(self, objs: Sequence[tuple[int, Mapping[str, Any]]], path: str, torn: tuple[str, ...]) -> SweepResult:
        report = objs[0][1]
        benchmarks = report.get("benchmarks")
        if not isinstance(benchmarks, list) or not benchmarks:
            raise UserError(f"{path}: benchmarks: an empty list; a guidellm report needs at least one benchmark")
        levels = _on_one_axis([_level(b, f"{path}: benchmarks[{i}]") for i, b in enumerate(benchmarks)])
        target = _first(report, benchmarks, "target")
        model = _first(report, benchmarks, "model")
        meta = SweepMeta(url=shown(target) or "", model=shown(model), workload=axis_workload(levels),
                         profile=Path(path).stem, created_at=levels[0].started_at or "", tool=self.name)
        return SweepResult(path=path, meta=meta, levels=tuple(levels))

    def write(self, result: SweepResult, records: Sequence[RequestRecord]) -> list[tuple[str, str]]:
        return [("", json.dumps(guidellm_report(result, records), allow_nan=False) + "\n")]

    def cannot_hold(self, result: SweepResult) -> list[str]:
        return super().cannot_hold(result) + list(NOT_MEASURED)


def _on_one_axis(levels: list[LevelResult]) -> list[LevelResult]:
    """The levels in order of load. A `sweep` profile brackets its rates with a synchronous and a throughput
    benchmark: they sit on the rate axis at the request rate they achieved, as guidellm itself places them."""
    if any(lv.rate is not None for lv in levels):
        levels = [lv if lv.rate is not None else replace(lv, rate=lv.request_throughput) for lv in levels]
    return sorted(levels, key=lambda lv: lv.load)


# --- the CSV report ------------------------------------------------------------------------------------------------
def _csv_result(text: str, path: str) -> SweepResult:
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
        levels.append(_csv_level(cell, where))
    levels = _on_one_axis(levels)
    meta = SweepMeta(url=shown(target) or "", model=shown(model),
                     workload=axis_workload(levels), profile=Path(path).stem, tool="guidellm")
    note = ("token totals are mean x count (a guidellm CSV holds no totals)",)
    return SweepResult(path=path, meta=meta, levels=tuple(levels), notes=note)


def _csv_cell(cell: Mapping[tuple[str, ...], str], key: tuple[str, str, str], where: str) -> float:
    if key not in cell or cell[key] == "":
        raise UserError(f"{where}: column {' / '.join(k for k in key if k)}: missing; expected a guidellm 0.8 CSV report")
    try:
        v = float(cell[key])
    except ValueError:
        raise UserError(f"{where}: column {' / '.join(k for k in key if k)}: {cell[key]!r} is not a number") from None
    return bounded(v, " / ".join(k for k in key if k), where, "a number")


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
    named = dict(zip(_PERCENTILES, pct)) if isinstance(pct, list) and len(pct) == len(_PERCENTILES) else {}
    at = f"{where}: {group} / {field}"
    p90, p99 = (bounded(named[k], f"{k}", at, "a number") * scale if k in named else None for k in ("p90", "p99"))
    return Stats(_csv_cell(cell, (group, field, "Mean"), where) * scale,
                 _csv_cell(cell, (group, field, "Median"), where) * scale, p90, p99)


def _csv_level(cell: Mapping[tuple[str, ...], str], where: str) -> LevelResult:
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
    elif kind in _RATE_KINDS and number is not None and 0 < number <= ABSURD:
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


# --- the JSON (or YAML) report -------------------------------------------------------------------------------------
# Where each guidellm layout keeps the target and model: 0.8's report config (as given) and each benchmark's backend
# config (auto-detected), 0.5's `args`, the 0.3-era worker's backend_*.
def _first(report: Mapping[str, Any], benchmarks: Sequence[Any], name: str) -> str | None:
    places = [dig(report, "config", "spec", "backend", name), dig(report, "args", name)]
    for b in benchmarks:
        places += [dig(b, "config", "backend", name), dig(b, "worker", f"backend_{name}")]
    return next((v for v in places if isinstance(v, str) and v), None)


def _level(b: Any, where: str) -> LevelResult:
    if not isinstance(b, Mapping):
        raise UserError(f"{where}: expected an object")
    strategy = dig(b, "config", "strategy") or dig(b, "args", "strategy")   # v0.8 / v0.3 layouts
    if not isinstance(strategy, Mapping):
        raise UserError(f"{where}.config.strategy: missing (a guidellm benchmark names its strategy)")
    at = f"{where}.config.strategy"
    kind = strategy.get("type_")
    limit = cap(strategy, at)
    rate: float | None = None
    if kind == "synchronous":
        concurrency = 1
    elif kind == "concurrent":
        concurrency = count(strategy, "streams", at)
    elif kind == "throughput":   # everything at once, up to its cap
        concurrency = limit or 0
    elif kind in _RATE_KINDS:
        rate = num(strategy, "rate", at)
        concurrency = limit or 0
    else:
        raise UserError(f"{at}.type_: unknown strategy {kind!r}")
    m = b.get("metrics")
    if not isinstance(m, Mapping):
        raise UserError(f"{where}.metrics: missing")
    totals = m.get("request_totals") or b.get("request_totals")
    if not isinstance(totals, Mapping):
        raise UserError(f"{where}.metrics.request_totals: missing")
    ok = count(totals, "successful", f"{where}.metrics.request_totals")
    failed = count(totals, "errored", f"{where}.metrics.request_totals", default=0)
    start = b.get("start_time")
    return LevelResult(
        concurrency=concurrency or (0 if rate is not None else ok + failed), rate=rate, requests_ok=ok,
        requests_failed=failed,
        duration_s=num(b, "duration", where, default=0.0) or _span(b, where),
        output_tokens=round(_sum(m, "output_token_count", where)),
        input_tokens=round(_sum(m, "prompt_token_count", where)),
        # Over the successful requests, as specmon's own levels and guidellm's CSV count them (guidellm's console
        # table shows the "total" figure, which counts errored and cut-off requests too).
        output_throughput=_mean(m, "output_tokens_per_second", where),
        request_throughput=_mean(m, "requests_per_second", where),
        total_throughput=_mean(m, "tokens_per_second", where),
        ttft_ms=_stats(m, "time_to_first_token_ms", where),
        tpot_ms=_stats(m, "inter_token_latency_ms", where),   # guidellm's ITL is per token: specmon's TPOT
        itl_ms=Stats(),
        e2e_ms=_stats(m, "request_latency", where, scale=1000.0),   # seconds
        tokens_per_chunk=_opt_mean(m, "output_tokens_per_iteration", where),
        achieved_concurrency=_opt_mean(m, "request_concurrency", where),
        client=ClientHealth(),
        started_at=iso(start) if isinstance(start, (int, float)) and not isinstance(start, bool) else None,
    )


def _span(b: Mapping[str, Any], where: str) -> float:
    return num(b, "end_time", where) - num(b, "start_time", where)


def _dist(m: Mapping[str, Any], name: str, where: str, status: str) -> Mapping[str, Any] | None:
    d = m.get(name)
    if d is None:
        return None
    if not isinstance(d, Mapping) or not isinstance(d.get(status), Mapping):
        raise UserError(f"{where}.metrics.{name}.{status}: expected an object with mean, median, percentiles")
    return d[status]


def _mean(m: Mapping[str, Any], name: str, where: str) -> float:
    d = _dist(m, name, where, "successful")
    if d is None:
        raise UserError(f"{where}.metrics.{name}: missing (a guidellm report carries it for every benchmark)")
    return num(d, "mean", f"{where}.metrics.{name}.successful")


def _opt_mean(m: Mapping[str, Any], name: str, where: str) -> float | None:
    d = _dist(m, name, where, "successful")
    return None if d is None else opt(d, "mean", f"{where}.metrics.{name}.successful")


def _sum(m: Mapping[str, Any], name: str, where: str) -> float:
    d = _dist(m, name, where, "successful")
    if d is None:
        raise UserError(f"{where}.metrics.{name}: missing (a guidellm report carries it for every benchmark)")
    return num(d, "total_sum", f"{where}.metrics.{name}.successful")


def _stats(m: Mapping[str, Any], name: str, where: str, scale: float = 1.0) -> Stats:
    d = _dist(m, name, where, "successful")
    if d is None:
        return Stats()
    at = f"{where}.metrics.{name}.successful"
    pct = d.get("percentiles") or {}
    if not isinstance(pct, Mapping):
        raise UserError(f"{at}.percentiles: expected an object")

    def scaled(v: float | None) -> float | None:
        return None if v is None else v * scale

    return Stats(scaled(opt(d, "mean", at)), scaled(opt(d, "median", at)), scaled(opt(pct, "p90", f"{at}.percentiles")),
                 scaled(opt(pct, "p99", f"{at}.percentiles")))
