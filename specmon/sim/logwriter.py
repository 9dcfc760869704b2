"""Launch-log lines of the simulated server, in each flavour's current real format.

Formats follow ../shared/reference/server-formats.md (SGLang 0.5.x / vLLM 0.1x-0.33 as seen in the
real logs of 2025-26). Every write goes straight to the stream and is flushed, so a tailer sees a
progress-bar redraw (`\\r`, no newline) the moment it happens.
"""

from __future__ import annotations

import os
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TextIO

from specmon.sim.options import SimConfig
from specmon.sim.tqdm_text import completed_bar, default_bar

SHARD_BAR_DESC = "Loading safetensors checkpoint shards"
GPU_TOTAL_GB = 79.19  # an 80 GB H100 as torch reports it
WEIGHTS_GB = 15.0  # bf16 8B-class model, split over the TP ranks
DRAFT_WEIGHTS_GB = 0.9
GRAPH_BATCH_SIZES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)
_HTTP_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(frozen=True)
class Frame:
    """One traceback frame."""

    path: str
    line: int
    func: str
    code: str


def traceback_lines(frames: list[Frame], exception: str) -> list[str]:
    """A Python traceback as the interpreter prints it."""
    out = ["Traceback (most recent call last):"]
    for f in frames:
        out.append(f'  File "{f.path}", line {f.line}, in {f.func}')
        out.append(f"    {f.code}")
    out.extend(exception.split("\n"))
    return out


