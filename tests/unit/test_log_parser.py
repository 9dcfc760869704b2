"""LogParser on synthetic input: one test (or a few) per bullet of issue 3's Build list."""

from __future__ import annotations

import random

import pytest

from specmon.model.logs import events as ev
from specmon.model.logs.logparse import MAX_PIECE_CHARS, LogParser
from specmon.model.runs.runstate import LogWatch, RunState


def parse(data: bytes | str, chunk: int | None = None, lines: bool = False) -> list[object]:
    raw = data.encode() if isinstance(data, str) else data
    parser = LogParser(lines=lines)
    out: list[object] = []
    step = chunk or max(1, len(raw))
    for i in range(0, len(raw), step):
        out += parser.feed(raw[i:i + step])
    return out + parser.close()


def of(events: list[object], kind: type) -> list:
    return [e for e in events if type(e) is kind]


def state_of(data: bytes | str, chunk: int | None = None) -> RunState:
    raw = data.encode() if isinstance(data, str) else data
    watch = LogWatch()
    step = chunk or max(1, len(raw))
    for i in range(0, len(raw), step):
        watch.feed(raw[i:i + step], 0.0)
    watch.close(0.0)
    return watch.state


BAR = "Loading safetensors checkpoint shards: {p:3d}% Completed | {n}/4 [00:0{n}<00:03,  1.25it/s]"


# --- bytes -> lines -----------------------------------------------------------------------------------
def test_tqdm_carriage_return_redraws_are_separate_pieces_of_one_line() -> None:
    text = "\r".join(BAR.format(p=25 * n, n=n) for n in range(5)) + "\n[2025-01-01 00:00:01 TP0] Load weight end. " \
        "type=X, dtype=torch.bfloat16, avail mem=1.00 GB, mem usage=2.00 GB.\n"
    events = parse(text)
    shards = of(events, ev.ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(n, 4) for n in range(5)]
    assert {s.line_no for s in shards} == {1}  # \r does not start a new physical line
    assert of(events, ev.WeightsLoaded)[0].line_no == 2
    assert shards[1].rate_per_s == pytest.approx(1.25)


def test_live_bar_progress_is_reported_before_its_line_ends() -> None:
    parser = LogParser()
    first = parser.feed((BAR.format(p=25, n=1) + "\r").encode())
    assert [(e.done, e.total) for e in of(first, ev.ShardProgress)] == [(1, 4)]
    second = parser.feed((BAR.format(p=50, n=2) + "\r" + BAR.format(p=75, n=3)).encode())
    assert [e.done for e in of(second, ev.ShardProgress)] == [2]  # 3/4 is not finished yet (no \r)
    rest = parser.feed(b"\n") + parser.close()
    assert [e.done for e in of(rest, ev.ShardProgress)] == [3]


def test_crlf_line_endings_count_once() -> None:
    text = "a\r\nb\r\n[2025-01-01 00:00:01] The server is fired up and ready to roll!\r\n"
    for chunk in (None, 1, 2, 5):
        ready = of(parse(text, chunk), ev.Ready)
        assert [r.line_no for r in ready] == [3], chunk


def test_record_glued_to_a_bar_is_parsed_with_its_prefix() -> None:
    line = ("Capturing CUDA graphs (decode, FULL):  97%|█████████▋| 65/67 [00:15<00:00,  4.58it/s]"
            "(Worker_TP2_EP2 pid=2709392) INFO 09-29 09:52:22 [gpu_model_runner.py:3468] Graph capturing "
            "finished in 38 secs, took 1.64 GiB\n")
    events = parse(line)
    graphs = of(events, ev.GraphCapture)
    assert [(g.stage, g.done, g.total) for g in graphs] == [("progress", 65, 67), ("end", None, None)]
    assert graphs[1].seconds == 38
    assert of(events, ev.ServerDetected)[0].server == "vllm"


def test_sglang_record_glued_to_a_bare_bar() -> None:
    line = ("  0%|          | 0/13 [00:00<?, ?it/s][2025-03-08 12:29:21 TP1] KV Cache is allocated. #tokens: 46611, "
            "K size: 1.42 GB, V size: 1.42 GB\n")
    kv = of(parse(line), ev.KVCache)
    assert [(k.tokens, k.k_gb, k.v_gb) for k in kv] == [(46611, 1.42, 1.42)]


def test_paste_with_lost_newlines_is_split_on_process_tags() -> None:
    glued = ("(APIServer pid=9) INFO 05-07 04:56:17 [loggers.py:271] Engine 000: Avg prompt throughput: 2.5 tokens/s, "
             "Avg generation throughput: 123.8 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 17.5%"
             "(APIServer pid=9) INFO 05-07 04:56:17 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: "
             "2.63, Accepted: 768 tokens, Drafted: 2355 tokens\n")
    stats = of(parse(glued), ev.DecodeStats)
    assert stats[0].running_reqs == 3 and stats[0].queue_reqs == 1 and stats[0].token_usage == pytest.approx(0.175)
    assert stats[1].accept_len == pytest.approx(2.63)


