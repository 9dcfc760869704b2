"""SGLang's `bench_serving` JSONL, read and written. Pure.

One flat JSON object per line per run, keys as vLLM's but `total_throughput`, `mean/median/pNN_e2e_latency_ms`,
`concurrency` (Little's law), `accept_length`, no `failed` (only completed requests are counted); the served model in
`server_info.model_path` (behind the prefill/decode router, each side's). Written with its field names and units, as
`bench_serving` appends them (`server_info` null: specmon keeps a summary).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from specmon.model.sweeps.formats.base import NO_PEER_FIELD, peer_dataset
from specmon.model.sweeps.formats.flat import FlatRunFormat
from specmon.model.sweeps.results import SweepResult
from specmon.model.sweeps.sweepstats import RequestRecord


class SglangBench(FlatRunFormat):
    name = "sglang"
    tool = "SGLang bench_serving"
    stems = {"ttft_ms": "ttft", "tpot_ms": "tpot", "itl_ms": "itl", "e2e_ms": "e2e_latency"}
    total_key = "total_throughput"
    concurrency_key = "concurrency"
    accept_length_key = "accept_length"
    no_field_for = NO_PEER_FIELD | {"tokens per chunk", "goodput", "failed requests", "acceptance rate",
                                    "errors by kind"}
    out_suffix = ".sglang.jsonl"
    failed_lacked = "failed requests (only completed ones are counted)"

    def claims(self, obj: Mapping[str, Any]) -> bool:
        return super().claims(obj) and ("total_throughput" in obj or "mean_e2e_latency_ms" in obj
                                        or "server_info" in obj)

    def model(self, o: Mapping[str, Any]) -> Any:
        """The served model: `server_info.model_path`; behind SGLang's prefill/decode router `server_info` holds each
        side's own server_info under `prefill` and `decode` instead: their model when all of them name the same
        one."""
        info = o.get("server_info")
        if not isinstance(info, Mapping):
            return None
        if "model_path" in info:
            return info["model_path"]
        sides = [s for key in ("prefill", "decode") if isinstance(info.get(key), list) for s in info[key]]
        models = {s.get("model_path") for s in sides if isinstance(s, Mapping)}
        return models.pop() if len(models) == 1 else None

    def write(self, result: SweepResult, records: Sequence[RequestRecord]) -> list[tuple[str, str]]:
        """One `bench_serving` JSONL line per level; SGLang writes Python's json (an uncapped request rate is
        `Infinity`), and so does this, for its readers."""
        meta = result.meta
        w = meta.workload
        backend = "sglang-oai-chat" if w.get("api", "chat") == "chat" else "sglang-oai"
        random = peer_dataset(w.get("dataset", "random")) == "random" and w.get("input_len") is not None
        lines = []
        for lv in result.levels:
            obj: dict[str, Any] = {
                "tag": meta.label, "backend": backend, "dataset_name": peer_dataset(w.get("dataset", "random")),
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
            obj.update(self.latency_keys(lv))
            obj["concurrency"] = lv.achieved_concurrency
            if lv.accept_length is not None:
                obj["accept_length"] = lv.accept_length
            lines.append(json.dumps(obj) + "\n")
        return [("", "".join(lines))]


def _mean_len(tokens: int, requests: int) -> int | None:
    return round(tokens / requests) if requests else None
