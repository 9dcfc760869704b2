"""Message-body regexes: one cleaned message in, the events it carries out.

Every regex is searched (never anchored to the whole line) and fields are pulled one by one, so a
reworded or reordered line still yields what it has (docs: shared reference server-formats.md §2, §6).
Tracebacks need state across lines; that lives in `logparse.LogParser`, which also decides what a
failure means. This module only recognises text.
"""

from __future__ import annotations

import re
from typing import Any

from specmon.model.logs.events import (
    DecodeStats,
    Event,
    GraphCapture,
    HttpRequest,
    KVCache,
    LaunchArgs,
    LoadStarted,
    LogSignature,
    NcclEnv,
    ShardProgress,
    WarmUp,
    WeightsLoaded,
)

# Substrings that any line carrying a signal contains. The parser only cleans and parses lines that hold
# one of them (one trie-shaped regex per line), so boring lines cost next to nothing. Every signal below
# must be reachable through one of these words (tests feed each wording behind an NCCL flood).
TRIGGER_WORDS = (
    "server_args=", "non-default args", "args: Namespace", "Initializing a V1 LLM engine",
    "mem-fraction-static", "gpu-memory-utilization",
    "Load weight", "Starting to load model", "checkpoint shards", "loading shards", "Fastsafetensor loader",
    "Loading weights took", "Model loading took", "Loading model weights took",
    "KV Cache", "KV cache", "max_total_num_tokens=", " blocks: ", "Memory pool end",
    "Capture ", "Capturing ", "Graph capturing finished", "init engine", "Starting vLLM",
    "Application startup complete", "Uvicorn running", "fired up and ready", "HTTP/1.", "HTTP/2",
    "Decode batch", "Avg generation throughput", "SpecDecoding metrics", "Speculative metrics",
    "set by environment",
    "Traceback", "File \"", "Error", "Exception", "error", "out of memory", "Errno", "already in use",
    "Killed", "died unexpectedly", "sigquit", "watchdog", "Watchdog", "failed", "Not enough memory",
    "No available memory", "larger than the available", "Repository Not Found", "model weights",
    "Invalid repository", "does not appear to have a file named", "is not available in", "encountered an issue",
)

_NUM = r"(\d+(?:\.\d+)?)"

# --- launch args --------------------------------------------------------------------------------------
ARGS_START_RE = re.compile(
    r"server_args=(?:ServerArgs\(|\{)|non-default args: \{|args: Namespace\(|Initializing a V1 LLM engine"
)
# `key=value` (ServerArgs / Namespace repr) and `'key': value` (dict repr); values stop at , ) }
_KV_EQ_RE = re.compile(r"(?:^|[(,{\s])(\w+)=('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,()\s{}\[\]]+)")
_KV_DICT_RE = re.compile(r"'(\w+)': ('(?:[^'\\]|\\.)*'|\"[^\"]*\"|[^,{}\[\]\s]+)")
_AUTO_MEM_RE = re.compile(r"Automatically reduce --mem-fraction-static to " + _NUM)
_GPU_UTIL_RE = re.compile(r"--gpu-memory-utilization=" + _NUM + r" is equivalent")

_MODEL_KEYS = ("model_path", "model", "model_tag")
_TP_KEYS = ("tp_size", "tensor_parallel_size")
_MEM_KEYS = ("mem_fraction_static", "gpu_memory_utilization")
_ALGO_KEYS = ("speculative_algorithm", "method", "speculative_method")
_STEPS_KEYS = ("speculative_num_steps", "num_speculative_tokens", "num_spec_tokens")