def test_utf8_split_across_reads_gives_the_same_events_and_no_replacement_chars() -> None:
    text = ("Capturing batches (bs=16 avail_mem=13.56 GB):  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]\n"
            "[2026-05-07 05:56:32 DP3 TP3 EP3] Capture cuda graph begin. Ünïcödé — ✓ avail mem=13.56 GB\n")
    whole = parse(text, lines=True)
    for chunk in (1, 2, 3):
        assert parse(text, chunk, lines=True) == whole
    assert not any("\ufffd" in e.text for e in of(whole, ev.Line))
    assert of(whole, ev.GraphCapture)[0].done == 1


def test_line_over_a_megabyte_is_bounded_and_later_lines_keep_their_numbers() -> None:
    huge = b"x" * (3 * MAX_PIECE_CHARS + 12345)
    data = huge + b" KV Cache is allocated. #tokens: 5, K size: 1.00 GB, V size: 1.00 GB\n" \
        + b"[2025-01-01 00:00:01] The server is fired up and ready to roll!\n"
    parser = LogParser()
    events = []
    for i in range(0, len(data), 65536):
        events += parser.feed(data[i:i + 65536])
        assert len(parser._pending) <= MAX_PIECE_CHARS + 65536  # never holds the whole line
    events += parser.close()
    assert [r.line_no for r in of(events, ev.Ready)] == [2]


def test_a_complete_line_of_megabytes_in_one_read_is_handled_in_slices() -> None:
    line = "x" * (2 * MAX_PIECE_CHARS) + " Load weight begin. avail mem=3.00 GB " + "y" * MAX_PIECE_CHARS + "\n"
    events = parse(line + "[2025-01-01 00:00:01] The server is fired up and ready to roll!\n")
    assert [(type(e).__name__, e.line_no) for e in events if type(e) is not ev.ServerDetected] == \
        [("LoadStarted", 1), ("Ready", 2)]


def test_binary_garbage_is_survived() -> None:
    rnd = random.Random(3)
    garbage = bytes(rnd.randrange(256) for _ in range(200_000))
    data = garbage + b"\n[2025-01-01 00:00:01] The server is fired up and ready to roll!\n"
    lines_before = garbage.count(b"\n") + 1
    for chunk in (None, 4093):
        ready = of(parse(data, chunk), ev.Ready)
        assert [r.line_no for r in ready] == [lines_before + 1]


# --- cleaning: colours, wrappers, prefixes ------------------------------------------------------------
@pytest.mark.parametrize("colour", ["\x1b[36m{}\x1b[0m", "^[[36m{}^[[0m", "[36m{}[0m", "\x1b[1;32m{}\x1b[m"])
def test_ansi_colour_in_all_three_spellings(colour: str) -> None:
    line = colour.format("(RayWorkerWrapper pid=858)") + " INFO 03-07 12:29:02 [kv_cache_utils.py:1] " \
        "GPU KV cache size: 75,840 tokens\n"
    events = parse(line, lines=True)
    assert of(events, ev.KVCache)[0].tokens == 75840
    assert of(events, ev.Line)[0].text == "GPU KV cache size: 75,840 tokens"


@pytest.mark.parametrize("wrapper", [
    "sglang-1  | ",
    "vllm-eb_1  | ",
    "[2025-03-08T12:29:04.123Z] ",
    "[2025-03-08T12:29:04Z] sglang-1  | ",
    "авг 18 14:15:04 llm python3[28059]: ",
    "(pid=858) ",
])
def test_wrapper_prefixes_are_removed_before_the_server_prefix(wrapper: str) -> None:
    text = (f"{wrapper}[2025-03-08 12:29:21] server_args=ServerArgs(model_path='/m', tp_size=1)\n"
            f"{wrapper}[2025-03-08 12:29:25 TP0] KV Cache is allocated. #tokens: 46611, K size: 1.42 GB, V size: 1.42 GB\n"
            f"{wrapper}[2025-03-08 12:29:33] The server is fired up and ready to roll!\n")
    events = parse(text, lines=True)
    assert of(events, ev.ServerDetected)[0].server == "sglang"
    assert of(events, ev.KVCache)[0].tokens == 46611
    assert of(events, ev.Line)[2].text == "The server is fired up and ready to roll!"
    # Load time from the log's own timestamps (args dump to ready line) survives the wrapper.
    assert state_of(text).load_seconds == 12.0
    # An excerpt that starts mid-launch has no load time: its first line is not the launch.
    assert state_of(text.split("\n", 1)[1]).load_seconds is None


