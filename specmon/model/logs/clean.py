"""Cleaning one log piece: colour codes, wrapper prefixes, then the server's own prefix.

`clean(piece)` returns a `Cleaned`: the message body the signal regexes run on, plus what the prefixes
said (which server's format, rank, timestamp). Order matters: ANSI codes first (they can sit inside a
prefix), then wrappers added by whatever collected the log (docker-compose `name  | `, journald, a log
collector's bracketed ISO-8601 timestamp, Ray / process tags `(Name pid=N)`, torch `[rankN]:`), then one
server prefix (SGLang `[date TPn]`, vLLM `LEVEL MM-DD hh:mm:ss [file.py:N]`, or a host app's Python
logging format). Values of secret-looking arguments are redacted on the way. Formats: the project's
shared reference `server-formats.md` §1.
"""

from __future__ import annotations

import codecs
import datetime as _dt
import re
from dataclasses import dataclass

# Real ESC, caret notation from pastes, or ESC lost so only `[36m` remains (then at least one digit, so
# ordinary text such as `[model]` is left alone).
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\^\[\[[0-9;]*[A-Za-z]|\[[0-9;]*[0-9]m")

# Every terminal control sequence, so log text can never retitle, recolour, move or query the user's terminal:
# CSI (ESC [ or C1 0x9b, up to its final byte), string sequences (OSC, DCS, SOS, PM, APC, in ESC or C1 form,
# up to BEL or ST or the end of the line), and the other ESC sequences (ESC c, ESC 7, ESC ( B ...).
_CONTROL_SEQ_RE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])[^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
)
# What is left that a terminal would act on: C0 controls but tab and newline, DEL, C1.
_CONTROL_CHAR_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ANY_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")

_WRAPPER_RE = re.compile(
    r"(?:"
    # log collector: [2025-03-08T12:29:04.123Z]
    r"\[\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\]\s*"
    # journald: `авг 18 14:15:04 llm python3[28059]: `
    r"|\w{3,4}\.? {1,2}\d{1,2} \d{2}:\d{2}:\d{2} \S+ [\w.-]+(?:\[\d+\])?: "
    # docker-compose: `vllm-eb_1  | `
    r"|[A-Za-z0-9][\w.-]*\s+\| "
    # torch distributed: `[rank6]:`
    r"|\[rank(?P<trank>\d+)\]:"
    # Ray and vLLM process tags, possibly nested and possibly unclosed when a bar was spliced in
    r"|\((?:(?P<proc>[A-Za-z_][\w:.-]*?)(?: rank=(?P<prank>\d+))? )?pid=\d+(?:, ip=[\d.]+)?\)? ?"
    r")"
)

_SGLANG_RE = re.compile(
    r"\[(?P<ts>(?:\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}:\d{2}(?:\.\d{3})?)"
    r"(?P<ranks>(?: (?:DP|PP|ATTN_CP|MOE_DP|TP|EP)\d+)*)\] ?"
)
_VLLM_RE = re.compile(
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) (?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.\d+)? "
    r"\[?[^\s\]]+\.py:\d+\] ?"
)
# A host application's Python logging format, e.g. `2026-06-07 10:59:31,659 [INFO] sglang.srt...: ` or
# flashinfer's `2025-03-27 21:33:31,320 - INFO - flashinfer.jit: `.
_PYLOG_RE = re.compile(
    r"(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}),\d{3} (?:\[\w+\]|- \w+ -) "
    r"(?:(?P<logger>[A-Za-z_][\w.]*)(?: - [\w.]+:\d+ -)?:? )?"
)
# Secret-looking arguments in args dumps (`api_key='sk-...'`, `'hf_token': 'hf_...'`): old servers print them
# in clear. The key must end with the secret word, so `max_total_tokens=4096` and `#token: 5` stay.
_SECRET_ARG_RE = re.compile(
    r"\b(\w*(?:_key|_token|secret|password)|key|token)(=|': )(?!None\b)('[^']*'|\"[^\"]*\"|[^\s,)}]+)",
    re.IGNORECASE,
)
REDACTED = "'<redacted>'"
_TP_RE = re.compile(r"TP(\d+)")
_PROC_RANK_RE = re.compile(r"(?:TP|rank)(\d+)", re.IGNORECASE)

