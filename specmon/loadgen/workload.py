"""What the load generator sends: the workload description, prompt sampling, and pre-encoded request bodies.

Prompts come from a dataset (specmon.model.workload.datasets): the built-in set, a user's ShareGPT/JSONL/SpecBench file,
or `random`, synthetic prompts of common English words (about one token each in Llama/Qwen-style tokenizers), so a
prompt of `input_len` words is roughly `input_len` tokens; the server's `usage.prompt_tokens` records the real
count. Each synthetic prompt starts with its own tag so server prefix caches cannot turn prefill into a cache hit;
dataset prompts are sent exactly as written (speculative acceptance depends on the text).

Sampling (all from `seed`, so two sweeps with the same seed send the same requests in the same order):
- request i of every level gets dataset entry order[i mod N], where `order` is a seeded shuffle of the N entries;
  every level thus sees the same prompts, and acceptance across levels is not confounded by a change of prompts;
- output length: `output_len` fixed, or uniform in output_len x [1 - output_range, 1 + output_range]; with
  `output_from_dataset`, the entry's own length where it has one (ShareGPT's reply, a JSONL `output_len`);
- input length (random only): `input_len`, or uniform in input_len x [1 - input_range, 1 + input_range].
Lengths are drawn once per position of a seeded sequence (period: the dataset size, or RANDOM_PERIOD).
"""

from __future__ import annotations

import itertools
import json
import random
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from specmon.errors import UserError
from specmon.model.config import check_levels, check_rates, one_wave_problem
from specmon.model.config.types import MAX_PROCESSES
from specmon.model.workload.datasets import DATASETS, FILE_DATASETS, Dataset, Prompt, load_dataset
from specmon.model.workload.goodput import check_slo

APIS = ("chat", "completions")
DEFAULT_RATE_SECONDS = 30.0   # open loop, no count or duration given: this much schedule per level
API_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
RANDOM_PERIOD = 1024      # synthetic prompts: lengths repeat after this many requests
RANDOM_POOL = 16          # distinct synthetic texts (the per-request tag keeps every prompt distinct anyway)
# Sizes past these are refused when the workload is built (at parse time, in one line), never half-run: one
# generator process cannot hold more streams or send faster, and a level longer than a week is a typo.
MAX_CONCURRENCY = 100_000     # requests in flight (levels, warm-up, --max-concurrency)
MIN_RATE, MAX_RATE = 1e-3, 1e5   # requests/s: one per 1000 s .. far above what one process sends
MIN_BURSTINESS, MAX_BURSTINESS = 0.01, 100.0
MAX_SECONDS = 7 * 24 * 3600.0    # --duration, --timeout, --deadline
MAX_ARRIVALS = 10_000_000     # one open-loop level's schedule (drawn lazily, but still minutes of setup beyond)
MAX_INPUT_LEN = 1 << 20       # synthetic prompt words (the longest contexts served)
MAX_OUTPUT_LEN = 10**8        # = client.USAGE_MAX

