"""profiles.toml: discovery order, a full good file read back, the shipped files, the key locator."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from paths import REPO

from specmon.model.config import (
    BUILTIN_SOURCE,
    DEFAULT_LEVELS,
    Profile,
    SshTarget,
    SweepDefaults,
    builtin_config,
    load_config,
    locate_keys,
    parse_config,
    parse_host,
    served_model_names,
)
from specmon.model.machine.interpreter import python_module

RUNNING = python_module("specmon")   # `specmon` at the start of a local profile's command


def parse_toml(text: str) -> dict:
    """The TOML reader the config module uses (tomllib, or tomli before Python 3.11)."""
    from specmon.model import config

    return config.tomllib.loads(text)


def _profile_file(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "profiles.toml"
    path.write_text(f'[profiles.{name}]\ncommand = "true"\n', encoding="utf-8")
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """One profiles file in each place discovery looks, each defining a differently named profile."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return {
        "explicit": _profile_file(tmp_path / "explicit", "from-explicit"),
        "env": _profile_file(tmp_path / "envvar", "from-env"),
        "cwd": _profile_file(work, "from-cwd"),
        "xdg": _profile_file(tmp_path / "xdg" / "specmon", "from-xdg"),
        "home": _profile_file(tmp_path / "home" / ".config" / "specmon", "from-home"),
    }


def test_discovery_order(places: dict[str, Path], tmp_path: Path) -> None:
    env = {"SPECMON_CONFIG": str(places["env"]), "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
           "HOME": str(tmp_path / "home")}

    def names(config_path: Path | None, environ: dict[str, str]) -> tuple[list[str], str]:
        config = load_config(config_path, env=environ)
        return list(config.profiles), config.found_by

    assert names(places["explicit"], env) == (["from-explicit"], "--config")
    assert names(None, env) == (["from-env"], "$SPECMON_CONFIG")
    del env["SPECMON_CONFIG"]
    assert names(None, env) == (["from-cwd"], "./profiles.toml")
    assert load_config(env=env).source == "profiles.toml"
    places["cwd"].unlink()
    assert names(None, env) == (["from-xdg"], "$XDG_CONFIG_HOME/specmon/profiles.toml")
    assert load_config(env=env).source == str(places["xdg"])
    # Without XDG_CONFIG_HOME (or with a relative one, which the XDG spec says to ignore): ~/.config.
    assert names(None, {"HOME": env["HOME"]})[0] == ["from-home"]
    assert names(None, {"HOME": env["HOME"], "XDG_CONFIG_HOME": "relative/dir"})[0] == ["from-home"]
    places["xdg"].unlink()
    places["home"].unlink()
    config = load_config(env=env)
    assert config.source == BUILTIN_SOURCE and config.is_builtin
    assert list(config.profiles) == ["demo-baseline", "demo-eagle3"]


