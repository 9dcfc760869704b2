"""HostPool, the connections to the hosts runs live on: one HostOps (and so one Transport: a shared SSH connection) per host name, made on
first use and closed with the manager."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import TypeVar, cast

from specmon.errors import UserError
from specmon.model.config import SshSettings, parse_host
from specmon.model.logs.clean import one_line
from specmon.sources.hostshell import HostOps
from specmon.sources.local import LocalTransport
from specmon.sources.transport import Transport

TransportFactory = Callable[[str], Transport]
T = TypeVar("T")
R = TypeVar("R")
LANES_PER_HOST = 4   # a host's runs are worked on this many at a time (SSH bounds its own sessions)


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


async def per_host(items: Sequence[T], hosts_of: Callable[[T], Collection[str]], work: Callable[[T], Awaitable[R]],
                   lanes: int = LANES_PER_HOST) -> list[R]:
    """`work(item)` for every item, the results in the items' order: items on different hosts (`hosts_of`, a
    multi-node run's several) at once, those on the same hosts `lanes` at a time. A host that is slow or does not
    answer holds up only its own items. `work` handles its own errors (one raised cancels nothing else, but is
    raised here once every lane is done)."""
    groups: dict[frozenset[str], list[int]] = {}
    for i, item in enumerate(items):
        groups.setdefault(frozenset(hosts_of(item)), []).append(i)
    results: list[R | None] = [None] * len(items)

    async def lane(indices: list[int]) -> None:
        for i in indices:
            results[i] = await work(items[i])

    done = await asyncio.gather(*(lane(indices[k::lanes]) for indices in groups.values()
                                  for k in range(min(lanes, len(indices)))), return_exceptions=True)
    for outcome in done:
        if isinstance(outcome, BaseException):
            raise outcome
    return cast(list[R], results)   # every lane finished: each item has its result
