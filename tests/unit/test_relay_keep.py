"""Issue 37: an SSH host's metrics relay sends the serving view only the lines of an answer that its parser reads
(`metricsrelay.kept_lines`). Whatever a server answers, the figures read from the cut text must be the figures read
from the whole: the real captures, and the same captures made hostile (CRLF endings, indented lines, names that
start other names, `position=` labels, comments that name a family, bytes that are not UTF-8)."""

from __future__ import annotations

import random

import pytest
from paths import FIXTURES

from specmon.model.server.acceptance import parse_metrics
from specmon.model.server.serving import FAMILIES
from specmon.sources.metricsrelay import kept_lines, lines_starting

CAPTURES = sorted((FIXTURES / "metrics").glob("*.prom"))
KEEP = lines_starting(sorted(FAMILIES))


def parsed(body: bytes) -> object:
    """What the serving view reads of an answer (the scraper decodes it so)."""
    return parse_metrics(body.decode("utf-8", errors="replace"), FAMILIES)


def hostile(body: bytes) -> list[bytes]:
    """The capture, and variants of it a server (or a proxy in front of it) might answer."""
    lines = body.split(b"\n")
    return [
        body,
        body.replace(b"\n", b"\r\n"),                                   # CRLF endings
        b"\n".join(b"  " + line for line in lines),                       # every line indented
        b"\n".join(b"\t" + line if i % 2 else line for i, line in enumerate(lines)),
        b"\n".join(line + b"\n" + line.replace(b":", b":x_", 1) for line in lines),   # names longer than a family's
        body.replace(b'",', b'",position="1",', 3),                      # spec positions, which the parser skips
        b"\n".join(b"# HELP " + line for line in lines) + b"\n" + body,  # comments that name each family
        body.rstrip(b"\n"),                                              # no last newline
        b"\xff\xfe" + body.replace(b"\n", b"\xc3\n", 5),                 # bytes that are not UTF-8 before newlines
        b"\r" + body.replace(b"\n", b"\r"),                             # old Mac endings: one line to the parser
    ]


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.stem)
def test_the_cut_answer_reads_as_the_whole_one(capture) -> None:
    for body in hostile(capture.read_bytes()):
        assert parsed(kept_lines(body, KEEP)) == parsed(body)


def test_the_cut_answer_of_a_real_server_is_a_small_part_of_it() -> None:
    """What crosses the link a second: a busy SGLang server's answer is mostly histogram buckets and help lines."""
    body = (FIXTURES / "metrics" / "sglang-llama31-8b-production-metrics.prom").read_bytes()
    assert parsed(body)   # it holds figures the serving view shows
    assert len(kept_lines(body, KEEP)) < len(body) / 10


def test_random_answers_built_from_family_names_read_the_same_cut() -> None:
    """Lines made of family names, their prefixes and extensions, labels, spaces, CR and comment marks, in any mix."""
    rng = random.Random(37)
    names = sorted(FAMILIES)
    parts = [b"", b" ", b"\t", b"\r", b"#", b"# TYPE ", b"{", b"}", b'{engine="0"}', b'{position="0"}', b" 1.5",
             b" 7", b" nan", b"_total", b"_bucket", b"x"]
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(0, 30)):
            name = rng.choice(names).encode()
            name = name[:rng.randint(1, len(name))] if rng.random() < 0.2 else name
            lines.append(b"".join([rng.choice(parts), name, *rng.choices(parts, k=rng.randint(0, 4))]))
        body = rng.choice([b"\n", b"\r\n"]).join(lines)
        assert parsed(kept_lines(body, KEEP)) == parsed(body), body