def _value(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_args_dump(msg: str) -> dict[str, Any]:
    """All scalar key/value pairs of an args dump, in either repr; first occurrence of a key wins.

    Secrets are already redacted by `clean.clean` (their values read `<redacted>`).
    """
    raw: dict[str, Any] = {}
    for rx in (_KV_DICT_RE, _KV_EQ_RE):
        for m in rx.finditer(msg):
            raw.setdefault(m.group(1), _value(m.group(2)))
    return raw


def launch_args(raw: dict[str, Any], line_no: int) -> LaunchArgs:
    """Map an args dump (SGLang or vLLM names) onto the key launch arguments."""

    def pick(keys: tuple[str, ...], kind: type) -> Any:
        for k in keys:
            v = raw.get(k)
            if v is not None and not isinstance(v, bool):
                try:
                    return kind(v)
                except (TypeError, ValueError):
                    continue
        return None

    algo = pick(_ALGO_KEYS, str)
    if algo is not None and algo.upper() == "NONE":
        algo = None
    # SGLang prints default spec steps even without speculation; they mean nothing then.
    steps = pick(_STEPS_KEYS, int) if algo is not None else None
    return LaunchArgs(
        tp=pick(_TP_KEYS, int),
        mem_fraction_static=pick(_MEM_KEYS, float),
        speculative_algorithm=algo,
        speculative_num_steps=steps,
        model_path=pick(_MODEL_KEYS, str),
        port=pick(("port",), int),
        raw=raw,
        line_no=line_no,
    )


# --- loading ------------------------------------------------------------------------------------------
_LOAD_BEGIN_RE = re.compile(r"Load weight begin\.(?: avail mem=" + _NUM + r" GB)?|Starting to load model \S")
_SHARD_RE = re.compile(
    r"(?:Loading (?:safetensors|pt|np_cache|fastsafetensors) checkpoint shards(?: \(eager\))?"
    r"|Multi-thread loading(?: pt checkpoint)? shards|Loading safetensors using Fastsafetensor loader)"
    r":\s*\d+%\s*(?:Completed\s*)?(?:\|[^|\d]*\|?\s*)?(\d+)/(\d+)(?:\s*\[([^\]]*)\])?"
)
_RATE_RE = re.compile(r"([\d.]+)\s*(it/s|s/it)")
_SGL_LOAD_END_RE = re.compile(r"Load weight end\.")
_ELAPSED_RE = re.compile(r"elapsed=" + _NUM + r" s")
_MEM_USAGE_RE = re.compile(r"mem usage=" + _NUM + r" GB")
_VLLM_LOADED_RE = re.compile(
    r"Model loading took " + _NUM + r" (?:GiB|GB)(?: memory)? and " + _NUM + r" seconds"
    r"|Loading model weights took " + _NUM + r" GB"
    r"|Loading weights took " + _NUM + r" seconds"
)


def tqdm_rate(bracket: str | None) -> float | None:
    """Items per second from a tqdm `[elapsed<remaining, rate]` field (`2.24it/s` or `2.87s/it`)."""
    if not bracket:
        return None
    m = _RATE_RE.search(bracket)
    if m is None:
        return None
    value = float(m.group(1))
    if m.group(2) == "it/s":
        return value
    return 1.0 / value if value > 0 else None


# --- KV cache -----------------------------------------------------------------------------------------
_SGL_KV_RE = re.compile(
    r"(?:KV Cache is allocated|KV Cache VA upper bound|KV cache allocated)\.\s*(?:dtype: ([^,]+), )?"
    r"#tokens: (\d+)"
)
_KV_KV_SIZE_RE = re.compile(r"K size: " + _NUM + r" GB, V size: " + _NUM + r" GB|KV size: " + _NUM + r" GB")
_MAX_TOKENS_RE = re.compile(r"max_total_num_tokens=(\d+)")
_VLLM_KV_RE = re.compile(r"KV cache size: ([\d,]+) tokens")
_VLLM_KV_MEM_RE = re.compile(r"Available KV cache memory: " + _NUM + r" GiB|available memory for KV cache is "
                             + _NUM + r" GB")
_V0_BLOCKS_RE = re.compile(r"# (?:GPU|cuda|rocm|xpu|tpu|hpu|npu|neuron) blocks: (\d+)")
_KV_DTYPE_RE = re.compile(r"Using KV cache dtype: (\S+)")

# --- graphs, warm-up, ready, HTTP -----------------------------------------------------------------------
_CAPTURE_RE = re.compile(r"Capture (?:[\w ]*?)graph (begin|end|bs|num tokens)|Capturing cudagraphs for")
_CAPTURE_SECS_RE = re.compile(r"Time elapsed: " + _NUM + r" s|elapsed=" + _NUM + r" s")
_CAPTURE_BAR_RE = re.compile(
    r"Capturing (?:batches|CUDA graphs?(?: shapes)?|cudagraphs?)(?: \([^)]*\))?:\s*\d+%\|[^|]*\|\s*(\d+)/(\d+)"
)
_VLLM_CAPTURE_END_RE = re.compile(r"Graph capturing finished in " + _NUM + r" secs?")
_WARMUP_RE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took|Starting vLLM (?:API )?server")
HTTP_UP_RE = re.compile(r"Application startup complete\.|Uvicorn running on")
READY_RE = re.compile(r"The server is fired up and ready to roll")
_ACCESS_RE = re.compile(r"\d:\d+ - \"([A-Z]+) (\S+) HTTP/[\d.]+\" (\d{3})")

# --- serving stats -------------------------------------------------------------------------------------
_DECODE_RE = re.compile(r"Decode batch(?: \[\d+\])?[.,] (#running-req: .*)$")
_VLLM_GEN_RE = re.compile(r"Avg generation throughput: " + _NUM + r" tokens/s")
_VLLM_RUNNING_RE = re.compile(r"Running: (\d+) reqs")
_VLLM_WAITING_RE = re.compile(r"(?:Waiting|Pending): (\d+) reqs")
_VLLM_KV_USAGE_RE = re.compile(r"GPU KV cache usage: " + _NUM + r"%")
_VLLM_ACCEPT_LEN_RE = re.compile(r"Mean acceptance length: " + _NUM)
_VLLM_ACCEPT_RATE_RE = re.compile(r"Draft acceptance rate: " + _NUM + r"(%?)")

# Some NCCL versions end the line with a period after the value.
_NCCL_ENV_RE = re.compile(r"NCCL INFO (\w+) set by environment to ?(.*?)\.?\s*$")


def _f(text: str | None) -> float | None:
    return float(text) if text else None


_DECODE_ITEM_RE = re.compile(r"(?:^|, )([^,:]+): ([^,]*)")


def _decode_fields(body: str, line_no: int) -> DecodeStats:
    """SGLang decode line body: `key: value` items split on `, ` (survives every punctuation era and new
    fields; unknown keys are ignored)."""
    fields = dict(_DECODE_ITEM_RE.findall(body))

    def num(key: str, alt: str = "", alt2: str = "") -> float | None:
        v = fields.get(key) or (fields.get(alt) if alt else None) or (fields.get(alt2) if alt2 else None)
        if v is None:
            return None
        try:
            return float(v)
        except ValueError:
            return None

    running = num("#running-req")
    queue = num("#queue-req")
    return DecodeStats(
        running_reqs=int(running) if running is not None else None,
        queue_reqs=int(queue) if queue is not None else None,
        token_usage=num("token usage", "full token usage", "gpu token usage"),
        accept_len=num("accept len"),
        accept_rate=num("accept rate"),
        gen_throughput=num("gen throughput (token/s)"),
        line_no=line_no,
    )


# The access line of a read that watches a server and tells nothing of its work: its /metrics or health read by
# specmon (the serving view's every second, a health check) or by another monitor (a Prometheus scrape, a load
# balancer), whatever the answer. Uvicorn's words, its colours allowed (as _ACCESS_RE reads the cleaned line).
_COLOUR = rb"(?:\x1b\[[\d;]*m)?"
_WATCH_READ_RE = re.compile(rb'[^\n]*\d:\d+ - "' + _COLOUR + rb"GET /(?:metrics|health|health_generate)(?:\?[^ \"\n]*)? "
                            rb'HTTP/[\d.]+' + _COLOUR + rb'"[^\n]*\n')


def watch_reads_only(data: bytes) -> bool:
    """Whether `data` is whole lines (each ending in a newline), every one the access line of a read that watches the
    server: no sign of its life or work. A ready server's log grows by one such line every second it is read."""
    pos = 0
    while pos < len(data):
        m = _WATCH_READ_RE.match(data, pos)
        if m is None:
            return False
        pos = m.end()
    return bool(data)


def message_events(msg: str, rank: int | None, line_no: int) -> list[Event]:
    """Every non-failure event the message carries (usually none or one)."""
    out: list[Event] = []
    if "Decode batch" in msg:
        m = _DECODE_RE.search(msg)
        if m:
            out.append(_decode_fields(m.group(1), line_no))
        return out
    if "HTTP/" in msg:
        m = _ACCESS_RE.search(msg)
        if m:
            out.append(HttpRequest(m.group(1), m.group(2), int(m.group(3)), line_no))
            return out
    if "shards" in msg or "Fastsafetensor" in msg:
        m = _SHARD_RE.search(msg)
        if m:
            out.append(ShardProgress(int(m.group(1)), int(m.group(2)), rank, tqdm_rate(m.group(3)), line_no))
            return out
    if "Capturing" in msg:
        m = _CAPTURE_BAR_RE.search(msg)
        if m:
            out.append(GraphCapture(int(m.group(1)), int(m.group(2)), "progress", None, line_no))
            return out
    if "Capture" in msg:
        m = _CAPTURE_RE.search(msg)
        if m:
            stage = "end" if m.group(1) == "end" else "begin"
            secs = None
            if stage == "end":
                s = _CAPTURE_SECS_RE.search(msg)
                if s:
                    secs = _f(s.group(1) or s.group(2))
            out.append(GraphCapture(None, None, stage, secs, line_no))
            return out
    if "Graph capturing finished" in msg:
        m = _VLLM_CAPTURE_END_RE.search(msg)
        out.append(GraphCapture(None, None, "end", _f(m.group(1)) if m else None, line_no))
        return out
    if "Load weight" in msg or "Starting to load model" in msg:
        m = _LOAD_BEGIN_RE.search(msg)
        if m:
            out.append(LoadStarted(_f(m.group(1)), line_no))
            return out
        if _SGL_LOAD_END_RE.search(msg):
            mem = _MEM_USAGE_RE.search(msg)
            el = _ELAPSED_RE.search(msg)
            out.append(WeightsLoaded(_f(mem.group(1)) if mem else None, _f(el.group(1)) if el else None, line_no))
            return out
    if "took" in msg:
        m = _VLLM_LOADED_RE.search(msg)
        if m:
            if m.group(1) is not None:
                out.append(WeightsLoaded(float(m.group(1)), float(m.group(2)), line_no))
            elif m.group(3) is not None:
                out.append(WeightsLoaded(float(m.group(3)), None, line_no))
            else:
                out.append(WeightsLoaded(None, float(m.group(4)), line_no))
            return out
    if "KV" in msg or "max_total_num_tokens" in msg or " blocks: " in msg or "Memory pool end" in msg:
        kv = _kv_event(msg, line_no)
        if kv is not None:
            out.append(kv)
            return out
    if "args" in msg or "Initializing a V1" in msg:
        if ARGS_START_RE.search(msg):
            out.append(launch_args(parse_args_dump(msg), line_no))
            return out
    if "--" in msg:
        m = _AUTO_MEM_RE.search(msg) or _GPU_UTIL_RE.search(msg)
        if m:
            out.append(LaunchArgs(mem_fraction_static=float(m.group(1)), line_no=line_no))
            return out
    if "init engine" in msg or "Starting vLLM" in msg:
        if _WARMUP_RE.search(msg):
            out.append(WarmUp(line_no))
            return out
    if "Avg generation throughput" in msg:
        gen = _VLLM_GEN_RE.search(msg)
        run = _VLLM_RUNNING_RE.search(msg)
        wait = _VLLM_WAITING_RE.search(msg)
        usage = _VLLM_KV_USAGE_RE.search(msg)
        out.append(DecodeStats(
            running_reqs=int(run.group(1)) if run else None,
            queue_reqs=int(wait.group(1)) if wait else None,
            token_usage=round(float(usage.group(1)) / 100.0, 6) if usage else None,
            gen_throughput=_f(gen.group(1)) if gen else None,
            line_no=line_no,
        ))
        return out
    if "SpecDecoding metrics: " in msg or "Speculative metrics: " in msg:
        length = _VLLM_ACCEPT_LEN_RE.search(msg)
        rate = _VLLM_ACCEPT_RATE_RE.search(msg)
        accept_rate = None
        if rate:
            accept_rate = round(float(rate.group(1)) / (100.0 if rate.group(2) else 1.0), 6)
        out.append(DecodeStats(accept_len=_f(length.group(1)) if length else None, accept_rate=accept_rate,
                               line_no=line_no))
        return out
    if "set by environment" in msg:
        m = _NCCL_ENV_RE.search(msg)
        if m:
            out.append(NcclEnv(m.group(1), m.group(2), line_no))
    return out


def _kv_event(msg: str, line_no: int) -> KVCache | None:
    m = _SGL_KV_RE.search(msg)
    if m:
        sizes = _KV_KV_SIZE_RE.search(msg)
        k = v = kv = None
        if sizes:
            k, v, kv = _f(sizes.group(1)), _f(sizes.group(2)), _f(sizes.group(3))
        dtype = m.group(1).strip() if m.group(1) else None
        mem = kv if kv is not None else (k + v if k is not None and v is not None else None)
        return KVCache(tokens=int(m.group(2)), dtype=dtype, k_gb=k, v_gb=v, mem_gb=mem, line_no=line_no)
    m = _MAX_TOKENS_RE.search(msg)
    if m:
        return KVCache(tokens=int(m.group(1)), line_no=line_no)
    m = _VLLM_KV_RE.search(msg)
    if m:
        return KVCache(tokens=int(m.group(1).replace(",", "")), line_no=line_no)
    m = _VLLM_KV_MEM_RE.search(msg)
    if m:
        return KVCache(mem_gb=_f(m.group(1) or m.group(2)), line_no=line_no)
    m = _V0_BLOCKS_RE.search(msg)
    if m:
        return KVCache(blocks=int(m.group(1)), line_no=line_no)
    m = _KV_DTYPE_RE.search(msg)
    if m:
        return KVCache(dtype=m.group(1), line_no=line_no)
    if "Memory pool end" in msg:
        return KVCache(line_no=line_no)
    return None


# --- failures -------------------------------------------------------------------------------------------
# Classified errors, checked in this order (a CUDA OOM inside an NCCL call is an OOM).
FAILURE_CLASSES: tuple[tuple[LogSignature, re.Pattern[str]], ...] = (
    (LogSignature.OOM, re.compile(
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory|"
        r"Not enough memory\. Please try to increase --mem-fraction-static|"
        r"No available memory for the cache blocks|KV cache is needed, which is larger than the available")),
    (LogSignature.NCCL, re.compile(
        r"NCCL error|Watchdog caught collective operation timeout|\[E\w*[^\]]*ProcessGroupNCCL\.cpp|"
        r"Error executing method 'init_device'")),
    (LogSignature.PORT_IN_USE, re.compile(
        r"\[Errno 98\]|[Aa]ddress already in use|Port is already in use|is not available in \d+ seconds")),
    (LogSignature.MODEL_NOT_FOUND, re.compile(
        r"RepositoryNotFoundError|Repository Not Found for url|Cannot find any model weights|"
        r"No model weights found|does not appear to have a file named|"
        r"Invalid repository ID or local directory|HFValidationError")),
)

# Lines that mean the server is going down, though the error itself may follow (a traceback).
FATAL_MARKER_RE = re.compile(
    r"Scheduler hit an exception|DetokenizerManager hit an exception|Exception in run_tp_server|"
    r"Initialization failed\. warmup error|EngineCore failed to start|WorkerProc failed to start|"
    r"Engine core initialization failed|EngineCore encountered an issue|"
    r"Received sigquit from a child process|watchdog timeout \(|died unexpectedly"
)
TRACEBACK_RE = re.compile(r"Traceback \(most recent call last\)")
# Traceback body: frames, source lines, caret markers, chained-exception banners.
FRAME_RE = re.compile(r"^\s+File \"|^\s{2,}\S|^\s*\^+\s*$")
FRAME_START_RE = re.compile(r"^\s+File \"[^\"]*\", line \d+")
# The exception line closing a traceback: `torch.OutOfMemoryError: CUDA out of memory...`, `Exception: ...`.
EXCEPTION_LINE_RE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure)|Exception)"
    r"(?:\([^)]*\))?(?::\s*(.*))?$"
)
KILLED_RE = re.compile(r"^Killed\s*$")


# Words that every failure line above contains (markers, classes, traceback, exception line, Killed):
# a line without any of them cannot be a failure line, which spares the detailed regexes.
FAILURE_HINT_RE = re.compile(
    r"Error|Exception|exception|failed|died|sigquit|watchdog|Watchdog|out of memory|Not enough memory|"
    r"No available memory|larger than the available|NCCL|init_device|Errno|already in use|not available in|"
    r"Repository|repository|model weights|does not appear|Traceback|File \"|Killed|encountered an issue"
)


def classify(text: str) -> LogSignature | None:
    """The failure kind a message names, or None when it names none of the known ones."""
    for kind, rx in FAILURE_CLASSES:
        if rx.search(text):
            return kind
    return None
