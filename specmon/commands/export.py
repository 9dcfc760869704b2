"""`specmon export RESULT --format vllm|sglang|guidellm [--out PATH]`: a result in the file format of vLLM's,
SGLang's or guidellm's benchmark.

vllm: a `vllm bench sweep serve` output folder in the directory --out (default: RESULT's name without its suffix,
plus `-vllm`, next to it): per load a folder BENCH-max_concurrency=C (or BENCH-request_rate=R-max_concurrency=C)
holding run=0.json (a `vllm bench serve --save-result` result; run=1.json... for repeats) and summary.json, the list
`vllm bench sweep plot` reads. sglang: one JSONL file with a line per level, as `bench_serving` appends them
(default: RESULT's name with `.sglang.jsonl`); input and output lengths are the configured ones for random prompts,
else the requests' mean. guidellm: one benchmarks report (JSON, default: RESULT's name with `.guidellm.json`) built
from the sweep's per-request records (the records file its meta line names, or one of that name beside RESULT), each
metric computed from the requests as guidellm computes it. Field names and definitions are the tools' (`output_throughput`,
`mean/median/p90/p99_ttft_ms`, `tpot`, `itl`, `e2el`, the accept length); what a format has no field for is said in
one line; nothing existing is overwritten.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from specmon.errors import UserError
from specmon.model.sweeps.formats import BY_NAME
from specmon.model.sweeps.results import SweepResult
from specmon.sources.resultfiles import read_any_results, read_records

FORMATS = tuple(BY_NAME)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("export", help="write a result in vLLM's, SGLang's or guidellm's benchmark result format",
                              description=__doc__)
    p.add_argument("result", metavar="RESULT", help="a result file (specmon's, or any file `specmon compare` reads)")
    p.add_argument("--format", choices=FORMATS, required=True, help="vllm (a directory of JSON files, one per "
                   "level), sglang (one JSONL file) or guidellm (one report JSON, from the per-request records)")
    p.add_argument("--out", type=Path, metavar="PATH", help="the directory (vllm) or file (sglang, guidellm) "
                   "to write")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = read_any_results(args.result)
    if not result.levels:
        raise UserError(f"{args.result}: no finished level to export")
    src = Path(args.result)
    stem = src.name[: -len(src.suffix)] if src.suffix else src.name
    fmt = BY_NAME[args.format]
    records = read_records(str(_records_file(result, src))) if fmt.needs_records else []
    out: Path = args.out or src.with_name(stem + fmt.out_suffix)
    files = [(out / name if name else out, text) for name, text in fmt.write(result, records)]
    if fmt.out_folder:
        if out.is_symlink() and not out.exists():
            raise UserError(f"{out}: a symbolic link to nothing (it points to {os.readlink(out)}); not followed "
                            "(choose another --out)")
        if out.exists() and not out.is_dir():
            raise UserError(f"{out}: exists and is not a directory")
    taken = [str(path) for path, _ in files if path.exists()]
    if taken:
        raise UserError(f"{taken[0]}: exists; not overwritten (choose another --out)")
    lost = fmt.cannot_hold(result)
    if lost:
        print(f"specmon: note: the {args.format} format has no field for: {', '.join(lost)} (not written)",
              file=sys.stderr)
    for path, text in files:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"{path.parent}: cannot create the directory ({exc.strerror or exc})") from None
        _write_new(path, text)
        print(path)
    return 0


def _records_file(result: SweepResult, src: Path) -> Path:
    """The sweep's per-request records (a format written from them needs them): where its meta line says, else the
    file of that name beside the result."""
    if result.meta.tool is not None or not result.meta.records:
        raise UserError(f"{src}: no per-request records (a guidellm report is built from a specmon sweep's "
                        "records file, which this result does not name)")
    named = Path(result.meta.records)
    beside = src.with_name(named.name)
    return named if named.is_file() or not beside.is_file() else beside


def _write_new(path: Path, text: str) -> None:
    """Create `path` with `text`; an existing file is refused (mode "x"), and a failed write leaves nothing."""
    try:
        with open(path, "x", encoding="utf-8") as f:
            try:
                f.write(text)
            except OSError:
                path.unlink(missing_ok=True)
                raise
    except FileExistsError:
        raise UserError(f"{path}: exists; not overwritten (choose another --out)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot write ({exc.strerror or exc})") from None
