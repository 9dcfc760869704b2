"""profiles.toml: named server profiles and sweep defaults.

CONTRACT (other modules code against these names; the loader/validator is filled in by the config work):
    load_config(path: str | os.PathLike | None, env: Mapping[str, str] | None = None) -> Config
        discovery when path is None: $SPECMON_CONFIG, ./profiles.toml, $XDG_CONFIG_HOME/specmon/profiles.toml,
        else the built-in demo profiles (Config.source == "built-in demo profiles").
        Every user error raises specmon.errors.UserError("FILE:LINE: key: what is wrong").
"""

from __future__ import annotations

from dataclasses import dataclass, field

SERVER_KINDS = ("sglang", "vllm", "other")
DEFAULT_LEVELS = (1, 2, 5, 10, 30, 70, 100, 250)


@dataclass(frozen=True)
class Profile:
    name: str
    command: tuple[str, ...]          # argv; a string in TOML is split with shlex
    host: str = "local"               # "local", an ssh alias, or user@host[:port]
    server: str = "sglang"            # one of SERVER_KINDS
    env: tuple[tuple[str, str], ...] = ()
    workdir: str | None = None
    port: int = 30000
    health_path: str = "/health"
    python: str = "python3"           # interpreter used for environment probes
    expected_load_s: float | None = None
    notify_cmd: str | None = None
    stall_timeout_s: float = 300.0    # no log bytes and no progress for this long => "stalled" warning

    @property
    def is_local(self) -> bool:
        return self.host == "local"

    @property
    def base_url(self) -> str:
        """URL the server answers on from where specmon runs (SSH forwards map remote ports to 127.0.0.1)."""
        return f"http://127.0.0.1:{self.port}"


@dataclass(frozen=True)
class SweepDefaults:
    levels: tuple[int, ...] = DEFAULT_LEVELS
    requests_per_level: int | None = None   # None => 4*C, at least 16 (see sweep docs)
    duration_s: float | None = None
    warmup_requests: int = 2
    input_len: int = 128
    output_len: int = 256
    api: str = "chat"                       # "chat" | "completions"


@dataclass(frozen=True)
class Config:
    source: str                              # file path, or "built-in demo profiles"
    profiles: dict[str, Profile] = field(default_factory=dict)
    sweep: SweepDefaults = field(default_factory=SweepDefaults)
    keys: dict[str, str] = field(default_factory=dict)   # binding id -> key, from a [keys] table (TUI remaps)

    def profile(self, name: str) -> Profile:
        """The named profile, or a UserError listing the known names."""
        from specmon.errors import UserError

        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise UserError(f"{self.source}: unknown profile {name!r} (known: {known})") from None