def test_default_environment_is_isolated_by_conftest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With os.environ (HOME/XDG pointed at a temp dir by conftest) and an empty cwd: the built-in profiles."""
    monkeypatch.chdir(tmp_path)
    assert load_config().is_builtin


FULL = '''
[profiles.kimi]
host = "ml@gpu7.example.internal:2222"
server = "vllm"
command = "vllm serve /models/kimi --tensor-parallel-size 8 --port 8000 --served-model-name 'kimi k2'"
workdir = "/scratch/runs"
port = 8000
health_path = "/v1/models"
python = "/opt/venv/bin/python"
expected_load_s = 600
notify_cmd = "notify-send specmon"
stall_timeout_s = 120.5
env = { NCCL_DEBUG = "INFO", "_PRIVATE" = "1" }

[profiles.other]
command = ["./serve.sh", "--flag", ""]
server = "other"

[sweep]
levels = [1, 4, 16]
requests_per_level = 48
warmup_requests = 0
input_len = 1024
output_len = 64
api = "completions"

[keys]
launch = "L"
quit = "ctrl+q"
'''


def test_full_file_read_back(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(FULL, encoding="utf-8")
    config = load_config(path, env={})
    assert config.source == str(path)
    assert config.profiles["kimi"] == Profile(
        name="kimi",
        command=("vllm", "serve", "/models/kimi", "--tensor-parallel-size", "8", "--port", "8000",
                 "--served-model-name", "kimi k2"),
        host="ml@gpu7.example.internal:2222", server="vllm", env=(("NCCL_DEBUG", "INFO"), ("_PRIVATE", "1")),
        workdir="/scratch/runs", port=8000, health_path="/v1/models", python="/opt/venv/bin/python",
        expected_load_s=600.0, notify_cmd="notify-send specmon", stall_timeout_s=120.5,
    )
    assert not config.profiles["kimi"].is_local
    assert config.profiles["other"] == Profile(name="other", command=("./serve.sh", "--flag", ""), server="other")
    assert config.profiles["other"].is_local
    assert config.sweep == SweepDefaults(levels=(1, 4, 16), requests_per_level=48, duration_s=None,
                                         warmup_requests=0, input_len=1024, output_len=64, api="completions",
                                         output_from_dataset=False)   # output_len written: fixed lengths
    assert config.keys == {"launch": "L", "quit": "ctrl+q"}
    # Later checks (the TUI validates binding ids) can still point at the line.
    assert config.where("keys", "quit") == f"{path}:29"
    assert config.where("profiles", "other", "port") == f"{path}:15"
    assert builtin_config().where("keys", "quit") == BUILTIN_SOURCE


def test_defaults_when_optional_tables_are_absent() -> None:
    config = parse_config('[profiles.x]\ncommand = ["srv"]\n', "mem.toml")
    assert config.sweep == SweepDefaults() and config.sweep.levels == DEFAULT_LEVELS
    assert config.keys == {}
    assert config.profiles["x"] == Profile(name="x", command=("srv",))


def test_shipped_profiles_toml_matches_built_in_demo() -> None:
    shipped = load_config(REPO / "profiles.toml", env={})
    builtin = builtin_config()
    # The same profiles; both run the running interpreter's specmon (issue 10 #1, issue 21 #3), which their env
    # views inspect (issue 21 #7).
    assert builtin.profiles == shipped.profiles
    assert all(p.command[:len(RUNNING)] == RUNNING and p.python == sys.executable for p in shipped.profiles.values())
    assert shipped.sweep == builtin.sweep
    assert shipped.experiments == builtin.experiments
    demo = builtin.experiment("demo")
    assert demo.profiles == ("demo-baseline", "demo-eagle3") and demo.repeats >= 3
    # Workload keys the experiment does not set come from [sweep].
    assert demo.sweep.output_len == builtin.sweep.output_len and demo.sweep.levels != builtin.sweep.levels
    baseline, eagle = builtin.profiles["demo-baseline"], builtin.profiles["demo-eagle3"]
    assert (baseline.port, eagle.port) == (30001, 30002)

    def flag(profile: Profile, name: str) -> str:
        return profile.command[profile.command.index(name) + 1]

    assert baseline.command[:len(RUNNING) + 1] == eagle.command[:len(RUNNING) + 1] == (*RUNNING, "sim")
    assert flag(baseline, "--port") == "30001" and flag(eagle, "--port") == "30002"
    assert flag(baseline, "--spec") == "none" and flag(eagle, "--spec") == "eagle3"
    assert flag(baseline, "--mem-fraction-static") == flag(eagle, "--mem-fraction-static")


def test_commented_real_profiles_are_valid_when_uncommented(tmp_path: Path) -> None:
    """The realistic SGLang examples in profiles.toml must work once a user removes the '# '."""
    lines = (REPO / "profiles.toml").read_text(encoding="utf-8").splitlines()
    start = lines.index("# [profiles.kimi-baseline]")
    end = lines.index("[sweep]")
    block = [line[2:] if line.startswith("# ") else "" for line in lines[start:end] if not line.startswith("# ---")]
    config = parse_config("\n".join(block), "uncommented")
    assert set(config.profiles) == {"kimi-baseline", "kimi-eagle3", "gpu7-baseline"}
    eagle = config.profiles["kimi-eagle3"].command
    for expected in ("--tp", "--attention-backend", "--enable-flashinfer-allreduce-fusion",
                     "--speculative-algorithm", "--speculative-num-draft-tokens"):
        assert expected in eagle
    assert dict(config.profiles["kimi-baseline"].env) == dict(config.profiles["kimi-eagle3"].env)
    assert parse_host(config.profiles["gpu7-baseline"].host) == SshTarget("gpu7.example.internal", "ml", 22)


def test_locator_handles_headers_dotted_inline_and_arrays() -> None:
    text = (
        "# top comment with = and [brackets]\n"      # 1
        "title = 'x' # trailing [c]\n"               # 2
        "[a.b]\n"                                    # 3
        "c.d = { e = 1, 'f g' = [1, {h = 2}] }\n"    # 4
        "arr = [\n"                                  # 5
        "  'x]', # comment ]\n"                      # 6
        "  \"y\\\"\",\n"                             # 7
        "]\n"                                        # 8
        "[[list]]\n"                                 # 9
        "k = '''\n[fake]\nz = 1'''\n"                # 10-12
        '[ "quoted.part" . sub ]\n'                  # 13
        "after = 1\n"                                # 14
    )
    found = locate_keys(text)
    assert found[("title",)] == 2
    assert found[("a",)] == found[("a", "b")] == 3
    assert found[("a", "b", "c", "d", "e")] == 4
    assert found[("a", "b", "c", "d", "f g")] == 4
    assert found[("a", "b", "arr")] == 5
    assert found[("list",)] == 9 and found[("list", "k")] == 10
    assert ("fake",) not in found and ("list", "z") not in found
    assert found[("quoted.part", "sub")] == 13
    assert found[("quoted.part", "sub", "after")] == 14


@pytest.mark.parametrize(("host", "target"), [
    ("gpu7", SshTarget("gpu7")),
    ("ml@10.0.0.7", SshTarget("10.0.0.7", "ml")),
    ("ml@gpu7.example.com:2222", SshTarget("gpu7.example.com", "ml", 2222)),
    ("root@[fe80::1]:22", SshTarget("fe80::1", "root", 22)),
])
def test_parse_host_accepts(host: str, target: SshTarget) -> None:
    assert parse_host(host) == target


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "gpu 7", "@gpu7", "ml@gpu7:0", "gpu7:", "a@b@c", "[::1"])
def test_parse_host_refuses(host: str) -> None:
    with pytest.raises(ValueError):
        parse_host(host)


def test_locator_with_crlf_escapes_and_multiline_values() -> None:
    text = (
        'a = "x\\"y = 2 [not] # no"\r\n'             # 1
        "b = '''\r\nc = 3\r\n'''\r\n"                  # 2-4
        'd = """ \\""" e = 4 """\r\n'                  # 5
        "f = [ { g = 1 },\r\n  { h = 2 } ]\r\n"        # 6-7
        "i . j = 5\r\n"                                # 8
        '"k\\u00e9y" = 6\r\n'                          # 9
    )
    found = locate_keys(text)
    assert (found[("a",)], found[("b",)], found[("d",)], found[("f",)]) == (1, 2, 5, 6)
    assert ("c",) not in found and ("e",) not in found and ("not",) not in found
    assert found[("f", "g")] == 6 and found[("f", "h")] == 7
    assert found[("i", "j")] == 8
    assert found[("k\u00e9y",)] == 9