@pytest.mark.parametrize("prefix,rank", [
    ("[23:17:01 TP7] ", 7),
    ("[2024-12-13 01:44:59 TP0] ", 0),
    ("[2025-11-30 12:50:10] ", None),
    ("[2025-05-08 10:34:41 DP7 TP15] ", 15),
    ("[2026-05-07 05:56:32 DP3 TP3 EP3] ", 3),
    ("[2026-05-07 05:56:32.123 PP1 TP2] ", 2),
])
def test_sglang_prefix_variants(prefix: str, rank: int | None) -> None:
    from specmon.model.logs.clean import clean

    c = clean(prefix + "Load weight begin. avail mem=21.63 GB")
    assert (c.msg, c.server_hint, c.rank) == ("Load weight begin. avail mem=21.63 GB", "sglang", rank)
    assert of(parse(prefix + "Load weight begin. avail mem=21.63 GB\n"), ev.LoadStarted)[0].avail_mem_gb == 21.63


@pytest.mark.parametrize("prefix,rank,strong", [
    ("INFO 02-24 04:15:43 api_server.py:912] ", None, False),
    ("INFO 10-06 00:39:34 [default_loader.py:268] ", None, False),
    ("(VllmWorkerProcess pid=144) INFO 09-19 08:57:55 multiproc_worker_utils.py:244] ", None, True),
    ("(VllmWorker rank=5 pid=3073) INFO 03-19 08:57:55 [gpu_worker.py:1] ", 5, True),
    ("(EngineCore_0 pid=1399537) INFO 08-19 14:58:40 [gpu_worker.py:277] ", None, True),
    ("(EngineCore_DP0 pid=26283) WARNING 11-06 10:51:48 [kv_cache_utils.py:979] ", None, True),
    ("(Worker_TP2_EP2 pid=2709392) INFO 09-29 09:52:20 [custom_all_reduce.py:203] ", 2, True),
    ("(Worker_DP0_TP5_EP5 pid=5020) INFO 10-24 13:23:34 [custom_all_reduce.py:216] ", 5, True),
    ("(EngineCore pid=120) ERROR 11-19 12:16:36 [v1/engine/core.py:842] ", None, True),
    ("(ServeReplica:app:LLMServer:m pid=28488) (EngineCore pid=29087) INFO 01-01 00:00:00 [x.py:1] ", None, True),
])
def test_vllm_prefix_variants(prefix: str, rank: int | None, strong: bool) -> None:
    from specmon.model.logs.clean import clean

    c = clean(prefix + "Loading weights took 24.84 seconds")
    assert c.msg == "Loading weights took 24.84 seconds"
    assert c.rank == rank
    assert c.server_hint == ("vllm" if strong else "vllm?")
    assert state_of(prefix + "Loading weights took 24.84 seconds\n").server == "vllm"


def test_imported_vllm_lines_do_not_turn_an_sglang_log_into_vllm() -> None:
    text = ("INFO 03-07 12:29:02 __init__.py:190] Automatically detected platform cuda.\n"
            "[2025-03-08 12:29:04] server_args=ServerArgs(model_path='/m', tp_size=4, mem_fraction_static=0.85, "
            "port=30000)\n")
    assert state_of(text).server == "sglang"


# --- signals ------------------------------------------------------------------------------------------
def test_args_dump_serverargs_wrapped_mid_token_across_lines() -> None:
    text = ("[2025-04-03 04:46:21] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', port=30000, "
            "mem_fraction_static=0.88, log_requests=Fa\n"
            "lse, tp_size=2, speculative_algorithm='EAGLE', speculative_num_steps=3, decode_log_interval=40)\n"
            "[2025-04-03 04:46:22 TP0] Load weight begin. avail mem=21.63 GB\n")
    events = parse(text)
    args = of(events, ev.LaunchArgs)
    assert len(args) == 1
    a = args[0]
    assert (a.model_path, a.port, a.mem_fraction_static, a.tp) == ("meta-llama/Llama-3.1-8B-Instruct", 30000, 0.88, 2)
    assert (a.speculative_algorithm, a.speculative_num_steps, a.line_no) == ("EAGLE", 3, 1)
    assert a.raw["log_requests"] is False
    assert of(events, ev.LoadStarted)[0].line_no == 3


