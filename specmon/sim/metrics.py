"""Prometheus text exposition of the simulated server, with each flavour's real metric names."""

from __future__ import annotations

from specmon.sim.engine import Counters, Snapshot
from specmon.sim.options import SimConfig


def _fmt(value: float) -> str:
    return repr(float(value))


def _family(lines: list[str], name: str, kind: str, help_text: str, labels: str, value: float) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    lines.append(f"{name}{{{labels}}} {_fmt(value)}")


def sglang_metrics(cfg: SimConfig, snap: Snapshot, c: Counters) -> str:
    """`sglang:*` gauges and counters (names from sglang/srt/observability/metrics_collector.py)."""
    labels = f'model_name="{cfg.model}",engine_type="unified",tp_rank="0",pp_rank="0"'
    out: list[str] = []
    gauges = [
        ("sglang:num_running_reqs", "The number of running requests.", snap.running),
        ("sglang:num_queue_reqs", "The number of requests in the waiting queue.", snap.queued),
        ("sglang:num_used_tokens", "The number of used tokens.", snap.used_tokens),
        ("sglang:token_usage", "The token usage.", snap.used_tokens / snap.kv_tokens),
        ("sglang:gen_throughput", "The generation throughput (token/s).", snap.last_gen_tps),
        ("sglang:cache_hit_rate", "The prefix cache hit rate.", 0.0),
        ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool.", cfg.kv_tokens),
        ("sglang:context_len", "The context length.", cfg.context_length),
        ("sglang:is_cuda_graph", "Whether the batch is using CUDA graph.", 1.0),
    ]
    if cfg.speculative:
        accept = snap.last_accept_len if snap.last_accept_len is not None else 0.0
        gauges += [
            ("sglang:spec_accept_length", "The average acceptance length of speculative decoding.", accept),
            ("sglang:spec_accept_rate", "The average acceptance rate of speculative decoding.",
             (accept - 1.0) / cfg.spec_steps if accept else 0.0),
            ("sglang:spec_num_steps", "The number of speculative decoding steps.", cfg.spec_steps),
            ("sglang:spec_num_draft_tokens", "The number of speculative draft tokens.", cfg.spec_steps + 1),
        ]
    for name, help_text, value in gauges:
        _family(out, name, "gauge", help_text, labels, value)
    counters = [
        ("sglang:prompt_tokens_total", "Number of prefill tokens processed.", c.prompt_tokens),
        ("sglang:generation_tokens_total", "Number of generation tokens processed.", c.generation_tokens),
        ("sglang:num_requests_total", "Number of requests processed.", c.requests),
        ("sglang:num_retracted_requests_total", "Total number of retracted requests.", c.preemptions),
    ]
    if cfg.speculative:
        counters.append(("sglang:spec_verify_calls_total", "Number of speculative verify calls.", c.spec_verify_calls))
    for name, help_text, value in counters:
        _family(out, name, "counter", help_text, labels, value)
    return "\n".join(out) + "\n"


def vllm_metrics(cfg: SimConfig, snap: Snapshot, c: Counters) -> str:
    """`vllm:*` gauges and counters (names from vllm/v1/metrics/loggers.py and v1/spec_decode/metrics.py)."""
    labels = f'engine="0",model_name="{cfg.model}"'
    out: list[str] = []
    _family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", labels, snap.running)
    _family(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", labels, snap.queued)
    _family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", labels,
            snap.used_tokens / snap.kv_tokens)
    _family(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels, c.prompt_tokens)
    _family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", labels, c.generation_tokens)
    _family(out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", labels,
            c.preemptions)
    if cfg.speculative:
        _family(out, "vllm:spec_decode_num_drafts_total", "counter", "Number of spec decoding drafts.", labels, c.spec_verify_calls)
        _family(out, "vllm:spec_decode_num_draft_tokens_total", "counter", "Number of draft tokens.", labels, c.spec_draft_tokens)
        _family(out, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Number of accepted tokens.", labels,
                c.spec_accepted_tokens)
        name = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
        out.append(f"# HELP {name} Accepted tokens per draft position.")
        out.append(f"# TYPE {name} counter")
        for pos, count in enumerate(c.spec_accepted_per_pos):
            out.append(f'{name}{{{labels},position="{pos}"}} {_fmt(count)}')
    return "\n".join(out) + "\n"


def metrics_text(cfg: SimConfig, snap: Snapshot, c: Counters) -> str:
    """The /metrics body for `cfg.flavor`."""
    return sglang_metrics(cfg, snap, c) if cfg.flavor == "sglang" else vllm_metrics(cfg, snap, c)
