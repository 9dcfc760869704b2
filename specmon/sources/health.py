"""HTTP probes of a running server: /health, one real completion (readiness), server info, /metrics.

A 200 from /health only says the HTTP server is up; a server is READY when it also answers one real
completion (max_tokens 1). `poll()` re-arms after each probe completes, so slow answers never pile up.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from specmon.model.text.textfile import loads
from specmon.sources.transport import Transport, url_host

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")


@dataclass(frozen=True)
class ProbeResult:
    """One probe: the HTTP status (None when no answer) or why there was none, and how long it took."""

    status: int | None
    error: str | None
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.status == 200


class ServerProbe:
    """Probes one server at `base_url` (e.g. http://127.0.0.1:30000). Close with `aclose()`."""

    def __init__(self, base_url: str, health_path: str = "/health", timeout_s: float = 5.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        """`transport`: where TCP connections start (e.g. on an SSH host, see Transport.http_transport)."""
        import httpx  # here, not at the top: `specmon status` imports this module and rarely probes (0.1 s saved)

        self.base_url = base_url.rstrip("/")
        self.health_path = health_path if health_path.startswith("/") else "/" + health_path
        # trust_env=False: a proxy from the environment must never sit between us and a loopback server.
        self._client = httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s, trust_env=False,
                                         transport=transport)
        self._model: str | None = None

    async def aclose(self) -> None:
        await self._client.aclose()

    async def _request(self, method: str, path: str, json: Any = None) -> tuple[ProbeResult, httpx.Response | None]:
        import httpx  # loaded by __init__ already

        t0 = time.monotonic()
        try:
            resp = await self._client.request(method, path, json=json)
        except httpx.TimeoutException:
            return ProbeResult(None, "timed out", time.monotonic() - t0), None
        except httpx.HTTPError as exc:
            reason = "connection refused" if isinstance(exc, httpx.ConnectError) else \
                "link down" if type(exc) is httpx.NetworkError else type(exc).__name__
            return ProbeResult(None, reason, time.monotonic() - t0), None
        return ProbeResult(resp.status_code, None, time.monotonic() - t0), resp

    async def health(self) -> ProbeResult:
        """GET the health path."""
        result, _ = await self._request("GET", self.health_path)
        return result

    async def model_id(self) -> str | None:
        """The first model id from /v1/models (cached once known)."""
        if self._model is None:
            result, resp = await self._request("GET", "/v1/models")
            if result.ok and resp is not None:
                try:
                    self._model = str(loads(resp.content)["data"][0]["id"])
                except (ValueError, KeyError, IndexError, TypeError):
                    pass
        return self._model

    async def completion(self) -> ProbeResult:
        """One real completion with max_tokens 1; ok only if it came back with choices."""
        body: dict[str, Any] = {"prompt": "Hi", "max_tokens": 1, "temperature": 0}
        model = await self.model_id()
        if model is not None:
            body["model"] = model
        result, resp = await self._request("POST", "/v1/completions", body)
        if result.status == 404:
            chat = {k: v for k, v in body.items() if k != "prompt"} | {"messages": [{"role": "user", "content": "Hi"}]}
            result, resp = await self._request("POST", "/v1/chat/completions", chat)
        if result.ok and resp is not None:
            try:
                answer = loads(resp.content)
                if not (isinstance(answer, dict) and answer.get("choices")):
                    return ProbeResult(result.status, "answer without choices", result.elapsed_s)
            except ValueError:
                return ProbeResult(result.status, "answer is not JSON", result.elapsed_s)
        return result

    async def metrics(self) -> str | None:
        """The Prometheus text of /metrics, or None when it does not answer 200 (SGLang needs --enable-metrics)."""
        result, resp = await self._request("GET", "/metrics")
        return resp.text if result.ok and resp is not None else None

    async def server_info(self) -> dict[str, Any] | None:
        """SGLang's /server_info (or /get_server_info), else vLLM's /v1/models; None if neither answers."""
        for path in ("/server_info", "/get_server_info", "/v1/models"):
            result, resp = await self._request("GET", path)
            if result.ok and resp is not None:
                try:
                    info = loads(resp.content)
                except ValueError:
                    continue
                if isinstance(info, dict):
                    return info
        return None


async def probe_of(transport: Transport, port: int, health_path: str = "/health",
                   timeout_s: float = 5.0, addr: str = "127.0.0.1") -> ServerProbe:
    """A probe of `addr`:`port` as the host reaches it (the host's own 127.0.0.1 unless told; a Slurm job's node
    from its login node): through the host's own TCP stack when the transport offers that (SSH direct-tcpip),
    else at the transport's local URL."""
    http = transport.http_transport()
    url = f"http://{url_host(addr)}:{port}" if http is not None else await transport.local_url(port, addr)
    return ServerProbe(url, health_path, timeout_s, transport=http)


async def poll(probe: Callable[[], Awaitable[T]], interval_s: float | Callable[[], float],
               on_result: Callable[[T], bool | None]) -> None:
    """Call `probe` forever, `interval_s` after each one COMPLETES (never overlapping).

    `interval_s` may be a function, asked before each pause (a ready server is polled less often).
    `on_result` gets each result; returning True stops the loop.
    """
    while True:
        if on_result(await probe()):
            return
        await asyncio.sleep(interval_s() if callable(interval_s) else interval_s)