# JSON without spaces: request bodies and record lines (json.dumps with separators builds an encoder every call)
compact_json = json.JSONEncoder(separators=(",", ":")).encode

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
    level sends requests at `rates[i]` per second on a schedule (specmon.model.workload.arrivals), whatever the server's
    pace, at most `max_concurrency` in flight when set; `levels` is then unused.
    """

    levels: tuple[int, ...]
    requests_per_level: int | None = None   # None and no duration: max(16, 4 * C), rounded up to a multiple of C
    duration_s: float | None = None
    warmup_requests: int = 2
    input_len: int = 128
    output_len: int = 256
    api: str = "chat"
    dataset: str = "random"                 # one of datasets.DATASETS; random for result files from before datasets
    dataset_path: str | None = None         # the file of a sharegpt/jsonl/specbench dataset
    input_range: float = 0.0                # random prompts: lengths uniform in input_len x [1 - r, 1 + r]
    output_range: float = 0.0               # output lengths uniform in output_len x [1 - r, 1 + r]
    output_from_dataset: bool = False       # the dataset entry's output length where it has one
    timeout_s: float = 120.0                # longest silence on one stream before it counts as a timeout
    deadline_s: float | None = None         # longest a request may run, start to end; None: 10 x timeout_s
    fixed_length: bool = True               # send ignore_eos + min_tokens so every request generates output_len
    temperature: float = 0.0
    seed: int = 0                           # the prompt order and lengths, and the open-loop arrival times
    rates: tuple[float, ...] = ()           # requests/s per level: open loop; () is closed loop
    burstiness: float = 1.0                 # gamma shape of the gaps between arrivals; 1 is Poisson
    max_concurrency: int | None = None      # open loop: most requests in flight; later arrivals wait for a slot
    slo: Mapping[str, float] = field(default_factory=dict)   # goodput targets in ms: ttft, tpot, e2el
    processes: int = 1                      # generator processes sending each level together (loadgen.shards)

    def __post_init__(self) -> None:
        try:
            check_levels(self.levels)
            if self.rates:
                check_rates(self.rates)
            object.__setattr__(self, "slo", check_slo(self.slo))
        except ValueError as exc:
            raise UserError(str(exc)) from None
        wave = None if self.rates else one_wave_problem(self.requests_per_level, self.levels)
        if wave is not None:
            raise UserError(wave)
        if not MIN_BURSTINESS <= self.burstiness <= MAX_BURSTINESS:
            raise UserError(f"burstiness: must be a number in [{MIN_BURSTINESS:g}, {MAX_BURSTINESS:g}] "
                            f"(1 is Poisson), got {self.burstiness:g}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise UserError(f"max concurrency: must be >= 1, got {self.max_concurrency}")
        if not 1 <= self.processes <= MAX_PROCESSES:
            raise UserError(f"processes: must be in [1, {MAX_PROCESSES}], got {self.processes}")
        if self.max_concurrency is not None and self.processes > self.max_concurrency:
            raise UserError(f"processes: {self.processes} is more than the max concurrency ({self.max_concurrency}) "
                            "it would be shared by")
        for name, v in (("timeout", self.timeout_s), ("deadline", self.deadline_s), ("duration", self.duration_s)):
            if v is not None and not (0 < v <= MAX_SECONDS):
                raise UserError(f"{name}: must be a number of seconds in (0, {MAX_SECONDS:g}] (7 days), got {v:g}")
        for name, n in (("concurrency level", max(self.levels)), ("max concurrency", self.max_concurrency or 0),
                        ("warm-up requests", self.warmup_requests)):
            if n > MAX_CONCURRENCY:
                raise UserError(f"{name}: {n} is more than one load generator can keep in flight "
                                f"(at most {MAX_CONCURRENCY})")
        for rate in self.rates:
            if not MIN_RATE <= rate <= MAX_RATE:
                raise UserError(f"request rate: must be in [{MIN_RATE:g}, {MAX_RATE:g}] requests/s, got {rate:g}")
            if self.arrivals_for(rate) > MAX_ARRIVALS:
                raise UserError(f"{rate:g} req/s: {self.arrivals_for(rate)} requests in one level, more than "
                                f"{MAX_ARRIVALS}; ask for fewer (--requests) or a shorter --duration")
        if self.input_len > MAX_INPUT_LEN or self.output_len > MAX_OUTPUT_LEN:
            raise UserError(f"input/output length: at most {MAX_INPUT_LEN}/{MAX_OUTPUT_LEN} tokens, "
                            f"got {self.input_len}/{self.output_len}")
        if self.api not in APIS:
            raise UserError(f"api: must be one of {', '.join(APIS)}, got {self.api!r}")
        if self.requests_per_level is not None and self.requests_per_level < 1:
            raise UserError(f"requests: must be >= 1, got {self.requests_per_level}")
        if self.input_len < 1 or self.output_len < 1:
            raise UserError(f"input/output length must be >= 1, got {self.input_len}/{self.output_len}")
        if self.warmup_requests < 0:
            raise UserError(f"warmup requests must be >= 0, got {self.warmup_requests}")
        if self.dataset not in DATASETS:
            raise UserError(f"dataset: must be one of {', '.join(DATASETS)}, got {self.dataset!r}")
        if self.dataset in FILE_DATASETS and not self.dataset_path:
            raise UserError(f"dataset {self.dataset} needs a dataset path (--dataset-path FILE)")
        if self.dataset not in FILE_DATASETS and self.dataset_path:
            raise UserError(f"dataset {self.dataset} takes no dataset path (give --dataset sharegpt, jsonl or specbench)")
        for name, r in (("input range", self.input_range), ("output range", self.output_range)):
            if not 0.0 <= r < 1.0:
                raise UserError(f"{name}: must be a fraction in [0, 1) (0.2 means +-20 %), got {r}")

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
        if d.get("prompt_file") and "dataset" not in d:   # a result file from before datasets
            known.update(dataset="jsonl", dataset_path=d["prompt_file"])
        return cls(**known)

    def load_dataset(self) -> Dataset:
        """The workload's prompt set; UserError naming FILE:LINE for a malformed entry."""
        return load_dataset(self.dataset, self.dataset_path)