def cuda_oom_message(alloc_gib: float, device: int = 0, free_gib: float = 0.31) -> str:
    """torch's CUDA out-of-memory message."""
    in_use = GPU_TOTAL_GB - free_gib
    return (
        f"CUDA out of memory. Tried to allocate {alloc_gib:.2f} GiB. GPU {device} has a total capacity of "
        f"{GPU_TOTAL_GB:.2f} GiB of which {free_gib:.2f} GiB is free. Including non-PyTorch memory, this process has "
        f"{in_use:.2f} GiB memory in use. Of the allocated memory {in_use - 1.2:.2f} GiB is allocated by PyTorch, "
        "and 512.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def c10d_timestamp(now: float) -> str:
    """glog-style `MMDD HH:MM:SS.nnnnnnnnn` used by torch's ProcessGroupNCCL messages."""
    lt = time.localtime(now)
    return time.strftime("%m%d %H:%M:%S", lt) + f".{int((now % 1) * 1e9):09d}"


def nccl_watchdog_lines(tp: int, now: float) -> list[str]:
    """torch c10d watchdog timeout lines, one block per rank (as in sglang-dsv3-shards-then-nccl-watchdog-3368.log)."""
    ts = c10d_timestamp(now)
    out = []
    for r in range(tp):
        out.append(
            f"[rank{r}]:[E{ts} ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600050 "
            "milliseconds before timing out."
        )
    for r in range(tp):
        out.append(
            f"[rank{r}]:[E{ts} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Exception (either "
            "an error or timeout) detected by watchdog at work: 2, last enqueued NCCL work: 2, last completed NCCL work: 1."
        )
    out.append("terminate called after throwing an instance of 'c10::DistBackendError'")
    return out


def uvicorn_bind_error(err: OSError) -> str:
    """uvicorn's bind failure: `ERROR:    [Errno 98] error while attempting to bind on address
    ('127.0.0.1', 8000): address already in use` (asyncio and uvloop word the OSError; uvicorn logs it)."""
    return f"ERROR:    {err}"


@dataclass(frozen=True)
class DecodeStats:
    """What one periodic stats line reports."""

    running: int
    queued: int
    used_tokens: int
    kv_tokens: int
    gen_tps: float
    prompt_tps: float
    accept_len: float | None  # mean tokens per request-step over the interval (spec only)
    accept_rate: float | None
    accepted: int = 0  # vLLM SpecDecoding: accepted draft tokens in the interval
    drafted: int = 0
    per_position: tuple[float, ...] = ()
    interval_s: float = 1.0


def server_args(cfg: SimConfig) -> dict[str, object]:
    """SGLang's resolved server arguments for `cfg` (the args dump and /server_info)."""
    c = cfg  # short name: the dict below is long
    spec = c.speculative
    return {
        "model_path": c.model, "tokenizer_path": c.model, "tokenizer_mode": "auto", "skip_tokenizer_init": False,
        "load_format": "auto", "trust_remote_code": False, "context_length": c.context_length, "is_embedding": False,
        "revision": None, "model_impl": "auto", "host": c.host, "port": c.port, "skip_server_warmup": False,
        "dtype": "auto", "quantization": None, "kv_cache_dtype": "auto", "served_model_name": c.model,
        "mem_fraction_static": c.mem_fraction_static, "max_running_requests": c.max_running,
        "max_total_tokens": None, "chunked_prefill_size": 8192, "max_prefill_tokens": 16384,
        "schedule_policy": "fcfs", "device": "cuda", "tp_size": c.tp, "pp_size": 1, "stream_interval": 1,
        "random_seed": 42, "log_level": "info", "log_requests": False, "enable_metrics": True,
        "decode_log_interval": c.decode_log_interval, "dp_size": 1, "ep_size": 1, "nnodes": c.nnodes,
        "node_rank": c.node_rank, "dist_init_addr": c.dist_init_addr, "attention_backend": "flashinfer", "sampling_backend": "flashinfer",
        "speculative_algorithm": "EAGLE3" if spec else None,
        "speculative_draft_model_path": "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B" if spec else None,
        "speculative_num_steps": c.spec_steps if spec else None,
        "speculative_eagle_topk": c.spec_topk if spec else None,
        "speculative_num_draft_tokens": c.spec_steps + 1 if spec else None,
        "cuda_graph_max_bs": max(graph_sizes(c)), "disable_cuda_graph": False, "watchdog_timeout": 300,
        "dist_timeout": None, "enable_torch_compile": False,
    }


def graph_sizes(cfg: SimConfig) -> list[int]:
    """Captured CUDA-graph batch sizes (up to the max running requests)."""
    return [bs for bs in GRAPH_BATCH_SIZES if bs <= cfg.max_running] or [1]


class LaunchLog(ABC):
    """Common writer; subclasses decide prefixes and wording per flavour."""

    # True: stats every --decode-log-interval steps (SGLang); False: every --stats-interval seconds (vLLM).
    stats_by_steps = True

    def __init__(self, cfg: SimConfig, stream: TextIO | None = None) -> None:
        self.cfg = cfg
        self._out = stream if stream is not None else sys.stdout
        self.pid = os.getpid()

    # -- raw output -----------------------------------------------------------------
    def write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    def lines(self, lines: list[str]) -> None:
        self.write("".join(line + "\n" for line in lines))

    # -- memory figures shared by both flavours ---------------------------------------
    def weights_gb(self) -> float:
        return WEIGHTS_GB / self.cfg.tp

    def kv_gb(self) -> float:
        """Size of the K (or V) half of the KV cache on one rank: 32 layers x 8 KV heads x 128 dims x bf16."""
        return self.cfg.kv_tokens * 32 * 8 * 128 * 2 / self.cfg.tp / 1e9

    def avail_after_load(self) -> float:
        return GPU_TOTAL_GB - 0.6 - self.weights_gb()

    def avail_after_kv(self) -> float:
        return max(0.5, self.avail_after_load() - 2 * self.kv_gb())

    def graph_sizes(self) -> list[int]:
        return graph_sizes(self.cfg)

    # -- hooks the lifecycle calls, one implementation per flavour ------------------------
    @abstractmethod
    def args_dump(self) -> None: ...

    @abstractmethod
    def dist_init(self) -> None: ...

    @abstractmethod
    def load_begin(self) -> None: ...

    @abstractmethod
    def load_end(self, elapsed: float) -> None: ...

    @abstractmethod
    def kv_allocated(self) -> None: ...

    @abstractmethod
    def graph_begin(self) -> None: ...

    @abstractmethod
    def graph_end(self, elapsed: float) -> None: ...

    @abstractmethod
    def engine_ready(self, init_elapsed: float) -> None: ...

    @abstractmethod
    def ready(self, host: str, port: int) -> None: ...

    @abstractmethod
    def stats(self, s: DecodeStats) -> None: ...

    @abstractmethod
    def prefill(self, new_seqs: int, new_tokens: int, s: DecodeStats, input_tps: float) -> None: ...

    @abstractmethod
    def access(self, peer: str, method: str, path: str, status: int) -> None: ...

    @abstractmethod
    def crash_in_shard(self, shard: int) -> None: ...

    @abstractmethod
    def oom(self, stage: str) -> None: ...

    @abstractmethod
    def nccl_timeout(self) -> None: ...

    @abstractmethod
    def bind_failed(self, host: str, port: int, err: OSError) -> None: ...

    @abstractmethod
    def sigterm_ignored(self) -> None: ...

    @abstractmethod
    def shutdown(self, http_started: bool) -> None: ...

    @abstractmethod
    def child_spawned(self, child_pid: int) -> None: ...

    @abstractmethod
    def shard_progress(self, n: int, elapsed: float) -> None: ...

    @abstractmethod
    def shards_done(self, elapsed: float) -> None: ...

    @abstractmethod
    def graph_progress(self, i: int, total: int, bs: int, elapsed: float) -> None: ...


class SglangLog(LaunchLog):
    """SGLang: `[YYYY-MM-DD HH:MM:SS TPn] msg`; TP rank only when tp > 1; shard bar redrawn with `\\r`."""

    stats_by_steps = True

    def _prefix(self, rank: int | None) -> str:
        ts = time.strftime("%Y-%m-%d %H:%M:%S")
        if rank is not None and self.cfg.tp > 1:
            return f"[{ts} TP{rank}] "
        return f"[{ts}] "

    def info(self, msg: str, rank: int | None = None) -> None:
        self.write(self._prefix(rank) + msg + "\n")

    def each_rank(self, msg: str) -> None:
        self.write("".join(self._prefix(r) + msg + "\n" for r in self.ranks()))

    def ranks(self) -> range:
        """This node's TP ranks: global, so node 1 of 2 with --tp 16 prints TP8..TP15."""
        per_node = max(1, self.cfg.tp // self.cfg.nnodes)
        return range(self.cfg.node_rank * per_node, (self.cfg.node_rank + 1) * per_node)

    def args_dump(self) -> None:
        self.info(f"server_args={server_args(self.cfg)!r}")

    def dist_init(self) -> None:
        self.each_rank("Init torch distributed begin.")
        self.each_rank("Init torch distributed ends. elapsed=0.41 s, mem usage=0.13 GB")

    def load_begin(self) -> None:
        self.each_rank(f"Load weight begin. avail mem={GPU_TOTAL_GB - 0.6:.2f} GB")
        if not self.cfg.worker_node:   # global rank 0 only
            self.info("Using model weights format ['*.safetensors']", 0)

    def shard_progress(self, n: int, elapsed: float) -> None:
        # tqdm redraws with a leading carriage return and no newline (SGLang's custom bar_format).
        self.write("\r" + completed_bar(SHARD_BAR_DESC, n, self.cfg.shards, elapsed))

    def shards_done(self, elapsed: float) -> None:
        # The close() refresh repeats the 100 % bar with the overall rate, then ends the line.
        self.write("\r" + completed_bar(SHARD_BAR_DESC, self.cfg.shards, self.cfg.shards, elapsed) + "\n\n")

    def load_end(self, elapsed: float) -> None:
        used = self.weights_gb()
        self.each_rank(
            f"Load weight end. elapsed={elapsed:.2f} s, type=LlamaForCausalLM, avail mem={self.avail_after_load():.2f} GB, "
            f"mem usage={used:.2f} GB."
        )
        if self.cfg.speculative:
            avail = self.avail_after_load()
            self.each_rank(f"Load weight begin. avail mem={avail:.2f} GB")
            self.each_rank(
                f"Load weight end. elapsed=0.52 s, type=LlamaForCausalLMEagle3, avail mem={avail - DRAFT_WEIGHTS_GB:.2f} GB, "
                f"mem usage={DRAFT_WEIGHTS_GB:.2f} GB."
            )

    def kv_allocated(self) -> None:
        kv = self.kv_gb()
        self.each_rank(f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {self.cfg.kv_tokens}, K size: {kv:.2f} GB, V size: {kv:.2f} GB")
        self.each_rank(f"Memory pool end. avail mem={self.avail_after_kv():.2f} GB")

    def _graph_name(self) -> tuple[str, int]:
        return ("target verify", self.cfg.spec_steps + 1) if self.cfg.speculative else ("target decode", 1)

    def graph_begin(self) -> None:
        name, per_req = self._graph_name()
        self.each_rank(
            f"Capture {name} CUDA graph begin. backend=flashinfer, num_tokens_per_req={per_req}, "
            f"avail mem={self.avail_after_kv():.2f} GB"
        )

    def graph_progress(self, i: int, total: int, bs: int, elapsed: float) -> None:
        avail = self.avail_after_kv() - 0.05 * i
        self.write("\r" + default_bar(f"Capturing batches (bs={bs} avail_mem={avail:.2f} GB)", i, total, elapsed))

    def graph_end(self, elapsed: float) -> None:
        self.write("\n")
        name, _ = self._graph_name()
        sizes = self.graph_sizes()
        avail = self.avail_after_kv() - 0.05 * len(sizes)
        self.each_rank(
            f"Capture {name} CUDA graph end. bs={sizes}, elapsed={elapsed:.2f} s, mem usage={0.05 * len(sizes):.2f} GB, "
            f"avail mem={avail:.2f} GB."
        )
        if self.cfg.speculative:
            self.each_rank(f"Capture draft decode CUDA graph begin. backend=flashinfer, num_tokens_per_req=1, avail mem={avail:.2f} GB")
            self.each_rank(f"Capture draft decode CUDA graph end. bs={sizes}, elapsed=0.31 s, mem usage=0.12 GB, avail mem={avail - 0.12:.2f} GB.")

    def engine_ready(self, init_elapsed: float) -> None:
        c = self.cfg
        self.info(
            f"max_total_num_tokens={c.kv_tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, "
            f"max_running_requests={c.max_running}, context_len={c.context_length}, "
            f"available_gpu_mem={self.avail_after_kv() - 0.6:.2f} GB",
            0,
        )
        self.uvicorn_started(c.host, c.port)

    def uvicorn_started(self, host: str, port: int) -> None:
        self.info(f"INFO:     Started server process [{self.pid}]")
        self.info("INFO:     Waiting for application startup.")
        self.info("INFO:     Application startup complete.")
        self.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

    def ready(self, host: str, port: int) -> None:
        self.access("127.0.0.1:50112", "GET", "/model_info", 200)
        self.info(
            "Prefill batch, #new-seq: 1, #new-token: 6, #cached-token: 0, token usage: 0.00, #running-req: 0, "
            "#queue-req: 0, cuda graph: True, input throughput (token/s): 0.00",
            0,
        )
        self.access("127.0.0.1:50118", "POST", "/generate", 200)
        self.info("The server is fired up and ready to roll!")

    def _usage(self, s: DecodeStats) -> str:
        return f"#token: {s.used_tokens}, token usage: {s.used_tokens / s.kv_tokens:.2f}, "

    def stats(self, s: DecodeStats) -> None:
        spec = ""
        if s.accept_len is not None:
            spec = f"accept len: {s.accept_len:.2f}, accept rate: {s.accept_rate or 0.0:.2f}, "
        self.info(
            f"Decode batch, #running-req: {s.running}, {self._usage(s)}{spec}cuda graph: True, "
            f"gen throughput (token/s): {s.gen_tps:.2f}, #queue-req: {s.queued}",
            0,
        )

    def prefill(self, new_seqs: int, new_tokens: int, s: DecodeStats, input_tps: float) -> None:
        self.info(
            f"Prefill batch, #new-seq: {new_seqs}, #new-token: {new_tokens}, #cached-token: 0, "
            f"token usage: {s.used_tokens / s.kv_tokens:.2f}, #running-req: {s.running}, #queue-req: {s.queued}, "
            f"cuda graph: True, input throughput (token/s): {input_tps:.2f}",
            0,
        )

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        self.info(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {_HTTP_REASONS.get(status, "")}'.rstrip())

    def _scheduler_exception(self, frames: list[Frame], exception: str) -> None:
        # The first traceback line carries the prefix, the rest do not (real SGLang behaviour).
        tb = traceback_lines(frames, exception)
        self.write(self._prefix(0) + "Scheduler hit an exception: " + tb[0] + "\n")
        self.lines(tb[1:])
        self.info("Received sigquit from a child process. It usually means the child failed.")

    def crash_in_shard(self, shard: int) -> None:
        self.write("\n")
        self._scheduler_exception(
            _SGLANG_INIT_FRAMES + [
                Frame(f"{_SG}/model_executor/model_runner.py", 276, "initialize", "self.load_model()"),
                Frame(f"{_SG}/model_executor/model_runner.py", 616, "load_model", "self.model = get_model("),
                Frame(f"{_SG}/model_loader/loader.py", 493, "load_model", "self.load_weights_and_postprocess("),
                Frame(f"{_SG}/model_loader/weight_utils.py", 478, "safetensors_weights_iterator", 'with safe_open(st_file, framework="pt") as f:'),
            ],
            f"safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer "
            f"(model-{shard:05d}-of-{self.cfg.shards:05d}.safetensors)",
        )

    def oom(self, stage: str) -> None:
        if stage == "kv":
            self._scheduler_exception(
                _SGLANG_INIT_FRAMES + [
                    Frame(f"{_SG}/model_executor/model_runner.py", 289, "initialize", "self.init_memory_pool("),
                    Frame(f"{_SG}/model_executor/model_runner.py", 1402, "init_memory_pool", "self.token_to_kv_pool = MHATokenToKVPool("),
                    Frame(f"{_SG}/mem_cache/memory_pool.py", 512, "_create_buffers", "torch.zeros("),
                ],
                "torch.OutOfMemoryError: " + cuda_oom_message(self.kv_gb() / 32),
            )
        else:
            self.write("\n")
            self._scheduler_exception(
                _SGLANG_INIT_FRAMES + [
                    Frame(f"{_SG}/model_executor/model_runner.py", 298, "initialize", "self.init_device_graphs()"),
                    Frame(f"{_SG}/model_executor/model_runner.py", 1931, "init_device_graphs", "self.graph_runner = graph_runners[self.device](self)"),
                    Frame(f"{_SG}/model_executor/cuda_graph_runner.py", 384, "__init__", "raise Exception("),
                ],
                "Exception: Capture cuda graph failed: " + cuda_oom_message(0.44) + "\n"
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
                "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n",
            )

    def nccl_timeout(self) -> None:
        self.lines(nccl_watchdog_lines(self.cfg.tp, time.time()))
        self.info("Received sigquit from a child process. It usually means the child failed.")

    def bind_failed(self, host: str, port: int, err: OSError) -> None:
        self.info(f"INFO:     Started server process [{self.pid}]")
        self.info("INFO:     Waiting for application startup.")
        self.info("INFO:     Application startup complete.")
        self.info(uvicorn_bind_error(err))
        self.info("INFO:     Waiting for application shutdown.")
        self.info("INFO:     Application shutdown complete.")

    def sigterm_ignored(self) -> None:
        self.info("Received SIGTERM; ignoring it (specmon sim --ignore-sigterm).")

    def shutdown(self, http_started: bool) -> None:
        if http_started:
            self.info("INFO:     Shutting down")
            self.info("INFO:     Waiting for application shutdown.")
            self.info("INFO:     Application shutdown complete.")
            self.info(f"INFO:     Finished server process [{self.pid}]")

    def child_spawned(self, child_pid: int) -> None:
        self.info(f"Started helper process pid={child_pid} in its own session (specmon sim --spawn-child).")


_SG = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
_SGLANG_INIT_FRAMES = [
    Frame(f"{_SG}/managers/scheduler.py", 2733, "run_scheduler_process", "scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)"),
    Frame(f"{_SG}/managers/scheduler.py", 339, "__init__", "self.tp_worker = TpModelWorker("),
    Frame(f"{_SG}/managers/tp_worker.py", 81, "__init__", "self.model_runner = ModelRunner("),
    Frame(f"{_SG}/model_executor/model_runner.py", 233, "__init__", "self.initialize(min_per_gpu_memory)"),
]
_VL = "/usr/local/lib/python3.12/dist-packages/vllm"


class VllmLog(LaunchLog):
    """vLLM V1: `(EngineCore_DP0 pid=N) INFO MM-DD HH:MM:SS [file.py:line] msg`; shard bar ends each update with `\\n`."""

    stats_by_steps = False

    def __init__(self, cfg: SimConfig, stream: TextIO | None = None) -> None:
        super().__init__(cfg, stream)
        # One process in reality per role; the sim is one process, so the other pids are made up next to ours.
        self.engine_pid = self.pid + 1
        self.worker_pids = [self.pid + 2 + r for r in range(cfg.tp)]

    def _proc(self, who: str) -> str:
        if who == "api":
            return f"(APIServer pid={self.pid})"
        if who == "engine":
            return f"(EngineCore_DP0 pid={self.engine_pid})"
        rank = int(who[1:])
        return f"(Worker_TP{rank} pid={self.worker_pids[rank]})"

    def log(self, who: str, where: str, msg: str, level: str = "INFO") -> None:
        ts = time.strftime("%m-%d %H:%M:%S")
        self.write(f"{self._proc(who)} {level} {ts} [{where}] {msg}\n")

    def each_worker(self, where: str, msg: str) -> None:
        for r in range(self.cfg.tp):
            self.log(f"w{r}", where, msg)

    def spec_config(self) -> dict[str, object] | None:
        if not self.cfg.speculative:
            return None
        return {"method": "eagle3", "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": self.cfg.spec_steps}

    def args_dump(self) -> None:
        c = self.cfg
        args: dict[str, object] = {"model_tag": c.model, "host": c.host, "port": c.port, "model": c.model,
                                   "max_model_len": c.context_length, "gpu_memory_utilization": c.mem_fraction_static}
        if c.tp > 1:
            args["tensor_parallel_size"] = c.tp
        if c.max_running != 256:
            args["max_num_seqs"] = c.max_running
        if c.speculative:
            args["speculative_config"] = self.spec_config()
        self.log("api", "api_server.py:1896", "vLLM API server version 0.33.0")
        self.log("api", "utils.py:278", f"non-default args: {args!r}")
        self.log(
            "engine", "core.py:93",
            f"Initializing a V1 LLM engine (v0.33.0) with config: model={c.model!r}, speculative_config={self.spec_config()!r}, "
            f"tokenizer={c.model!r}, dtype=torch.bfloat16, max_seq_len={c.context_length}, tensor_parallel_size={c.tp}, "
            f"pipeline_parallel_size=1, data_parallel_size=1, served_model_name={c.model}, enable_prefix_caching=True",
        )

    def dist_init(self) -> None:
        for r in range(self.cfg.tp):
            self.log(f"w{r}", "parallel_state.py:1208",
                     f"rank {r} in world size {self.cfg.tp} is assigned as DP rank 0, PP rank 0, TP rank {r}, EP rank {r}")

    def load_begin(self) -> None:
        self.each_worker("gpu_model_runner.py:2602", f"Starting to load model {self.cfg.model}...")

    def shard_progress(self, n: int, elapsed: float) -> None:
        self.write(completed_bar(SHARD_BAR_DESC, n, self.cfg.shards, elapsed) + "\n")

    def shards_done(self, elapsed: float) -> None:
        self.write(completed_bar(SHARD_BAR_DESC, self.cfg.shards, self.cfg.shards, elapsed) + "\n")
        self.write(self._proc("w0") + "\n")  # the bare prefix line real logs show after the bar

    def load_end(self, elapsed: float) -> None:
        self.log("w0", "default_loader.py:384", f"Loading weights took {elapsed:.2f} seconds")
        gib = self.weights_gb()
        if self.cfg.speculative:
            self.each_worker("gpu_model_runner.py:2640", "Loading drafter model...")
            gib += DRAFT_WEIGHTS_GB
        self.each_worker("gpu_model_runner.py:4879", f"Model loading took {gib:.2f} GiB memory and {elapsed + 1.7:.6f} seconds")

    def kv_allocated(self) -> None:
        self.each_worker("gpu_worker.py:349", f"Available KV cache memory: {2 * self.kv_gb():.2f} GiB")
        self.log("engine", "kv_cache_utils.py:1229", f"GPU KV cache size: {self.cfg.kv_tokens:,} tokens")
        conc = self.cfg.kv_tokens / self.cfg.context_length
        self.log("engine", "kv_cache_utils.py:1234", f"Maximum concurrency for {self.cfg.context_length:,} tokens per request: {conc:.2f}x")

    def graph_begin(self) -> None:
        pass  # vLLM prints no begin line; the first bar update is the signal

    def graph_progress(self, i: int, total: int, bs: int, elapsed: float) -> None:
        self.write("\r" + default_bar("Capturing CUDA graphs (decode, FULL)", i, total, elapsed))

    def graph_end(self, elapsed: float) -> None:
        self.write("\n")
        self.each_worker("gpu_model_runner.py:6456", f"Graph capturing finished in {max(1, round(elapsed))} secs, took 0.10 GiB")

    def engine_ready(self, init_elapsed: float) -> None:
        # torch.compile is on by default, so vLLM reports its share of the init time
        self.log("engine", "core.py:302", f"init engine (profile, create kv cache, warmup model) took {init_elapsed:.2f} s "
                                          f"(compilation: {0.4 * init_elapsed:.2f} s)")

    def ready(self, host: str, port: int) -> None:
        self.routes(host, port)
        self.uvicorn(f"INFO:     Started server process [{self.pid}]")
        self.uvicorn("INFO:     Waiting for application startup.")
        self.uvicorn("INFO:     Application startup complete.")

    def routes(self, host: str, port: int) -> None:
        self.log("api", "api_server.py:602", f"Starting vLLM server on http://{host}:{port}")
        self.log("api", "launcher.py:37", "Available routes are:")
        for path, methods in _VLLM_ROUTES:
            self.log("api", "launcher.py:46", f"Route: {path}, Methods: {methods}")

    def uvicorn(self, msg: str) -> None:
        self.write(f"{self._proc('api')} {msg}\n")

    def stats(self, s: DecodeStats) -> None:
        line = (
            f"Engine 000: Avg prompt throughput: {s.prompt_tps:.1f} tokens/s, Avg generation throughput: {s.gen_tps:.1f} tokens/s, "
            f"Running: {s.running} reqs, Waiting: {s.queued} reqs, GPU KV cache usage: {100.0 * s.used_tokens / s.kv_tokens:.1f}%, "
            "Prefix cache hit rate: 0.0%"
        )
        self.log("api", "loggers.py:271", line)
        if s.accept_len is not None and s.drafted:
            per_pos = ", ".join(f"{p:.3f}" for p in s.per_position)
            self.log(
                "api", "metrics.py:101",
                f"SpecDecoding metrics: Mean acceptance length: {s.accept_len:.2f}, "
                f"Accepted throughput: {s.accepted / s.interval_s:.2f} tokens/s, Drafted throughput: {s.drafted / s.interval_s:.2f} tokens/s, "
                f"Accepted: {s.accepted} tokens, Drafted: {s.drafted} tokens, Per-position acceptance rate: {per_pos}, "
                f"Avg Draft acceptance rate: {100.0 * s.accepted / s.drafted:.1f}%",
            )

    def prefill(self, new_seqs: int, new_tokens: int, s: DecodeStats, input_tps: float) -> None:
        pass  # vLLM logs no per-batch prefill line; prompt throughput is part of the "Engine 000:" line

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        self.uvicorn(f'INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {_HTTP_REASONS.get(status, "")}'.rstrip())

    def _prefixed_traceback(self, who: str, where: str, header: str, frames: list[Frame], exception: str) -> None:
        # vLLM prefixes every traceback line with the process tag and an ERROR record header.
        ts = time.strftime("%m-%d %H:%M:%S")
        head = f"{self._proc(who)} ERROR {ts} [{where}] "
        self.write("".join(head + line + "\n" for line in [header, *traceback_lines(frames, exception)]))

    def _engine_failed(self, frames: list[Frame], exception: str) -> None:
        self._prefixed_traceback("w0", "multiproc_executor.py:597", "WorkerProc failed to start.", frames, exception)
        self._prefixed_traceback(
            "engine", "core.py:708", "EngineCore failed to start.",
            [Frame(f"{_VL}/v1/engine/core.py", 699, "run_engine_core", "engine_core = EngineCoreProc(*args, **kwargs)"),
             Frame(f"{_VL}/v1/executor/multiproc_executor.py", 106, "_init_executor", "self.workers = WorkerProc.wait_for_ready(unready_workers)")],
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
        )
        self.lines([f"{self._proc('api')} {line}" for line in traceback_lines(
            [Frame(f"{_VL}/entrypoints/openai/api_server.py", 1910, "run_server", "await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)"),
             Frame(f"{_VL}/v1/engine/utils.py", 886, "wait_for_engine_startup", "raise RuntimeError(")],
            "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
        )])

    def crash_in_shard(self, shard: int) -> None:
        self._engine_failed(
            _VLLM_WORKER_FRAMES + [
                Frame(f"{_VL}/v1/worker/gpu_model_runner.py", 2610, "load_model", "self.model = model_loader.load_model("),
                Frame(f"{_VL}/model_executor/model_loader/weight_utils.py", 530, "safetensors_weights_iterator", 'with safe_open(st_file, framework="pt") as f:'),
            ],
            f"safetensors_rust.SafetensorError: Error while deserializing header: MetadataIncompleteBuffer "
            f"(model-{shard:05d}-of-{self.cfg.shards:05d}.safetensors)",
        )

    def oom(self, stage: str) -> None:
        if stage == "kv":
            frames = [Frame(f"{_VL}/v1/worker/gpu_worker.py", 288, "determine_available_memory", "self.model_runner.profile_run()"),
                      Frame(f"{_VL}/v1/worker/gpu_model_runner.py", 3912, "profile_run", "hidden_states, last_hidden_states = self._dummy_run(")]
            alloc = 2 * self.kv_gb() / 16
        else:
            self.write("\n")
            frames = [Frame(f"{_VL}/v1/worker/gpu_worker.py", 421, "compile_or_warm_up_model", "cuda_graph_memory_bytes = self.model_runner.capture_model()"),
                      Frame(f"{_VL}/v1/worker/gpu_model_runner.py", 4310, "capture_model", "self._capture_cudagraphs(")]
            alloc = 0.44
        self._engine_failed(frames, "torch.OutOfMemoryError: " + cuda_oom_message(alloc))

    def nccl_timeout(self) -> None:
        self.lines(nccl_watchdog_lines(self.cfg.tp, time.time()))
        self.log("engine", "multiproc_executor.py:154",
                 "Worker proc VllmWorker-0 died unexpectedly (exit code: -6), shutting down executor.", level="ERROR")

    def bind_failed(self, host: str, port: int, err: OSError) -> None:
        self.routes(host, port)
        self.uvicorn(f"INFO:     Started server process [{self.pid}]")
        self.uvicorn("INFO:     Waiting for application startup.")
        self.uvicorn("INFO:     Application startup complete.")
        self.uvicorn(uvicorn_bind_error(err))
        self.uvicorn("INFO:     Waiting for application shutdown.")
        self.uvicorn("INFO:     Application shutdown complete.")

    def sigterm_ignored(self) -> None:
        self.log("api", "launcher.py:98", "Received SIGTERM; ignoring it (specmon sim --ignore-sigterm).", level="WARNING")

    def shutdown(self, http_started: bool) -> None:
        if http_started:
            self.uvicorn("INFO:     Shutting down")
            self.uvicorn("INFO:     Waiting for application shutdown.")
            self.uvicorn("INFO:     Application shutdown complete.")

    def child_spawned(self, child_pid: int) -> None:
        self.log("api", "api_server.py:1880", f"Started helper process pid={child_pid} in its own session (specmon sim --spawn-child).")


_VLLM_WORKER_FRAMES = [
    Frame(f"{_VL}/v1/executor/multiproc_executor.py", 571, "worker_main", "worker = WorkerProc(*args, **kwargs)"),
    Frame(f"{_VL}/v1/executor/multiproc_executor.py", 437, "__init__", "self.worker.load_model()"),
    Frame(f"{_VL}/v1/worker/gpu_worker.py", 214, "load_model", "self.model_runner.load_model(eep_scale_up=eep_scale_up)"),
]
_VLLM_ROUTES = (
    ("/openapi.json", "HEAD, GET"), ("/docs", "HEAD, GET"), ("/redoc", "HEAD, GET"), ("/health", "GET"),
    ("/load", "GET"), ("/ping", "POST"), ("/ping", "GET"), ("/tokenize", "POST"), ("/detokenize", "POST"),
    ("/v1/models", "GET"), ("/version", "GET"), ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"),
    ("/server_info", "GET"), ("/metrics", "GET"),
)


def make_log(cfg: SimConfig, stream: TextIO | None = None) -> LaunchLog:
    """The writer for `cfg.flavor`."""
    return SglangLog(cfg, stream) if cfg.flavor == "sglang" else VllmLog(cfg, stream)
