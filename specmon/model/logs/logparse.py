"""Incremental, tolerant launch-log parser: bytes in, events out.

    parser = LogParser()            # LogParser(lines=True) also emits a `Line` per cleaned line
    events = parser.feed(chunk)     # any chunking: partial lines and split UTF-8 are carried over
    events += parser.close()        # flush the trailing partial line at end of file

How a chunk flows:
1. bytes -> text with an incremental UTF-8 decoder (bad bytes become U+FFFD, never an exception).
2. Physical lines end at `\\n` (`\\r\\n` counts once); they are numbered from 1. A `\\r` (tqdm redraw)
   splits a line into pieces that share its number; pieces of an unfinished line are handled as soon as
   their `\\r` arrives, so a live bar shows progress before its line ends. A piece longer than
   MAX_PIECE_CHARS is handled in slices, so memory stays bounded on newline-free input.
3. Prefilter, per line, cheapest first: an `NCCL INFO` line (the bulk of an NCCL_DEBUG=INFO log) is
   skipped unless it says `set by environment`; any other line must contain a trigger word
   (`signals.TRIGGER_WORDS`, one trie-shaped regex). Boring lines cost a split and a substring test;
   no event, no cleaning. (`bench/logscan_speed.py` measures it.)
4. A hit line is split where records were glued together (after a tqdm bar, before a vLLM process tag),
   each piece is cleaned (`clean.clean`) and its message run through `signals.message_events`.
5. State across lines: the server seen so far, the log's first timestamp (for load time from the log's
   own clock), an open traceback (to report the exception line itself), and a wrapped args dump.

The parser never raises on content: garbage, binary, unknown wording all end as "no event".
"""

from __future__ import annotations

import codecs
import re
from collections import deque

from specmon.model.logs import signals
from specmon.model.logs.clean import SGLANG, VLLM, VLLM_WEAK, Cleaned, clean, elapsed_between, ts_kind, ts_seconds
from specmon.model.logs.events import (
    Event,
    HttpUp,
    Line,
    LoggedError,
    LogSignature,
    Ready,
    ServerDetected,
    ShardProgress,
)

MAX_PIECE_CHARS = 1 << 20  # a line longer than this (no newline) is handled in slices of this size
CONTEXT_LINES = 20  # lines kept for failure reports
# Every line is looked at until the first timestamp and the server are known, for at most this many lines.
_SCAN_LINES = 2000
_ARGS_CONTINUATION_LINES = 3  # pastes wrap a 10 KB args dump mid-token; join this many following lines

_NCCL_INFO = " NCCL INFO "
_NCCL_ENV = "set by environment"


# The failure of a log whose server was killed by a signal (the shell's "Killed"): who sent it is not in the log.
KILLED = "Killed (the kernel's OOM killer or a signal ended the server)"

