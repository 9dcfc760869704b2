"""`specmon sim`: a simulated SGLang/vLLM server for machines with no GPU.

Run it as `specmon sim ...` or `python -m specmon.sim ...` (same options; `--help` lists them).

Modules
    options    the command-line options and their validation (SimConfig)
    model      the throughput model: pure functions, calibration, KV admission, EAGLE-3 pattern
    engine     the asyncio continuous-batching scheduler driving the model
    logwriter  launch-log lines per flavour (SGLang / vLLM current real formats), tracebacks
    tqdm_text  tqdm's progress-bar text
    api        OpenAI request parsing, the sim's tokenizer, response bodies
    metrics    Prometheus text with each flavour's metric names
    server     lifecycle, faults, aiohttp app

Lifecycle (durations times --time-scale): args dump; 0.5 s distributed init; --load-seconds of weight
loading over --shards (shard bar: `\\r` redraws for SGLang, one line per update for vLLM); the HTTP port
is bound only now (connections refused before); 1 s KV-cache allocation; 2 s CUDA-graph capture; 1 s
warm-up; ready (SGLang "The server is fired up and ready to roll!"; vLLM "Starting vLLM server on ...",
routes, "Application startup complete."). /health answers 503 from the bind until ready, then 200.

Endpoints, both flavours: GET /health, /v1/models, /metrics, /server_info; POST /v1/chat/completions and
/v1/completions (stream or not; max_tokens or max_completion_tokens, min_tokens, ignore_eos,
stream_options.include_usage). SGLang adds /health_generate, /get_server_info, /model_info,
/get_model_info; vLLM adds /version. /server_info has SGLang's shape in both flavours (real vLLM exposes
it only with VLLM_SERVER_DEV_MODE=1): the resolved server args (tp_size, mem_fraction_static,
speculative_algorithm, speculative_num_steps, ...), max_total_num_tokens, internal_states, and a `sim`
object: phase, running, queued, the model parameters, and cumulative step counters (steps,
step_planned_s, step_actual_s, step_abs_error_s, generation_tokens) for timing checks.

Tokenization: one token per whitespace-separated word (prompt_tokens = word count of the prompt; chat:
of all message contents; a list of token ids counts its length). Each generated token is one word with a
leading space, so `len(text.split())` equals completion_tokens. Without ignore_eos a request stops at a
deterministic point between max_tokens/2 and max_tokens (from a CRC of the prompt), never below min_tokens.

Faults and outcomes:
    --crash-at-shard K   traceback (SafetensorError) while loading shard K, exit 1, never binds
    --oom-at kv|graph    torch.OutOfMemoryError / "Capture cuda graph failed: CUDA out of memory" traceback, exit 1
    --nccl-timeout       after the weights: torch ProcessGroupNCCL watchdog timeout lines, exit 1, never binds
    --stall-at-shard K   stops at shard K with no further output and stays alive (SIGTERM still ends it)
    port not bindable    after the weights: uvicorn "[Errno 98] error while attempting to bind ... address
                         already in use" (flavour's prefix), exit 1
    --slow-health S      every /health answer takes S seconds
    --exit-zero-after S  uvicorn shutdown lines and exit 0, S seconds after ready
    --ignore-sigterm     SIGTERM logged and ignored (otherwise SIGTERM/SIGINT: graceful stop, exit 0)
    --spawn-child        logs "Started helper process pid=N in its own session", a sleeping child (setsid,
                         inherits the environment) that outlives the sim
"""
