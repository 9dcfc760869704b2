"""The installed `specmon` command: help, version, bad usage, and `specmon profiles`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import REPO
from process_support import run_specmon

import specmon
from specmon.model.machine.interpreter import python_module

pytestmark = pytest.mark.slow


def test_help_lists_global_options_and_subcommands() -> None:
    done = run_specmon("--help")
    assert done.returncode == 0
    for text in ("usage: specmon", "--config FILE", "--profile NAME", "--version", "profiles"):
        assert text in done.stdout


def test_version() -> None:
    done = run_specmon("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"specmon {specmon.__version__}"


def test_unknown_subcommand_exits_2_with_one_usage_error() -> None:
    done = run_specmon("frobnicate")
    assert done.returncode == 2
    assert "invalid choice: 'frobnicate'" in done.stderr
    assert "Traceback" not in done.stderr


def test_profiles_without_any_file_says_built_in(tmp_path: Path) -> None:
    done = run_specmon("profiles", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    first, header, *rows = done.stdout.splitlines()
    assert first.startswith("profiles: built-in demo profiles (no profiles file found;")
    assert header.split() == ["NAME", "HOST", "SERVER", "PORT", "COMMAND"]
    assert rows[0].split()[:4] == ["demo-baseline", "local", "sglang", "30001"]
    # The built-in profiles run the simulator of the specmon that is running, not whichever one PATH finds.
    listed = json.loads(run_specmon("profiles", "--json", cwd=tmp_path).stdout)
    python, *rest = next(p for p in listed["profiles"] if p["name"] == "demo-baseline")["command"][:5]
    assert Path(python).is_absolute() and Path(python).name.startswith("python")
    assert rest == [*python_module("specmon")[1:], "sim"]   # isolated from the working directory
    assert rows[1].split()[:4] == ["demo-eagle3", "local", "sglang", "30002"]


def test_profiles_json_names_the_file_and_redacts_credentials(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text('[profiles.a]\ncommand = "serve --port 9000"\nport = 9000\n'
                    'env = { NCCL_DEBUG = "INFO", HF_TOKEN = "hf_secret123", OPENAI_API_KEY = "sk-abc" }\n',
                    encoding="utf-8")
    done = run_specmon("--config", str(path), "profiles", "--json")
    assert done.returncode == 0, done.stderr
    assert "hf_secret123" not in done.stdout and "sk-abc" not in done.stdout
    data = json.loads(done.stdout)
    assert data["source"] == str(path) and data["found_by"] == "--config"
    (profile,) = data["profiles"]
    assert profile["name"] == "a" and profile["command"] == ["serve", "--port", "9000"]
    assert profile["url"] == "http://127.0.0.1:9000"
    assert profile["env"] == {"NCCL_DEBUG": "INFO", "HF_TOKEN": "<redacted>", "OPENAI_API_KEY": "<redacted>"}
    assert data["sweep"]["levels"] == [1, 2, 5, 10, 30, 70, 100, 250]


def test_profiles_found_in_xdg_config_home(tmp_path: Path, isolated_home: Path) -> None:
    xdg_file = isolated_home / ".config" / "specmon" / "profiles.toml"
    xdg_file.parent.mkdir(parents=True)
    xdg_file.write_text('[profiles.from-xdg]\ncommand = "true"\n', encoding="utf-8")
    done = run_specmon("profiles", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (f"profiles: {xdg_file} (found by $XDG_CONFIG_HOME/specmon/profiles.toml)")


def test_missing_config_file_is_one_line_exit_2(tmp_path: Path) -> None:
    done = run_specmon("--config", str(tmp_path / "nope.toml"), "profiles")
    assert done.returncode == 2
    assert done.stderr == f"specmon: error: {tmp_path / 'nope.toml'}: no such file (named by --config)\n"


def _reference_sections() -> dict[str, str]:
    """docs/cli.md, the CLI reference, split into one text per `## \\`specmon NAME ...\\`` heading."""
    reference = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    for chunk in reference.split("\n## `specmon ")[1:]:
        name = chunk.split(maxsplit=1)[0].rstrip("`")
        sections[name] = chunk.split("\n# ", 1)[0]
    return sections


def test_the_cli_reference_documents_every_subcommand_and_option() -> None:
    """The CLI reference cannot drift from the parser: each subcommand and each of its options is in docs/cli.md."""
    import argparse

    from specmon.cli import build_parser

    sections = _reference_sections()
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert "profiles" in subparsers.choices
    for name, sub in subparsers.choices.items():
        assert name in sections, f"docs/cli.md has no `## specmon {name}` section"
        for action in sub._actions:
            for option in action.option_strings:
                if option.startswith("--") and option != "--help":
                    assert option in sections[name], f"docs/cli.md: `specmon {name}` does not mention {option}"


def test_a_command_loads_only_its_own_module_so_it_starts_fast(tmp_path: Path) -> None:
    """`specmon status` used to import every command (plotext, asyncssh, the sweep and experiment code): 2-3 s on a
    busy box before it did anything, and before the TUI's first frame. A command now imports its own module only;
    `specmon --help` still lists them all."""
    probe = ("import sys\nfrom specmon.cli import main\ncode = main(sys.argv[1:])\n"
             "print(sorted(m for m in sys.modules if m.startswith('specmon.commands.') or m in ('asyncssh', 'plotext')))")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state")}
    status = subprocess.run([sys.executable, "-c", probe, "--config", str(tmp_path / "none.toml"), "profiles", "--json"],
                            capture_output=True, text=True, env=env, timeout=120)
    loaded = status.stdout.strip().splitlines()[-1]
    assert "specmon.commands.profiles" in loaded and "specmon.commands.sweep" not in loaded
    assert "asyncssh" not in loaded and "plotext" not in loaded
    listed = subprocess.run([sys.executable, "-m", "specmon", "--help"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert all(name in listed.stdout for name in ("profiles", "sweep", "trust", "demo"))
    unknown = subprocess.run([sys.executable, "-m", "specmon", "swep"], capture_output=True, text=True, env=env,
                             timeout=120)
    assert unknown.returncode == 2 and "invalid choice: 'swep'" in unknown.stderr and "sweep" in unknown.stderr


def test_profiles_lists_the_experiments_too(tmp_path: Path) -> None:
    """`specmon profiles` never said that an experiment existed, not even the built-in `demo` (issue 35 #22)."""
    done = run_specmon("profiles", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    experiments = [line for line in done.stdout.splitlines() if line.startswith("experiment ")]
    assert experiments == [
        "experiment demo: demo-baseline vs demo-eagle3, 3 repeats over levels 1,2,4,8,16,32 (`specmon experiment demo`)",
        # a tuning grid in one line: its baseline, how many variants, the first and last
        "experiment demo-grid: demo-baseline vs a grid of 6 variants (demo-eagle3 steps=1 topk=1 … demo-eagle3 "
        "steps=5 topk=4), 3 repeats over levels 1,2,4,8,16 (`specmon experiment demo-grid`)"]
    listed = json.loads(run_specmon("profiles", "--json", cwd=tmp_path).stdout)
    assert listed["experiments"][0] == {"name": "demo", "profiles": ["demo-baseline", "demo-eagle3"], "repeats": 3,
                                        "levels": [1, 2, 4, 8, 16, 32], "baseline": None}
    assert listed["experiments"][1]["baseline"] == "demo-baseline" and len(listed["experiments"][1]["profiles"]) == 7


def test_a_mistyped_option_of_a_subcommand_names_that_subcommands_help(tmp_path: Path) -> None:
    """`specmon launch --wiat base` printed the top-level usage, which says nothing of launch's options; then
    launch's whole usage (12-19 lines) above the one line that matters (issue 35 #17): now that line and a hint."""
    done = run_specmon("launch", "--wiat", "base", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["specmon launch: error: unrecognized arguments: --wiat",
                                        "hint: see `specmon launch --help`"]
    bad_value = run_specmon("sweep", "demo-baseline", "--levels", "x", cwd=tmp_path)
    assert bad_value.returncode == 2 and bad_value.stdout == ""
    assert bad_value.stderr.splitlines() == ["specmon sweep: error: argument --levels: levels: 'x' is not a positive "
                                             "whole number", "hint: see `specmon sweep --help`"]


@pytest.mark.parametrize(("args", "error"), [
    (("logs", "x", "-n", "-5"), "argument -n/--lines: must be >= 0, got '-5'"),
    (("metrics", "x", "--interval", "0"), "argument --interval: must be a finite number > 0, got '0'"),
    (("metrics", "x", "--interval", "nan"), "argument --interval: must be a finite number > 0, got 'nan'"),
    (("metrics", "x", "--interval", "inf"), "argument --interval: must be a finite number > 0, got 'inf'"),
    (("wait", "x", "--timeout", "-1"), "argument --timeout: must be a finite number > 0, got '-1'"),
])
def test_negative_counts_and_seconds_that_are_not_positive_and_finite_are_refused(
        tmp_path: Path, args: tuple[str, ...], error: str) -> None:
    """`logs -n -5` printed nothing and exited 0; `metrics --interval 0` (nan, inf) was taken (issue 35 #20)."""
    done = run_specmon(*args, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [f"specmon {args[0]}: error: {error}", f"hint: see `specmon {args[0]} --help`"]


def test_status_of_runs_on_an_ssh_host_imports_no_http_client_nor_the_tui(tmp_path: Path) -> None:
    """Issue 37: `specmon status --all` over a fleet's SSH hosts spent about 0.5 s importing before it checked a
    run; httpx (and httpcore) came with the SSH transport and the health probes, though checking runs speaks no
    HTTP. Only the first HTTP probe imports them now; the TUI's modules never come with a command."""
    from specmon.model.runs.record import RunRecord
    from specmon.orchestration.runs.store import RunStore

    state = tmp_path / "state"
    store = RunStore(state / "specmon")
    store.save(RunRecord(
        run_id="20261205-000000-ab0001", profile="p", host="nowhere", run_dir="/tmp/x", port=1,
        url="http://127.0.0.1:1", server="sglang", health_path="/health", stall_timeout_s=30, notify_cmd=None,
        expected_load_s=None, started_at=time.time() - 60, state="ready", pid=12345, starttime=1, boot_id="b",
        ready_at=time.time() - 30))
    config = tmp_path / "profiles.toml"
    config.write_text(f'[ssh]\nconfig = "{tmp_path / "ssh_config"}"\nknown_hosts = "{tmp_path / "known_hosts"}"\n'
                      'connect_timeout_s = 1\n\n[profiles.p]\nhost = "nowhere"\ncommand = ["true"]\nport = 1\n')
    (tmp_path / "ssh_config").write_text("Host nowhere\n  HostName 127.0.0.1\n  Port 9\n")
    probe = ("import sys\nfrom specmon.cli import main\ncode = main(sys.argv[1:])\n"
             "print(sorted(m for m in sys.modules if m in ('asyncssh', 'httpx', 'httpcore', 'textual', 'plotext')))")
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(state)}
    status = subprocess.run([sys.executable, "-c", probe, "--config", str(config), "status", "--all"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert "20261205-000000-ab0001" in status.stdout, status.stderr   # checked (the host did not answer: as recorded)
    assert status.stdout.strip().splitlines()[-1] == "['asyncssh']", status.stdout