def test_args_dump_dict_forms() -> None:
    sglang = "[2026-01-01 00:00:00] server_args={'model_path': '/m', 'tp_size': 8, 'mem_fraction_static': 0.9, " \
        "'speculative_algorithm': None, 'speculative_num_steps': 5, 'port': 30000}\n"
    a = of(parse(sglang), ev.LaunchArgs)[0]
    assert (a.model_path, a.tp, a.mem_fraction_static, a.speculative_algorithm, a.speculative_num_steps) == \
        ("/m", 8, 0.9, None, None)  # steps mean nothing without an algorithm
    vllm = "(APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model': 'Qwen/Q', " \
        "'tensor_parallel_size': 2, 'gpu_memory_utilization': 0.92, 'speculative_config': {'method': 'eagle3', " \
        "'num_speculative_tokens': 4}, 'port': 8001}\n"
    a = of(parse(vllm), ev.LaunchArgs)[0]
    assert (a.model_path, a.tp, a.mem_fraction_static, a.speculative_algorithm, a.speculative_num_steps, a.port) == \
        ("Qwen/Q", 2, 0.92, "eagle3", 4, 8001)


def test_args_dump_secrets_are_redacted() -> None:
    text = "[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/m', api_key='sk-live-123', hf_token='hf_abc', " \
        "max_total_tokens=4096, admin_api_key=None, watermark_secret_key='wm-1', tp_size=1)\n"
    events = parse(text, lines=True)
    raw = of(events, ev.LaunchArgs)[0].raw
    assert (raw["api_key"], raw["hf_token"], raw["max_total_tokens"], raw["admin_api_key"]) == \
        ("<redacted>", "<redacted>", 4096, None)
    assert raw["watermark_secret_key"] == "<redacted>"
    assert "sk-live-123" not in repr(events) and "hf_abc" not in repr(events) and "wm-1" not in repr(events)
    vllm = "(APIServer pid=1) INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', 'api_key': " \
        "'sk-9', 'hf_token': \"hf_x\"}\n"
    events = parse(vllm, lines=True)
    assert of(events, ev.LaunchArgs)[0].raw["api_key"] == "<redacted>"
    assert "sk-9" not in repr(events) and "hf_x" not in repr(events)
    decode = "[2026-01-01 00:00:00] Decode batch, #running-req: 1, #token: 227, token usage: 0.05, #queue-req: 0\n"
    assert of(parse(decode, lines=True), ev.Line)[0].text.endswith("#token: 227, token usage: 0.05, #queue-req: 0")


def test_runtime_mem_fraction_adjustment() -> None:
    text = "[2025-01-01 00:00:00] server_args=ServerArgs(model_path='/m', mem_fraction_static=0.88)\n" \
        "[2025-01-01 00:00:01] Automatically reduce --mem-fraction-static to 0.760 because this is a multimodal model.\n"
    assert state_of(text).mem_fraction_static == 0.76


@pytest.mark.parametrize("line,done,total", [
    ("Loading safetensors checkpoint shards:  20% Completed | 13/64 [00:10<00:40,  1.30it/s]", 13, 64),
    ("Loading safetensors checkpoint shards:   0% 0/1 [00:00<?, ?it/s]", 0, 1),
    ("Loading pt checkpoint shards:  50% Completed | 1/2 [00:03<00:03,  3.00s/it]", 1, 2),
    ("Loading fastsafetensors checkpoint shards:  40% Completed | 2/5 [00:01<00:01,  1.63it/s]", 2, 5),
    ("Loading safetensors checkpoint shards (eager):  10% Completed | 10/100 [00:01<00:09, 10.0it/s]", 10, 100),
    ("Multi-thread loading shards: 100% Completed | 8/8 [00:04<00:00,  1.92it/s]", 8, 8),
    ("Loading safetensors using Fastsafetensor loader:  30%|███       | 3/10 [00:03<00:07,  1.00it/s]", 3, 10),
])
def test_shard_bar_variants(line: str, done: int, total: int) -> None:
    shards = of(parse(line + "\n"), ev.ShardProgress)
    assert [(s.done, s.total) for s in shards] == [(done, total)]


def test_cuda_graph_bar_is_not_a_shard_bar() -> None:
    text = "Capturing batches (bs=16 avail_mem=13.56 GB):  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]\n"
    events = parse(text)
    assert of(events, ev.ShardProgress) == []
    assert [(g.done, g.total) for g in of(events, ev.GraphCapture)] == [(1, 6)]


@pytest.mark.parametrize("line,tokens", [
    ("[2026-01-01 00:00:00 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2243474, K size: 59.91 GB, "
     "V size: 59.91 GB", 2243474),
    ("[2026-01-01 00:00:00 TP0] KV Cache is allocated. #tokens: 1000, KV size: 3.50 GB", 1000),
    ("[2025-03-08 12:29:29 TP0] max_total_num_tokens=46611, chunked_prefill_size=2048, max_prefill_tokens=16384", 46611),
    ("(EngineCore_DP0 pid=1) INFO 11-06 10:51:48 [kv_cache_utils.py:1229] GPU KV cache size: 75,840 tokens", 75840),
    ("(EngineCore pid=1) INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU + host KV cache size: 1,000 tokens, "
     "Maximum concurrency for 100 tokens per request: 10.00x", 1000),
    ("[2026-06-01 00:00:00 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 500000, KV size: 30.00 GB",
     500000),
    ("[2026-06-01 00:00:00 TP0] Post-capture KV sizing: KV cache allocated. dtype: fp8_e4m3, #tokens: 123, K size: "
     "1.00 GB, V size: 1.00 GB", 123),
])
def test_kv_cache_sizes(line: str, tokens: int) -> None:
    assert state_of(line + "\n").kv_cache_tokens == tokens


