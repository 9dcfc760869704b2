"""HTTP over SSH direct-tcpip channels: an httpx transport whose TCP connections start on the remote host.

Health probes, server info and the readiness completion use it, so `http://127.0.0.1:PORT` names the host's
own port and a refused channel ("connection refused" from the host) means nothing listens there yet, which is
what a loading server looks like. A link that is down shows as a network error, never as a refusal.
"""

from __future__ import annotations

import asyncio
import ssl
import typing
from collections.abc import AsyncIterator, Iterable
from typing import Protocol

import httpcore
import httpx

from specmon.sources import timelimit
from specmon.sources.sshlib import asyncssh
from specmon.sources.transport import LinkState, TransportError


class ChannelOpener(Protocol):
    """What the tunnel needs of an SSH link (`sources.ssh.SSHTransport` is one): its state, and direct-tcpip
    channels to a host:port as seen from the host (ConnectionRefusedError when nothing listens there,
    TransportError when the link is down)."""

    @property
    def link(self) -> LinkState: ...

    async def open_tcp(self, host: str, port: int,
                       wait_s: float | None = None) -> tuple[asyncssh.SSHReader[bytes], asyncssh.SSHWriter[bytes]]: ...


class _ChannelStream(httpcore.AsyncNetworkStream):
    """One direct-tcpip channel, seen by httpcore as a socket."""

    def __init__(self, reader: asyncssh.SSHReader[bytes], writer: asyncssh.SSHWriter[bytes]) -> None:
        self._reader = reader
        self._writer = writer

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        try:
            return await timelimit.wait_for(self._reader.read(max_bytes), timeout)
        except asyncio.TimeoutError:
            raise httpcore.ReadTimeout("no answer from the host in time") from None
        except (OSError, asyncssh.Error) as exc:
            raise httpcore.ReadError(str(exc)) from None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        try:
            self._writer.write(buffer)
            await timelimit.wait_for(self._writer.drain(), timeout)
        except asyncio.TimeoutError:
            raise httpcore.WriteTimeout("the host took no data in time") from None
        except (OSError, asyncssh.Error) as exc:
            raise httpcore.WriteError(str(exc)) from None

    async def aclose(self) -> None:
        self._writer.close()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("https through the SSH channel is not supported (the server is on loopback)")

    def get_extra_info(self, info: str) -> typing.Any:
        return None


class _ChannelBackend(httpcore.AsyncNetworkBackend):
    """Opens each "TCP connection" as a direct-tcpip channel of the host's SSH connection."""

    def __init__(self, transport: ChannelOpener) -> None:
        self._transport = transport

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        link = self._transport.link
        if not link.up and link.state != "connecting":
            # A probe during an outage says so at once (it polls again); it never waits for the reconnect.
            raise httpcore.NetworkError(link.detail or link.state)
        try:
            reader, writer = await timelimit.wait_for(self._transport.open_tcp(host, port, wait_s=timeout), timeout)
        except ConnectionRefusedError:
            raise httpcore.ConnectError("connection refused") from None
        except asyncio.TimeoutError:
            raise httpcore.ConnectTimeout(f"no channel to {host}:{port} in time") from None
        except TransportError as exc:
            # Not a ConnectError: a link that is down must not read as "nothing listens".
            raise httpcore.NetworkError(str(exc)) from None
        return _ChannelStream(reader, writer)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[typing.Any] | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not reached through SSH")

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


def _as_httpx(exc: Exception, request: httpx.Request) -> Exception:
    for core, mapped in _ERRORS:
        if isinstance(exc, core):
            return mapped(str(exc), request=request)
    return exc


class _Body(httpx.AsyncByteStream):
    """The body of an httpcore response, as httpx wants it (errors mapped, closing returns the connection)."""

    def __init__(self, response: httpcore.Response, request: httpx.Request) -> None:
        self._response = response
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._response.aiter_stream():
                yield part
        except Exception as exc:
            raise _as_httpx(exc, self._request) from None

    async def aclose(self) -> None:
        await self._response.aclose()


class TunnelHTTPTransport(httpx.AsyncBaseTransport):
    """httpx transport: HTTP/1.1 with keep-alive over direct-tcpip channels of one SSH link."""

    def __init__(self, transport: ChannelOpener, max_connections: int = 4) -> None:
        self._pool = httpcore.AsyncConnectionPool(network_backend=_ChannelBackend(transport),
                                                  max_connections=max_connections)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host, port=request.url.port,
                             target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream, extensions=request.extensions)
        try:
            response = await self._pool.handle_async_request(core_request)
        except Exception as exc:
            raise _as_httpx(exc, request) from None
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_Body(response, request), extensions=response.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()
