"""What the generator sends: synthetic prompts, prompt files, request counts per level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.loadgen import workload
from specmon.loadgen.workload import RequestFactory, Workload, load_prompts


def test_synthetic_prompts_have_the_length_and_differ_from_the_first_token() -> None:
    f = RequestFactory(Workload(levels=(4,), input_len=100, output_len=7), "m")
    bodies = [json.loads(f.body(4, i)) for i in range(40)]
    prompts = [b["messages"][0]["content"] for b in bodies]
    assert all(len(p.split()) == 100 - 4 + 1 for p in prompts)     # tag + words: about input_len tokens
    assert len({p.split()[0] for p in prompts}) == 40                # no two share a prefix-cache entry
    assert bodies[0]["max_tokens"] == 7 and bodies[0]["stream_options"] == {"include_usage": True}


def test_completions_api_and_free_length() -> None:
    wl = Workload(levels=(1,), api="completions", fixed_length=False, output_len=5)
    body = json.loads(RequestFactory(wl, "m").body(1, 0))
    assert isinstance(body["prompt"], str) and "messages" not in body
    assert "ignore_eos" not in body and "min_tokens" not in body


def test_requests_per_level_default_is_whole_waves() -> None:
    wl = Workload(levels=(1, 3, 5, 30))
    assert [wl.requests_for(c) for c in wl.levels] == [16, 18, 20, 120]
    assert Workload(levels=(3,), requests_per_level=7).requests_for(3) == 7
    assert Workload(levels=(3,), duration_s=5.0).requests_for(3) is None
    assert Workload.from_dict(wl.to_dict()) == wl


def test_prompt_files_jsonl_messages_and_sharegpt(tmp_path: Path) -> None:
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"prompt": "Tell me"}\n\n{"messages": [{"role": "user", "content": "Hi"}]}\n'
                  '{"conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "Why?"}]}\n')
    prompts = load_prompts(jl)
    assert prompts == ["Tell me", ({"role": "user", "content": "Hi"},), "Why?"]
    sg = tmp_path / "sharegpt.json"
    sg.write_text(json.dumps([{"id": "a", "conversations": [{"from": "human", "value": "Q1"}]}]))
    assert load_prompts(sg) == ["Q1"]
    f = RequestFactory(Workload(levels=(1,)), "m", prompts)
    assert json.loads(f.body(1, 1))["messages"] == [{"role": "user", "content": "Hi"}]
    assert json.loads(f.body(1, 3))["messages"] == [{"role": "user", "content": "Tell me"}]   # cycles


@pytest.mark.parametrize(
    ("content", "where"),
    [('{"prompt": "a"}\n{"prompt": \n', ":2: not valid JSON"),
     ('{"prompt": "a"}\n\n{"question": "b"}\n', ":3: expected"),
     ("", ":1: no prompts")],
)
def test_bad_prompt_file_names_file_and_line(tmp_path: Path, content: str, where: str) -> None:
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(UserError) as err:
        load_prompts(p)
    assert str(err.value).startswith(str(p)) and where in str(err.value)


def test_workload_rejects_nonsense() -> None:
    with pytest.raises(UserError, match="levels"):
        Workload(levels=(0,))
    with pytest.raises(UserError, match="api"):
        Workload(levels=(1,), api="grpc")


def test_workload_from_sweep_defaults_and_overrides() -> None:
    from specmon.model.config import SweepDefaults
    from specmon.orchestration.sweep import WorkloadOverrides, workload_from

    timed = SweepDefaults(levels=(1, 2), duration_s=30.0, warmup_requests=3, input_len=64, output_len=32, api="completions")
    w = workload_from(timed)
    assert (w.levels, w.requests_per_level, w.duration_s, w.warmup_requests) == ((1, 2), None, 30.0, 3)
    assert (w.input_len, w.output_len, w.api, w.timeout_s, w.fixed_length) == (64, 32, "completions", 120.0, True)
    # A request count given by the front end turns [sweep]'s duration off (a level never has both) ...
    w = workload_from(timed, WorkloadOverrides(levels=(4,), requests_per_level=8, output_len=16, fixed_length=False))
    assert (w.levels, w.requests_per_level, w.duration_s, w.output_len, w.fixed_length) == ((4,), 8, None, 16, False)
    # ... and a duration turns [sweep]'s request count off.
    counted = SweepDefaults(levels=(1, 4, 16), requests_per_level=40)   # one full wave of the top level
    w = workload_from(counted, WorkloadOverrides(duration_s=5.0, warmup_requests=0, timeout_s=9.0))
    assert (w.requests_per_level, w.duration_s, w.warmup_requests, w.timeout_s) == (None, 5.0, 0, 9.0)
    assert workload_from(counted).requests_per_level == 40


def test_prompt_file_that_is_not_text_stops_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--prompt-file /dev/zero` read without limit until a MemoryError; a NUL byte or an oversized file now stops
    the read with one line naming the file."""
    with pytest.raises(UserError, match=r"^/dev/zero:1: a NUL byte at offset 0: not a text file"):
        load_prompts("/dev/zero")
    big = tmp_path / "big.jsonl"
    big.write_text('{"prompt": "hello"}\n' * 2000)
    monkeypatch.setattr(workload, "MAX_PROMPT_BYTES", 10_000)
    with pytest.raises(UserError, match=r"big.jsonl:1: larger than 10000 bytes"):
        load_prompts(big)
