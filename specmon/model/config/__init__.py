"""profiles.toml: named server profiles, sweep defaults, experiments, ssh settings and key bindings.

Its rooms: `types` (Config, Profile, ... and the pure facts about them), `validation` (parse_config: TOML text
to a checked Config, and the rules for values also typed elsewhere: levels, rates), `keys` (the TOML key
scanner that gives each problem its line) and `loading` (load_config: discovery and reading the file, the one
part that reads files). What callers use is re-exported here, so `from specmon.model.config import X` keeps
working.

`keymap` beside them: the TUI's key table and the rules for remapping it in `[keys]`; `grid`: a tuning grid in an
experiment, its variants derived from the base profile in memory.
"""

from specmon.model.config.keys import format_key, locate_keys
from specmon.model.config.loading import builtin_config, config_dir, load_config
from specmon.model.config.types import (
    BUILTIN_SOURCE,
    DEFAULT_LEVELS,
    ENV_NAME,
    Config,
    ExperimentSpec,
    Profile,
    SshSettings,
    SshTarget,
    SweepDefaults,
    command_port,
    on_ports,
    parse_host,
    served_model_names,
)
from specmon.model.config.validation import (
    check_levels,
    check_rates,
    one_wave_problem,
    parse_config,
    parse_levels,
    parse_rates,
    tomllib,
)

__all__ = [
    "BUILTIN_SOURCE", "DEFAULT_LEVELS", "ENV_NAME", "Config", "ExperimentSpec", "Profile", "SshSettings", "SshTarget",
    "SweepDefaults", "builtin_config", "check_levels", "check_rates", "command_port", "config_dir", "format_key",
    "load_config", "locate_keys", "on_ports", "one_wave_problem", "parse_config", "parse_host", "parse_levels",
    "parse_rates", "served_model_names", "tomllib",
]
