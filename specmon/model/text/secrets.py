"""The one redaction rule: what counts as a secret in a command line, an environment, a URL or free text.

Applied wherever one of those leaves memory (files, the terminal, JSON): result files, experiment.json,
report.md, `env`, `profiles --json`, `status`.

    names      a variable or key is secret when one of its words (split at `_`, `-`, `.` and camelCase) is
               key, apikey, token, secret, password, passwd, credential(s), auth, authorization, cookie or
               session: `HF_TOKEN`, `OPENAI_API_KEY`, `DB_PASSWORD`; `max_total_tokens` is not
    flags      `--api-key X`, `--token=X`, `--hf-token X`, `--password X` (any flag ending in such a word)
    URLs       the password of any `scheme://user:password@host` (`postgres://u:pw@db/x`), whatever holds it
    values     bearer tokens and provider keys (`Bearer ...`, `sk-...`, `hf_...`) wherever they appear
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "<redacted>"

_SECRET_WORDS = frozenset({"key", "apikey", "token", "secret", "password", "passwd", "credential",
                           "credentials", "auth", "authorization", "cookie", "session", "accesstoken"})
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
# A secret-looking command-line flag (`--api-key`, `--hf-token`, `--password`): its last word is a secret word.
_SECRET_FLAG = re.compile(r"^--?(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|token|secret|passw(?:or)?d|credentials?)$",
                          re.I)
# The same in free text (a log line echoing argv or a Python repr of the server's args).
_SECRET_IN_TEXT = re.compile(
    r"(?P<key>--?(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|token|secret|passw(?:or)?d)(?:=|\s+)"
    r"|\b(?:[A-Za-z0-9]+_)*(?:api_key|token|secret|password)\s*[=:]\s*)"
    r"(?P<value>'[^']*'|\"[^\"]*\"|[^\s,)]+)", re.I)
# Values that look like bearer tokens or provider keys, whatever holds them.
_SECRET_VALUE = re.compile(r"(Bearer\s+\S+|\bsk-[A-Za-z0-9_\-]{8,}|\bhf_[A-Za-z0-9]{16,})")
# The password part of `scheme://user:password@host` (user and password without `/`, `@` or spaces).
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:)([^/\s@]+)(@)")


def is_secret_name(name: str) -> bool:
    """Whether a variable, key or option named `name` holds a secret (see the module doc)."""
    words = [w.lower() for w in _WORD_SPLIT.split(name) if w]
    return any(w in _SECRET_WORDS for w in words) or "apikey" in name.lower().replace("_", "").replace("-", "")


def redact_value(text: str) -> str:
    """`text` with URL passwords and token-looking words replaced by REDACTED."""
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    return _SECRET_VALUE.sub(REDACTED, text)


def redact_text(text: str) -> str:
    """Free text (a log line, an error message) with secret `--flag value` and `key=value` pairs, URL passwords
    and token-looking words redacted."""
    return redact_value(_SECRET_IN_TEXT.sub(lambda m: m.group("key") + REDACTED, text))


def redact_argv(argv: Iterable[str]) -> list[str]:
    """argv with the values of secret-looking flags (`=`-joined or separate), URL passwords and token-looking
    words replaced by REDACTED."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next and not arg.startswith("--"):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        name, eq, _ = arg.partition("=")
        if _SECRET_FLAG.match(name):
            if eq:
                out.append(f"{name}={REDACTED}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact_value(arg))
    return out


def redact_env(env: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """An environment with the values of secret-looking names, URL passwords and token-looking words redacted."""
    items = env.items() if isinstance(env, Mapping) else env
    return {name: REDACTED if is_secret_name(name) and value else redact_value(value) for name, value in items}


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy of JSON-like `value` with the values of secret-looking keys, URL passwords, token-looking
    words and the given secret strings replaced by REDACTED; a list under a key named `command` or `argv` is
    redacted as a command line."""
    secret_set = {s for s in secrets if s}

    def walk(v: Any, key: str | None) -> Any:
        if key is not None and is_secret_name(key) and v not in (None, "", False):
            return REDACTED
        if isinstance(v, Mapping):
            return {k: walk(x, str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            if key in ("command", "argv") and all(isinstance(x, str) for x in v):
                v = redact_argv(v)
            return [walk(x, None) for x in v]
        if isinstance(v, str):
            v = redact_value(v)
            for s in secret_set:
                if s in v:
                    v = v.replace(s, REDACTED)
        return v

    return walk(value, None)
