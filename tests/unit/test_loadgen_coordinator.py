"""The coordinator of a sharded sweep (specmon.loadgen.shards.ShardedSweep) writes its parts' request records to the
one records file as the parts wrote them, and makes each level from its parts' tallies: it neither encodes nor
reads a record (20-25 us a record, a tenth of a core at 4,000 req/s, on the CPUs the parts send from)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from specmon.errors import UserError
from specmon.loadgen.protocol import ChildSpec, Message, Ready, Tally, Warn, encode
from specmon.loadgen.shards import ShardedSweep
from specmon.loadgen.workload import Workload
from specmon.model.sweeps.results import LevelResult
from specmon.model.sweeps.sweepstats import LevelAccumulator, RequestRecord, level_from_records


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


def one_level_told_by_two_parts(spec: ChildSpec, recs: list[RequestRecord], first_error: str) -> list[Message]:
    """What the coordinator emits for a first level whose records part k (of two) holds every other of, told as
    the parts tell it: ready, then each part's tally in pieces of two values a series (part 1's first piece saying
    `first_error`) and its level message; no record lines at all."""
    seen: list[Message] = []

    async def main() -> None:
        sweep = ShardedSweep(spec, seen.append)
        for k in (0, 1):
            sweep._line(k, encode(Ready(1)))
        for k in (0, 1):
            share = LevelAccumulator(recs[0].concurrency)
            for r in recs[k::2]:
                share.add(r)
            for n, piece in enumerate(share.pieces(2)):
                sweep._line(k, encode(Tally(piece, first_error if k == 1 and n == 0 else None)))
            sweep._line(k, encode(share.result(4.25, 0.5, 1.0)))
        sweep._records.close()

    asyncio.run(main())
    return seen


def test_the_coordinator_gives_a_level_the_figures_its_parts_tallied(tmp_path: Path) -> None:
    # The coordinator's level is the one its parts' requests make together, with the parts' CPU summed.
    recs = [RequestRecord(concurrency=4, index=i, start_s=i * 0.25, end_s=i * 0.25 + 2.0, ok=i != 3,
                          error=None if i != 3 else "http", detail=None if i != 3 else "502 Bad Gateway",
                          ttft_ms=None if i == 3 else 40.0 + 10 * i, e2e_ms=None if i == 3 else 2000.0,
                          chunks=8, output_tokens=None if i == 3 else 16, prompt_tokens=32, itl_us=(25_000,) * 7)
            for i in range(10)]
    spec = ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(4,), warmup_requests=0, processes=2),
                     str(tmp_path / "records.jsonl"))
    seen = one_level_told_by_two_parts(spec, recs, "http: 502 Bad Gateway")
    (level,) = [m for m in seen if isinstance(m, LevelResult)]
    one = level_from_records(recs)
    assert (level.requests_ok, level.requests_failed, level.output_tokens) == (9, 1, 144)
    assert (level.ttft_ms, level.e2e_ms, level.itl_ms, level.tpot_ms) == (one.ttft_ms, one.e2e_ms, one.itl_ms, one.tpot_ms)
    assert level.duration_s == 4.25 and level.client.cpu_s == 1.0 and level.client.processes == 2
    assert not (tmp_path / "records.jsonl").read_bytes()   # no record lines came: none were made up


def test_a_level_where_every_part_failed_stops_the_sweep_with_a_parts_first_error() -> None:
    spec = ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(2, 4), warmup_requests=0, processes=2), None)
    recs = [RequestRecord(concurrency=2, index=i, start_s=0.0, end_s=0.01, ok=False, error="http",
                          detail="401 Unauthorized") for i in range(2)]
    seen = one_level_told_by_two_parts(spec, recs, "http: 401 Unauthorized")
    warning = seen[-1]
    assert isinstance(warning, Warn) and "no request succeeded at C=2 (http 2; first: http: 401 Unauthorized)" in \
        warning.message


def test_a_record_cut_off_by_a_part_that_died_stays_out_of_the_records_file(tmp_path: Path) -> None:
    # A part killed in the middle of writing its records leaves a last line without its newline: the records file
    # keeps its whole lines only, and the sweep ends saying which part broke off.
    whole = b'{"concurrency":4,"i":1,"start_s":0.25,"end_s":1.5,"ok":true,"chunks":3,"output_tokens":9,"itl_us":[]}'
    records = tmp_path / "records.jsonl"
    spec = ChildSpec("http://127.0.0.1:1", "m", Workload(levels=(4,), processes=2), str(records))

    class Killed:
        def __init__(self) -> None:
            self.stdout = asyncio.StreamReader()
            self.stdout.feed_data(whole + b"\n" + whole[:40])
            self.stdout.feed_eof()

        async def wait(self) -> int:
            return -9

    async def main() -> str:
        sweep = ShardedSweep(spec, lambda message: None)
        await sweep._read(1, Killed())  # type: ignore[arg-type]
        sweep._records.close()
        try:
            await sweep._finished
        except UserError as exc:
            return str(exc)
        return "no error"

    said = asyncio.run(main())
    assert records.read_bytes() == whole + b"\n"
    assert said.startswith("load generator part 2 of 2 wrote a line that is not JSON: "), said
