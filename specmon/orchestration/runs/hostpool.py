"""HostPool, the connections to the hosts runs live on: one HostOps (and so one Transport: a shared SSH connection) per host name, made on
first use and closed with the manager."""

from __future__ import annotations

from collections.abc import Callable

from specmon.errors import UserError
from specmon.model.config import SshSettings, parse_host
from specmon.model.logs.clean import one_line
from specmon.sources.host import HostOps
from specmon.sources.local import LocalTransport
from specmon.sources.transport import Transport

TransportFactory = Callable[[str], Transport]


def default_transport(host: str, ssh: SshSettings) -> Transport:
    """LocalTransport for "local"; an SSHTransport (one shared connection) for any other host."""
    if host == "local":
        return LocalTransport()
    # asyncssh and its crypto take about a second to import here: only a session that reaches an SSH host pays it
    # (the TUI's first frame no longer waits for it).
    from specmon.sources.ssh import SSHTransport

    return SSHTransport(host, ssh)


class HostPool:
    """Each host's operations, by host name ("local" or an SSH host)."""

    def __init__(self, factory: TransportFactory) -> None:
        self._factory = factory
        self._ops: dict[str, HostOps] = {}

    def ops(self, host: str) -> HostOps:
        """The operations on `host` (UserError for a host name that cannot be one)."""
        if host not in self._ops:
            if host != "local":
                try:
                    parse_host(host)   # one named on the command line is not checked by the config
                except ValueError as exc:
                    raise UserError(f"host {one_line(host, 60)}: {exc}") from None
            self._ops[host] = HostOps(self._factory(host))
        return self._ops[host]

    async def close(self) -> None:
        """Close every host's transport (its SSH connection and forwards)."""
        for ops in self._ops.values():
            await ops.transport.close()
