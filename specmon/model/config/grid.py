"""A tuning grid in an experiment (`[experiments.NAME]` with `base`, `baseline` and `vary`): the base profile's
variants, one per combination of the values in `vary`, each a profile derived in memory. Pure.

    vary = { "--speculative-num-steps" = [1, 3, 5], "--speculative-eagle-topk" = [1, 4], "env.NCCL_ALGO" = ["Ring"] }

Each key is a command flag (`--[a-z0-9-]+`: replaced in the base profile's command where it is written, as
`--flag value` or `--flag=value`, appended as `--flag value` where it is not) or `env.NAME` (the variant's
environment value). A variant is named after its base and its values in the order the keys are written, each key
shortened: `eagle3 steps=3 topk=4` (`--` and `speculative-` dropped, then a leading `num-` or `eagle-`; the whole
flag where two keys would shorten alike). The names hold spaces, which a profile written in the file cannot, so a
variant never takes a written profile's name.

Refused (each a (key path, problem) pair, reported by the validator as FILE:LINE: key: problem): a key that would
move the port specmon probes (`--port`, which `types.command_port` reads), a malformed flag or environment name, a
value that is not a string or a number, an empty or repeated list of values, a flag the base command writes as a
switch (no value after it: setting one would overwrite the next option), and more than MAX_VARIANTS variants.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from specmon.model.config.keys import KeyPath
from specmon.model.config.types import ENV_NAME, RESERVED_ENV, Profile

MAX_VARIANTS = 24          # each variant is a server launch and a full sweep: two dozen is already a long day
FLAG = re.compile(r"--[a-z0-9]+(?:-[a-z0-9]+)*")
ENV_PREFIX = "env."
PORT_FLAGS = ("--port",)   # what types.command_port reads: the port specmon probes must stay the profile's
_DROPPED = ("speculative-",)
_LEADING = ("num-", "eagle-")

Problems = list[tuple[KeyPath, str]]


def short_name(key: str) -> str:
    """`--speculative-num-steps` -> `steps`, `--speculative-eagle-topk` -> `topk`, `--mem-fraction-static` ->
    `mem-fraction-static`, `env.NCCL_ALGO` -> `NCCL_ALGO`."""
    if key.startswith(ENV_PREFIX):
        return key[len(ENV_PREFIX):]
    name = key[2:]
    for part in _DROPPED:
        name = name.replace(part, "", 1) if name.startswith(part) else name
    for part in _LEADING:
        if name.startswith(part) and len(name) > len(part):
            name = name[len(part):]
            break
    return name


def value_text(value: object) -> str:
    """A grid value as the command line or environment gets it (`0.85`, `3`, `bf16`)."""
    return str(value)


def set_flag(argv: Sequence[str], flag: str, value: str) -> tuple[str, ...]:
    """`argv` with every `flag VALUE` / `flag=VALUE` set to `value`, or `flag value` appended when absent."""
    out = list(argv)
    found = False
    for i, arg in enumerate(out):
        if arg == flag and i + 1 < len(out):
            out[i + 1] = value
            found = True
        elif arg.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            found = True
    if not found:
        out += [flag, value]
    return tuple(out)


def check_vary(raw: object, path: KeyPath) -> tuple[list[tuple[str, tuple[str, ...]]], Problems]:
    """The `vary` table as (key, values as text) in written order, and its problems."""
    problems: Problems = []
    if not isinstance(raw, dict) or not raw:
        problems.append((path, "must be a non-empty table of \"--flag\" or \"env.NAME\" = [values...]"))
        return [], problems
    keys: list[tuple[str, tuple[str, ...]]] = []
    for key, values in raw.items():
        at = path + (key,)
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX):]
            if not ENV_NAME.fullmatch(name):
                problems.append((at, "bad environment variable name (use letters, digits and _, "
                                     "not starting with a digit)"))
                continue
            if name in RESERVED_ENV:
                problems.append((at, "is reserved: specmon sets it on every server it starts"))
                continue
        elif key in PORT_FLAGS or key.startswith(tuple(f + "=" for f in PORT_FLAGS)):
            problems.append((at, "would change the server's port, which specmon probes; a grid varies how a server "
                                 "runs, not where (set the profile's port)"))
            continue
        elif not FLAG.fullmatch(key):
            problems.append((at, "not a command flag (--lowercase-words) or env.NAME"))
            continue
        if not isinstance(values, list) or not values:
            problems.append((at, "must be a non-empty array of values (strings or numbers)"))
            continue
        bad = next((v for v in values if isinstance(v, bool) or not isinstance(v, (str, int, float))), None)
        if bad is not None:
            kind = {bool: "boolean", list: "array", dict: "table"}.get(type(bad), type(bad).__name__)
            problems.append((at, f"each value must be a string or a number, got {kind}"))
            continue
        texts = tuple(value_text(v) for v in values)
        if any(not t.strip() for t in texts):
            problems.append((at, "a value must not be empty"))
        elif len(set(texts)) != len(texts):
            problems.append((at, "names a value twice"))
        else:
            keys.append((key, texts))
    return keys, problems


def variant_names(base: str, keys: Sequence[tuple[str, tuple[str, ...]]]) -> list[tuple[str, tuple[tuple[str, str], ...]]]:
    """(name, ((key, value), ...)) of every combination, the last key varying fastest."""
    shorts = [short_name(k) for k, _ in keys]
    labels = [s if shorts.count(s) == 1 else (k[2:] if k.startswith("--") else k) for s, (k, _) in zip(shorts, keys)]
    out = []
    for combo in itertools.product(*(values for _, values in keys)):
        name = " ".join([base] + [f"{label}={value}" for label, value in zip(labels, combo)])
        out.append((name, tuple((k, v) for (k, _), v in zip(keys, combo))))
    return out


def derive(profile: Profile, name: str, settings: Sequence[tuple[str, str]]) -> Profile:
    """The base profile with the variant's flags and environment values set."""
    command = profile.command
    env = dict(profile.env)
    for key, value in settings:
        if key.startswith(ENV_PREFIX):
            env[key[len(ENV_PREFIX):]] = value
        else:
            command = set_flag(command, key, value)
    return replace(profile, name=name, command=command, env=tuple(env.items()))


