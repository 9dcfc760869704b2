"""An SSH link's joined writes (specmon.sources.sshwrites) on a real socket pair: the writes of one turn of the event
loop leave together, and none waits for a later turn (a sweep's request through a port forward is not held back)."""

from __future__ import annotations

import asyncio
import socket

from specmon.sources.sshwrites import JoinedWrites


async def test_the_writes_of_one_turn_leave_together_at_its_end_and_none_waits_longer() -> None:
    loop = asyncio.get_running_loop()
    ours, theirs = socket.socketpair()
    theirs.setblocking(False)
    transport, _ = await loop.create_connection(asyncio.Protocol, sock=ours)
    joined = JoinedWrites(transport, loop)   # type: ignore[arg-type]
    sends: list[bytes] = []
    write = transport.write

    def counted(data: bytes | bytearray | memoryview) -> None:
        sends.append(bytes(data))
        write(data)

    transport.write = counted   # type: ignore[method-assign]
    try:
        for packet in (b"ignore", b"request one", b"ignore", b"request two"):
            joined.write(packet)
        assert sends == []   # within the turn: gathered
        await asyncio.sleep(0)   # the end of this turn, no later
        assert sends == [b"ignorerequest oneignorerequest two"]
        assert theirs.recv(100) == b"ignorerequest oneignorerequest two"

        joined.write(b"a lone request")
        await asyncio.sleep(0)
        assert theirs.recv(100) == b"a lone request"   # not kept back for others that may come
    finally:
        joined.close()
        theirs.close()
