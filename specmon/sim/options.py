"""Command-line options of `specmon sim` (shared by `specmon sim` and `python -m specmon.sim`)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace

from specmon.errors import UserError
from specmon.model.workload.datasets import BUILTIN_CATEGORIES
from specmon.sim import model as throughput

FLAVORS = ("sglang", "vllm")
DESCRIPTION = (
    "Simulated SGLang/vLLM inference server: real-format launch log on stdout, OpenAI-compatible HTTP API, "
    "a deterministic continuous-batching throughput model, and fault injection. It models the settings a tuning "
    "grid varies: more draft steps (--speculative-num-steps) accept more tokens per step, with diminishing returns, "
    "at a higher cost per step; a wider --speculative-eagle-topk costs compute per step and raises acceptance "
    "slightly; a smaller --mem-fraction-static leaves a smaller KV cache, so requests queue at high load."
)


@dataclass(frozen=True)
class SimConfig:
    """Everything the simulated server needs, validated."""

    flavor: str = "sglang"
    host: str = "127.0.0.1"
    port: int = 30000
    tp: int = 1
    shards: int = 8
    load_seconds: float = 20.0
    kv_tokens: int = 400_000
    new_token_ratio: float = 1.0      # below 1: the cache is overcommitted and running requests get preempted
    mem_fraction_static: float = 0.88
    spec: str = "none"
    accept_len: float = throughput.DEFAULT_ACCEPT_LEN
    # Built-in prompt category -> accept length for its prompts; other prompts get accept_len.
    accept_by_category: tuple[tuple[str, float], ...] = ()
    spec_steps: int = throughput.REFERENCE_STEPS
    spec_topk: int = 1
    spec_step_cost: float = 1.0
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    context_length: int = 32768
    max_running: int = throughput.DEFAULT_MAX_RUNNING
    time_scale: float = 1.0
    decode_log_interval: int = 40
    stats_interval: float = 10.0
    no_metrics: bool = False          # /metrics answers 404, as SGLang's does without --enable-metrics
    metrics_from: str | None = None   # /metrics answers this file's bytes instead (a hostile server, for tests)
    crash_at_shard: int | None = None
    hang_after_crash: bool = False
    oom_at: str | None = None
    nccl_timeout: bool = False
    stall_at_shard: int | None = None
    slow_health: float = 0.0
    exit_zero_after: float | None = None
    ignore_sigterm: bool = False
    spawn_child: bool = False
    nnodes: int = 1
    node_rank: int = 0
    dist_init_addr: str | None = None

    @property
    def worker_node(self) -> bool:
        """A node of a multi-node server other than rank 0: it loads its share and serves no HTTP."""
        return self.node_rank > 0

    @property
    def speculative(self) -> bool:
        return self.spec == "eagle3"

    def step_model(self) -> throughput.StepModel:
        """The throughput model these options select."""
        if self.speculative:
            return throughput.eagle3_model(self.accept_len, self.max_running, self.spec_steps, self.spec_step_cost,
                                           self.spec_topk)
        return throughput.baseline_model(self.max_running)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every `specmon sim` option to `parser`."""
    d = SimConfig()
    p = parser.add_argument
    p("--flavor", choices=FLAVORS, default=d.flavor, help="which server to imitate: log format, endpoints, metric names")
    p("--host", default=d.host, help="address to bind (default %(default)s)")
    p("--port", type=int, default=d.port, help="HTTP port, bound only once the weights are loaded (default %(default)s)")
    p("--tp", type=int, default=d.tp, help="tensor-parallel size: one log line per rank where the real server prints one")
    p("--shards", type=int, default=d.shards, help="number of checkpoint shards in the loading progress bar")
    p("--load-seconds", type=float, default=d.load_seconds, help="total weight-loading time in seconds, spread over the shards")
    p("--kv-tokens", type=int, default=None,
      help="KV-cache capacity in tokens (#tokens / max_total_num_tokens); bounds running requests. Given, it is the "
      "cache outright (as SGLang's --max-total-tokens); else the memory fraction sizes it "
      f"({d.kv_tokens} at {throughput.REFERENCE_MEM_FRACTION:g})")
    p("--new-token-ratio", type=float, default=d.new_token_ratio, metavar="R",
      help="admission counts R x max_tokens of each request's output (0 < R <= 1; SGLang's new_token_ratio); below 1 "
      "the cache is overcommitted and, when the running requests outgrow it, the newest are preempted back to the "
      "queue (vllm:num_preemptions_total, sglang:num_retracted_requests_total)")
    p("--mem-fraction-static", type=float, default=d.mem_fraction_static,
      help=f"GPU memory share of weights + KV cache (0 < F <= 1). Without --kv-tokens it sizes the cache: the weights "
      f"hold {throughput.WEIGHTS_FRACTION:g}, so the cache is {d.kv_tokens} x (F - {throughput.WEIGHTS_FRACTION:g})/"
      f"({throughput.REFERENCE_MEM_FRACTION:g} - {throughput.WEIGHTS_FRACTION:g}) tokens (F above "
      f"{throughput.WEIGHTS_FRACTION:g}); smaller: fewer requests at once, queueing at high load (default %(default)s)")
    p("--spec", choices=("none", "eagle3"), default=d.spec, help="speculative decoding: none or eagle3 (several tokens per step)")
    p("--accept-len", type=float, default=d.accept_len,
      help="EAGLE-3 mean tokens per step per request, including the bonus token, at 3 draft steps and top-k 1 "
      "(1 .. 4); other steps and top-k derive theirs from the per-token acceptance rate it implies")
    p("--accept-by-category", metavar="CAT=LEN,...", type=_category_lengths, default=(),
      help="EAGLE-3 accept length by prompt category of the built-in prompt set (" + ",".join(BUILTIN_CATEGORIES)
      + "), e.g. code=3.4,chat=2.2; a prompt the sim does not recognise, or of a category not listed, gets --accept-len")
    p("--spec-steps", "--speculative-num-steps", dest="spec_steps", type=int, default=d.spec_steps,
      help="EAGLE-3 draft steps (draft tokens = steps+1): more steps accept more tokens per step with diminishing "
      "returns, and cost more per step (drafting, and verifying steps+1 tokens per request) (default %(default)s)")
    p("--speculative-eagle-topk", dest="spec_topk", type=int, default=d.spec_topk,
      help="EAGLE-3 draft branches per step: each extra one costs compute per step (most at a large batch) and raises "
      "acceptance slightly (default %(default)s)")
    p("--spec-step-cost", type=float, default=d.spec_step_cost, help="EAGLE-3 step (draft + verify) time, times the default; lower keeps speculation ahead longer")
    p("--model", default=d.model, help="model name: args dump, /v1/models and responses")
    p("--context-length", type=int, default=d.context_length, help="max model length (context_len / max_model_len)")
    p("--max-running-requests", dest="max_running", type=int, default=d.max_running, help="largest decode batch; more requests queue (default %(default)s)")
    p("--time-scale", type=float, default=d.time_scale, help="multiplies every startup duration (tests use small values)")
    p("--decode-log-interval", type=int, default=d.decode_log_interval, help="SGLang: a 'Decode batch' line every N decode steps")
    p("--stats-interval", type=float, default=d.stats_interval, help="vLLM: seconds between 'Engine 000:' stats lines (VLLM_LOG_STATS_INTERVAL)")
    p("--no-metrics", action="store_true", help="serve no /metrics (404), as SGLang without --enable-metrics")
    m = parser.add_argument_group("multi-node (SGLang's flags)")
    m.add_argument("--nnodes", type=int, default=d.nnodes, help="number of nodes the server spans")
    m.add_argument("--node-rank", type=int, default=d.node_rank,
                   help="this node's rank; a rank >= 1 prints no shard bar or ready line and serves no HTTP")
    m.add_argument("--dist-init-addr", metavar="ADDR:PORT", help="rank 0's rendezvous address (needed with --nnodes > 1)")
    f = parser.add_argument_group("fault injection")
    f.add_argument("--crash-at-shard", type=int, metavar="K", help="crash with a Python traceback while loading shard K; exit 1")
    f.add_argument("--hang-after-crash", action="store_true",
                   help="with --crash-at-shard: print the traceback, then stay alive (as a server whose rank died "
                   "while the others wait forever)")
    f.add_argument("--oom-at", choices=("kv", "graph"), help="CUDA out-of-memory traceback at KV-cache allocation or CUDA-graph capture; exit 1")
    f.add_argument("--nccl-timeout", action="store_true", help="after the weights load, print the NCCL watchdog timeout lines and exit 1")
    f.add_argument("--stall-at-shard", type=int, metavar="K", help="stop progressing and logging at shard K, but stay alive")
    f.add_argument("--metrics-from", metavar="FILE",
                   help="/metrics answers FILE's bytes, read at each request and sent chunked as uvicorn sends vLLM's "
                   "(/dev/zero: an answer that never ends), instead of the engine's figures")
    f.add_argument("--slow-health", type=float, default=0.0, metavar="S", help="every /health answer takes S seconds")
    f.add_argument("--exit-zero-after", type=float, metavar="S", help="exit with code 0 S seconds after ready, unasked")
    f.add_argument("--ignore-sigterm", action="store_true", help="log and ignore SIGTERM (SIGKILL still works)")
    f.add_argument("--spawn-child", action="store_true", help="start a child process in its own session (setsid) that sleeps forever")
    f.add_argument("--fault-rank", type=int, metavar="R",
                   help="apply the fault options above only on node rank R (one command serves every node)")