def _key_paths(table: dict, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = []
    for key, value in table.items():
        paths.append(prefix + (key,))
        if isinstance(value, dict):
            paths += _key_paths(value, prefix + (key,))
    return paths


def test_locator_finds_every_key_of_the_repository_toml_files() -> None:
    """Every key of every TOML file shipped here is located on a line that names it."""
    files = [REPO / "pyproject.toml", REPO / "profiles.toml", REPO / "specmon" / "demo_profiles.toml",
             *sorted((REPO / "themes").glob("*.toml"))]
    for path in files:
        text = path.read_text(encoding="utf-8")
        found = locate_keys(text)
        lines = text.splitlines()
        for key_path in _key_paths(parse_toml(text)):
            assert key_path[-1] in lines[found[key_path] - 1], (path, key_path)


def test_demo_moved_to_other_ports_changes_port_and_the_command_port() -> None:
    from specmon.errors import UserError
    from specmon.model.config import on_ports

    moved = on_ports(builtin_config(), [30003, 30004])
    for name, port in (("demo-baseline", 30003), ("demo-eagle3", 30004)):
        profile = moved.profiles[name]
        assert profile.port == port and profile.command[profile.command.index("--port") + 1] == str(port)
    with pytest.raises(UserError, match="give 2 different ports"):
        on_ports(builtin_config(), [30003])
    with pytest.raises(UserError, match="1..65535"):
        on_ports(builtin_config(), [0, 30004])


def test_sweep_dataset_keys_and_a_relative_path_taken_from_the_profiles_file(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "p.toml"
    path.parent.mkdir()
    path.write_text('[profiles.a]\ncommand = "x"\n[sweep]\ndataset = "sharegpt"\ndataset_path = "data/sg.json"\n'
                    "input_range = 0.25\noutput_range = 0.1\nseed = 7\n"
                    '[experiments.e]\nprofiles = ["a", "b"]\ndataset = "builtin"\noutput_len = 32\n'
                    '[profiles.b]\ncommand = "y"\n', encoding="utf-8")
    sweep = load_config(path, env={}).sweep
    assert (sweep.dataset, sweep.dataset_path) == ("sharegpt", str(tmp_path / "conf" / "data" / "sg.json"))
    assert (sweep.input_range, sweep.output_range, sweep.seed, sweep.output_from_dataset) == (0.25, 0.1, 7, True)
    # An experiment's own dataset drops [sweep]'s file; its output_len makes lengths fixed.
    exp = load_config(path, env={}).experiments["e"].sweep
    assert (exp.dataset, exp.dataset_path, exp.seed, exp.output_from_dataset) == ("builtin", None, 7, False)
    assert SweepDefaults().dataset == "builtin"   # realistic prompts unless a profiles file says otherwise


@pytest.mark.parametrize(("argv", "names"), [
    (["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/QwQ-32B", "--port", "30000"], ("Qwen/QwQ-32B",)),
    (["python3", "-m", "sglang.launch_server", "--model-path=/m/llama", "--served-model-name", "llama"], ("llama",)),
    (["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--port", "8000"], ("meta-llama/Llama-3.1-8B-Instruct",)),
    (["/opt/venv/bin/vllm", "serve", "m", "--served-model-name", "a", "b", "--tp", "2"], ("a", "b")),
    (["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], ("m",)),
    (["sh", "-c", "exec vllm serve m --port 8000"], ()),   # a script's text: not read as a command
    (["python3", "-m", "specmon", "sim", "--port", "30001"], ()),
])
def test_served_model_names_of_a_server_command(argv: list[str], names: tuple[str, ...]) -> None:
    """What a profile's server lists on /v1/models, so a sweep can tell the profile's server from another's (#7)."""
    assert served_model_names(argv) == names


def test_every_toml_example_in_the_docs_is_a_valid_profiles_file() -> None:
    """The examples in README.md and docs/ are what a new user copies: each reads without a problem or a warning. An
    example that only adds an `[experiments.NAME]` table is read with stub profiles of the names it uses (issue 35 #22:
    the README had no experiment example and no complete remote SGLang profile). Links and anchors: tests/unit/test_docs.py."""
    import re

    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    blocks = [(page, block) for page in pages for block in re.findall(r"```toml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)]
    assert any("[experiments." in b for _, b in blocks) and any('host = "' in b and "sglang" in b for _, b in blocks)
    for page, block in blocks:
        text = block
        if "[profiles." not in block:
            names = re.findall(r'"([\w.-]+)"', re.search(r"^profiles = \[(.*)\]", block, re.M).group(1))  # type: ignore[union-attr]
            text = "".join(f'[profiles.{n}]\nport = {30100 + i}\ncommand = ["true"]\nserver = "other"\n\n'
                           for i, n in enumerate(names)) + block
        config = parse_config(text, str(page))
        assert not config.warnings, (page, block, config.warnings)


def test_the_repositorys_remote_example_is_valid_and_says_what_this_build_does() -> None:
    """profiles.toml said remote hosts need "the SSH transport, which this build does not have yet" (issue 35 #22):
    false since the SSH transport came. Its commented remote profile, uncommented, is a valid profile."""
    text = (REPO / "profiles.toml").read_text(encoding="utf-8")
    assert "does not have yet" not in text
    start = text.index("# [profiles.gpu7-baseline]")
    block = [line[2:] for line in text[start:].splitlines()]
    block = block[:block.index("") if "" in block else len(block)]
    config = parse_config("\n".join(block) + "\n", str(REPO / "profiles.toml"))
    assert config.profiles["gpu7-baseline"].host == "ml@gpu7.example.internal:22" and not config.warnings
