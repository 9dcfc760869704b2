"""Where each key of a profiles file is written: tomllib reports no positions for the values it returns, so
`locate_keys` re-scans the already-valid text and maps every key path to the line it is on (`line_of` falls
back to the enclosing table); `format_key` writes a key path back the way TOML would, safe to echo."""

from __future__ import annotations

import bisect
import re
import sys
from collections.abc import Iterable, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib


KeyPath = tuple[str, ...]


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def format_key(path: Iterable[str]) -> str:
    """A key path written the way TOML would (`profiles."my model".port`)."""
    parts = [part if _BARE_KEY.fullmatch(part) else _quoted_key(part) for part in path]
    return ".".join(parts) or "(top level)"


def _quoted_key(key: str) -> str:
    """A TOML basic-string key with every control character escaped, so echoing it can neither break the one-line
    error (a newline) nor act on the terminal (ESC, C1)."""
    body = key.replace("\\", "\\\\").replace('"', '\\"')
    body = _KEY_CONTROL.sub(lambda m: _KEY_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"), body)
    return '"' + body + '"'


_KEY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_KEY_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def line_of(lines: Mapping[KeyPath, int], path: KeyPath) -> int:
    """The line of `path`, else of its closest enclosing table that is written down, else 1."""
    for end in range(len(path), 0, -1):
        if path[:end] in lines:
            return lines[path[:end]]
    return 1


def locate_keys(text: str) -> dict[KeyPath, int]:
    """Map each key path in valid TOML `text` to the 1-based line where it is first written.

    Table headers (`[a.b]`, `[[a]]`), dotted keys (`a.b = 1`) and keys inside inline tables are all recorded, and
    the implicit parents of each (`a` for `a.b`) map to the first line that mentions them. Array-of-tables entries
    share their array's path. Only meant for text tomllib has already accepted.
    """
    return _KeyScanner(text).scan()


class _KeyScanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.newlines = [i for i, char in enumerate(text) if char == "\n"]
        self.found: dict[KeyPath, int] = {}

    def line(self) -> int:
        return bisect.bisect_left(self.newlines, self.pos) + 1

    def peek(self, count: int = 1) -> str:
        return self.text[self.pos: self.pos + count]

    def record(self, path: KeyPath) -> None:
        line = self.line()
        for end in range(1, len(path) + 1):
            self.found.setdefault(path[:end], line)

    def skip_blank(self, newlines: bool) -> None:
        """Skip spaces and tabs, and with `newlines` also line breaks and comments."""
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t" or (newlines and char in "\r\n"):
                self.pos += 1
            elif newlines and char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                break

    def scan(self) -> dict[KeyPath, int]:
        table: KeyPath = ()
        while True:
            self.skip_blank(newlines=True)
            if self.pos >= len(self.text):
                return self.found
            if self.peek() == "[":
                width = 2 if self.peek(2) == "[[" else 1
                self.pos += width
                self.skip_blank(newlines=False)
                table = self.key()
                self.record(table)
                self.skip_blank(newlines=False)
                self.pos += width
            else:
                self.key_value(table)

    def key_value(self, table: KeyPath) -> None:
        path = table + self.key()
        self.record(path)
        self.skip_blank(newlines=False)
        self.pos += 1  # "="
        self.skip_blank(newlines=False)
        self.value(path)

    def key(self) -> KeyPath:
        parts: list[str] = []
        while True:
            self.skip_blank(newlines=False)
            char = self.peek()
            if char in ("'", '"'):
                parts.append(self.string())
            else:
                match = _BARE_KEY.match(self.text, self.pos)
                end = match.end() if match else self.pos + 1
                parts.append(self.text[self.pos: end])
                self.pos = end
            self.skip_blank(newlines=False)
            if self.peek() != ".":
                return tuple(parts)
            self.pos += 1

    def string(self) -> str:
        """Consume a string of any of TOML's four kinds; return its body (escapes decoded for basic strings)."""
        quote = self.peek()
        triple = self.peek(3) == quote * 3
        delimiter = quote * 3 if triple else quote
        start = self.pos + len(delimiter)
        index = start
        while True:
            end = self.text.find(delimiter, index)
            if end < 0:
                end = len(self.text)
                break
            backslashes = 0
            while quote == '"' and end - 1 - backslashes >= start and self.text[end - 1 - backslashes] == "\\":
                backslashes += 1
            if backslashes % 2 == 0:
                break
            index = end + 1
        if triple:  # up to two extra quotes may close a multi-line string ('''a''''' is "a''")
            while self.text[end + 3: end + 4] == quote and end + 3 < len(self.text):
                end += 1
        body = self.text[start:end]
        self.pos = end + len(delimiter)
        if quote == '"' and "\\" in body:
            try:
                body = tomllib.loads(f'k = "{body}"')["k"]
            except tomllib.TOMLDecodeError:
                pass  # a name only used to find a line; the raw form is still good enough
        return body

    def value(self, path: KeyPath) -> None:
        char = self.peek()
        if char in ("'", '"'):
            self.string()
        elif char == "[":
            self.pos += 1
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("]", ""):
                    self.pos += 1
                    return
                self.value(path)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        elif char == "{":
            self.pos += 1
            while True:
                self.skip_blank(newlines=True)
                if self.peek() in ("}", ""):
                    self.pos += 1
                    return
                self.key_value(path)
                self.skip_blank(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
        else:
            while self.pos < len(self.text) and self.text[self.pos] not in ",]}\r\n#":
                self.pos += 1
