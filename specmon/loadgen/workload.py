"""What the load generator sends: the workload description, prompts, and pre-encoded request bodies.

Synthetic prompts are common English words (about one token each in Llama/Qwen-style tokenizers), so a prompt of
`input_len` words is roughly `input_len` tokens; the server's `usage.prompt_tokens` records the real count. Every
request starts with its own tag so server prefix caches cannot turn prefill into a cache hit.

Prompt files (for realistic speculative acceptance) are JSONL with one object per line, or one JSON array:
`{"prompt": "..."}`, `{"text": "..."}`, `{"messages": [{"role": ..., "content": ...}, ...]}`, or ShareGPT-style
`{"conversations": [{"from": "human", "value": "..."}, ...]}` (the first human turn is used).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.errors import UserError
from specmon.model.config import check_levels, check_rates, one_wave_problem
from specmon.model.goodput import check_slo
from specmon.model.textfile import NotTextError, read_capped

APIS = ("chat", "completions")
MAX_PROMPT_BYTES = 1 << 30   # the ShareGPT dump is ~0.7 GB; past 1 GiB a path is almost certainly wrong
DEFAULT_RATE_SECONDS = 30.0   # open loop, no count or duration given: this much schedule per level
API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}

# One message list (chat) or one string (completions / synthetic).
Prompt = str | tuple[Mapping[str, Any], ...]

_WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which this be has had not but "
    "they one all their also new first can more two time after who when year over into other people some only "
    "state most world work city its many used three made well may between under game part during school team "
    "before such where later him film known both through since then these life war end north south long group "
    "music day each while same high about several family national out would around river four main back early "
    "season name government series against what than second line because until system public however since own "
    "large five left last place small house based area three history river station number power water general"
).split()


@dataclass(frozen=True)
class Workload:
    """One sweep's load: levels, stop rule per level, and request shape. Serialised into the result meta line.

    Closed loop (the default): each level keeps `levels[i]` requests in flight. Open loop (`rates` given): each
    level sends requests at `rates[i]` per second on a schedule (specmon.model.arrivals), whatever the server's
    pace, at most `max_concurrency` in flight when set; `levels` is then unused.
    """

    levels: tuple[int, ...]
    requests_per_level: int | None = None   # None and no duration: max(16, 4 * C), rounded up to a multiple of C
    duration_s: float | None = None
    warmup_requests: int = 2
    input_len: int = 128
    output_len: int = 256
    api: str = "chat"
    prompt_file: str | None = None
    timeout_s: float = 120.0                # longest silence on one stream before it counts as a timeout
    deadline_s: float | None = None         # longest a request may run, start to end; None: 10 x timeout_s
    fixed_length: bool = True               # send ignore_eos + min_tokens so every request generates output_len
    temperature: float = 0.0
    seed: int = 0
    rates: tuple[float, ...] = ()           # requests/s per level: open loop; () is closed loop
    burstiness: float = 1.0                 # gamma shape of the gaps between arrivals; 1 is Poisson
    max_concurrency: int | None = None      # open loop: most requests in flight; later arrivals wait for a slot
    slo: Mapping[str, float] = field(default_factory=dict)   # goodput targets in ms: ttft, tpot, e2el

    def __post_init__(self) -> None:
        try:
            check_levels(self.levels)
            if self.rates:
                check_rates(self.rates)
            object.__setattr__(self, "slo", check_slo(self.slo))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        if not self.rates and self.requests_per_level is not None and self.requests_per_level < max(self.levels):
            raise UserError(one_wave_problem(self.requests_per_level, max(self.levels)))
        if not 0 < self.burstiness < math.inf:
            raise UserError(f"burstiness: must be a finite number > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UserError(f"max concurrency: must be >= 1, got {self.max_concurrency}")
        for name, v in (("timeout", self.timeout_s), ("deadline", self.deadline_s), ("duration", self.duration_s)):
            if v is not None and not (0 < v < math.inf):
                raise UserError(f"{name}: must be a finite number of seconds > 0, got {v}")
        if self.api not in APIS:
            raise UserError(f"api: must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            raise UserError(f"requests: must be >= 1, got {self.requests_per_level}")
        if self.input_len < 1 or self.output_len < 1:
            raise UserError(f"input/output length must be >= 1, got {self.input_len}/{self.output_len}")
        if self.warmup_requests < 0:
            raise UserError(f"warmup requests must be >= 0, got {self.warmup_requests}")

    def requests_for(self, concurrency: int) -> int | None:
        """Measured requests at this level; None when the level runs for duration_s instead."""
        if self.duration_s is not None and self.requests_per_level is None:
            return None
        if self.requests_per_level is not None:
            return self.requests_per_level
        # Whole waves: in a closed loop a last, partial wave runs below C and drags the level's throughput down.
        return -(-max(16, 4 * concurrency) // concurrency) * concurrency

    @property
    def open_loop(self) -> bool:
        return bool(self.rates)

    @property
    def mode(self) -> str:
        """"rate" (open loop) or "concurrency" (closed loop): what a level's x value is."""
        return "rate" if self.rates else "concurrency"

    def arrivals_for(self, rate: float) -> int:
        """Requests scheduled at this open-loop rate: the count given, else duration x rate, else 30 s of them."""
        if self.requests_per_level is not None:
            return self.requests_per_level
        seconds = self.duration_s if self.duration_s is not None else DEFAULT_RATE_SECONDS
        return max(1, round(rate * seconds))

    def to_dict(self) -> dict[str, Any]:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
        d["slo"] = dict(self.slo)
        d["mode"] = self.mode
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Workload:
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["levels"] = tuple(int(c) for c in known.get("levels", ()))
        known["rates"] = tuple(float(r) for r in known.get("rates", ()))
        known["slo"] = dict(known.get("slo") or {})
        return cls(**known)