def config_from_args(ns: argparse.Namespace) -> SimConfig:
    """Validate parsed options; a bad value raises UserError naming the option."""
    d = SimConfig()
    cfg = SimConfig(
        flavor=ns.flavor, host=ns.host, port=ns.port, tp=ns.tp, shards=ns.shards, load_seconds=ns.load_seconds,
        kv_tokens=d.kv_tokens if ns.kv_tokens is None else ns.kv_tokens,
        new_token_ratio=ns.new_token_ratio, mem_fraction_static=ns.mem_fraction_static, spec=ns.spec, accept_len=ns.accept_len,
        accept_by_category=ns.accept_by_category,
        spec_steps=ns.spec_steps, spec_topk=ns.spec_topk, spec_step_cost=ns.spec_step_cost, model=ns.model, context_length=ns.context_length, max_running=ns.max_running,
        time_scale=ns.time_scale, decode_log_interval=ns.decode_log_interval, stats_interval=ns.stats_interval,
        no_metrics=ns.no_metrics, metrics_from=ns.metrics_from,
        crash_at_shard=ns.crash_at_shard, hang_after_crash=ns.hang_after_crash, oom_at=ns.oom_at, nccl_timeout=ns.nccl_timeout,
        stall_at_shard=ns.stall_at_shard, slow_health=ns.slow_health, exit_zero_after=ns.exit_zero_after,
        ignore_sigterm=ns.ignore_sigterm, spawn_child=ns.spawn_child,
        nnodes=ns.nnodes, node_rank=ns.node_rank, dist_init_addr=ns.dist_init_addr,
    )
    reference = throughput.REFERENCE_STEPS   # accept lengths are given at the reference steps (sim.model)
    checks = [
        (0 <= cfg.port <= 65535, "--port must be 0..65535"),
        (cfg.tp >= 1, "--tp must be >= 1"),
        (cfg.shards >= 1, "--shards must be >= 1"),
        (cfg.load_seconds >= 0, "--load-seconds must be >= 0"),
        (cfg.kv_tokens >= 1, "--kv-tokens must be >= 1"),
        (0 < cfg.new_token_ratio <= 1, "--new-token-ratio must be in (0, 1]"),
        (0 < cfg.mem_fraction_static <= 1, "--mem-fraction-static must be in (0, 1]"),
        (ns.kv_tokens is not None or cfg.mem_fraction_static > throughput.WEIGHTS_FRACTION,
         f"--mem-fraction-static must be above {throughput.WEIGHTS_FRACTION:g} without --kv-tokens: the simulated "
         "weights hold that much of the memory, and the KV cache gets the rest of the fraction"),
        (cfg.spec_steps >= 1, "--spec-steps must be >= 1"),
        (cfg.spec_topk >= 1, "--speculative-eagle-topk must be >= 1"),
        (1.0 <= cfg.accept_len <= reference + 1, f"--accept-len must be in [1, {reference + 1}] (spec-steps + 1)"),
        (not cfg.accept_by_category or cfg.speculative, "--accept-by-category needs --spec eagle3"),
        *((1.0 <= v <= reference + 1,
           f"--accept-by-category: {cat}={v:g} must be in [1, {reference + 1}] (spec-steps + 1): an accept length "
           f"counts the bonus token; for an acceptance rate r give 1 + r x spec-steps")
          for cat, v in cfg.accept_by_category),
        (cfg.spec_step_cost > 0, "--spec-step-cost must be > 0"),
        (cfg.context_length >= 1, "--context-length must be >= 1"),
        (cfg.max_running >= 1, "--max-running-requests must be >= 1"),
        (cfg.time_scale >= 0, "--time-scale must be >= 0"),
        (cfg.decode_log_interval >= 1, "--decode-log-interval must be >= 1"),
        (cfg.stats_interval > 0, "--stats-interval must be > 0"),
        (cfg.crash_at_shard is None or 1 <= cfg.crash_at_shard <= cfg.shards, "--crash-at-shard must be in 1..--shards"),
        (not cfg.hang_after_crash or cfg.crash_at_shard is not None, "--hang-after-crash needs --crash-at-shard"),
        (cfg.stall_at_shard is None or 1 <= cfg.stall_at_shard <= cfg.shards, "--stall-at-shard must be in 1..--shards"),
        (cfg.slow_health >= 0, "--slow-health must be >= 0"),
        (cfg.exit_zero_after is None or cfg.exit_zero_after >= 0, "--exit-zero-after must be >= 0"),
        (cfg.nnodes >= 1, "--nnodes must be >= 1"),
        (0 <= cfg.node_rank < cfg.nnodes, "--node-rank must be in 0..--nnodes - 1"),
        (cfg.nnodes == 1 or bool(cfg.dist_init_addr), "--dist-init-addr is needed with --nnodes > 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise UserError(f"sim: {message}")
    # The tuning settings (sim.model's docstring): the accept lengths given at the reference steps and top-k become
    # those of these settings; without --kv-tokens the memory fraction sizes the KV cache.
    cfg = replace(
        cfg, accept_len=throughput.tuned_accept_len(cfg.accept_len, cfg.spec_steps, cfg.spec_topk),
        accept_by_category=tuple((cat, throughput.tuned_accept_len(v, cfg.spec_steps, cfg.spec_topk))
                                 for cat, v in cfg.accept_by_category),
        kv_tokens=cfg.kv_tokens if ns.kv_tokens is not None else throughput.kv_tokens_for(cfg.kv_tokens,
                                                                                           cfg.mem_fraction_static))
    if ns.fault_rank is not None and ns.fault_rank != cfg.node_rank:
        cfg = replace(cfg, crash_at_shard=d.crash_at_shard, hang_after_crash=d.hang_after_crash, oom_at=d.oom_at, nccl_timeout=d.nccl_timeout,
                      stall_at_shard=d.stall_at_shard, slow_health=d.slow_health, exit_zero_after=d.exit_zero_after,
                      ignore_sigterm=d.ignore_sigterm, spawn_child=d.spawn_child)
    return cfg


def _category_lengths(text: str) -> tuple[tuple[str, float], ...]:
    """`code=3.4,chat=2.2` -> (("code", 3.4), ("chat", 2.2)); categories of the built-in set, each once."""
    out: dict[str, float] = {}
    for part in text.split(","):
        cat, eq, value = part.strip().partition("=")
        cat = cat.strip()
        if not eq or not cat:
            raise argparse.ArgumentTypeError(f"expected CATEGORY=ACCEPT_LEN pairs separated by commas, got {part.strip()!r}")
        if cat not in BUILTIN_CATEGORIES:
            raise argparse.ArgumentTypeError(f"unknown category {cat!r} (the built-in prompt set has "
                                             + ", ".join(BUILTIN_CATEGORIES) + ")")
        if cat in out:
            raise argparse.ArgumentTypeError(f"category {cat!r} given twice")
        try:
            out[cat] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{cat}: expected a number, got {value.strip()!r}") from None
    return tuple(out.items())