def expand_grid(table: Mapping[str, Any], path: KeyPath,
                profiles: Mapping[str, Profile]) -> tuple[str, list[Profile], Problems]:
    """An experiment table's grid: (baseline profile name, the variants in order, problems). `profiles` are the
    profiles read from the same file; a base or baseline that is not among them is a problem."""
    problems: Problems = []
    names: dict[str, str] = {}
    for key in ("base", "baseline"):
        value = table.get(key)
        if not isinstance(value, str) or not value:
            problems.append((path + (key,), "missing or not a profile name; a grid needs `base` (the profile to "
                                            "vary) and `baseline` (the profile to beat)"))
        elif value not in profiles:
            problems.append((path + (key,), f"unknown profile {value!r} (known: {', '.join(profiles) or 'none'})"))
        else:
            names[key] = value
    keys, vary_problems = check_vary(table.get("vary"), path + ("vary",))
    problems += vary_problems
    if problems or "base" not in names:
        return names.get("baseline", ""), [], problems
    count = 1
    for _, values in keys:
        count *= len(values)
    if count > MAX_VARIANTS:
        sizes = " x ".join(str(len(v)) for _, v in keys)
        problems.append((path + ("vary",), f"{sizes} = {count} variants; at most {MAX_VARIANTS} (each is a launch "
                                           "and a full sweep): split the grid into experiments"))
        return names["baseline"], [], problems
    base = profiles[names["base"]]
    for key, _ in keys:
        if any(arg == key and (i + 1 == len(base.command) or base.command[i + 1].startswith("--"))
               for i, arg in enumerate(base.command)):
            problems.append((path + ("vary", key), f"is a switch in {base.name}'s command (no value follows it); "
                                                   "a grid sets flags that take a value"))
    if problems:
        return names["baseline"], [], problems
    return names["baseline"], [derive(base, n, s) for n, s in variant_names(base.name, keys)], problems
