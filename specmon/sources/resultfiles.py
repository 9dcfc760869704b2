"""Result files and folders read from disk: specmon's own, other load generators' (the formats of
specmon.model.sweeps.formats), a `vllm bench sweep serve` folder walked, and a sweep's per-request records.
`read_text` is the one reading of such a file: what cannot be read is one UserError naming the file (and line)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.sweeps.formats import VLLM, detect, parse_any_results
from specmon.model.sweeps.formats.base import EXPECTED, Located, check_run_count, json_value, located
from specmon.model.sweeps.formats.guidellm_report import parse_records
from specmon.model.sweeps.formats.vllm import SUMMARY, is_run_file, serve_part
from specmon.model.sweeps.results import SweepResult, results_from_text
from specmon.model.sweeps.sweepstats import RequestRecord
from specmon.model.text.textfile import NotTextError, read_capped

# guidellm keeps every request in its report: a long run's file is large, but a result file, never gigabytes.
MAX_FILE_BYTES = 1 << 30
MAX_RECORDS_BYTES = 1 << 32   # a long sweep's records file: a line per request


def read_any_results(path: str | os.PathLike[str]) -> SweepResult:
    """Read a result file of specmon, vLLM, SGLang or guidellm (or a directory of vLLM result files).

    Bad or unknown content raises UserError naming the file (and line or field) and what was expected.
    """
    p = Path(path)
    if p.is_dir():
        return _read_vllm_dir(p)
    return parse_any_results(read_text(p), str(p))


def read_results(path: str | os.PathLike[str]) -> SweepResult:
    """A result file written by `specmon sweep` (finished levels only, in file order)."""
    return results_from_text(read_text(path, "a specmon result file"), str(path))


def serve_grid(path: str | os.PathLike[str]) -> list[SweepResult]:
    """A `vllm bench sweep serve` output folder of several server settings as a grid: one sweep per combination,
    labelled with its settings, in the order vLLM ran them. [] for anything else (a file, one combination, no
    combinations)."""
    d = Path(path)
    if not d.is_dir():
        return []
    summaries = sorted(d.rglob(SUMMARY))
    check_run_count(len(summaries), str(d))
    groups: dict[str, list[Located]] = {}
    for f in summaries:
        serve = serve_part(f.parent.name)
        if serve is not None:
            groups.setdefault(serve, []).extend(VLLM.summary_runs(json_value(read_text(f), str(f)), str(f)))
    return VLLM.grid(groups, str(d)) if len(groups) >= 2 else []


def read_records(path: str) -> list[RequestRecord]:
    """A sweep's per-request records file (one JSON object a line); a bad line is one error naming it."""
    text = read_text(path, "a sweep's per-request records file", MAX_RECORDS_BYTES,
                     missing="the sweep's per-request records; a guidellm report is built from them")
    return parse_records(text, path)


def _read_vllm_dir(d: Path) -> SweepResult:
    """A `--result-dir` of `vllm bench serve` files, or a `vllm bench sweep serve` output folder (its summaries; runs
    of a combination without one), at any depth: one sweep, repeats kept."""
    summaries = sorted(d.rglob(SUMMARY))
    runs: list[tuple[str, Mapping[str, Any]]] = []
    torn: tuple[str, ...] = ()
    check_run_count(len(summaries), str(d))
    for f in summaries:
        text = read_text(f)
        check_run_count(len(runs) + text.count(VLLM.run_mark), str(d))
        runs += VLLM.folder_summary_runs(text, str(f), f.parent.name)
    summed = {f.parent for f in summaries}
    files = sorted(f for f in d.rglob("*.json") if f.parent not in summed and is_run_file(f.name))
    check_run_count(len(runs) + len(files), str(d))
    for f in files:
        text = read_text(f)
        check_run_count(len(runs) + text.count(VLLM.run_mark), str(d))
        fmt, objs, cut = detect(text, str(f))
        if fmt is not VLLM:
            raise UserError(f"{f}: not a `vllm bench serve --save-result` file (a directory is read as one vLLM "
                            f"sweep); found {fmt.tool} output")
        runs += located(objs, str(f))
        torn += cut
    if not runs:
        raise UserError(f"{d}: no result files in it; expected a directory of `vllm bench serve --save-result` "
                        "files or a `vllm bench sweep serve` output folder")
    return VLLM.result(runs, str(d), label=d.name, torn=torn)


def read_text(path: str | os.PathLike[str], expected: str = EXPECTED, max_bytes: int = MAX_FILE_BYTES,
              missing: str = "") -> str:
    """A result, records or state file's text; UserError naming the file when it is missing (with `missing`, what
    it was for), is no text file of this kind (the line, and what was `expected`) or cannot be read."""
    try:
        return read_capped(path, max_bytes).decode("utf-8")
    except FileNotFoundError:
        raise UserError(f"{path}: no such file" + (f" ({missing})" if missing else "")) from None
    except NotTextError as exc:
        raise UserError(f"{path}:{exc.line}: {exc}; expected {expected}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
