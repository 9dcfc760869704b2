"""Prompt sets for the load generator: the built-in set and the files users bring. Pure parsing plus a capped read.

Datasets (`specmon sweep --dataset NAME [--dataset-path FILE]`, `[sweep] dataset`, `dataset_path`):
- builtin:   specmon/data/prompts.jsonl, a few hundred prompts written for specmon, each with its category (chat,
             code, maths, summarisation, translation); the `jsonl` format below.
- random:    no file: synthetic word prompts of `input_len` words (the load generator makes them).
- sharegpt:  a JSON array (or JSONL) of `{"conversations": [{"from": "human"|"gpt", "value": ...}, ...]}`. The
             first human turn is the prompt; the gpt turn right after it gives the output length (estimated as
             CHARS_PER_TOKEN characters per token, since the generator loads no tokenizer). Entries without a
             human turn (ShareGPT dumps have empty conversations) are skipped and counted.
- jsonl:     one object a line: `{"prompt": "..."}` (or `"text"`, or chat `"messages": [{"role", "content"}...]`),
             optional `"category": "..."` and `"output_len": N`.
- specbench: SpecBench's question.jsonl, `{"question_id", "category", "turns": ["...", ...]}`: the first turn.
A malformed entry raises UserError as one line `FILE:LINE: what is wrong`; a JSON array's entries are located by
the line their object starts on.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.text.textfile import MAX_DEPTH, NotTextError, loads, read_capped, too_deep_at

DATASETS = ("builtin", "random", "sharegpt", "jsonl", "specbench")
FILE_DATASETS = ("sharegpt", "jsonl", "specbench")   # those that need a dataset path
OUTPUT_LEN_DATASETS = ("sharegpt", "jsonl")          # those whose entries can give an output length
MAX_DATASET_BYTES = 1 << 30   # the ShareGPT dump is ~0.7 GB; past 1 GiB a path is almost certainly wrong
CHARS_PER_TOKEN = 4           # English text in Llama/Qwen-style tokenizers, for lengths given as text
BUILTIN_RESOURCE = "data/prompts.jsonl"
BUILTIN_CATEGORIES = ("chat", "code", "maths", "summarisation", "translation")

def has_set_length(name: str) -> bool:
    """Whether the dataset's prompts are made to a length asked for (`input_len`, `input_range`): random prompts
    are; every other set's prompts are sent as written."""
    return name == "random"


# One message list (chat) or one string (completions and single-turn chat).
Prompt = str | tuple[Mapping[str, Any], ...]


