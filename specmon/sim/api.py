"""OpenAI-compatible request parsing and response bodies of the simulated server (pure functions).

Tokenization (the sim's, documented for clients that count tokens): one token per
whitespace-separated word. `prompt_tokens` is the word count of the prompt (chat: of all message
contents together, no template overhead; a list of token ids counts its length). Every generated
token is one word with a leading space, so `len(text.split())` of a completion equals its
`completion_tokens`.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from specmon.sim import model as throughput

DEFAULT_MAX_TOKENS = 256
_WORDS = (
    "the", "model", "server", "token", "batch", "cache", "draft", "verify", "accept", "stream", "load", "shard",
    "graph", "kernel", "memory", "queue", "decode", "prefill", "tensor", "rank", "step", "latency", "speed", "request",
    "answer", "value", "signal", "engine", "weight", "layer", "head", "block",
)


class BadRequest(ValueError):
    """A request body the server rejects with 400; the message names the field."""


@dataclass(frozen=True)
class Generation:
    """A validated completion request."""

    chat: bool
    prompt_key: int  # CRC32 of the prompt text: seeds the natural length and the words
    prompt_tokens: int
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    model: str
    prompt_text: str = ""  # the prompt as one string (chat: message contents joined by newlines)

    def completion_tokens(self) -> int:
        """How many tokens this request will produce: max_tokens with ignore_eos, else a deterministic EOS point."""
        if self.ignore_eos:
            return self.max_tokens
        return throughput.natural_length(self.prompt_key, self.max_tokens, self.min_tokens)


def _content_text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise BadRequest(f"{where}[{i}] must be an object with a string 'text'")
            parts.append(part.get("text", ""))
        return " ".join(parts)
    if content is None:
        return ""
    raise BadRequest(f"{where} must be a string or a list of content parts")


def _prompt(body: dict[str, Any], chat: bool) -> tuple[str, int]:
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list")
        texts = []
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
                raise BadRequest(f"messages[{i}] must be an object with a string 'role'")
            texts.append(_content_text(msg.get("content"), f"messages[{i}].content"))
        text = "\n".join(texts)
        return text, throughput.count_prompt_tokens(text)
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt, throughput.count_prompt_tokens(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return " ".join(map(str, prompt)), len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return prompt[0], throughput.count_prompt_tokens(prompt[0])
    raise BadRequest("'prompt' must be a string, a one-string list or a non-empty list of token ids")


def _int_field(body: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise BadRequest(f"'{name}' must be an integer >= {minimum}")
    return value


def _bool_field(body: dict[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"'{name}' must be a boolean")
    return value


def parse_request(body: object, chat: bool, served_model: str, context_length: int) -> Generation:
    """Validate a /v1/chat/completions (`chat`) or /v1/completions body."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    model_name = body.get("model", served_model)
    if model_name is not None and not isinstance(model_name, str):
        raise BadRequest("'model' must be a string")
    if model_name not in (None, served_model, "default"):
        raise BadRequest(f"model '{model_name}' not found; this server serves '{served_model}'")
    text, prompt_tokens = _prompt(body, chat)
    max_name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    # like the real servers, an unset limit means "what fits", here capped at DEFAULT_MAX_TOKENS
    max_tokens = _int_field(body, max_name, max(1, min(DEFAULT_MAX_TOKENS, context_length - prompt_tokens)), 1)
    min_tokens = _int_field(body, "min_tokens", 0, 0)
    if _int_field(body, "n", 1, 1) != 1:
        raise BadRequest("'n' must be 1")
    stream = _bool_field(body, "stream")
    ignore_eos = _bool_field(body, "ignore_eos")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not isinstance(options, dict):
            raise BadRequest("'stream_options' must be an object")
        if not stream:
            raise BadRequest("'stream_options' is only allowed when 'stream' is true")
        include_usage = _bool_field(options, "include_usage")
    if prompt_tokens + max_tokens > context_length:
        raise BadRequest(
            f"This model's maximum context length is {context_length} tokens. However, you requested "
            f"{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion)."
        )
    return Generation(chat=chat, prompt_key=zlib.crc32(text.encode()), prompt_tokens=prompt_tokens,
                      max_tokens=max_tokens, min_tokens=min_tokens, ignore_eos=ignore_eos,
                      stream=stream, include_usage=include_usage, model=served_model, prompt_text=text)


def token_text(prompt_key: int, start: int, count: int) -> str:
    """Text of tokens start..start+count-1 of a completion: one word per token, each with a leading space."""
    n = len(_WORDS)
    return "".join(" " + _WORDS[(prompt_key + i) % n] for i in range(start, start + count))


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def finish_reason(gen: Generation, produced: int) -> str:
    return "length" if produced >= gen.max_tokens else "stop"


def stream_chunk(gen: Generation, rid: str, created: int, text: str | None, finish: str | None,
                 role: bool = False) -> dict[str, Any]:
    """One SSE `data:` object. `text=None` with `role=True` is the chat role preamble."""
    if gen.chat:
        delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {"content": text}
        choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        obj = "chat.completion.chunk"
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": gen.model, "choices": [choice]}


def usage_chunk(gen: Generation, rid: str, created: int, produced: int) -> dict[str, Any]:
    """The final `choices: []` chunk sent with stream_options.include_usage."""
    obj = "chat.completion.chunk" if gen.chat else "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": gen.model, "choices": [],
            "usage": usage(gen.prompt_tokens, produced)}


def full_response(gen: Generation, rid: str, created: int, text: str, produced: int) -> dict[str, Any]:
    """A non-streamed response body."""
    finish = finish_reason(gen, produced)
    if gen.chat:
        choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                  "logprobs": None, "finish_reason": finish}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": gen.model, "choices": [choice],
            "usage": usage(gen.prompt_tokens, produced)}


def error_body(message: str, status: int) -> dict[str, Any]:
    """OpenAI-style error object (both servers answer this shape)."""
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
