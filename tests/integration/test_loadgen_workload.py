"""What the generator sends: synthetic prompts, prompt files, request counts per level."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.loadgen.workload import RequestFactory, Workload
from specmon.model.workload.datasets import Dataset, load_dataset


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


def test_a_body_is_its_request_compactly_encoded_whatever_the_api_length_or_text(tmp_path: Path) -> None:
    """Text prompts are encoded into a frame made once per output length (the open loop's hot path): the bytes are
    still exactly the request's compact JSON, the text escaped as JSON escapes it."""
    texts = [{"prompt": "plain"}, {"prompt": 'quote " back \\ slash \n line \u00e9 \u2603 prompt'}]
    for api in ("chat", "completions"):
        for fixed in (True, False):
            wl = Workload(levels=(1,), api=api, fixed_length=fixed, output_len=9, output_range=0.5, input_len=12)
            for dataset in (None, _jsonl(tmp_path, texts)):
                f = RequestFactory(wl, 'm\u00e9 "prompt"', dataset)
                for i in range(30):
                    raw = f.body(1, i)
                    req = json.loads(raw)
                    assert raw == json.dumps(req, separators=(",", ":")).encode()
                    assert list(req)[-1] == ("messages" if api == "chat" else "prompt")
                    assert req["model"] == 'm\u00e9 "prompt"' and req.get("min_tokens", req["max_tokens"]) == req["max_tokens"]


def test_requests_per_level_default_is_whole_waves() -> None:
    wl = Workload(levels=(1, 3, 5, 30))
    assert [wl.requests_for(c) for c in wl.levels] == [16, 18, 20, 120]
    assert Workload(levels=(3,), requests_per_level=7).requests_for(3) == 7
    assert Workload(levels=(3,), duration_s=5.0).requests_for(3) is None
    assert Workload.from_dict(wl.to_dict()) == wl


def _jsonl(tmp_path: Path, rows: list[dict[str, object]]) -> Dataset:
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return load_dataset("jsonl", p)


def test_dataset_prompts_go_as_written_in_one_seeded_order_for_every_level(tmp_path: Path) -> None:
    ds = _jsonl(tmp_path, [{"prompt": f"question {n}", "category": "odd" if n % 2 else "even"} for n in range(10)]
                + [{"messages": [{"role": "user", "content": "Hi"}]}])
    wl = Workload(levels=(1, 4), dataset="jsonl", dataset_path="p.jsonl", seed=3)
    f = RequestFactory(wl, "m", ds)
    first = [json.loads(f.body(1, i))["messages"] for i in range(11)]
    assert sorted(json.dumps(m) for m in first) == sorted(
        json.dumps([{"role": "user", "content": e.prompt}] if isinstance(e.prompt, str) else list(e.prompt))
        for e in ds.entries)                                     # a permutation: every prompt once per pass
    assert first[:10] != [[{"role": "user", "content": f"question {n}"}] for n in range(10)]   # shuffled, not file order
    assert [json.loads(f.body(4, i))["messages"] for i in range(11)] == first             # the same at each level
    assert [json.loads(f.body(1, i + 11))["messages"] for i in range(11)] == first        # then it cycles
    assert [f.category(i) for i in range(11)] == [f.sample(1, i).category for i in range(11)]
    assert {f.category(i) for i in range(11)} == {"odd", "even", None}


@pytest.mark.slow
def test_seed_makes_prompts_and_lengths_repeatable() -> None:
    ds = load_dataset("builtin")

    def bodies(seed: int) -> list[bytes]:
        wl = Workload(levels=(8,), dataset="builtin", seed=seed, output_range=0.3)
        return [RequestFactory(wl, "m", ds).body(8, i) for i in range(300)]

    assert bodies(11) == bodies(11)
    assert bodies(11) != bodies(12)
    rand = [Workload(levels=(2,), seed=5, input_range=0.5, output_range=0.5) for _ in range(2)]
    assert [RequestFactory(rand[0], "m").body(2, i) for i in range(50)] == [RequestFactory(rand[1], "m").body(2, i) for i in range(50)]


def test_length_ranges_are_uniform_within_their_bounds() -> None:
    wl = Workload(levels=(1,), input_len=100, input_range=0.2, output_len=200, output_range=0.5, seed=1)
    f = RequestFactory(wl, "m")
    bodies = [json.loads(f.body(1, i)) for i in range(1000)]
    inputs = [len(b["messages"][0]["content"].split()) - 1 + 4 for b in bodies]   # words after the tag, + the tag's 4
    outputs = [b["max_tokens"] for b in bodies]
    assert min(inputs) == 80 and max(inputs) == 120 and 95 < sum(inputs) / len(inputs) < 105
    assert min(outputs) == 100 and max(outputs) == 300 and 190 < sum(outputs) / len(outputs) < 210
    assert all(b["min_tokens"] == b["max_tokens"] for b in bodies)     # ignore_eos: each request its own length
    assert len(set(inputs)) > 30 and len(set(outputs)) > 150


def test_output_len_from_the_dataset_unless_given(tmp_path: Path) -> None:
    ds = _jsonl(tmp_path, [{"prompt": "long answer", "output_len": 700}, {"prompt": "no length given"}])
    by_prompt = {}
    for from_dataset in (True, False):
        wl = Workload(levels=(1,), dataset="jsonl", dataset_path="p.jsonl", output_len=64, output_from_dataset=from_dataset)
        f = RequestFactory(wl, "m", ds)
        by_prompt[from_dataset] = {f.sample(1, i).prompt: f.sample(1, i).output_len for i in range(2)}
    assert by_prompt[True] == {"long answer": 700, "no length given": 64}
    assert by_prompt[False] == {"long answer": 64, "no length given": 64}


def test_old_result_files_workload_reads_back() -> None:
    """A meta line written before datasets had `prompt_file` (or nothing): it reads as jsonl (or random)."""
    old = Workload.from_dict({"levels": [1, 2], "input_len": 128, "output_len": 256, "prompt_file": "/p.jsonl"})
    assert (old.dataset, old.dataset_path) == ("jsonl", "/p.jsonl")
    assert Workload.from_dict({"levels": [1], "prompt_file": None}).dataset == "random"


def test_workload_rejects_nonsense() -> None:
    with pytest.raises(UserError, match="levels"):
        Workload(levels=(0,))
    with pytest.raises(UserError, match="api"):
        Workload(levels=(1,), api="grpc")
    with pytest.raises(UserError, match="dataset jsonl needs a dataset path"):
        Workload(levels=(1,), dataset="jsonl")
    with pytest.raises(UserError, match="dataset builtin takes no dataset path"):
        Workload(levels=(1,), dataset="builtin", dataset_path="x.jsonl")
    with pytest.raises(UserError, match=r"output range: must be a fraction in \[0, 1\)"):
        Workload(levels=(1,), output_range=1.0)


def test_workload_from_sweep_defaults_and_overrides() -> None:
    from specmon.model.config import SweepDefaults
    from specmon.orchestration.measure.sweep import WorkloadOverrides, workload_from

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


def test_ignore_eos_false_in_an_experiment_sends_no_ignore_eos_or_min_tokens() -> None:
    """transformers serve answers 422 to a request with ignore_eos/min_tokens: an experiment against it (the H200
    tuning grid, bench/gpu_grid.py) needs `ignore_eos = false`, as `specmon sweep --no-ignore-eos`."""
    from specmon.model.config import parse_config
    from specmon.orchestration.measure.sweep import workload_from

    text = ('[profiles.tf]\ncommand = "python3 -m transformers.cli.transformers serve m --port 8000"\nport = 8000\n'
            '[profiles.tf2]\ncommand = "python3 -m transformers.cli.transformers serve m --port 8000"\nport = 8000\n'
            '[experiments.x]\nprofiles = ["tf", "tf2"]\nlevels = [1]\nignore_eos = false\n')

    def body(toml: str) -> dict[str, object]:
        spec = parse_config(toml, "p.toml").experiments["x"]
        return dict(json.loads(RequestFactory(workload_from(spec.sweep), "m").body(1, 0)))

    assert "ignore_eos" not in body(text) and "min_tokens" not in body(text)
    assert body(text.replace("ignore_eos = false\n", ""))["ignore_eos"] is True   # the default is unchanged
    assert body("[sweep]\nignore_eos = false\n" + text.replace("ignore_eos = false\n", "")).get("ignore_eos") is None
    with pytest.raises(UserError) as err:
        parse_config(text.replace("ignore_eos = false", 'ignore_eos = "no"'), "p.toml")
    assert str(err.value).startswith("p.toml:10: experiments.x.ignore_eos: must be true or false")