@pytest.mark.parametrize("line,stage,done,total,secs", [
    ("[2026-05-07 05:56:32 TP0] Capture target decode CUDA graph begin. backend=flashinfer, num_tokens_per_req=4, "
     "avail mem=13.56 GB", "begin", None, None, None),
    ("[2026-05-07 05:57:32 TP0] Capture draft extend CUDA graph end. bs=[1, 2, 4], elapsed=3.21 s, mem usage=0.50 GB, "
     "avail mem=12.00 GB.", "end", None, None, 3.21),
    ("[2025-11-30 12:50:15] Capture cuda graph end. Time elapsed: 5.37 s. mem usage=1.44 GB. avail mem=38.05 GB.",
     "end", None, None, 5.37),
    ("[2026-01-15 13:56:50 DP1 TP1] Capture npu graph begin. This can take up to several minutes. avail mem=11.91 GB",
     "begin", None, None, None),
    ("Capturing batches (avail_mem=12.55 GB):   0%|          | 0/23 [00:00<?, ?it/s]", "progress", 0, 23, None),
    ("Capturing CUDA graph shapes: 100%|██████████| 35/35 [00:10<00:00,  3.40it/s]", "progress", 35, 35, None),
    ("(Worker_TP0 pid=187) INFO 06-09 19:28:10 [gpu_model_runner.py:6456] Graph capturing finished in 2 secs, took "
     "0.10 GiB", "end", None, None, 2.0),
])
def test_cuda_graph_wordings(line: str, stage: str, done: int | None, total: int | None, secs: float | None) -> None:
    g = of(parse(line + "\n"), ev.GraphCapture)
    assert [(x.stage, x.done, x.total, x.seconds) for x in g] == [(stage, done, total, secs)]


def test_kv_cache_tokens_is_the_first_value() -> None:
    text = ("[2026-01-01 00:00:00 TP0] KV Cache is allocated. #tokens: 100, K size: 1.00 GB, V size: 1.00 GB\n"
            "[2026-01-01 00:00:01 TP0] KV Cache is allocated. #tokens: 7, K size: 0.01 GB, V size: 0.01 GB\n"
            "[2026-01-01 00:00:02 TP0] max_total_num_tokens=99, chunked_prefill_size=2048\n")
    assert state_of(text).kv_cache_tokens == 100


@pytest.mark.parametrize("line,running,queue,usage,accept,rate,gen", [
    # early 2025: period, no trailing comma
    ("[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, accept len: 2.90, "
     "cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0", 8, 0, 0.13, 2.90, None, 171.01),
    # Nov 2025: comma and trailing ", "
    ("[2025-11-11 04:06:27] Decode batch, #running-req: 46, #token: 34901, token usage: 0.19, cuda graph: False, "
     "gen throughput (token/s): 1447.08, #queue-req: 2, ", 46, 2, 0.19, None, None, 1447.08),
    # 2026 with accept rate and an iteration counter
    ("[2026-04-05 20:02:51] Decode batch [120], #running-req: 32, #token: 11179, token usage: 0.08, accept len: 3.10, "
     "accept rate: 0.70, cuda graph: True, gen throughput (token/s): 1635.11, #queue-req: 0", 32, 0, 0.08, 3.10, 0.70,
     1635.11),
    # hybrid SWA model: no plain "token usage"
    ("[2026-04-05 20:02:51] Decode batch, #running-req: 3, #full token: 10, full token usage: 0.25, #swa token: 5, "
     "swa token usage: 0.10, cuda graph: True, gen throughput (token/s): 10.00, #queue-req: 1", 3, 1, 0.25, None, None,
     10.0),
])
def test_sglang_decode_line_variants(line: str, running: int, queue: int, usage: float, accept: float | None,
                                     rate: float | None, gen: float) -> None:
    d = of(parse(line + "\n"), ev.DecodeStats)[0]
    assert (d.running_reqs, d.queue_reqs, d.token_usage, d.accept_len, d.accept_rate, d.gen_throughput) == \
        (running, queue, usage, accept, rate, gen)


