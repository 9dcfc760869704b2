"""Issue 37: the /metrics of an SSH host's runs are read through one relay kept running on that host (a python3
program on one session of the host's connection), all of a second's reads in one batch, instead of one direct-tcpip
channel per run. Against the real loopback sshd and real HTTP servers: what a user sees of each read must not change
(200 and its text, "timed out", "connection refused", an answer too large), a hung server must not hold up the
others, nothing of the relay may stay on the host, and a host without python3 is still read. The serving view's
reads of a real server's answer show the figures read directly, while only the lines it parses cross the link."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from paths import FIXTURES
from sshd_support import Relay, Sshd, established

from specmon.model.server.serving import FAMILIES, figures, read_sample
from specmon.sources import relayread
from specmon.sources.health import ProbeResult
from specmon.sources.local import LocalTransport
from specmon.sources.relayread import metrics_scraper
from specmon.sources.scrape import MAX_BODY, MetricsScraper
from specmon.sources.ssh import SSHTransport

pytestmark = pytest.mark.slow   # real servers and a real sshd

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def answer_port(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each GET with a /metrics line that names the server's port."""
    port = writer.get_extra_info("sockname")[1]
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        while await reader.readuntil(b"\r\n\r\n"):
            body = f"sglang:num_running_reqs {port}\n".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


async def _never_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()   # accepts, reads the request, says nothing


def noting(asked: list[float], answer: bool = True) -> Handler:
    """A server that notes when each request came, and answers it as `answer_port` does (or never: a hung server)."""
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        port = writer.get_extra_info("sockname")[1]
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                asked.append(time.monotonic())
                if answer:
                    body = _text(port).encode()
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return serve


async def _too_large(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1))
        await reader.read()


