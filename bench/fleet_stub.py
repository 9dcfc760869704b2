"""A light stand-in for one ready SGLang server, for bench/fleet_cost.py (stdlib only, about 10 MB and no CPU idle).

    python3 bench/fleet_stub.py --port PORT [--count-to FILE] [--real-body CAPTURE]

Prints SGLang's ready lines, then answers /health, /v1/models, /get_model_info, /server_info, /metrics (SGLang's
gauge and counter names, values that move with the clock) and one-token /v1/completions, each request logged as
SGLang's and vLLM's uvicorn log it (`INFO:     127.0.0.1:PORT - "GET /metrics HTTP/1.1" 200 OK`): a server read
every second has a log that grows every second, as a real one has. A fleet of 128 real
`specmon sim` processes would cost the benchmark's 2-core box more than the app being measured. With --count-to,
FILE always holds how many /metrics reads it has answered. With --real-body, its /metrics answer goes on with the rest
of a real server's capture (its histograms, help and type lines, less the families the stub answers itself, so no
series is doubled): a real answer's size and shape, where the stub's own is 1.5 kB.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


OWN = ("sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:gen_throughput",
       "sglang:max_total_num_tokens", "sglang:prompt_tokens_total", "sglang:generation_tokens_total",
       "sglang:num_requests_total")


def metrics() -> bytes:
    t = time.time()
    labels = f'model_name="{MODEL}",engine_type="unified",tp_rank="0",pp_rank="0"'
    rows = [("sglang:num_running_reqs", "gauge", int(t) % 7), ("sglang:num_queue_reqs", "gauge", 0),
            ("sglang:token_usage", "gauge", (int(t) % 50) / 100), ("sglang:gen_throughput", "gauge", 1000 + int(t) % 90),
            ("sglang:max_total_num_tokens", "gauge", 400000), ("sglang:prompt_tokens_total", "counter", int(t) % 10**6),
            ("sglang:generation_tokens_total", "counter", int(t * 10) % 10**7),
            ("sglang:num_requests_total", "counter", int(t) % 10**5)]
    out = []
    for name, kind, value in rows:
        out += [f"# HELP {name} {name}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {float(value)!r}"]
    return ("\n".join(out) + "\n").encode() + REST[0]


def rest_of(capture: str) -> bytes:
    """The lines of a real capture whose family the stub does not answer itself (samples, and help and type lines)."""
    def family(line: str) -> str:
        words = line.split()
        return words[2] if line.startswith("#") and len(words) > 2 else line.split("{", 1)[0].split(" ", 1)[0]
    with open(capture) as fh:
        return "".join(line for line in fh if family(line) not in OWN).encode()


REST = [b""]
COUNT_TO: list[str] = []
SCRAPES = [0]


def body_for(method: str, path: str) -> tuple[str, bytes, str]:
    path = path.split("?", 1)[0]
    if path in ("/health", "/health_generate"):
        return "200 OK", b"", "text/plain"
    if path == "/metrics":
        SCRAPES[0] += 1
        if COUNT_TO:
            with open(COUNT_TO[0], "w") as fh:
                fh.write(str(SCRAPES[0]))
        return "200 OK", metrics(), "text/plain; version=0.0.4"
    if path == "/v1/models":
        return "200 OK", json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode(), \
            "application/json"
    if path in ("/get_model_info", "/model_info"):
        return "200 OK", json.dumps({"model_path": MODEL, "is_generation": True}).encode(), "application/json"
    if path in ("/server_info", "/get_server_info"):
        return "200 OK", json.dumps({"model_path": MODEL, "tp_size": 1}).encode(), "application/json"
    if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
        choice = {"index": 0, "text": "!", "message": {"role": "assistant", "content": "!"}, "finish_reason": "length"}
        return "200 OK", json.dumps({"id": "stub", "model": MODEL, "choices": [choice],
                                     "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode(), "application/json"
    return "404 Not Found", b'{"detail":"Not Found"}', "application/json"


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path = lines[0].split(" ")[:2]
            length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                           if k.strip().lower() == "content-length"), 0)
            if length:
                await reader.readexactly(length)
            status, body, kind = body_for(method, path)
            peer = writer.get_extra_info("peername") or ("?", 0)
            print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] INFO:     {peer[0]}:{peer[1]} - \"{method} {path} HTTP/1.1\" "
                  f"{status}", flush=True)
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
                         + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] INFO:     Uvicorn running on http://127.0.0.1:{port} "
          "(Press CTRL+C to quit)", flush=True)
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] The server is fired up and ready to roll!", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if "--count-to" in sys.argv:
        COUNT_TO.append(sys.argv[sys.argv.index("--count-to") + 1])
    if "--real-body" in sys.argv:
        REST[0] = rest_of(sys.argv[sys.argv.index("--real-body") + 1])
    try:
        asyncio.run(main(int(sys.argv[sys.argv.index("--port") + 1])))
    except KeyboardInterrupt:
        pass
