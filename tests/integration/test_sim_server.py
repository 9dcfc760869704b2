"""`specmon sim` as a real subprocess: real-format launch logs, health sequence, OpenAI API, metrics.

The regexes are the ones in ../shared/reference/server-formats.md (sections 1 and 6), applied to the
message part after the prefix, exactly as a parser of real logs would.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from simproc import start_sim

pytestmark = pytest.mark.slow

SGLANG_PREFIX = re.compile(
    r"^\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)(?P<ranks>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] (?P<msg>.*)$"
)
VLLM_PREFIX = re.compile(
    r"^(?:\((?P<proc>[A-Za-z_][\w:.-]*(?: rank=\d+)?) pid=(?P<pid>\d+)(?:, ip=[\d.]+)?\)\s*)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2}) \[?(?P<file>[^\s\]]+\.py):(?P<line>\d+)\] (?P<msg>.*)$"
)
SHARD = re.compile(
    r"(Loading (?:safetensors|pt|np_cache|fastsafetensors) checkpoint shards(?: \(eager\))?|Multi-thread loading(?: pt checkpoint)? shards):"
    r"\s+(\d+)%(?: Completed [|]|[|][^|]*[|])?\s*(\d+)/(\d+) \[([\d:]+)<([\d:?]+),\s*([^\]]+)\]"
)
SG_LOAD_END = re.compile(r"Load weight end\. (?:elapsed=([\d.]+) s, )?type=(\w+), (.*?)avail mem=([\d.]+) GB(?:, mem usage=([\d.]+) GB)?")
SG_KV = re.compile(r"(?:(\w+) )?KV Cache is allocated\. (?:dtype: (\S+), )?#tokens: (\d+), (?:K size: ([\d.]+) GB, V size: ([\d.]+) GB|KV size: ([\d.]+) GB)")
SG_MAX_TOTAL = re.compile(r"max_total_num_tokens=(\d+),")
SG_GRAPH_BEGIN = re.compile(r"Capture (.*?)graph begin\.")
SG_GRAPH_BAR = re.compile(r"Capturing batches \((?:bs=(\d+) )?avail_mem=([\d.]+) GB\):\s+(\d+)%[|][^|]*[|]\s*(\d+)/(\d+)")
SG_GRAPH_END = re.compile(r"Capture (.*?)graph end\. (?:Time elapsed: ([\d.]+) s|(?:bs=\[[^\]]*\], )?elapsed=([\d.]+) s)")
SG_READY = "The server is fired up and ready to roll!"
SG_DECODE = re.compile(r"Decode batch(?: \[\d+\])?[.,] (?P<body>#running-req: .*)$")
ACCESS = re.compile(r'INFO:\s+([\d.:\[\]a-f]+):\d+ - "([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')
VL_KV = re.compile(r"([A-Z]+)(?: \+ host)? KV cache size: ([\d,]+) tokens")
VL_CONC = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
VL_LOAD_END = re.compile(r"Model loading took ([\d.]+) (?:GiB|GB)(?: memory)? and ([\d.]+) seconds")
VL_GRAPH_BAR = re.compile(r"Capturing CUDA graph(?:s| shapes)(?: \(([^)]*)\))?:\s+(\d+)%[|][^|]*[|]\s*(\d+)/(\d+)")
VL_GRAPH_END = re.compile(r"Graph capturing finished in (\d+) secs?, took ([\d.]+) GiB")
VL_READY = re.compile(r"Starting vLLM (?:API )?server(?: (\d+))? on (\S+)")
VL_STATS = re.compile(
    r"Engine (\d+): Avg prompt throughput: ([\d.]+) tokens/s, Avg generation throughput: ([\d.]+) tokens/s, "
    r"Running: (\d+) reqs, Waiting: (\d+) reqs, .*?KV cache usage: ([\d.]+)%"
)
VL_SPEC = re.compile(
    r"SpecDecoding metrics: (?:Draft acceptance rate: ([\d.]+)%, )?(?:Mean acceptance length: ([\d.]+), )?"
    r"(?:Accepted throughput: [\d.]+ tokens/s, Drafted throughput: [\d.]+ tokens/s, )?Accepted: (\d+) tokens, Drafted: (\d+) tokens"
)


def decode_fields(body: str) -> dict[str, str]:
    """Split a decode-batch body as the reference prescribes: on ', ', each item on the last ': '."""
    out = {}
    for item in body.rstrip(", ").split(", "):
        key, _, value = item.rpartition(": ")
        out[key] = value
    return out


def sglang_messages(lines: list[str]) -> list[tuple[str, str]]:
    """(ranks, message) of every prefixed line."""
    return [(m["ranks"].strip(), m["msg"]) for m in map(SGLANG_PREFIX.match, lines) if m]


def chat_stream(url: str, body: dict[str, object]) -> list[dict[str, object]]:
    chunks = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
            elif line == "data: [DONE]":
                chunks.append({"done": True})
    return chunks


def test_sglang_tp2_startup_log_matches_real_formats_line_for_line() -> None:
    with start_sim("--tp", "2", "--kv-tokens", "123456", "--mem-fraction-static", "0.83", flavor="sglang") as sim:
        raw = sim.text()
        lines = sim.lines()
    # the shard bar is redrawn with \r and no newline between updates
    assert re.search(r"Completed \| 1/4 \[[^\]]*\]\rLoading safetensors checkpoint shards: ", raw)
    bars = [SHARD.search(p) for p in lines if SHARD.search(p)]
    assert [int(b[3]) for b in bars][:5] == [0, 1, 2, 3, 4] and all(int(b[4]) == 4 for b in bars)
    # every other piece carries the SGLang prefix (bars and the graph-capture bar excepted)
    unprefixed = [p for p in lines if not SGLANG_PREFIX.match(p) and not SHARD.search(p) and not SG_GRAPH_BAR.search(p)]
    assert unprefixed == []
    msgs = sglang_messages(lines)
    args = next(msg for _, msg in msgs if msg.startswith("server_args="))
    assert "'mem_fraction_static': 0.83" in args and "'tp_size': 2" in args and "'speculative_algorithm': None" in args
    kv = [(ranks, SG_KV.search(msg)) for ranks, msg in msgs if SG_KV.search(msg)]
    assert [ranks for ranks, _ in kv] == ["TP0", "TP1"]  # one line per TP rank
    assert all(m[3] == "123456" and m[2] == "torch.bfloat16" for _, m in kv)
    assert [r for r, msg in msgs if SG_LOAD_END.search(msg)] == ["TP0", "TP1"]
    assert any(SG_MAX_TOTAL.search(msg) and SG_MAX_TOTAL.search(msg)[1] == "123456" for _, msg in msgs)
    assert sum(1 for _, msg in msgs if SG_GRAPH_BEGIN.search(msg)) == 2
    graph = [SG_GRAPH_BAR.search(p) for p in lines if SG_GRAPH_BAR.search(p)]
    assert graph[-1][3] == "100" and int(graph[0][1]) > int(graph[-1][1])  # bs counts down
    assert sum(1 for _, msg in msgs if SG_GRAPH_END.search(msg)) == 2
    ready_ranks = [r for r, msg in msgs if msg == SG_READY]
    assert ready_ranks == [""]  # the main process prints it with no rank
    order = [next(i for i, (_, msg) in enumerate(msgs) if rx.search(msg)) for rx in (SG_LOAD_END, SG_KV, SG_GRAPH_END, re.compile(SG_READY))]
    assert order == sorted(order)


def test_health_goes_refused_then_503_then_200() -> None:
    seen: list[int | None] = []
    # 0.8 s of loading, then 0.8 s of KV/graphs/warm-up answering 503: wide enough for a loaded box
    with start_sim("--load-seconds", "4", "--time-scale", "0.2", wait=None) as sim:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            status = sim.health_status()
            if not seen or seen[-1] != status:
                seen.append(status)
            if status == 200:
                break
            time.sleep(0.02)
        assert seen == [None, 503, 200]
        assert any(ACCESS.search(p) and ACCESS.search(p)[4] == "503" for p in sim.lines())


def test_streamed_usage_equals_tokens_produced_and_prompt_is_counted() -> None:
    with start_sim() as sim:
        prompt = "count these seven words in the prompt"
        chunks = chat_stream(sim.url, {"messages": [{"role": "user", "content": prompt}], "max_tokens": 40,
                                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
        assert chunks[-1] == {"done": True}
        usage_chunk = chunks[-2]
        assert usage_chunk["choices"] == []
        content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-2])
        assert usage_chunk["usage"] == {"prompt_tokens": 7, "completion_tokens": 40, "total_tokens": 47}
        assert len(content.split()) == 40
        assert chunks[-3]["choices"][0]["finish_reason"] == "length"
        # without include_usage there is no usage chunk
        plain = chat_stream(sim.url, {"messages": [{"role": "user", "content": prompt}], "max_tokens": 5, "stream": True})
        assert all(c.get("choices") != [] for c in plain)


def test_non_stream_completion_stops_early_without_ignore_eos_and_honours_min_tokens() -> None:
    with start_sim() as sim:
        body = {"prompt": "a deterministic prompt", "max_tokens": 60}
        first = httpx.post(sim.url + "/v1/completions", json=body, timeout=30).json()
        again = httpx.post(sim.url + "/v1/completions", json=body, timeout=30).json()
        n = first["usage"]["completion_tokens"]
        assert 30 <= n <= 60 and n == again["usage"]["completion_tokens"]
        assert len(first["choices"][0]["text"].split()) == n
        assert first["usage"]["prompt_tokens"] == 3 and first["object"] == "text_completion"
        floor = httpx.post(sim.url + "/v1/completions", json={**body, "min_tokens": 59}, timeout=30).json()
        assert floor["usage"]["completion_tokens"] >= 59
        chat = httpx.post(sim.url + "/v1/chat/completions", timeout=30, json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "ignore_eos": True}).json()
        assert chat["usage"]["completion_tokens"] == 8 and len(chat["choices"][0]["message"]["content"].split()) == 8


def test_bad_bodies_get_400_json_errors() -> None:
    with start_sim() as sim:
        cases = [
            ("/v1/chat/completions", b"{not json", "invalid JSON"),
            ("/v1/chat/completions", json.dumps({"max_tokens": 3}).encode(), "messages"),
            ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}).encode(), "max_tokens"),
            ("/v1/completions", json.dumps({"prompt": "x", "stream_options": {"include_usage": True}}).encode(), "stream_options"),
            ("/v1/completions", json.dumps({"prompt": "x", "model": "other"}).encode(), "model"),
            ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 10**6}).encode(), "maximum context length"),
        ]
        for path, body, needle in cases:
            resp = httpx.post(sim.url + path, content=body, headers={"content-type": "application/json"}, timeout=10)
            assert resp.status_code == 400, (path, body)
            assert needle in resp.json()["message"]


async def _load(url: str, n: int, max_tokens: int, path: str = "/v1/chat/completions") -> list[dict[str, object]]:
    """n concurrent streamed chat completions; returns the usage objects."""
    async with httpx.AsyncClient(timeout=30) as client:
        async def one(i: int) -> dict[str, object]:
            body = {"messages": [{"role": "user", "content": f"request {i}"}], "max_tokens": max_tokens,
                    "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
            tokens_per_chunk = []
            usage: dict[str, object] = {}
            async with client.stream("POST", url + path, json=body) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: {"):
                        obj = json.loads(line[6:])
                        if obj["choices"]:
                            text = obj["choices"][0]["delta"].get("content")
                            if text:
                                tokens_per_chunk.append(len(text.split()))
                        else:
                            usage = obj["usage"]
            return {"usage": usage, "chunks": tokens_per_chunk}

        return await asyncio.gather(*(one(i) for i in range(n)))


async def test_eagle3_chunks_carry_several_tokens_and_decode_lines_report_accept_len() -> None:
    with start_sim("--spec", "eagle3", "--accept-len", "2.5", "--decode-log-interval", "10") as sim:
        results = await _load(sim.url, 4, 60)
        for r in results:
            assert r["usage"]["completion_tokens"] == 60 == sum(r["chunks"])
            assert max(r["chunks"]) > 1
        sim.wait_for(SG_DECODE.pattern)
        bodies = [decode_fields(SG_DECODE.search(p)["body"]) for p in sim.lines() if SG_DECODE.search(p)]
        assert bodies and all(list(b)[:4] == ["#running-req", "#token", "token usage", "accept len"] for b in bodies)
        assert any(abs(float(b["accept len"]) - 2.5) < 0.3 for b in bodies)
        assert all(b["cuda graph"] == "True" and "gen throughput (token/s)" in b and "#queue-req" in b for b in bodies)
        info = httpx.get(sim.url + "/server_info").json()
        assert info["speculative_algorithm"] == "EAGLE3" and info["speculative_num_steps"] == 3
        metrics = httpx.get(sim.url + "/metrics").text
        assert re.search(r"^sglang:spec_accept_length\{[^}]*\} 2\.\d+$", metrics, re.M)


async def test_sglang_baseline_decode_lines_queue_and_metrics_under_load() -> None:
    with start_sim("--decode-log-interval", "4", "--max-running-requests", "3", "--kv-tokens", "5000") as sim:
        results = await _load(sim.url, 6, 30)
        assert all(r["usage"]["completion_tokens"] == 30 and max(r["chunks"]) == 1 for r in results)
        bodies = [decode_fields(SG_DECODE.search(p)["body"]) for p in sim.lines() if SG_DECODE.search(p)]
        assert bodies and all("accept len" not in b for b in bodies)
        assert max(int(b["#running-req"]) for b in bodies) == 3  # --max-running-requests bounds the batch
        assert max(int(b["#queue-req"]) for b in bodies) >= 1
        assert any(ACCESS.search(p) and ACCESS.search(p)[3] == "/v1/chat/completions" for p in sim.lines())
        metrics = httpx.get(sim.url + "/metrics").text
        for name in ("sglang:token_usage", "sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:gen_throughput",
                     "sglang:max_total_num_tokens"):
            assert re.search(rf"^{name}\{{", metrics, re.M), name
        assert re.search(r"^sglang:generation_tokens_total\{[^}]*\} 180\.0$", metrics, re.M)
        info = httpx.get(sim.url + "/server_info").json()
        assert info["max_total_num_tokens"] == 5000 and info["tp_size"] == 1 and info["mem_fraction_static"] == 0.88
        assert info["speculative_algorithm"] is None
        assert httpx.get(sim.url + "/get_server_info").json()["max_total_num_tokens"] == 5000
        models = httpx.get(sim.url + "/v1/models").json()
        assert models["data"][0]["id"] == "meta-llama/Llama-3.1-8B-Instruct"


def test_vllm_tp2_startup_log_matches_real_formats() -> None:
    with start_sim("--tp", "2", "--kv-tokens", "75840", "--context-length", "8192", flavor="vllm") as sim:
        raw = sim.text()
        lines = sim.lines()
        port = sim.port
    # vLLM ends every shard-bar update with a newline
    assert re.search(r"Completed \| 1/4 \[[^\]]*\]\nLoading safetensors checkpoint shards: ", raw)
    records = [VLLM_PREFIX.match(p) for p in lines]
    msgs = [(m["proc"], m["msg"]) for m in records if m]
    procs = {p for p, _ in msgs}
    assert {"APIServer", "EngineCore_DP0", "Worker_TP0", "Worker_TP1"} <= procs
    args = next(msg for _, msg in msgs if msg.startswith("non-default args: {"))
    assert "'tensor_parallel_size': 2" in args
    assert [p for p, msg in msgs if VL_LOAD_END.search(msg)] == ["Worker_TP0", "Worker_TP1"]
    kv = [VL_KV.search(msg) for _, msg in msgs if VL_KV.search(msg)]
    assert len(kv) == 1 and kv[0][2] == "75,840"
    conc = [VL_CONC.search(msg) for _, msg in msgs if VL_CONC.search(msg)]
    assert conc[0][1] == "8,192" and conc[0][2] == "9.26"
    assert any(VL_GRAPH_BAR.search(p) and VL_GRAPH_BAR.search(p)[2] == "100" for p in lines)
    assert [p for p, msg in msgs if VL_GRAPH_END.search(msg)] == ["Worker_TP0", "Worker_TP1"]
    ready = [VL_READY.search(msg) for _, msg in msgs if VL_READY.search(msg)]
    assert ready[0][2] == f"http://127.0.0.1:{port}"
    assert lines[-1] == f"(APIServer pid={sim.pid}) INFO:     Application startup complete." or any(
        p.endswith("INFO:     Application startup complete.") for p in lines)


async def test_vllm_eagle3_stats_spec_lines_and_metrics() -> None:
    with start_sim("--spec", "eagle3", "--stats-interval", "0.3", flavor="vllm") as sim:
        results = await _load(sim.url, 3, 80)
        assert all(r["usage"]["completion_tokens"] == 80 for r in results)
        sim.wait_for(VL_STATS.pattern, timeout=5)
        sim.wait_for(VL_SPEC.pattern, timeout=5)
        stats = [VL_STATS.search(p) for p in sim.lines() if VL_STATS.search(p)]
        assert any(float(s[3]) > 0 for s in stats)
        spec = [VL_SPEC.search(p) for p in sim.lines() if VL_SPEC.search(p)]
        assert all(int(s[3]) <= int(s[4]) for s in spec) and any(1.5 < float(s[2]) <= 4.0 for s in spec)
        metrics = httpx.get(sim.url + "/metrics").text
        values = {m[1]: float(m[2]) for m in re.finditer(r"^(vllm:[a-z_]+)\{[^}]*\} ([\d.e+-]+)$", metrics, re.M)}
        assert values["vllm:generation_tokens_total"] == 240
        assert values["vllm:num_requests_running"] == 0 and "vllm:num_requests_waiting" in values
        assert "vllm:kv_cache_usage_perc" in values and values["vllm:prompt_tokens_total"] == 6
        drafts = values["vllm:spec_decode_num_drafts_total"]
        assert values["vllm:spec_decode_num_draft_tokens_total"] == 3 * drafts
        # acceptance length = 1 + accepted / drafts, equal to tokens per step (each request-step is one draft)
        assert 1 + values["vllm:spec_decode_num_accepted_tokens_total"] / drafts >= 2.5
        assert httpx.get(sim.url + "/health_generate").status_code == 404


@pytest.mark.parametrize("flavor", ["sglang", "vllm"])
async def test_kv_use_never_exceeds_the_cache_while_preempting(flavor: str) -> None:
    """Admission counts a twentieth of each request's output, so 8 requests of 400 tokens outgrow the 2000-token
    cache and the newest are preempted; a preempted request comes back only when its tokens fit again: /metrics
    never reports the cache over 100 % (it used to take the preempted straight back, up to 160 % in this test)."""
    usage = {"sglang": re.compile(r"^sglang:token_usage\{[^}]*\} (\S+)$", re.M),
             "vllm": re.compile(r"^vllm:kv_cache_usage_perc\{[^}]*\} (\S+)$", re.M)}[flavor]
    preempted = {"sglang": re.compile(r"^sglang:num_retracted_requests_total\{[^}]*\} (\S+)$", re.M),
                 "vllm": re.compile(r"^vllm:num_preemptions_total\{[^}]*\} (\S+)$", re.M)}[flavor]
    with start_sim("--kv-tokens", "2000", "--new-token-ratio", "0.05", flavor=flavor) as sim:
        seen: list[float] = []
        async with httpx.AsyncClient(timeout=30) as client:
            load = asyncio.ensure_future(_load(sim.url, 8, 400))
            while not load.done():
                text = (await client.get(sim.url + "/metrics")).text
                seen.append(float(usage.search(text)[1]))   # type: ignore[index]
                await asyncio.sleep(0.005)
            results = await load
            text = (await client.get(sim.url + "/metrics")).text
        assert all(r["usage"]["completion_tokens"] == 400 for r in results)   # type: ignore[index]
        assert float(preempted.search(text)[1]) >= 1                            # type: ignore[index]
        assert max(seen) <= 1.0, f"KV use up to {max(seen):.0%} of the cache"
        assert max(seen) > 0.5
