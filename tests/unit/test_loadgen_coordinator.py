"""The coordinator of a sharded sweep (specmon.loadgen.shards.ShardedSweep) writes its parts' request records to the
one records file as the parts wrote them: a record line is already the file's line, so it is not encoded again
(~20 us a record, a fifth of a core at 4,000 req/s, on the CPUs the parts send from)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specmon.loadgen.protocol import ChildSpec, Message
from specmon.loadgen.shards import ShardedSweep
from specmon.loadgen.workload import Workload


def test_a_parts_record_line_goes_to_the_records_file_as_written(tmp_path: Path) -> None:
    # Written the way no encoder of ours writes it (spaces, key order, 1.50): a line re-encoded would differ.
    line = (b'{"i": 7, "concurrency": 4, "start_s": 0.250, "end_s": 1.50, "ok": true, "chunks": 3, '
            b'"output_tokens": 9, "itl_us": [20000, 21000], "rate": 8.0, "late_ms": 0.4}')
    records = tmp_path / "records.jsonl"
    seen: list[Message] = []

    async def main() -> None:
        spec = ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(1,), processes=2), str(records))
        sweep = ShardedSweep(spec, seen.append)
        sweep._line(0, line + b"\n")
        sweep._line(1, line)   # a last line without its newline still ends with one in the file
        sweep._records.close()

    asyncio.run(main())
    assert records.read_bytes() == line + b"\n" + line + b"\n"
    assert seen == []   # records are no message of their own