def _trie_pattern(words: tuple[str, ...]) -> str:
    """One regex for "contains any of these words", shaped as a trie so that re tries one branch per
    character instead of every word at every position (several times faster on long lines)."""
    trie: dict[str, dict] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, dict]) -> str:
        if "" in node:  # a shorter word already matches: the rest of the branch adds nothing
            return ""
        alts = [re.escape(ch) + build(sub) for ch, sub in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return build(trie)


_TRIGGER_RE = re.compile(_trie_pattern(signals.TRIGGER_WORDS))
# Records glued onto a tqdm bar (`...4.58it/s](Worker_TP2 pid=1) INFO ...`), or onto each other when a
# paste lost its newlines (`...(APIServer pid=2960)   File ...`).
_GLUE_SPLIT_RE = re.compile(
    r"(?<=it/s\])(?=\S)|(?<=s/it\])(?=\S)"
    r"|(?<=\S)(?=\((?:APIServer|EngineCore|Worker|VllmWorker|RayWorkerWrapper)\w* (?:rank=\d+ )?pid=\d+\))"
)
_SGLANG_WORDS = re.compile(r"sglang|server_args=|Scheduler hit an exception|fired up and ready|"
                           r"Decode batch|KV Cache is allocated|max_total_num_tokens=|Load weight (?:begin|end)")
_VLLM_WORDS = re.compile(r"/vllm/|vLLM API server|non-default args|GPU KV cache size|Engine 0\d\d:|"
                         r"SpecDecoding metrics|Capturing CUDA graphs|EngineCore|Starting vLLM")


class LogParser:
    """Turn a launch log's bytes into events, incrementally (see the module docstring)."""

    def __init__(self, lines: bool = False) -> None:
        self.lines = lines
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""  # unfinished piece of the current line (after its last \r)
        self._settled = ""  # the pending piece `settle` already read
        self._line_no = 1  # number of the line now being read
        self._tail: deque[str] = deque(maxlen=CONTEXT_LINES)  # raw last pieces of recent lines
        self._tail_has_pending = False  # the tail's last entry is a piece of the unfinished line
        self.server: str | None = None  # "sglang", "vllm", or None; a weak vLLM guess is kept apart
        self._weak_vllm_line: int | None = None
        self._server_by_prefix = False
        self._first_ts: dict[str, float] = {}
        self._last_ts: str | None = None  # the latest timestamp text seen
        self._scan_left = _SCAN_LINES
        self._launch_seen = False  # an args dump was seen: the log starts at the launch
        # traceback state
        self._tb_open = False
        self._tb_fatal = False
        self._fatal_marker_line: int | None = None
        # wrapped args dump
        self._args_text: str | None = None
        self._args_line = 0
        self._args_left = 0
        self._out: list[Event] = []
        self._at_top = True  # still inside the leading `# ` metadata lines, if any
        # where the line being handled sits, for failure context (None: a piece of the unfinished line)
        self._cur_lines: list[str] | None = None
        self._cur_idx = 0

    # ------------------------------------------------------------------ public API
    def feed(self, data: bytes) -> list[Event]:
        """Parse the next bytes of the log and return the events they complete."""
        text = self._decoder.decode(data)
        return self._feed_text(text)

    def close(self) -> list[Event]:
        """End of input: handle the trailing partial line and any wrapped args dump still open."""
        text = self._decoder.decode(b"", final=True)
        events = self._feed_text(text) if text else []
        self._out = events
        if self._pending:
            piece, self._pending = self._pending, ""
            self._remember_piece(piece)
            self._handle_line(piece, self._line_no)
        self._flush_args()
        self._out = []
        return events

    def settle(self) -> list[Event]:
        """Shard progress from the unfinished line's last piece, for a writer that has paused there.

        tqdm writes `\\r` + its update, so the newest update of a live bar sits after the last `\\r` until the
        next redraw: on a stalled load it would never be read, and a live reader would say one shard less
        than a reader of the finished file. The caller decides the writer has paused (no bytes for a while);
        only ShardProgress is taken (repeating it when the piece completes is harmless), and a piece is
        settled once.
        """
        piece = self._pending
        if not piece or piece == self._settled:
            return []
        self._settled = piece
        found: list[Event] = []
        for sub in _GLUE_SPLIT_RE.split(piece):
            if sub:
                c = clean(sub)
                found += [e for e in signals.message_events(c.msg, c.rank, self._line_no) if isinstance(e, ShardProgress)]
        return found

    def pass_over(self, lines: int) -> bool:
        """Count the next `lines` whole lines as read without reading them: lines that can tell the parser nothing (a
        ready server's access lines of the reads that watch it, one a second). False, and nothing done, where it is
        not between lines, still at the top of the file, or in something that spans lines (it must read them).
        They are not in `tail` either: a failure's context is the lines of its own."""
        if self._pending or self._decoder.getstate()[0] or self._at_top or self.lines or self._scanning() \
                or self._args_text is not None:
            return False
        self._line_no += lines
        return True

    @property
    def line_no(self) -> int:
        """Number of the line being read (lines completed so far + 1)."""
        return self._line_no

    def tail(self) -> tuple[str, ...]:
        """The last CONTEXT_LINES cleaned lines read so far (for failure reports)."""
        return tuple(clean(p).msg for p in self._tail)

    # ------------------------------------------------------------------ splitting
    def _feed_text(self, text: str) -> list[Event]:
        out: list[Event] = []
        self._out = out
        if not text:
            return out
        if self._pending:
            text = self._pending + text
            self._pending = ""
        nl = text.rfind("\n")
        if nl >= 0:
            self._block(text[: nl + 1])
            rest = text[nl + 1:]
        else:
            rest = text
        # Pieces of the unfinished line that a \r already closed: handle them now (live tqdm bars).
        cr = rest.rfind("\r")
        if cr >= 0:
            done, rest = rest[:cr], rest[cr + 1:]
            for piece in done.split("\r"):
                if piece:
                    self._remember_piece(piece)
                    self._handle_line(piece, self._line_no)
        while len(rest) > MAX_PIECE_CHARS:
            piece, rest = rest[:MAX_PIECE_CHARS], rest[MAX_PIECE_CHARS:]
            self._handle_line(piece, self._line_no)
        self._pending = rest
        self._out = []
        return out

    def _block(self, block: str) -> None:
        """Complete lines (block ends with \\n). Only lines that pass the prefilter are parsed.

        Prefilter, per line, cheapest first: an NCCL INFO line (the bulk of an NCCL_DEBUG=INFO log) is
        skipped unless it says `set by environment`; any other line must contain a trigger word.
        """
        if self._at_top:
            block = self._skip_header(block)
            if not block:
                return
        base = self._line_no
        lines = block.split("\n")
        lines.pop()  # the block ends with \n
        self._cur_lines = lines
        search = _TRIGGER_RE.search
        handle = self._handle_line
        careful = self.lines or self._scanning() or self._args_text is not None
        for i, raw in enumerate(lines):
            if careful:
                if self._careful_line(raw, base + i):
                    continue
                careful = self.lines or self._scanning() or self._args_text is not None
            if _NCCL_INFO in raw:
                if _NCCL_ENV not in raw:
                    continue
            elif search(raw) is None:
                continue
            self._cur_idx = i
            handle(raw, base + i)
            if self._args_text is not None:
                careful = True
        self._cur_lines = None
        self._line_no = base + len(lines)
        self._remember_block(lines)

    def _careful_line(self, raw: str, line_no: int) -> bool:
        """The slow per-line work: server/timestamp scan, `Line` events, args-dump continuation.

        Returns True when the line was consumed (a continuation of a wrapped args dump).
        """
        last = raw.rstrip("\r").rpartition("\r")[2]
        if self.lines or self._scanning():
            c = clean(last)
            if self._scanning():
                self._scan_left -= 1
                self._note_ts(c)
                self._note_server(c, c.msg, line_no)
            if self.lines:
                self._out.append(Line(c.msg, line_no))
        if self._args_text is None:
            return False
        self._args_text += raw.rstrip("\r")
        self._args_left -= 1
        if self._args_text.rstrip().endswith((")", "}")) or self._args_left <= 0:
            self._flush_args()
        return True

    def _skip_header(self, block: str) -> str:
        """Metadata lines (`# source: ...`) at the very top of a file are not log lines: count, skip."""
        pos = 0
        while block.startswith("# ", pos):
            pos = block.find("\n", pos) + 1
            self._line_no += 1
            if pos >= len(block):
                return ""
        self._at_top = False
        return block[pos:]

    def _scanning(self) -> bool:
        """Still looking at every line for the first timestamp or for which server speaks."""
        return self._scan_left > 0 and (not self._first_ts or self.server is None)

    def _remember_piece(self, piece: str) -> None:
        """Tail bookkeeping for a \\r-piece of the unfinished line: like a terminal, keep only its latest."""
        if self._tail_has_pending:
            self._tail[-1] = piece
        else:
            self._tail.append(piece)
            self._tail_has_pending = True

    def _remember_block(self, lines: list[str]) -> None:
        """Tail bookkeeping for complete lines (the last piece of each, as a terminal shows it)."""
        if self._tail_has_pending and lines:
            # The first line of the block finishes the line whose earlier pieces are already in the tail.
            last = lines[0].rstrip("\r").rpartition("\r")[2]
            if last:
                self._tail[-1] = last
            lines = lines[1:]
            self._tail_has_pending = False
        for raw in lines[-CONTEXT_LINES:]:
            self._tail.append(raw.rstrip("\r").rpartition("\r")[2])

    # ------------------------------------------------------------------ one line
    def _handle_line(self, raw: str, line_no: int) -> None:
        if len(raw) > MAX_PIECE_CHARS:  # bound the work of every regex below
            for start in range(0, len(raw), MAX_PIECE_CHARS):
                self._handle_line(raw[start:start + MAX_PIECE_CHARS], line_no)
            return
        pieces = raw.split("\r") if "\r" in raw else (raw,)
        for piece in pieces:
            if not piece:
                continue
            if "it/s]" in piece or "s/it]" in piece or piece.count("pid=") > 1:
                for sub in _GLUE_SPLIT_RE.split(piece):
                    if sub:
                        self._handle_piece(sub, line_no)
            else:
                self._handle_piece(piece, line_no)

    def _handle_piece(self, piece: str, line_no: int) -> None:
        c = clean(piece)
        msg = c.msg
        out = self._out
        self._note_server(c, msg, line_no)
        if c.ts is not None:
            self._note_ts(c)
        if self._failure(msg, line_no, piece):
            return
        if "ready to roll" in msg and signals.READY_RE.search(msg):
            out.append(Ready(self._log_elapsed(c), line_no))
            return
        if ("startup complete" in msg or "Uvicorn running" in msg) and signals.HTTP_UP_RE.search(msg):
            out.append(HttpUp(self._log_elapsed(c), line_no))
            return
        if ("args" in msg or "Initializing" in msg) and signals.ARGS_START_RE.search(msg):
            self._launch_seen = True
            stripped = msg.rstrip()
            if not stripped.endswith((")", "}")):
                # A wrapped dump: collect the continuation lines first (see _careful_line).
                self._args_text, self._args_line, self._args_left = stripped, line_no, _ARGS_CONTINUATION_LINES
                return
        out.extend(signals.message_events(msg, c.rank, line_no))

    def _flush_args(self) -> None:
        if self._args_text is None:
            return
        text, self._args_text = self._args_text, None
        self._out.append(signals.launch_args(signals.parse_args_dump(text), self._args_line))

    # ------------------------------------------------------------------ server, time
    def _note_server(self, c: Cleaned, msg: str, line_no: int) -> None:
        """Which server speaks. A prefix only one server prints (SGLang's `[date TPn]`, vLLM's process tags)
        settles it; wording settles it only while nothing better was seen; a bare vLLM-format prefix is a
        weak guess (SGLang imports vllm, whose lines keep vLLM's format)."""
        if self._server_by_prefix:
            return
        hint = c.server_hint
        if hint == SGLANG or hint == VLLM:
            self._server_by_prefix = True
        elif self.server is None:
            if _SGLANG_WORDS.search(msg):
                hint = SGLANG
            elif _VLLM_WORDS.search(msg):
                hint = VLLM
            elif hint == VLLM_WEAK and self._weak_vllm_line is None:
                self._weak_vllm_line = line_no
                return
            else:
                return
        else:
            return
        if hint != self.server:
            self.server = hint
            self._out.append(ServerDetected(hint, line_no))

    def weak_server(self) -> str | None:
        """The server when only weak evidence was seen (a bare vLLM-format prefix), else None."""
        return VLLM if self.server is None and self._weak_vllm_line is not None else None

    def _note_ts(self, c: Cleaned) -> None:
        # Parsing is deferred: only the first timestamp of each format and the one at a ready line matter.
        if c.ts is None:
            return
        self._last_ts = c.ts
        if ts_kind(c.ts) not in self._first_ts:
            parsed = ts_seconds(c.ts)
            if parsed is not None:
                self._first_ts[parsed[0]] = parsed[1]

    def _log_elapsed(self, c: Cleaned) -> float | None:
        """Seconds from the log's first timestamp to this line's (or the latest) one, in the same format.

        Only when the log shows the launch itself (an args dump): an excerpt that starts mid-launch
        would give a duration of nothing in particular.
        """
        if not self._launch_seen:
            return None
        text = c.ts or self._last_ts
        now = ts_seconds(text) if text else None
        if now is None or now[0] not in self._first_ts:
            return None
        return elapsed_between((now[0], self._first_ts[now[0]]), now)

    # ------------------------------------------------------------------ failures
    def _context(self, piece: str) -> tuple[str, ...]:
        """Up to CONTEXT_LINES cleaned lines ending with the one being handled (whose piece is given)."""
        before: list[str] = []
        if self._cur_lines is not None:
            i = self._cur_idx
            before = self._cur_lines[max(0, i - CONTEXT_LINES + 1):i][::-1]
        if len(before) < CONTEXT_LINES - 1:
            older = list(self._tail)
            before.extend(reversed(older[-(CONTEXT_LINES - 1 - len(before)):]))
        before.reverse()
        lines = [clean(raw.rstrip("\r").rpartition("\r")[2]).msg for raw in before]
        lines.append(clean(piece).msg)
        return tuple(lines)

    def _fail(self, kind: LogSignature, message: str, fatal: bool, provisional: bool, line_no: int, piece: str) -> None:
        self._out.append(LoggedError(kind, message, fatal, provisional, line_no, self._context(piece)))

    def _failure(self, msg: str, line_no: int, piece: str) -> bool:
        """Failure bookkeeping for one message; True when the message was a failure line."""
        if not self._tb_open and signals.FAILURE_HINT_RE.search(msg) is None:
            return False  # the common case (progress and stats lines): one search, nothing else
        marker = signals.FATAL_MARKER_RE.search(msg)
        traceback = "Traceback" in msg and signals.TRACEBACK_RE.search(msg) is not None
        if marker is not None:
            kind = signals.classify(msg) or LogSignature.EXCEPTION
            self._fail(kind, msg.strip(), True, kind == LogSignature.EXCEPTION, line_no, piece)
            self._fatal_marker_line = line_no
            if traceback:
                self._tb_open, self._tb_fatal = True, True
            return True
        if traceback:
            fatal = self._fatal_marker_line is not None
            self._tb_open, self._tb_fatal = True, fatal
            if not fatal:
                self._fail(LogSignature.EXCEPTION, msg.strip(), False, True, line_no, piece)
            return True
        if msg[:1] in " \t^":
            if self._tb_open:
                if signals.FRAME_RE.match(msg):
                    return True
            elif signals.FRAME_START_RE.match(msg):
                # A traceback whose header is not in the log (an excerpt, or a lost line).
                self._tb_open, self._tb_fatal = True, self._fatal_marker_line is not None
                if not self._tb_fatal:
                    self._fail(LogSignature.EXCEPTION, msg.strip(), False, True, line_no, piece)
                return True
        if self._tb_open:
            m = signals.EXCEPTION_LINE_RE.match(msg)
            if m is not None:
                kind = signals.classify(msg) or LogSignature.EXCEPTION
                self._fail(kind, msg.strip(), self._tb_fatal or kind != LogSignature.EXCEPTION, False, line_no, piece)
                self._tb_open = False
                self._fatal_marker_line = None
                return True
        if ("Killed" in msg and signals.KILLED_RE.match(msg)):
            self._fail(LogSignature.OOM, KILLED, True, False,
                       line_no, piece)
            return True
        named = signals.classify(msg)
        if named is not None:
            self._fail(named, msg.strip(), True, False, line_no, piece)
            return True
        return False