def load_prompts(path: str | Path) -> list[Prompt]:
    """Prompts from a JSONL or JSON-array file; a bad entry raises UserError naming file:line."""
    p = Path(path)
    try:
        text = read_capped(p, MAX_PROMPT_BYTES).decode("utf-8")
    except NotTextError as exc:
        raise UserError(f"{p}:{exc.line}: {exc}; expected a JSONL or JSON prompt file") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{p}: cannot read prompt file (not UTF-8 text: {exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise UserError(f"{p}: cannot read prompt file ({exc.strerror or exc})") from None
    entries: list[tuple[str, Any]] = []   # (where, entry)
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"{p}:{exc.lineno}: not valid JSON ({exc.msg})") from None
        entries = [(f"{p}: entry {n}", e) for n, e in enumerate(data, 1)]
    else:
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                entries.append((f"{p}:{lineno}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise UserError(f"{p}:{lineno}: not valid JSON ({exc.msg})") from None
    prompts = [_prompt_of(entry, where) for where, entry in entries]
    if not prompts:
        raise UserError(f"{p}:1: no prompts in file")
    return prompts


def _prompt_of(entry: Any, where: str) -> Prompt:
    if isinstance(entry, Mapping):
        for key in ("prompt", "text"):
            if isinstance(entry.get(key), str) and entry[key]:
                return entry[key]
        msgs = entry.get("messages")
        if isinstance(msgs, list) and msgs and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in msgs):
            return tuple(dict(m) for m in msgs)
        conv = entry.get("conversations")
        if isinstance(conv, list):
            for turn in conv:
                if isinstance(turn, Mapping) and turn.get("from") in ("human", "user") and isinstance(turn.get("value"), str):
                    return turn["value"]
    raise UserError(f"{where}: expected {{\"prompt\": ...}}, {{\"messages\": [...]}} or ShareGPT conversations")


class RequestFactory:
    """Builds the encoded JSON body of request i of a level; bodies differ from the very first token."""

    def __init__(self, workload: Workload, model: str, prompts: Sequence[Prompt] | None = None) -> None:
        self._w = workload
        self._model = model
        self._prompts = list(prompts) if prompts else None
        rng = random.Random(workload.seed)
        # A small pool of synthetic texts; the per-request tag in front keeps every prompt distinct.
        self._pool = [" ".join(rng.choices(_WORDS, k=max(1, workload.input_len - 4))) for _ in range(16)]

    def body(self, level: int | str, i: int) -> bytes:
        w = self._w
        tag = f"[{level}-{i}]"
        if self._prompts is not None:
            prompt = self._prompts[i % len(self._prompts)]
        else:
            prompt = f"{tag} {self._pool[i % len(self._pool)]}"
        req: dict[str, Any] = {"model": self._model, "max_tokens": w.output_len, "stream": True,
                               "stream_options": {"include_usage": True}, "temperature": w.temperature}
        if w.fixed_length:
            req["ignore_eos"] = True
            req["min_tokens"] = w.output_len
        if w.api == "chat":
            req["messages"] = list(prompt) if isinstance(prompt, tuple) else [{"role": "user", "content": prompt}]
        else:
            req["prompt"] = prompt if isinstance(prompt, str) else "\n".join(str(m["content"]) for m in prompt)
        return json.dumps(req, separators=(",", ":")).encode()