def test_vllm_spec_metrics_variants() -> None:
    current = ("INFO 05-07 04:56:17 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.63, Accepted "
               "throughput: 76.80 tokens/s, Drafted throughput: 235.49 tokens/s, Accepted: 768 tokens, Drafted: 2355 "
               "tokens, Per-position acceptance rate: 0.726, 0.467, Avg Draft acceptance rate: 32.6%\n")
    sep2025 = ("INFO 09-07 04:56:17 [metrics.py:101] SpecDecoding metrics: Draft acceptance rate: 88.8%, Mean "
               "acceptance length: 5.44, Accepted: 10 tokens, Drafted: 11 tokens\n")
    v0 = "INFO 10-16 19:05:47 metrics.py:367] Speculative metrics: Draft acceptance rate: 0.642, System efficiency: 0.598\n"
    assert (state_of(current).spec_accept_len, state_of(current).spec_accept_rate) == (2.63, 0.326)
    assert (state_of(sep2025).spec_accept_len, state_of(sep2025).spec_accept_rate) == (5.44, 0.888)
    assert (state_of(v0).spec_accept_len, state_of(v0).spec_accept_rate) == (None, 0.642)


def test_nccl_set_by_environment_lines() -> None:
    text = ("node-0:4200:4200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
            "node-0:4200:4200 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
            "node-0:4201:4201 [1] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n"
            "node-0:4200:4200 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n")
    envs = of(parse(text), ev.NcclEnv)
    assert [(e.name, e.value, e.line_no) for e in envs] == [
        ("NCCL_SOCKET_IFNAME", "eth0", 2), ("NCCL_SOCKET_IFNAME", "eth0", 3), ("NCCL_IB_DISABLE", "1", 4)]
    assert state_of(text).nccl_env == (("NCCL_SOCKET_IFNAME", "eth0"), ("NCCL_IB_DISABLE", "1"))


# --- failures -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("text,kind,line", [
    # the exception line of a traceback, not its header
    ("[2025-08-14 17:50:07 TP4] Scheduler hit an exception: Traceback (most recent call last):\n"
     '  File "/sglang/srt/model_loader/loader.py", line 10, in load_model\n'
     "    raise RuntimeError(msg)\n"
     "RuntimeError: Cannot find any model weights with `s3://bucket/m`\n", "model_not_found", 4),
    # vLLM: header line first, every traceback line prefixed
    ("(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] EngineCore failed to start.\n"
     "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] Traceback (most recent call last):\n"
     '(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842]   File "/vllm/v1/worker/gpu_worker.py", line 1, in x\n'
     "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842]     self.model_runner.load_model()\n"
     "(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] torch.OutOfMemoryError: CUDA out of memory. "
     "Tried to allocate 2.00 GiB.\n"
     "(APIServer pid=1) ERROR 11-19 12:16:37 [api_server.py:1] RuntimeError: Engine core initialization failed. "
     "See root cause above.\n", "oom", 5),
    ("[rank0]: RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)\n", "nccl", 1),
    ("(APIServer pid=1) ERROR 01-01 00:00:00 [launcher.py:1] OSError: [Errno 98] Address already in use\n",
     "port_in_use", 1),
    ("[2026-01-01 00:00:00 TP0] Port is already in use. dist_init_port=5000 port_base=5000\n", "port_in_use", 1),
    ("(APIServer pid=1) ERROR 01-01 00:00:00 [x.py:1] ValueError: No available memory for the cache blocks. Try "
     "increasing `gpu_memory_utilization` when initializing the engine.\n", "oom", 1),
    ("x\n[2026-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.\n",
     "exception", 2),
    ("Killed\n", "oom", 1),
    # chained exceptions: the first (root cause) wins
    ("Traceback (most recent call last):\n"
     '  File "/hf/_http.py", line 453, in hf_raise_for_status\n'
     "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error.\n"
     "\n"
     "The above exception was the direct cause of the following exception:\n"
     "\n"
     "Traceback (most recent call last):\n"
     '  File "/vllm/main.py", line 10, in main\n'
     "OSError: Qwen/Nope is not a local folder and is not a valid model identifier\n", "model_not_found", 3),
])
def test_failure_kind_and_line(text: str, kind: str, line: int) -> None:
    state = state_of(text)
    assert state.phase == "failed"
    assert state.failure is not None
    assert (state.failure.kind, state.failure.line_no) == (kind, line)
    assert isinstance(state.failure.kind, ev.LogSignature)