@dataclass(frozen=True)
class Sample:
    """What request i of a level sends: its prompt, the prompt's category (None if the set has none), its length."""

    prompt: Prompt
    category: str | None
    output_len: int


class RequestFactory:
    """Builds the encoded JSON body of request i of a level; see the module docstring for the sampling."""

    def __init__(self, workload: Workload, model: str, dataset: Dataset | None = None) -> None:
        self._w = workload
        self._model = model
        self._entries = dataset.entries if dataset is not None else ()
        seed = workload.seed
        period = len(self._entries) or RANDOM_PERIOD
        self._order = list(range(len(self._entries)))
        random.Random(f"{seed}/order").shuffle(self._order)
        self._out = _lengths(workload.output_len, workload.output_range, period, random.Random(f"{seed}/output"))
        self._in = _lengths(workload.input_len, workload.input_range, period, random.Random(f"{seed}/input"))
        rng = random.Random(seed)
        # A small pool of synthetic texts; the per-request tag in front keeps every prompt distinct.
        longest = max(self._in)
        # Each text joined once, with where its k-th word ends (a compact array: 4 bytes a word at the longest
        # prompts), so a prompt of k words is then one slice.
        self._pool: list[str] = []
        self._ends: list[array[int]] = []
        self._frames: dict[int, tuple[bytes, bytes]] = {}   # output length -> a text request's bytes (body)
        for _ in range(RANDOM_POOL):
            words = rng.choices(_WORDS, k=max(1, longest - 4))
            self._pool.append(" ".join(words))
            self._ends.append(array("L", itertools.accumulate(len(w) + 1 for w in words)))

    def sample(self, level: int | str, i: int) -> Sample:
        """Request i of the level `level` (its concurrency, or an open-loop level's label)."""
        w = self._w
        out = self._out[i % len(self._out)]
        if not self._entries:
            k = i % RANDOM_POOL
            end = self._ends[k][max(1, self._in[i % len(self._in)] - 4) - 1] - 1
            return Sample(f"[{level}-{i}] " + self._pool[k][:end], None, out)
        entry = self._entries[self._order[i % len(self._order)]]
        if w.output_from_dataset and entry.output_len is not None:
            out = entry.output_len
        return Sample(entry.prompt, entry.category, out)

    def category(self, i: int) -> str | None:
        """The category of request i's prompt (the same at every level)."""
        return self._entries[self._order[i % len(self._order)]].category if self._entries else None

    def body(self, level: int | str, i: int) -> bytes:
        s = self.sample(level, i)
        prompt = s.prompt
        if isinstance(prompt, str):   # one text: the same bytes around it as the whole request encoded (frame)
            frame = self._frames.get(s.output_len)
            if frame is None:
                frame = self._frames[s.output_len] = self._frame(s.output_len)
            return frame[0] + compact_json(prompt).encode() + frame[1]
        return compact_json(self._request(s.output_len, prompt)).encode()

    def _request(self, output_len: int, prompt: Prompt) -> dict[str, Any]:
        w = self._w
        req: dict[str, Any] = {"model": self._model, "max_tokens": output_len, "stream": True,
                               "stream_options": {"include_usage": True}, "temperature": w.temperature}
        if w.fixed_length:
            req["ignore_eos"] = True
            req["min_tokens"] = output_len
        if w.api == "chat":
            req["messages"] = list(prompt) if isinstance(prompt, tuple) else [{"role": "user", "content": prompt}]
        else:
            req["prompt"] = prompt if isinstance(prompt, str) else "\n".join(str(m["content"]) for m in prompt)
        return req

    def _frame(self, output_len: int) -> tuple[bytes, bytes]:
        """The encoded request of one text prompt before and after the text's JSON string: encoding only the text
        for each request keeps an open loop's sends on time (the whole request encoded took ~10 us a request)."""
        marker = "prompt"
        whole = compact_json(self._request(output_len, marker)).encode()
        head, tail = whole.rsplit(compact_json(marker).encode(), 1)   # the text is the request's last value
        return head, tail


def _lengths(base: int, spread: float, n: int, rng: random.Random) -> list[int]:
    """n lengths: all `base`, or uniform integers in base x [1 - spread, 1 + spread] (at least 1)."""
    if not spread:
        return [base]
    lo, hi = max(1, round(base * (1 - spread))), max(1, round(base * (1 + spread)))
    return [rng.randint(lo, hi) for _ in range(n)]