@dataclass(frozen=True)
class PromptEntry:
    """One prompt of a dataset, with its category and wanted output length where the dataset gives them."""

    prompt: Prompt
    category: str | None = None
    output_len: int | None = None

    @property
    def text(self) -> str:
        """The prompt as one string (a chat's message contents joined by newlines, as the sim reads them)."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n".join(str(m.get("content", "")) for m in self.prompt)


@dataclass(frozen=True)
class Dataset:
    """A loaded prompt set: what it is (for the result's meta line) and its entries in file order."""

    name: str
    path: str | None
    sha256: str | None
    entries: tuple[PromptEntry, ...]
    skipped: int = 0          # entries a format allows to be unusable (a ShareGPT conversation with no human turn)

    @property
    def categories(self) -> dict[str, int]:
        """Prompts per category, for sets whose entries have one."""
        return dict(sorted(Counter(e.category for e in self.entries if e.category).items()))

    def describe(self) -> dict[str, Any]:
        """What the result's meta line records about the set."""
        return {"name": self.name, "path": self.path, "sha256": self.sha256, "prompts": len(self.entries),
                "skipped": self.skipped, "categories": self.categories}


def load_dataset(name: str, path: str | Path | None = None) -> Dataset:
    """The named dataset (a file for sharegpt/jsonl/specbench); UserError naming FILE:LINE for a bad entry.

    `random` has no entries (the generator makes its prompts) and no file.
    """
    if name not in DATASETS:
        raise UserError(f"dataset: must be one of {', '.join(DATASETS)}, got {name!r}")
    if name == "random":
        return Dataset(name, None, None, ())
    if name == "builtin":
        data = resources.files("specmon").joinpath(BUILTIN_RESOURCE).read_bytes()
        return _parse(name, "specmon/" + BUILTIN_RESOURCE, data)
    if path is None:
        raise UserError(f"--dataset {name} needs --dataset-path FILE")
    p = Path(path)
    try:
        data = read_capped(p, MAX_DATASET_BYTES)
    except NotTextError as exc:
        raise UserError(f"{p}:{exc.line}: {exc}; expected a {name} dataset file") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read the {name} dataset ({exc.strerror or exc})") from None
    return _parse(name, str(p), data)


def builtin_categories() -> dict[str, str]:
    """Prompt text -> category for every prompt of the built-in set (what `specmon sim` recognises)."""
    return {e.text: e.category for e in load_dataset("builtin").entries if e.category}


def _parse(name: str, shown: str, data: bytes) -> Dataset:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{shown}:{line}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    entries: list[PromptEntry] = []
    skipped = 0
    for line, obj in _objects(text, shown):
        where = f"{shown}:{line}"
        if not isinstance(obj, Mapping):
            raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        entry = _ENTRY[name](obj, where)
        if entry is None:
            skipped += 1
        else:
            entries.append(entry)
    if not entries:
        raise UserError(f"{shown}:1: no usable prompts in the {name} dataset"
                        + (f" ({skipped} entries without a human turn)" if skipped else ""))
    return Dataset(name, shown, hashlib.sha256(data).hexdigest(), tuple(entries), skipped)


def _objects(text: str, shown: str) -> Iterator[tuple[int, Any]]:
    """(line, value) for each element of a JSON array file, or each non-blank line of a JSONL file."""
    start = len(text) - len(text.lstrip())
    if text[start:start + 1] != "[":
        for lineno, raw in enumerate(text.splitlines(), 1):
            if raw.strip():
                try:
                    yield lineno, loads(raw)
                except json.JSONDecodeError as exc:
                    raise UserError(f"{shown}:{lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        return
    # A JSON array, walked element by element so each one's line is known (json.loads would only give values).
    deep = too_deep_at(text)
    if deep >= 0:
        raise UserError(f"{shown}:{text.count(chr(10), 0, deep) + 1}: not valid JSON (nested deeper than {MAX_DEPTH} "
                        "levels)")
    decoder = json.JSONDecoder()
    pos, line, counted = start + 1, 1 + text.count("\n", 0, start), start

    def skip_ws(i: int) -> int:
        while i < len(text) and text[i] in " \t\r\n":
            i += 1
        return i

    def line_at(i: int) -> int:
        nonlocal line, counted
        line += text.count("\n", counted, i)
        counted = i
        return line

    pos = skip_ws(pos)
    if text[pos:pos + 1] == "]":
        return
    while True:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise UserError(f"{shown}:{exc.lineno}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        yield line_at(pos), value
        pos = skip_ws(end)
        sep = text[pos:pos + 1]
        if sep == "]":
            return
        if sep != ",":
            raise UserError(f"{shown}:{line_at(pos)}: not valid JSON (expected ',' or ']' after an array element)")
        pos = skip_ws(pos + 1)


def _category(obj: Mapping[str, Any], where: str) -> str | None:
    value = obj.get("category")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: 'category' must be a non-empty string, got {_shown(value)}")
    return value.strip()


def _output_len(obj: Mapping[str, Any], where: str) -> int | None:
    value = obj.get("output_len")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: 'output_len' must be an integer >= 1, got {_shown(value)}")
    return value


def _jsonl_entry(obj: Mapping[str, Any], where: str) -> PromptEntry:
    prompt: Prompt | None = None
    for key in ("prompt", "text"):
        if key in obj:
            value = obj[key]
            if not isinstance(value, str) or not value.strip():
                raise UserError(f"{where}: '{key}' must be a non-empty string, got {_shown(value)}")
            prompt = value
            break
    else:
        msgs = obj.get("messages")
        if msgs is not None:
            if not isinstance(msgs, list) or not msgs or not all(
                    isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in msgs):
                raise UserError(f"{where}: 'messages' must be a non-empty list of {{\"role\": ..., \"content\": ...}} "
                                "objects with string values")
            prompt = tuple(dict(m) for m in msgs)
    if prompt is None:
        raise UserError(f"{where}: expected a \"prompt\" (or \"text\" or \"messages\") key, found "
                        + (", ".join(repr(k) for k in list(obj)[:5]) or "an empty object"))
    return PromptEntry(prompt, _category(obj, where), _output_len(obj, where))


def _sharegpt_entry(obj: Mapping[str, Any], where: str) -> PromptEntry | None:
    conv = obj.get("conversations")
    if not isinstance(conv, list):
        raise UserError(f"{where}: expected a \"conversations\" list, got {_shown(conv)}")
    for n, turn in enumerate(conv):
        if not isinstance(turn, Mapping) or not isinstance(turn.get("from"), str) or not isinstance(turn.get("value"), str):
            raise UserError(f"{where}: conversations[{n}] must be an object with string \"from\" and \"value\"")
    for n, turn in enumerate(conv):
        if turn["from"] in ("human", "user") and turn["value"].strip():
            reply = conv[n + 1] if n + 1 < len(conv) else None
            output_len = None
            if reply is not None and reply["from"] in ("gpt", "assistant", "chatgpt", "bard") and reply["value"]:
                output_len = max(1, round(len(reply["value"]) / CHARS_PER_TOKEN))
            return PromptEntry(turn["value"], _category(obj, where), output_len)
    return None


def _specbench_entry(obj: Mapping[str, Any], where: str) -> PromptEntry:
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns or not isinstance(turns[0], str) or not turns[0].strip():
        raise UserError(f"{where}: 'turns' must be a non-empty list of strings (SpecBench question.jsonl), "
                        f"got {_shown(turns)}")
    return PromptEntry(turns[0], _category(obj, where), _output_len(obj, where))


_ENTRY = {"builtin": _jsonl_entry, "jsonl": _jsonl_entry, "sharegpt": _sharegpt_entry, "specbench": _specbench_entry}


def _shown(value: object) -> str:
    text = json.dumps(value, ensure_ascii=True) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