@pytest.mark.parametrize("message,kind", [
    ("Scheduler hit an exception: Traceback (most recent call last):", "exception"),
    ("DetokenizerManager hit an exception: Traceback (most recent call last):", "exception"),
    ("Exception in run_tp_server:", "exception"),
    ("Initialization failed. warmup error: Traceback (most recent call last):", "exception"),
    ("EngineCore failed to start.", "exception"),
    ("WorkerProc failed to start.", "exception"),
    ("EngineCore encountered an issue. See stack trace (above) for the root cause.", "exception"),
    ("Received sigquit from a child process. It usually means the child failed.", "exception"),
    ("Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)", "exception"),
    ("Worker proc VllmWorker-0 died unexpectedly (exit code: -9), shutting down executor.", "exception"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 448.00 MiB.", "oom"),
    ("RuntimeError: CUDA error: out of memory", "oom"),
    ("Not enough memory. Please try to increase --mem-fraction-static.", "oom"),
    ("To serve at least one request with the model's max seq len (8192), (1.0 GiB KV cache is needed, which is "
     "larger than the available KV cache memory (0.5 GiB).", "oom"),
    ("Error executing method 'init_device'. This might cause deadlock in distributed execution.", "nccl"),
    ("[E207 01:29:36.730311765 ProcessGroupNCCL.cpp:616] [Rank 6] Watchdog caught collective operation timeout",
     "nccl"),
    ("nccl_port at 30001 is not available in 60 seconds.", "port_in_use"),
    ("ValueError: No model weights found in: `/models/x`", "model_not_found"),
    ("OSError: /m does not appear to have a file named config.json.", "model_not_found"),
    ("huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name'", "model_not_found"),
    ("Invalid repository ID or local directory specified: '/nope'", "model_not_found"),
])
def test_every_fatal_wording_is_reached_through_the_prefilter(message: str, kind: str) -> None:
    # Behind an NCCL flood and a vLLM prefix, so the fast path (not the first-lines scan) must find it.
    flood = "".join(f"node-0:1:1 [0] NCCL INFO Channel {i:02d}/24 : 0 1\n" for i in range(3000))
    text = flood + f"(EngineCore_DP0 pid=7) ERROR 11-19 12:16:36 [core.py:842] {message}\n"
    state = state_of(text)
    assert state.failure is not None, message
    assert (state.failure.kind, state.failure.line_no, state.phase) == (kind, 3001, "failed")


def test_nccl_warnings_are_not_failures() -> None:
    text = ("[rank0]:[W1104 10:00:00.000 ProcessGroupNCCL.cpp:4561] [PG ID 0 PG GUID 0 Rank 0] using GPU 0 to "
            "perform barrier as devices used by this process are currently unknown.\n"
            "node-0:1:1 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n")
    assert state_of(text).failure is None


def test_traceback_after_ready_does_not_fail_the_server() -> None:
    text = ("[2025-03-08 12:29:33] The server is fired up and ready to roll!\n"
            "[2025-03-08 12:30:00] ERROR:    Exception in ASGI application\n"
            "Traceback (most recent call last):\n"
            '  File "/starlette/routing.py", line 1, in app\n'
            "ValueError: bad request body\n"
            "[2025-03-08 12:30:01] Decode batch, #running-req: 1, #token: 1, token usage: 0.00, "
            "gen throughput (token/s): 1.00, #queue-req: 0\n")
    state = state_of(text)
    assert (state.phase, state.ready, state.failure) == ("ready", True, None)


def test_a_surviving_traceback_during_launch_is_forgotten_when_the_launch_moves_on() -> None:
    text = ("[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=21.63 GB\n"
            "Traceback (most recent call last):\n"
            '  File "/triton/compiler.py", line 1, in compile\n'
            "ImportError: cannot import name 'x'\n")
    assert state_of(text).phase == "failed"  # for now this looks fatal
    later = text + "[2025-03-08 12:29:21 TP0] KV Cache is allocated. #tokens: 5, K size: 1.00 GB, V size: 1.00 GB\n"
    state = state_of(later)
    assert (state.phase, state.failure) == ("allocating_kv", None)


def test_fatal_failure_survives_later_progress_lines_from_other_ranks() -> None:
    text = ("[23:17:08 TP4] Exception in run_tp_server:\n"
            "Traceback (most recent call last):\n"
            '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 147, in __init__\n'
            "[23:17:08 TP1] Capture cuda graph end. Time elapsed: 2.19 s\n")
    state = state_of(text)
    assert state.phase == "failed"
    assert (state.failure.kind, state.failure.line_no) == ("exception", 1)


# --- unknown wording ----------------------------------------------------------------------------------
def test_unknown_future_wording_is_ignored_and_known_fields_still_answer() -> None:
    text = ("(EngineCore_DP0 pid=1) INFO 01-01 00:00:00 [new_loader.py:1] Streaming tensors 3 of 9 via quantum link\n"
            "(EngineCore_DP0 pid=1) INFO 01-01 00:00:01 [planner.py:1] KV planner v9: reserved 12 GiB in 3 pools\n"
            "(EngineCore_DP0 pid=1) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 1,234 tokens\n"
            "(APIServer pid=1) INFO 01-01 00:00:03 [api.py:1] Ready-ish: all systems nominal ✓\n"
            "%%%% totally unknown %%%% Decode batch?? #running-req: lots\n")
    state = state_of(text)
    assert (state.server, state.kv_cache_tokens, state.phase, state.ready, state.failure) == \
        ("vllm", 1234, "allocating_kv", False, None)


def test_header_metadata_lines_are_not_log_lines() -> None:
    text = ("# source: https://example.com/issue/1\n"
            "# note: mentions The server is fired up and ready to roll! and CUDA out of memory\n"
            "[2025-03-08 12:29:33] Load weight begin. avail mem=1.00 GB\n")
    events = parse(text)
    assert [type(e) for e in events] == [ev.ServerDetected, ev.LoadStarted]
    assert events[1].line_no == 3


def test_line_events_only_when_asked() -> None:
    text = "\x1b[32mhello\x1b[0m\nvllm-1  | world\n"
    assert of(parse(text), ev.Line) == []
    assert [(e.text, e.line_no) for e in of(parse(text, lines=True), ev.Line)] == [("hello", 1), ("world", 2)]


def test_vllm_v1_startup_walks_through_every_phase() -> None:
    p = "(EngineCore_DP0 pid=26283) INFO 11-06 10:50:{s:02d} [x.py:1] "
    api = "(APIServer pid=1) INFO 11-06 10:5{m}:{s:02d} [api_server.py:1] "
    steps = [
        (api.format(m=0, s=0) + "non-default args: {'model': 'Qwen/Qwen3-8B', 'tensor_parallel_size': 2, "
         "'gpu_memory_utilization': 0.9, 'port': 8000}", "launching"),
        (p.format(s=5) + "Starting to load model Qwen/Qwen3-8B...", "loading_weights"),
        ("Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:02<00:02,  1.00it/s]", "loading_weights"),
        (p.format(s=9) + "Model loading took 15.27 GiB memory and 9.53 seconds", "loading_weights"),
        (p.format(s=20) + "Available KV cache memory: 2.30 GiB", "allocating_kv"),
        (p.format(s=20) + "GPU KV cache size: 75,840 tokens", "allocating_kv"),
        ("Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  50%|█████     | 34/67 [00:01<00:01, 30.1it/s]",
         "capturing_graphs"),
        (p.format(s=40) + "Graph capturing finished in 4 secs, took 0.45 GiB", "capturing_graphs"),
        (p.format(s=41) + "init engine (profile, create kv cache, warmup model) took 36.10 s", "warming_up"),
        (api.format(m=0, s=42) + "Starting vLLM API server 0 on http://0.0.0.0:8000", "warming_up"),
        ("(APIServer pid=1) INFO:     Application startup complete.", "ready"),
    ]
    watch = LogWatch()
    for line, phase in steps:
        watch.feed((line + "\n").encode(), 0.0)
        assert watch.state.phase == phase, line
    s = watch.state
    assert (s.server, s.tp, s.mem_fraction_static, s.model_path, s.port) == ("vllm", 2, 0.9, "Qwen/Qwen3-8B", 8000)
    assert (s.shards_done, s.shards_total, s.kv_cache_tokens, s.kv_cache_gb, s.weights_gb) == (2, 4, 75840, 2.3, 15.27)
    assert (s.graphs_done, s.graphs_total, s.ready_evidence, s.load_seconds) == (34, 67, "startup_complete", 42.0)


@pytest.mark.parametrize("first,later,seconds", [
    ("2025-03-08 12:29:04", "2025-03-08 12:29:33", 29.0),
    ("2025-03-08 12:29:04.250", "2025-03-08 12:29:05.750", 1.5),  # SGLANG_LOG_MS
    ("23:59:50", "00:00:20", 30.0),  # time-only prefix across midnight
    ("12-31 23:59:00", "01-01 00:01:00", 120.0),  # vLLM prints no year
    ("12:00:00", "2025-01-01 12:00:00", None),  # different formats are not compared
])
def test_log_timestamps(first: str, later: str, seconds: float | None) -> None:
    from specmon.model.logs.clean import elapsed_between, ts_seconds

    a, b = ts_seconds(first), ts_seconds(later)
    assert a is not None and b is not None
    got = elapsed_between(a, b)
    assert got == (pytest.approx(seconds) if seconds is not None else None)


def test_highlights_say_which_lines_carried_an_event() -> None:
    """The Log pane colours lines from these (no second parse): line numbers as `grep -n` counts them."""
    log = ("[2026] server_args=ServerArgs(model_path='m', tp_size=1)\n"
           "Loading safetensors checkpoint shards:  50% Completed | 4/8 [00:11<00:11]\n"
           "[2026] KV Cache is allocated. #tokens: 450000, K size: 1 GB\n"
           "Prefill batch, #new-seq: 1\n"
           "[2026] The server is fired up and ready to roll!\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n")
    for chunk in (None, 7):
        assert ev.highlights(parse(log, chunk)) == {2: "shard", 3: "kv", 5: "ready", 6: "error"}
