"""Themes: load `themes/*.toml` into Textual themes, and remember the user's choice.

A theme file holds the fields of `textual.theme.Theme` (name, dark, primary, ... ) and an optional `[variables]`
table of extra CSS variables. Files are read from the project's `themes/` directory and from
`$XDG_CONFIG_HOME/specmon/themes/` (a user's file with the same name wins). The chosen theme is kept in
`$XDG_CONFIG_HOME/specmon/ui.json`, written atomically so a crash never leaves it half-written.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from textual.theme import Theme

from specmon.errors import UserError
from specmon.model.config import config_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

DEFAULT_THEME = "specmon-dark"
# The project's top-level themes/: beside the package in a checkout (editable install), or copied to
# <prefix>/share/specmon/themes by a wheel install (pyproject's data-files).
BUNDLED_THEMES_DIR = next(
    (d for d in (Path(__file__).resolve().parent.parent.parent / "themes", Path(sys.prefix) / "share/specmon/themes")
     if d.is_dir()),
    Path(sys.prefix) / "share/specmon/themes",
)

_COLOUR_FIELDS = ("primary", "secondary", "warning", "error", "success", "accent", "foreground", "background",
                  "surface", "panel", "boost")
_ALLOWED = {"name", "dark", "luminosity_spread", "text_alpha", "variables", *_COLOUR_FIELDS}


def theme_from_toml(path: Path) -> Theme:
    """One theme file -> a Theme; a UserError names the file and the bad key."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read theme: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: {exc}") from None
    unknown = sorted(set(data) - _ALLOWED)
    if unknown:
        raise UserError(f"{path}: {unknown[0]}: unknown theme key")
    if not isinstance(data.get("name"), str) or not isinstance(data.get("primary"), str):
        raise UserError(f"{path}: name, primary: a theme needs both, as strings")
    variables = data.pop("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise UserError(f"{path}: variables: must be a table of strings")
    try:
        return Theme(variables=dict(variables), **data)
    except (TypeError, ValueError) as exc:
        raise UserError(f"{path}: {exc}") from None


def load_themes(dirs: list[Path] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Theme]:
    """All themes from the bundled and user directories, by name; later directories override earlier ones."""
    if dirs is None:
        dirs = [BUNDLED_THEMES_DIR, config_dir(env) / "themes"]
    themes: dict[str, Theme] = {}
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.toml")):
                theme = theme_from_toml(path)
                themes[theme.name] = theme
    return themes


def ui_state_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the TUI keeps its small persistent preferences."""
    return config_dir(env) / "ui.json"


def load_ui_state(path: Path) -> dict[str, object]:
    """The saved preferences, or {} when absent or unreadable (a broken file must never stop the app)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_ui_state(path: Path, state: Mapping[str, object]) -> None:
    """Write preferences atomically: temp file in the same directory, fsync, rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ui.", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(dict(state), fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