# Which server a format belongs to; "vllm?" is a weak hint (SGLang imports vllm, whose lines then carry
# vLLM's format) that any SGLang evidence overrides.
SGLANG = "sglang"
VLLM = "vllm"
VLLM_WEAK = "vllm?"

_VLLM_PROCS = ("APIServer", "EngineCore", "Worker", "VllmWorker", "DPEngineCore", "DPSupervisor",
               "RayWorkerWrapper")


@dataclass(frozen=True, slots=True)
class Cleaned:
    """A cleaned piece: `msg` without any prefix, plus what the prefixes told."""

    msg: str
    server_hint: str | None = None  # SGLANG, VLLM, VLLM_WEAK or None
    rank: int | None = None
    ts: str | None = None  # timestamp text as printed; see `ts_seconds`
    level: str | None = None


def strip_ansi(text: str) -> str:
    """Remove colour codes in all three spellings (ESC, `^[`, lost ESC)."""
    if "[" not in text:
        return text
    return ANSI_RE.sub("", text)


def printable(text: str) -> str:
    """`text` safe to write to a terminal: control sequences removed, other control characters (a lone ESC,
    BEL, backspace, `\\r`...) shown as `\\xNN`; tabs and newlines kept."""
    if text.isprintable() or _CONTROL_CHAR_RE.search(text) is None:   # isprintable: the C-speed common case
        return text
    return _CONTROL_CHAR_RE.sub(_hex, _CONTROL_SEQ_RE.sub("", text))


def escape_controls(text: str) -> str:
    """`text` on one line with every control character (newline and tab too) shown as `\\xNN`, nothing removed:
    for echoing what a user wrote (a config value), where hiding part of it would mislead."""
    return _ANY_CONTROL_RE.sub(_hex, text)


def one_line(text: str, limit: int = 2000) -> str:
    """`text` from outside (a host, a server, a file) as one terminal line: controls escaped (`escape_controls`),
    cut at `limit` characters saying how long it was (a 10 MB line must not become a 10 MB error)."""
    if len(text) > limit:
        text = f"{text[:limit]}… (cut: {len(text):,} characters in all)"
    return escape_controls(text)