def answer_capture(body: bytes) -> Handler:
    """A server that answers each GET with a real server's /metrics capture."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    return answer


@contextlib.asynccontextmanager
async def _servers(*handlers: Handler) -> AsyncIterator[list[int]]:
    """Servers on loopback ports; on leaving, their connections are given a few seconds to end (a relay ends a moment
    after its link) and then cut."""
    live: set[asyncio.Future[None]] = set()

    def served(handler: Handler) -> Handler:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.ensure_future(handler(reader, writer))
            live.add(task)
            with contextlib.suppress(asyncio.CancelledError):
                await task
            live.discard(task)
            writer.close()
        return serve

    servers = [await asyncio.start_server(served(handler), "127.0.0.1", 0) for handler in handlers]
    try:
        yield [s.sockets[0].getsockname()[1] for s in servers]
    finally:
        for server in servers:
            server.close()
        if live:
            await asyncio.wait(live, timeout=5.0)
        for task in live:
            task.cancel()


def _text(port: int) -> str:
    return f"sglang:num_running_reqs {port}\n"


def _relays(sshd: Sshd) -> list[int]:
    """The metrics relays running under the sshd (its sessions' processes that run the relay's program)."""
    return [pid for pid in sshd.sessions()[0] if b"specmon-relay" in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _channels_to(sshd: Sshd, ports: list[int]) -> int:
    """Connections to these servers that the sshd itself holds: one per direct-tcpip channel."""
    sockets = sshd.sessions()[1]
    return sum(remote in ports and inode in sockets for _, remote, inode in established())


def _link_bytes(sshd: Sshd, counter: str) -> int:
    """A count of this machine's connections to the sshd (the kernel's, `ss`): "bytes_received" (what came over the
    SSH link, encrypted) or "bytes_sent"."""
    ours = {local for local, remote, _ in established() if remote == sshd.port}
    info = subprocess.run(["ss", "-tinH", "state", "established", f"( dport = :{sshd.port} )"],
                          capture_output=True, text=True, check=True).stdout
    total = 0
    for row, details in zip(info.splitlines()[::2], info.splitlines()[1::2]):
        if int(row.split()[2].rsplit(":", 1)[1]) in ours:
            total += sum(int(f.split(":")[1]) for f in details.split() if f.startswith(f"{counter}:"))
    return total


def _received_from(sshd: Sshd) -> int:
    return _link_bytes(sshd, "bytes_received")


async def _until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _on_the_second(scrapers: list[MetricsScraper]) -> list[tuple[ProbeResult, str | None]]:
    """Every scraper's read, begun together on the shared second as the serving view's readers are."""
    await asyncio.sleep(1.0 - time.monotonic() % 1.0)
    return await asyncio.gather(*(scraper.read() for scraper in scrapers))


async def _first_relay(sshd: Sshd, transport: SSHTransport, port: int) -> tuple[MetricsScraper, int]:
    """A reader of `port` on the sshd's host, read once (through the relay it started), and that relay's pid."""
    scraper = metrics_scraper(transport, port, 2.0, "127.0.0.1")
    assert (await scraper.read())[1] == _text(port)
    relays = _relays(sshd)
    assert len(relays) == 1
    return scraper, relays[0]


def _gone(pid: int) -> Callable[[], bool]:
    return lambda: not Path(f"/proc/{pid}").exists()


async def _close(transport: SSHTransport, scrapers: list[MetricsScraper]) -> None:
    for scraper in scrapers:
        await scraper.aclose()
    await transport.close()


async def test_a_hosts_runs_are_read_through_one_relay_not_a_channel_each(sshd: Sshd) -> None:
    """Four runs on one host: one relay on it reads them all, each over its own kept-alive connection; the sshd
    forwards no connection to any of them (before: a direct-tcpip channel per run, each read its own packets)."""
    async with _servers(answer_port, answer_port, answer_port, answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scrapers = [metrics_scraper(transport, port, 2.0, "127.0.0.1") for port in ports]
        try:
            for _ in range(3):
                answers = await _on_the_second(scrapers)
                assert [(r.status, text) for r, text in answers] == [(200, _text(port)) for port in ports]
            assert len(_relays(sshd)) == 1, "one relay reads the host's servers"
            assert _channels_to(sshd, ports) == 0, "the sshd forwards a channel per run"
        finally:
            await _close(transport, scrapers)


async def test_a_server_that_never_answers_times_out_while_the_hosts_others_answer_every_second(
        sshd: Sshd, free_port: int) -> None:
    """On one host: a server that accepts and never answers reads "timed out" (within its time limit), a port where
    nothing listens "connection refused", an answer over MAX_BODY its reason, while the host's healthy servers
    answer every second, each within a few tens of ms of the second."""
    async with _servers(answer_port, answer_port, _never_answer, _too_large) as ports:
        good, hung, large = ports[:2], ports[2], ports[3]
        transport = SSHTransport("gpu1", sshd.settings())
        scrapers = [metrics_scraper(transport, port, 2.0, "127.0.0.1") for port in [*ports, free_port]]
        late: list[float] = []
        said: dict[int, list[str | None]] = {}

        async def reader(scraper: MetricsScraper) -> None:
            while True:
                await asyncio.sleep(1.0 - time.monotonic() % 1.0)
                result, text = await scraper.read()
                said.setdefault(scraper.port, []).append(text if result.status == 200 else result.error)
                if scraper.port in good:
                    late.append(time.monotonic() % 1.0)

        try:
            assert (await scrapers[0].read())[0].status == 200   # the relay has started
            readers = [asyncio.create_task(reader(scraper)) for scraper in scrapers]
            await asyncio.sleep(4.5)
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
        finally:
            await _close(transport, scrapers)
        for port in good:
            assert said[port][:4] == [_text(port)] * 4, said[port]
        assert said[hung] and set(said[hung]) == {"timed out"}, said[hung]
        assert said[free_port][:4] == ["connection refused"] * 4, said[free_port]
        assert said[large][0] == f"answer over {MAX_BODY >> 20} MiB ({MAX_BODY + 1:,} bytes), not read", said[large]
        assert max(late) < 0.25, f"a healthy server's answer came {max(late):.3f} s after its second"


async def test_the_relay_ends_on_the_host_when_the_app_closes_its_link(sshd: Sshd) -> None:
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper, relay = await _first_relay(sshd, transport, ports[0])
        await _close(transport, [scraper])
        assert await _until(_gone(relay), 5.0), "the relay outlived the link"


async def test_the_relay_ends_on_the_host_when_its_link_is_cut_and_reading_resumes_after(sshd: Sshd) -> None:
    """The link reset under the app (a network drop): the relay ends on the host, and once the link is back a new
    relay reads on."""
    cut = await Relay(sshd.port).start()
    sshd.add_alias("relay-cut", cut.port)
    async with _servers(answer_port) as ports:
        transport = SSHTransport("relay-cut", sshd.settings(keepalive_s=1.0, connect_timeout_s=3.0), backoff_cap_s=2.0)
        scraper, first = await _first_relay(sshd, transport, ports[0])
        try:
            cut.reset()
            assert await _until(_gone(first), 10.0), "the relay outlived its link"
            texts = [(await _on_the_second([scraper]))[0][1] for _ in range(6)]
            assert texts[-1] == _text(ports[0]), texts
            assert len(_relays(sshd)) == 1
        finally:
            await _close(transport, [scraper])
            await cut.close()


async def test_a_relay_that_dies_is_replaced_on_a_later_second(sshd: Sshd) -> None:
    """Killed on the host (an OOM killer, a user): the reads it had been asked fail, no read hangs past its limit,
    and a later second starts another relay that reads on."""
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper, first = await _first_relay(sshd, transport, ports[0])
        try:
            await (await asyncio.create_subprocess_exec("kill", "-KILL", str(first))).wait()
            texts = []
            for _ in range(3):
                started = time.monotonic()
                result, text = (await _on_the_second([scraper]))[0]
                assert time.monotonic() - started < 3.1
                texts.append(text)
            assert texts[-1] == _text(ports[0]), texts
            assert _relays(sshd) and _relays(sshd) != [first]
        finally:
            await _close(transport, [scraper])


async def test_a_relay_that_stops_answering_is_replaced(sshd: Sshd) -> None:
    """A relay that hangs (here: stopped) costs one read its time limit ("timed out"); it is ended on the host and a
    later second reads through a new one."""
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper, first = await _first_relay(sshd, transport, ports[0])
        try:
            await (await asyncio.create_subprocess_exec("kill", "-STOP", str(first))).wait()
            said = [(await _on_the_second([scraper]))[0] for _ in range(3)]
            assert said[0][0].error == "timed out", said
            assert said[-1][1] == _text(ports[0]), said
            assert await _until(_gone(first), 5.0), "the stopped relay was left"
        finally:
            await _close(transport, [scraper])


OLD_PYTHONS = sorted(glob.glob("/root/.pyenv/versions/3.6*/bin/python3") + glob.glob("/usr/bin/python3.6"))


@pytest.mark.skipif(not OLD_PYTHONS, reason="no Python 3.6 on this machine")
async def test_the_relay_runs_on_a_host_whose_python3_is_3_6(sshd: Sshd, free_port: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """GPU hosts run old distributions: the relay is plain Python 3.6 (the serving view's cut answers and standing
    reads too)."""
    monkeypatch.setattr(relayread, "RELAY_PYTHON", OLD_PYTHONS[0])
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scrapers = [metrics_scraper(transport, port, 2.0, "127.0.0.1", keep=FAMILIES) for port in [ports[0], free_port]]
        scrapers.append(metrics_scraper(transport, ports[0], 2.0, "127.0.0.1", keep=FAMILIES, period_s=1.0))
        try:
            for _ in range(2):
                answers = await _on_the_second(scrapers)
                assert [(r.status, r.error, text) for r, text in answers] == \
                    [(200, None, _text(ports[0])), (None, "connection refused", None), (200, None, _text(ports[0]))]
            assert len(_relays(sshd)) == 1 and _channels_to(sshd, ports) == 0
        finally:
            await _close(transport, scrapers)


async def test_a_host_without_python3_is_read_directly_and_not_asked_again(
        sshd: Sshd, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose PATH has no such interpreter (here: a name no host has): its runs are read as before, each over
    a channel of its own, and the relay is not tried again on every second. A reader of every second (the serving
    view's) is read so too, on the app's clock (`paced` no more)."""
    monkeypatch.setattr(relayread, "RELAY_PYTHON", "python3-not-on-this-host")
    async with _servers(answer_port, answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scrapers = [metrics_scraper(transport, ports[0], 2.0, "127.0.0.1"), _standing(transport, ports[1])]
        started: list[str] = []
        session = transport.session

        def counted(command: str, wait_s: float | None = None) -> object:
            started.append(command)
            return session(command, wait_s)

        monkeypatch.setattr(transport, "session", counted)
        try:
            for _ in range(3):
                answers = await _on_the_second(scrapers)
                assert [(r.status, text) for r, text in answers] == [(200, _text(port)) for port in ports]
            assert _channels_to(sshd, ports) == 2
            assert len(started) == 1, started
            assert not scrapers[1].paced
        finally:
            await _close(transport, scrapers)


CAPTURES = sorted((FIXTURES / "metrics").glob("*.prom"))
READS = 5


async def _serving_reads(sshd: Sshd, scraper: MetricsScraper) -> tuple[list[object], int]:
    """READS reads in a row of the serving view's scraper: the figures of each, and the bytes the link brought."""
    before = _received_from(sshd)
    shown = []
    for _ in range(READS):
        result, text = await scraper.read()
        assert result.status == 200 and text is not None, result
        shown.append(figures(read_sample(text, 0.0)))
    return shown, _received_from(sshd) - before


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
async def test_a_real_servers_figures_read_through_the_relay_are_those_read_directly_and_cost_the_link_little(
        sshd: Sshd, capture: Path) -> None:
    """SGLang's and vLLM's real answers: the serving view's figures through the relay equal those read directly, and
    only the lines it parses cross the SSH link (before: the whole answer, histogram buckets and help lines, every
    second for every run)."""
    body = capture.read_bytes()
    async with _servers(answer_capture(body)) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        relayed = metrics_scraper(transport, ports[0], 2.0, "127.0.0.1", keep=FAMILIES)
        direct = MetricsScraper(LocalTransport(), ports[0], 2.0)
        try:
            assert (await relayed.read())[0].status == 200   # the relay has started
            shown, received = await _serving_reads(sshd, relayed)
            text = (await direct.read())[1]
            assert text is not None
            assert shown == [figures(read_sample(text, 0.0))] * READS
            if len(body) > 4096:   # the captures with their histograms (the others are excerpts of a few lines)
                assert received < READS * len(body) / 4, f"{received} bytes came for {READS} reads of {len(body)}"
        finally:
            await direct.aclose()
            await _close(transport, [relayed])


async def test_a_relay_started_again_is_told_which_lines_to_send(sshd: Sshd) -> None:
    """A relay killed on the host is replaced; the new one too sends only the lines the serving view parses."""
    body = (FIXTURES / "metrics" / "sglang-llama31-8b-production-metrics.prom").read_bytes()
    async with _servers(answer_capture(body)) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper = metrics_scraper(transport, ports[0], 2.0, "127.0.0.1", keep=FAMILIES)
        try:
            assert (await scraper.read())[0].status == 200
            first = _relays(sshd)[0]
            await (await asyncio.create_subprocess_exec("kill", "-KILL", str(first))).wait()
            for _ in range(3):   # the read the killed relay was asked fails; a later one starts another
                if (await _on_the_second([scraper]))[0][0].status == 200:
                    break
            assert _relays(sshd) and _relays(sshd) != [first]
            shown, received = await _serving_reads(sshd, scraper)
            assert shown[0] == figures(read_sample(body.decode(), 0.0))
            assert received < READS * len(body) / 4, f"{received} bytes came for {READS} reads of {len(body)}"
        finally:
            await _close(transport, [scraper])


def _standing(transport: SSHTransport, port: int) -> MetricsScraper:
    """A reader of `port` as the serving view reads it: every second, through a standing ask."""
    return metrics_scraper(transport, port, 2.0, "127.0.0.1", period_s=1.0)


async def test_a_reader_of_every_second_gets_each_answer_on_the_hosts_second_while_the_app_writes_nothing(
        sshd: Sshd) -> None:
    """The serving view's reads: asked once, then answered every second on the host's clock without the app writing
    a byte to the host (before: one write of asks a second, a sixth of the idle app's CPU at 64 runs); the host's
    answers of a second come together, on its second (this host's clock is ours)."""
    async with _servers(answer_port, answer_port, answer_port, answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings(keepalive_s=60.0))
        scrapers = [_standing(transport, port) for port in ports]
        try:
            first = await asyncio.gather(*(scraper.read() for scraper in scrapers))
            assert [text for _, text in first] == [_text(port) for port in ports]
            assert all(scraper.paced for scraper in scrapers)
            sent = _link_bytes(sshd, "bytes_sent")
            came: list[float] = []
            for _ in range(3):
                answers = await asyncio.gather(*(scraper.read() for scraper in scrapers))
                came.append(time.time())
                assert [text for _, text in answers] == [_text(port) for port in ports]
            assert _link_bytes(sshd, "bytes_sent") == sent, "the app wrote to the host while it was only reading"
            assert [round(b - a) for a, b in zip(came, came[1:])] == [1, 1], came
            assert max(at % 1.0 for at in came) < 0.3, f"answers came {[round(at % 1.0, 3) for at in came]} s past the second"
            assert len(_relays(sshd)) == 1 and _channels_to(sshd, ports) == 0
        finally:
            await _close(transport, scrapers)


async def test_a_standing_read_ends_on_the_host_when_its_reader_closes(sshd: Sshd) -> None:
    """A run no longer READY (its reader closed): the relay stops asking its server, and reads the others on."""
    asked: list[float] = []
    async with _servers(noting(asked), answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        gone, kept = _standing(transport, ports[0]), _standing(transport, ports[1])
        try:
            for _ in range(2):
                assert (await gone.read())[1] == _text(ports[0])
            await gone.aclose()
            closed_at = time.monotonic()
            for _ in range(3):
                assert (await kept.read())[1] == _text(ports[1])
            assert [round(at - closed_at, 3) for at in asked if at > closed_at + 0.5] == [], \
                "the closed reader's server was still asked"
        finally:
            await _close(transport, [gone, kept])


async def test_a_hung_servers_standing_reads_do_not_pile_up_while_its_hosts_others_answer(sshd: Sshd) -> None:
    """A server that accepts and never answers: each read says "timed out" within its limit, the server is asked no
    more often than its reads end, and the host's healthy server answers every second meanwhile."""
    asked: list[float] = []
    async with _servers(noting(asked, answer=False), answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        hung, good = _standing(transport, ports[0]), _standing(transport, ports[1])
        healthy: list[str | None] = []

        async def read_good() -> None:
            while True:
                healthy.append((await good.read())[1])

        reading = asyncio.create_task(read_good())
        try:
            started = time.monotonic()
            said = []
            for _ in range(3):
                began = time.monotonic()
                result, _ = await hung.read()
                said.append(result.error)
                assert time.monotonic() - began < 2.5, "a read of the hung server ran past its limit"
            spent = time.monotonic() - started
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
            await _close(transport, [hung, good])
        assert said == ["timed out"] * 3, said
        assert len(asked) <= 4, f"the hung server was asked {len(asked)} times in {spent:.1f} s of 3 reads"
        assert len(healthy) >= int(spent) - 1 and set(healthy) == {_text(ports[1])}, (spent, healthy)


async def test_standing_reads_go_on_through_a_new_relay_after_the_relay_is_killed(sshd: Sshd) -> None:
    """The relay killed on the host: no read waits out its limit for it (a read waiting when it died says "link
    down"; one made after its end starts another relay), and the reads come again every second through a new one."""
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper = _standing(transport, ports[0])
        try:
            assert (await scraper.read())[1] == _text(ports[0])
            first = _relays(sshd)[0]
            await (await asyncio.create_subprocess_exec("kill", "-KILL", str(first))).wait()
            said = [await scraper.read() for _ in range(5)]
            errors = [result.error for result, _ in said]
            assert set(errors) <= {None, "link down"} and errors.count("link down") <= 1, said
            assert [text for _, text in said[-3:]] == [_text(ports[0])] * 3, said
            assert _relays(sshd) and _relays(sshd) != [first]
        finally:
            await _close(transport, [scraper])


async def test_a_standing_reader_whose_link_is_gone_is_not_paced_so_its_caller_waits_for_its_clock(
        sshd: Sshd) -> None:
    """A read through a link that is gone fails at once ("link down"); a reader paced after it would be asked again at
    once by the serving view, in a loop with no wait: it is paced only after an answer."""
    async with _servers(answer_port) as ports:
        transport = SSHTransport("gpu1", sshd.settings())
        scraper = _standing(transport, ports[0])
        try:
            assert (await scraper.read())[1] == _text(ports[0]) and scraper.paced
            await transport.close()
            result, _ = await scraper.read()
            assert result.error == "link down" and result.elapsed_s < 1.0, result
            assert not scraper.paced
        finally:
            await _close(transport, [scraper])


async def test_a_server_slow_for_seconds_is_not_asked_in_a_burst_of_the_seconds_it_missed() -> None:
    """The relay program alone (as a host runs it, no SSH): a standing ask whose server took 3.5 s to answer is not
    asked again while that read waits, so once the server is back its reads go on one a second, not in a burst of the
    seconds it missed (each a stale figure, and load on a server just recovering)."""
    asked: list[float] = []

    async def slow_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                asked.append(time.monotonic())
                if len(asked) == 1:
                    await asyncio.sleep(3.5)
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async with _servers(slow_first) as ports:
        relay = await asyncio.create_subprocess_exec(
            "python3", "-I", "-c", relayread.PROGRAM, str(MAX_BODY), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert relay.stdin is not None and relay.stdout is not None
        try:
            assert await relay.stdout.readline() == relayread.HELLO
            relay.stdin.write(f"every 1000 1 127.0.0.1 {ports[0]} 5000 /metrics\n".encode())
            answers = []
            for _ in range(4):
                head = (await asyncio.wait_for(relay.stdout.readline(), 10.0)).split()
                answers.append((head[1], await relay.stdout.readexactly(int(head[3]))))
        finally:
            relay.stdin.close()
            await relay.wait()
    assert answers == [(b"ok", b"ok")] * 4, answers
    gaps = [round(b - a, 3) for a, b in zip(asked, asked[1:])]
    assert min(gaps) > 0.5, f"asked {gaps} s apart"
