"""Prompt sets: the built-in set, ShareGPT / JSONL / SpecBench files, and one-line FILE:LINE errors for bad ones.

The ShareGPT and SpecBench samples below are written here from the formats' documented shapes (ShareGPT:
a JSON array of {"id", "conversations": [{"from": "human"|"gpt", "value"}]}; SpecBench's data/spec_bench/question.jsonl:
{"question_id", "category", "turns": [...]}); their text is ours.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.model.workload import datasets
from specmon.model.workload.datasets import BUILTIN_CATEGORIES, CHARS_PER_TOKEN, PromptEntry, load_dataset


def test_builtin_set_has_every_category_evenly_and_records_its_hash() -> None:
    ds = load_dataset("builtin")
    raw = resources.files("specmon").joinpath("data/prompts.jsonl").read_bytes()
    assert ds.sha256 == hashlib.sha256(raw).hexdigest() and ds.path == "specmon/data/prompts.jsonl"
    assert len(ds.entries) >= 250
    assert set(ds.categories) == set(BUILTIN_CATEGORIES)
    assert max(ds.categories.values()) == min(ds.categories.values())    # an even mix at any full pass
    texts = [e.text for e in ds.entries]
    assert len(set(texts)) == len(texts)             # the sim recognises a prompt by its exact text
    words = [len(t.split()) for t in texts]
    assert min(words) >= 4 and max(words) <= 150     # short to medium
    assert ds.describe()["categories"] == ds.categories and ds.describe()["prompts"] == len(ds.entries)


def test_sharegpt_array_first_human_turn_and_reply_length(tmp_path: Path) -> None:
    reply = "x" * 400
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "How do tides work?"}, {"from": "gpt", "value": reply}]},
        {"id": "b", "conversations": []},                                       # empty in real dumps: skipped
        {"id": "c", "conversations": [{"from": "gpt", "value": "Hello!"}, {"from": "human", "value": "Name a fruit."}]},
    ]
    p = tmp_path / "sg.json"
    p.write_text(json.dumps(data, indent=2))
    ds = load_dataset("sharegpt", p)
    assert ds.entries == (PromptEntry("How do tides work?", None, 400 // CHARS_PER_TOKEN),
                          PromptEntry("Name a fruit.", None, None))     # no reply after it: no length
    assert ds.skipped == 1 and ds.describe()["skipped"] == 1
    assert ds.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()


def test_jsonl_prompt_category_output_len_and_messages(tmp_path: Path) -> None:
    p = tmp_path / "p.jsonl"
    p.write_text('{"prompt": "Sort a list in Go.", "category": "code", "output_len": 300}\n\n'
                 '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]}\n'
                 '{"text": "Old-style prompt files used text."}\n')
    ds = load_dataset("jsonl", p)
    assert ds.entries[0] == PromptEntry("Sort a list in Go.", "code", 300)
    assert ds.entries[1].prompt == ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})
    assert ds.entries[1].text == "Be brief.\nHi" and ds.entries[2].prompt == "Old-style prompt files used text."
    assert ds.categories == {"code": 1}


def test_specbench_question_file_first_turn_and_category(tmp_path: Path) -> None:
    p = tmp_path / "question.jsonl"
    rows = [{"question_id": 81, "category": "writing", "turns": ["Write a haiku about rain.", "Now make it sad."]},
            {"question_id": 161, "category": "math_reasoning", "turns": ["What is 17 times 23?"]}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_dataset("specbench", p)
    assert ds.entries == (PromptEntry("Write a haiku about rain.", "writing"), PromptEntry("What is 17 times 23?", "math_reasoning"))


ARRAY = '[\n  {"conversations": [{"from": "human", "value": "a"}]},\n  {\n    "conversations": "oops"\n  }\n]\n'

# (format, file text, expected "FILE:LINE: ..." fragment after the path)
MALFORMED = [
    ("jsonl", '{"prompt": "a"}\n{"prompt": \n', ":2: not valid JSON (Expecting value, column 12)"),
    ("jsonl", '{"prompt": "a"}\n\n{"question": "b"}\n', ":3: expected a \"prompt\" (or \"text\" or \"messages\") key, found 'question'"),
    ("jsonl", '{"prompt": "a", "output_len": "long"}\n', ":1: 'output_len' must be an integer >= 1, got 'long'"),
    ("jsonl", '{"prompt": "a", "output_len": 0}\n', ":1: 'output_len' must be an integer >= 1, got 0"),
    ("jsonl", '{"prompt": "a", "category": 5}\n', ":1: 'category' must be a non-empty string, got 5"),
    ("jsonl", '{"prompt": ""}\n', ":1: 'prompt' must be a non-empty string, got ''"),
    ("jsonl", '{"prompt": "a"}\n"just text"\n', ":2: expected a JSON object, got str"),
    ("jsonl", '{"messages": [{"role": "user"}]}\n', ":1: 'messages' must be a non-empty list"),
    ("jsonl", "", ":1: no usable prompts in the jsonl dataset"),
    ("sharegpt", ARRAY, ":3: expected a \"conversations\" list, got 'oops'"),     # the line the bad entry starts on
    ("sharegpt", '[{"conversations": [{"from": "human", "value": "a"}]},\n {"conversations": [1]}]', ":2: conversations[0] must be an object"),
    ("sharegpt", '[{"conversations": [{"from": "human", "value": "a"}]}\n {"conversations": []}]', ":2: not valid JSON (expected ',' or ']'"),
    ("sharegpt", '[{"conversations": [{"from": "human", "value": "a"}]},\n{"conversations": [', ":2: not valid JSON"),
    ("sharegpt", '[{"conversations": [{"from": "gpt", "value": "only a reply"}]}]', ":1: no usable prompts in the sharegpt dataset (1 entries without a human turn)"),
    ("specbench", '{"question_id": 1, "category": "qa", "turns": []}\n', ":1: 'turns' must be a non-empty list of strings"),
    ("specbench", '{"question_id": 1, "category": "qa", "turns": ["a"]}\n{"question_id": 2, "turns": "b"}\n', ":2: 'turns' must be"),
]


@pytest.mark.parametrize(("fmt", "text", "fragment"), MALFORMED)
def test_malformed_entry_is_one_line_naming_file_and_line(tmp_path: Path, fmt: str, text: str, fragment: str) -> None:
    p = tmp_path / "data.json"
    p.write_text(text)
    with pytest.raises(UserError) as err:
        load_dataset(fmt, p)
    message = str(err.value)
    assert message.startswith(f"{p}{fragment}"), message
    assert "\n" not in message


def test_unreadable_files_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserError, match=r"^/dev/zero:1: a device, not a regular file \(refused: it may never end\); expected a jsonl"):
        load_dataset("jsonl", "/dev/zero")
    with pytest.raises(UserError, match=r"missing.jsonl: cannot read the specbench dataset \(No such file"):
        load_dataset("specbench", tmp_path / "missing.jsonl")
    latin = tmp_path / "latin1.jsonl"
    latin.write_bytes(b'{"prompt": "ok"}\n{"prompt": "caf\xe9"}\n')
    with pytest.raises(UserError, match=r"latin1.jsonl:2: not UTF-8 text"):
        load_dataset("jsonl", latin)
    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": "hello"}\n' * 2000)
    monkeypatch.setattr(datasets, "MAX_DATASET_BYTES", 10_000)
    with pytest.raises(UserError, match=r"big.jsonl:1: larger than 10000 bytes"):
        load_dataset("jsonl", big)
    with pytest.raises(UserError, match=r"--dataset sharegpt needs --dataset-path FILE"):
        load_dataset("sharegpt")