def _hex(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


class PrintableStream:
    """Log bytes arriving in arbitrary pieces, as printable text (see `printable`), one piece at a time.

    A character or control sequence split between two pieces is held back until it is complete, so it can be
    neither printed half nor slip through. Carriage returns are kept (a progress bar redraws in place, as `cat`
    shows it); every other control character is escaped.
    """

    _HOLD_MAX = 4096   # an "escape sequence" longer than this is text, not a sequence still arriving

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._held = ""

    def feed(self, data: bytes, final: bool = False) -> str:
        """The printable text of `data` (and of what the last call held back); final=True flushes everything."""
        text = self._held + self._decoder.decode(data, final)
        self._held = ""
        if not final:
            cut = max(text.rfind("\x1b"), max((text.rfind(c) for c in "\x90\x98\x9b\x9d\x9e\x9f"), default=-1))
            if cut >= 0 and len(text) - cut < self._HOLD_MAX:
                m = _CONTROL_SEQ_RE.match(text, cut)
                if m is not None and m.end() == len(text):
                    text, self._held = text[:cut], text[cut:]
        return "\r".join(printable(part) for part in text.split("\r")) if "\r" in text else printable(text)


def redact(text: str) -> str:
    """Replace the values of secret-looking arguments (api keys, tokens, passwords) with '<redacted>'."""
    return _SECRET_ARG_RE.sub(lambda m: m.group(1) + m.group(2) + REDACTED, text)


def clean(piece: str) -> Cleaned:
    """Strip colour codes, wrapper prefixes and the server prefix from one piece of a line; redact secrets
    (everything downstream, events, failure context, displayed lines, sees the redacted text)."""
    text = printable(strip_ansi(piece) if "[" in piece else piece)
    if "key" in text or "oken" in text or "ecret" in text or "assword" in text:
        text = redact(text)
    rank: int | None = None
    proc: str | None = None
    # Wrappers can nest (docker-compose around a Ray tag around a vLLM tag); bounded, never loops forever.
    for _ in range(6):
        m = _WRAPPER_RE.match(text)
        if m is None or m.end() == 0:
            break
        if m.group("trank") is not None:
            rank = int(m.group("trank"))
        elif m.group("proc") is not None or m.group("prank") is not None:
            proc = m.group("proc")
            if m.group("prank") is not None:
                rank = int(m.group("prank"))
            elif proc:
                pr = _PROC_RANK_RE.search(proc)
                if pr:
                    rank = int(pr.group(1))
        text = text[m.end():]
    hint: str | None = None
    if proc is not None and proc.startswith(_VLLM_PROCS):
        hint = VLLM
    if text[:1] == "[":
        m = _SGLANG_RE.match(text)
        if m is not None:
            ranks = m.group("ranks")
            if ranks:
                t = _TP_RE.search(ranks)
                if t:
                    rank = int(t.group(1))
            return Cleaned(text[m.end():], SGLANG, rank, m.group("ts"))
    elif text[:1] in "DIWEC":
        m = _VLLM_RE.match(text)
        if m is not None:
            return Cleaned(text[m.end():], hint or VLLM_WEAK, rank, m.group("ts"), m.group("level"))
    elif text[:2] == "20":
        m = _PYLOG_RE.match(text)
        if m is not None:
            logger = m.group("logger") or ""
            if logger.startswith("sglang"):
                hint = SGLANG
            elif logger.startswith("vllm"):
                hint = VLLM
            return Cleaned(text[m.end():], hint, rank, m.group("ts"))
    return Cleaned(text, hint, rank)


def ts_kind(ts: str) -> str:
    """The format kind of a printed timestamp (see `ts_seconds`), without parsing it."""
    if len(ts) > 4 and ts[4] == "-":
        return "ymd"
    return "md" if len(ts) > 2 and ts[2] == "-" else "t"


def ts_seconds(ts: str) -> tuple[str, float] | None:
    """A printed timestamp as (format kind, seconds) so that two of the same kind can be subtracted.

    Kinds: "ymd" (`2025-03-08 12:29:04[.123]`), "md" (vLLM `03-08 12:29:04`, no year), "t" (`12:29:04`).
    Seconds are counted from an arbitrary origin per kind; callers fix wrap-arounds (midnight, new year).
    """
    try:
        if len(ts) >= 19 and ts[4] == "-":
            d = _dt.datetime(int(ts[0:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]),
                             int(ts[17:19]))
            frac = float("0" + ts[19:]) if len(ts) > 20 and ts[19] == "." else 0.0
            return "ymd", (d - _dt.datetime(2000, 1, 1)).total_seconds() + frac
        if len(ts) >= 14 and ts[2] == "-":
            d = _dt.datetime(2000, int(ts[0:2]), int(ts[3:5]), int(ts[6:8]), int(ts[9:11]), int(ts[12:14]))
            return "md", (d - _dt.datetime(2000, 1, 1)).total_seconds()
        if len(ts) >= 8 and ts[2] == ":":
            secs = int(ts[0:2]) * 3600 + int(ts[3:5]) * 60 + int(ts[6:8])
            frac = float("0" + ts[8:]) if len(ts) > 9 and ts[8] == "." else 0.0
            return "t", secs + frac
    except ValueError:
        return None
    return None


def elapsed_between(first: tuple[str, float], later: tuple[str, float]) -> float | None:
    """Seconds from `first` to `later` (same kind), fixing midnight / new-year wrap; None across kinds."""
    if first[0] != later[0]:
        return None
    delta = later[1] - first[1]
    if delta < 0:
        if first[0] == "t":
            delta += 86400.0
        elif first[0] == "md":
            delta += 366 * 86400.0
        else:
            return None
    return delta
