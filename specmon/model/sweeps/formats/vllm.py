"""vLLM's `vllm bench serve --save-result` files and `vllm bench sweep serve` folders, read and written. Pure.

Read: one flat JSON object per run, keys `completed`, `failed`, `duration`, `output_throughput`,
`total_token_throughput`, `mean/median/pNN_{ttft,tpot,itl,e2el}_ms`, `max_concurrency`, `request_rate`...;
`--append-result` puts several on separate lines; a `--result-dir` of such files is one sweep; a sweep folder's
summary.json is the list of its runs (each with run_number and the overrides). Which files of a folder are runs,
and how a folder's SERVE- name is read, are here; walking the folder is specmon.sources.resultfiles's.

Written: a `vllm bench sweep serve` folder, per load BENCH-.../run=N.json (`--save-result` objects) and the
summary.json `vllm bench sweep plot` reads.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from specmon.errors import UserError
from specmon.model.sweeps.formats.base import EXPECTED, NO_PEER_FIELD, Located, count, json_value
from specmon.model.sweeps.formats.flat import PER_RUN_STRINGS, SERVE_KEY, FlatRunFormat
from specmon.model.sweeps.results import SweepResult
from specmon.model.sweeps.sweepstats import RequestRecord

# `vllm bench sweep serve` leaves, per parameter combination, a folder of run=N.json (one per --num-runs repeat),
# warmup.json, *.failure.json and summary.json (the list of its runs, as `vllm bench sweep plot` reads them).
SUMMARY = "summary.json"
_NOT_RUNS = ("warmup.json", SUMMARY)


class VllmBench(FlatRunFormat):
    name = "vllm"
    tool = "vllm bench serve"
    stems = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2el"}
    total_key = "total_token_throughput"
    goodput_key = "request_goodput"
    accept_length_key = "spec_decode_acceptance_length"
    accept_rate_key = "spec_decode_acceptance_rate"
    no_field_for = NO_PEER_FIELD | {"tokens per chunk", "achieved concurrency", "errors by kind"}
    out_folder = True
    out_suffix = "-vllm"

    def claims(self, obj: Mapping[str, Any]) -> bool:
        return super().claims(obj) and ("total_token_throughput" in obj or "endpoint_type" in obj
                                        or "mean_e2el_ms" in obj or "tokenizer_id" in obj)

    def labels(self, o: Mapping[str, Any]) -> dict[str, str]:
        """A run's string labels (what `--metadata k=v` adds, the backend, the label)."""
        return {k: v for k, v in o.items() if isinstance(v, str) and k not in PER_RUN_STRINGS}

    def failed(self, o: Mapping[str, Any], completed: int, where: str) -> int | None:
        """`failed`, else (older files have none) the prompts sent less those completed, else unknown (None)."""
        if o.get("failed") is not None:
            return count(o, "failed", where)
        if o.get("num_prompts") is None:
            return None
        sent = count(o, "num_prompts", where)
        if sent < completed:
            raise UserError(f"{where}: num_prompts is {sent}, below completed {completed}; expected the number of "
                            "prompts sent")
        return sent - completed

    def derived(self, runs: Sequence[Located]) -> list[str]:
        said = super().derived(runs)
        if any(o.get("failed") is None and o.get("num_prompts") is not None for _, o in runs):
            said.insert(0, "failed requests derived as num_prompts - completed (the file has no failed)")
        return said

    def read_layout(self, text: str, path: str) -> SweepResult | None:
        if not text.lstrip().startswith("["):   # a `vllm bench sweep serve` summary.json
            return None
        return self.result(self.summary_runs(json_value(text, path), path), path)

    def summary_runs(self, value: Any, path: str) -> list[Located]:
        """A sweep summary.json: a list of `vllm bench serve` results (each with run_number and the overrides)."""
        if not isinstance(value, list) or not all(isinstance(o, Mapping) and self.claims(o) for o in value):
            raise UserError(f"{path}: not a result file specmon reads; expected {EXPECTED} (a list: a `vllm bench "
                            "sweep serve` summary.json of `vllm bench serve` results)")
        return [(f"{path}[{i}]", o) for i, o in enumerate(value)]

    def folder_summary_runs(self, text: str, path: str, folder: str) -> list[Located]:
        """A combination folder's summary.json runs, each marked with the folder's server settings: one server
        configuration per sweep (runs of another are left out as another workload, not pooled as repeats)."""
        serve = serve_part(folder)
        return [(where, {**o, SERVE_KEY: serve} if serve else o)
                for where, o in self.summary_runs(json_value(text, path), path)]

    def grid(self, groups: Mapping[str, Sequence[Located]], path: str) -> list[SweepResult]:
        """Each server setting's runs as one sweep labelled with its settings, in the order vLLM ran them (the date
        of each one's first run; the folder name where no run has a date)."""
        first_run = {serve: min(str(o.get("date") or "~") for _, o in runs) for serve, runs in groups.items()}
        order = sorted(groups, key=lambda s: (first_run[s], s))
        return [self.result(groups[s], path, label=serve_label(s)) for s in order]

    def write(self, result: SweepResult, records: Sequence[RequestRecord]) -> list[tuple[str, str]]:
        """A `vllm bench sweep serve` output folder of `result`: per load, BENCH-<overrides>/run=N.json (a `vllm bench
        serve --save-result` object, one per repeat, with run_number and the overrides as the sweep adds them) and
        BENCH-<overrides>/summary.json (the list of its runs: what `vllm bench sweep plot` reads).

        Fields vLLM writes that specmon does not measure (std, peak output tok/s, peak concurrent requests) are left
        out rather than made up.
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
            obj.update(self.latency_keys(lv))
            if lv.accept_length is not None:
                obj["spec_decode_acceptance_length"] = lv.accept_length
            if lv.accept_rate is not None:
                obj["spec_decode_acceptance_rate"] = lv.accept_rate * 100.0
            overrides = (({"request_rate": lv.rate} if lv.rate is not None else {})
                         | {"max_concurrency": lv.concurrency or None})
            folder = "BENCH-" + "-".join(f"{k}={'none' if v is None else f'{v:g}'}" for k, v in overrides.items())
            runs = folders.setdefault(folder, [])
            runs.append(obj | {"run_number": len(runs)} | overrides)
        out: list[tuple[str, Any]] = []
        for folder, runs in folders.items():
            out += [(f"{folder}/run={run['run_number']}.json", run) for run in runs]
            out.append((f"{folder}/{SUMMARY}", runs))
        return [(name, json.dumps(obj, indent=4, allow_nan=False) + "\n") for name, obj in out]


def is_run_file(name: str) -> bool:
    """Whether a .json file of a result folder is one run's result (not a warm-up, summary, profile or failure)."""
    return name not in _NOT_RUNS and not name.endswith((".pytorch.json", ".failure.json"))


def serve_part(folder: str) -> str | None:
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


def _compact_date(iso: str) -> str:
    # vLLM's %Y%m%d-%H%M%S from specmon's ISO-8601 UTC time.
    digits = re.sub(r"\D", "", iso)[:14]
    return f"{digits[:8]}-{digits[8:14]}" if len(digits) == 14 else ""
