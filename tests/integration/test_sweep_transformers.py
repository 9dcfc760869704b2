"""End to end against a real third-party OpenAI-compatible server: `transformers serve` with a tiny randomly
initialised Llama built here on CPU (no download). The sweep's token counts must be the server's own usage.

transformers serve rejects the ignore_eos/min_tokens extensions (HTTP 422) and ends streams without [DONE]; the
sweep runs with fixed_length off (`specmon sweep --no-ignore-eos`) and treats a stream that ended with its finish
chunk as complete.
Needs `pip install torch 'transformers[serving]'` (CPU wheels are enough); skipped when they are not installed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port
from tiny_model import build_tiny_model

from specmon.loadgen.workload import RequestFactory, Workload
from specmon.orchestration.measure.sweep import SweepSpec, run_sweep

MISSING = [m for m in ("torch", "transformers", "fastapi", "uvicorn") if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    bool(MISSING), reason=f"{', '.join(MISSING)} not installed: pip install torch 'transformers[serving]' to run")]


@pytest.fixture(scope="module")
def transformers_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    model_dir = tmp_path_factory.mktemp("tiny-llama")
    build_tiny_model(model_dir)
    port = free_port()
    log = open(model_dir / "serve.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformers.cli.transformers", "serve", str(model_dir), "--host", "127.0.0.1",
         "--port", str(port), "--device", "cpu"],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=5) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert proc.poll() is None, (model_dir / "serve.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "transformers serve did not come up in 180 s"
            time.sleep(0.5)
        yield url, str(model_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def usage_without_streaming(url: str, body: bytes) -> int:
    """completion_tokens of the same request sent non-streaming (greedy decoding: the same generation)."""
    req = json.loads(body)
    req["stream"] = False
    req.pop("stream_options", None)
    data = json.dumps(req).encode()
    r = urllib.request.Request(url + "/v1/chat/completions", data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(r, timeout=60) as resp:
        return int(json.load(resp)["usage"]["completion_tokens"])


@pytest.mark.timeout(300)
async def test_sweep_counts_match_transformers_serve_usage(transformers_server: tuple[str, str], tmp_path: Path) -> None:
    url, model = transformers_server
    wl = Workload(levels=(1, 2), requests_per_level=4, warmup_requests=1, input_len=12, output_len=12,
                  fixed_length=False)
    result = await run_sweep(SweepSpec(url=url, workload=wl, out_path=tmp_path / "tf.jsonl"))
    assert result.meta.model == model                        # auto-detected from its /v1/models
    records = [json.loads(x) for x in Path(result.meta.records or "").read_text().splitlines()]
    factory = RequestFactory(wl, model)
    for lv in result.levels:
        assert lv.requests_ok == 4 and lv.requests_failed == 0 and lv.usage_missing == 0
        mine = {r["i"]: r["output_tokens"] for r in records if r["concurrency"] == lv.concurrency and not r.get("warmup")}
        served = {i: usage_without_streaming(url, factory.body(lv.concurrency, i)) for i in mine}
        assert mine == served
        assert lv.output_tokens == sum(served.values())
        assert all(0 < n <= 12 for n in served.values())
