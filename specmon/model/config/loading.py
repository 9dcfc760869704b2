"""Finding and reading the profiles file (the one part of config that reads files).

    load_config(path=None, env=None) -> Config
        Discovery when path is None: $SPECMON_CONFIG, ./profiles.toml, $XDG_CONFIG_HOME/specmon/profiles.toml
        (default ~/.config), else the built-in demo profiles (Config.source == BUILTIN_SOURCE).
        Every user error raises specmon.errors.UserError("FILE:LINE: key: what is wrong").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from specmon.errors import UserError
from specmon.model.config.types import (
    BUILTIN_SOURCE,
    MAX_CONFIG_BYTES,
    Config,
)
from specmon.model.config.validation import parse_config
from specmon.model.text.textfile import NotTextError, read_capped


def load_config(path: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Find, read and validate the profiles file (see the module docstring for the discovery order)."""
    env = os.environ if env is None else env
    if path is not None:
        return _load_file(Path(path), "--config")
    if env.get("SPECMON_CONFIG"):
        return _load_file(Path(env["SPECMON_CONFIG"]), "$SPECMON_CONFIG")
    cwd_file = Path("profiles.toml")
    if cwd_file.is_file():
        return _load_file(cwd_file, "./profiles.toml")
    xdg_file = config_dir(env) / "profiles.toml"
    if xdg_file.is_file():
        return _load_file(xdg_file, "$XDG_CONFIG_HOME/specmon/profiles.toml")
    return builtin_config()


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """specmon's per-user config directory: `$XDG_CONFIG_HOME/specmon`, default `~/.config/specmon`."""
    env = os.environ if env is None else env
    xdg = env.get("XDG_CONFIG_HOME", "")
    # The XDG spec says relative values are to be ignored.
    base = Path(xdg) if os.path.isabs(xdg) else Path(env.get("HOME") or Path.home()) / ".config"
    return base / "specmon"


def builtin_config() -> Config:
    """The demo profiles shipped inside the package (two `specmon sim` servers, run by the running specmon as
    any local profile's `specmon ...` command is)."""
    text = resources.files("specmon").joinpath("demo_profiles.toml").read_text(encoding="utf-8")
    return parse_config(text, BUILTIN_SOURCE, found_by="built-in")


def _load_file(path: Path, found_by: str) -> Config:
    try:
        data = read_capped(path, MAX_CONFIG_BYTES, special=True)   # `--config <(generate)` is a pipe
    except NotTextError as exc:
        raise UserError(f"{path}:{exc.line}: {exc} (named by {found_by})") from None
    except FileNotFoundError:
        raise UserError(f"{path}: no such file (named by {found_by})") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, expected a profiles.toml file (named by {found_by})") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 text (byte {exc.start})") from None
    return parse_config(text, str(path), found_by=found_by)
