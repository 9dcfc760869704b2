"""`specmon profiles [--json]`: the profiles specmon would use, which file they came from, its sweep settings and
its experiments."""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
from collections.abc import Mapping
from typing import Any, TextIO

from specmon.commands._lifecycle import config_for
from specmon.commands._table import table_text
from specmon.model.config import Config
from specmon.model.logs.clean import escape_controls
from specmon.model.text.secrets import redact_argv, redact_env, redact_text, redact_value
from specmon.model.workload.datasets import OUTPUT_LEN_DATASETS, has_set_length
from specmon.orchestration.runs.manager import RunManager

# Env values whose names look like credentials are never printed.
_DISCOVERY = "--config, $SPECMON_CONFIG, ./profiles.toml, $XDG_CONFIG_HOME/specmon/profiles.toml"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "profiles",
        help="list the resolved profiles (and experiments) and where they came from",
        description="List the profiles and experiments specmon would use and the file they came from "
        f"(searched in order: {_DISCOVERY}; else the built-in demo profiles).",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    config = config_for(args)
    if args.json:
        print(json.dumps(config_to_json(config, asyncio.run(_local_urls(config))), indent=2))
    else:
        print(render_table(config))
    return 0


async def _local_urls(config: Config) -> dict[str, str]:
    """Each profile's URL as its run (through its transport) gives it: local ones, and remote ones with their own
    `url`. A remote host's loopback port is not forwarded here: that URL exists only while a specmon process holds
    the forward."""
    manager = RunManager(config)
    try:
        return {name: await manager.url_of(name) for name, p in config.profiles.items() if p.is_local or p.url}
    finally:
        await manager.close()


def config_to_json(config: Config, urls: Mapping[str, str]) -> dict[str, Any]:
    """The resolved configuration as plain JSON data (env credentials and secret-looking arguments redacted); `urls` by profile name."""
    return {
        "source": config.source,
        "found_by": config.found_by,
        "profiles": [
            {
                "name": p.name, "host": p.host, "server": p.server, "port": p.port, "url": _url(urls.get(p.name)),
                "command": redact_argv(p.command), "env": redact_env(p.env), "workdir": p.workdir,
                "health_path": p.health_path, "python": p.python, "expected_load_s": p.expected_load_s,
                "notify_cmd": redact_text(p.notify_cmd) if p.notify_cmd else None, "stall_timeout_s": p.stall_timeout_s,
            }
            for p in config.profiles.values()
        ],
        "sweep": {
            "levels": list(config.sweep.levels), "requests_per_level": config.sweep.requests_per_level,
            "duration_s": config.sweep.duration_s, "warmup_requests": config.sweep.warmup_requests,
            "input_len": config.sweep.input_len, "output_len": config.sweep.output_len, "api": config.sweep.api,
            "rates": list(config.sweep.rates), "slo": dict(config.sweep.slo),
            "dataset": config.sweep.dataset, "dataset_path": config.sweep.dataset_path, "seed": config.sweep.seed,
        },
        "experiments": [
            {"name": e.name, "profiles": list(e.profiles), "repeats": e.repeats, "levels": list(e.sweep.levels),
             "baseline": e.baseline}
            for e in config.experiments.values()
        ],
        "keys": dict(config.keys),
    }


def _url(url: str | None) -> str | None:
    return None if url is None else redact_value(url)


def render_table(config: Config, out: TextIO | None = None) -> str:
    """A header naming the source, then one row per profile (on a terminal, the command is cut to its width;
    see `_table.table_text`), then the sweep settings."""
    if config.is_builtin:
        header = f"profiles: built-in demo profiles (no profiles file found; searched {_DISCOVERY})"
    else:
        header = f"profiles: {config.source} (found by {config.found_by})"
    titles = ("NAME", "HOST", "SERVER", "PORT", "COMMAND")
    # Escaped: a config string holding ESC or a newline must neither act on the terminal nor break the table.
    rows = [(p.name, escape_controls(p.host), p.server, str(p.port), escape_controls(shlex.join(redact_argv(p.command))))
            for p in config.profiles.values()]
    lines = [header, table_text(titles, rows, out=out)]
    levels = ",".join(str(level) for level in config.sweep.levels)
    sweep = config.sweep
    prompts = f"dataset {sweep.dataset}" + (f" ({escape_controls(sweep.dataset_path)})" if sweep.dataset_path else "")
    if has_set_length(sweep.dataset):
        prompts += f", input {sweep.input_len}"
    output = f"{sweep.output_len} tokens"
    if sweep.output_from_dataset and sweep.dataset in OUTPUT_LEN_DATASETS:
        output += " where the dataset gives none"
    lines.append(f"sweep: levels {levels}, {prompts}, output {output}, api {sweep.api}")
    for e in config.experiments.values():   # what `specmon experiment NAME` (or `x` in the TUI) runs
        names = [escape_controls(p) for p in e.profiles]
        compared = " vs ".join(names) if e.baseline is None or len(names) < 4 else \
            f"{names[0]} vs a grid of {len(names) - 1} variants ({names[1]} … {names[-1]})"
        lines.append(f"experiment {escape_controls(e.name)}: {compared}, "
                     f"{e.repeats} repeats over levels {','.join(map(str, e.sweep.levels))} "
                     f"(`specmon experiment {escape_controls(e.name)}`)")
    return "\n".join(lines)
