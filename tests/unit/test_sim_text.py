"""Pure text pieces of the sim: tqdm bars reproduce real bars exactly; request parsing and response bodies."""

from __future__ import annotations

import pytest

from specmon.sim import api
from specmon.sim.tqdm_text import completed_bar, default_bar, format_interval


def test_bars_reproduce_real_bars_character_for_character() -> None:
    # from the reference (sglang-dp-tp-ep-prefix-capture-progress-17392.log) and sglang-full-startup-tp4-...log
    assert default_bar("Capturing batches (bs=16 avail_mem=13.56 GB)", 1, 6, 16.57) == (
        "Capturing batches (bs=16 avail_mem=13.56 GB):  17%|█▋        | 1/6 [00:16<01:22, 16.57s/it]")
    assert completed_bar("Loading safetensors checkpoint shards", 1, 14, 1 / 2.93) == (
        "Loading safetensors checkpoint shards:   7% Completed | 1/14 [00:00<00:04,  2.93it/s]")
    assert completed_bar("Loading safetensors checkpoint shards", 0, 14, 0.0) == (
        "Loading safetensors checkpoint shards:   0% Completed | 0/14 [00:00<?, ?it/s]")
    assert default_bar("Capturing CUDA graphs (decode, FULL)", 67, 67, 2.0).startswith(
        "Capturing CUDA graphs (decode, FULL): 100%|██████████| 67/67 [00:02<00:00, 33.50it/s]")
    assert format_interval(3725) == "1:02:05"


def test_parse_chat_and_completion_requests() -> None:
    chat = api.parse_request({"messages": [{"role": "system", "content": "be brief"},
                                           {"role": "user", "content": [{"type": "text", "text": "two words"}]}],
                              "max_completion_tokens": 7, "stream": True, "stream_options": {"include_usage": True}},
                             chat=True, served_model="m", context_length=100)
    assert (chat.prompt_tokens, chat.max_tokens, chat.stream, chat.include_usage) == (4, 7, True, True)
    ids = api.parse_request({"prompt": [1, 2, 3], "max_tokens": 5, "ignore_eos": True}, False, "m", 100)
    assert ids.prompt_tokens == 3 and ids.completion_tokens() == 5
    assert api.parse_request({"prompt": "x"}, False, "m", 1000).max_tokens == api.DEFAULT_MAX_TOKENS
    assert api.parse_request({"prompt": "x y"}, False, "m", 100).max_tokens == 98  # unset: what fits


@pytest.mark.parametrize("body,needle", [
    ([], "JSON object"),
    ({"messages": []}, "'messages'"),
    ({"messages": [{"content": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "'n'"),
    ({"messages": [{"role": "user", "content": "x"}], "ignore_eos": "yes"}, "'ignore_eos'"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": True, "stream_options": []}, "'stream_options'"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": True}, "'max_tokens'"),
])
def test_bad_requests_name_the_field(body: object, needle: str) -> None:
    with pytest.raises(api.BadRequest) as err:
        api.parse_request(body, chat=True, served_model="m", context_length=100)
    assert needle in str(err.value)


def test_tokens_are_words_and_usage_is_exact() -> None:
    gen = api.parse_request({"prompt": "a b", "max_tokens": 9, "stream": True}, False, "m", 100)
    text = api.token_text(gen.prompt_key, 0, 4) + api.token_text(gen.prompt_key, 4, 5)
    assert text == api.token_text(gen.prompt_key, 0, 9) and len(text.split()) == 9
    assert api.usage_chunk(gen, "id", 0, 9) == {"id": "id", "object": "text_completion", "created": 0, "model": "m",
                                                "choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 9,
                                                                         "total_tokens": 11}}
    assert api.finish_reason(gen, 9) == "length" and api.finish_reason(gen, 8) == "stop"
