"""Every bad profiles.toml gives one line `FILE:LINE: key: problem`, exit code 2 from the CLI, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from process_support import specmon_script

from specmon.errors import UserError
from specmon.model.config import load_config

GOOD = '[profiles.a]\ncommand = "python3 -m http.server"\n'
TWO = '[profiles.a]\ncommand = "x"\n[profiles.b]\ncommand = "y"\n'

# (case id, file text, expected line, expected key, a fragment of the problem)
CASES = [
    ("malformed-toml", '[profiles.a]\ncommand = "x"\nport = \n', 3, None, "invalid TOML: Invalid value"),
    ("unclosed-array-at-end", GOOD + "\n[sweep]\nlevels = [1, 2,\n\n", 5, None, "invalid TOML: Invalid value"),
    ("table-twice", '[profiles.a]\ncommand = "x"\n\n[profiles.a]\nport = 1\n', 4, None, "invalid TOML: Cannot declare"),
    ("unknown-profile-key", GOOD + "prot = 30001\n", 3, "profiles.a.prot", "unknown key (did you mean 'port'?)"),
    ("unknown-top-table", "[profile.a]\ncommand = 'x'\n", 1, "profile", "unknown key (did you mean 'profiles'?)"),
    ("unknown-sweep-key", GOOD + "\n[sweep]\nlevel = [1, 2]\n", 5, "sweep.level", "did you mean 'levels'?"),
    ("unknown-key-no-hint", GOOD + "gpu_count = 8\n", 3, "profiles.a.gpu_count", "unknown key (allowed: host,"),
    ("port-wrong-type", GOOD + 'port = "30000"\n', 3, "profiles.a.port",
     "must be an integer in 1..65535, got string '30000'"),
    ("port-out-of-range", GOOD + "port = 70000\n", 3, "profiles.a.port", "must be an integer in 1..65535, got 70000"),
    ("port-boolean", GOOD + "port = true\n", 3, "profiles.a.port", "got boolean true"),
    ("missing-command", '[profiles.ok]\ncommand = "x"\n\n[profiles.a]\nport = 30001\n', 4, "profiles.a.command",
     "missing; every profile needs the command"),
    ("empty-command-list", "[profiles.a]\nport = 1\ncommand = []\n", 3, "profiles.a.command", "must not be empty"),
    ("command-item-not-string", '[profiles.a]\ncommand = ["specmon", "sim", 30001]\n', 2, "profiles.a.command",
     "each item must be a string, got integer 30001"),
    ("command-unbalanced-quote", "[profiles.a]\ncommand = 'python3 -c \"print(1)'\n", 2, "profiles.a.command",
     "cannot split into arguments: No closing quotation"),
    ("command-wrong-type", "[profiles.a]\ncommand = 42\n", 2, "profiles.a.command",
     "must be a string or an array of strings, got integer 42"),
    ("env-bad-name-subtable", GOOD + '\n[profiles.a.env]\nNCCL_DEBUG = "INFO"\n"1BAD" = "x"\n', 6,
     'profiles.a.env.1BAD', "bad environment variable name"),
    ("env-bad-name-inline", GOOD + 'env = { OK = "1", "NCCL-DEBUG" = "INFO" }\n', 3, 'profiles.a.env.NCCL-DEBUG',
     "bad environment variable name"),
    ("env-value-not-string", GOOD + "env = { CUDA_DEVICE_MAX_CONNECTIONS = 1 }\n", 3,
     "profiles.a.env.CUDA_DEVICE_MAX_CONNECTIONS", 'must be a string (write CUDA_DEVICE_MAX_CONNECTIONS = "1")'),
    ("env-reserved", GOOD + 'env = { SPECMON_RUN_ID = "x" }\n', 3, "profiles.a.env.SPECMON_RUN_ID", "is reserved"),
    ("env-not-table", GOOD + 'env = "NCCL_DEBUG=INFO"\n', 3, "profiles.a.env", "must be a table"),
    ("server-unknown", GOOD + 'server = "sglan"\n', 3, "profiles.a.server",
     "must be one of 'sglang', 'vllm', 'other', got 'sglan' (did you mean 'sglang'?)"),
    ("host-option-injection", GOOD + 'host = "-oProxyCommand=touch /tmp/x"\n', 3, "profiles.a.host",
     "bad host name"),
    ("host-bad-port", GOOD + 'host = "ml@gpu7:99999"\n', 3, "profiles.a.host", "bad port (expected :1..65535)"),
    ("host-empty", GOOD + 'host = ""\n', 3, "profiles.a.host", "must not be empty"),
    ("health-path-no-slash", GOOD + 'health_path = "health"\n', 3, "profiles.a.health_path", "must start with '/'"),
    ("expected-load-zero", GOOD + "expected_load_s = 0\n", 3, "profiles.a.expected_load_s",
     "must be a number of seconds > 0, got 0"),
    ("stall-timeout-string", GOOD + 'stall_timeout_s = "5m"\n', 3, "profiles.a.stall_timeout_s",
     "must be a number of seconds, got string '5m'"),
    ("profile-name", '[profiles."my model"]\ncommand = "x"\n', 1, 'profiles."my model"', "profile names use letters"),
    ("profile-not-table", "[profiles]\na = 3\n", 2, "profiles.a", "must be a table, got integer 3"),
    ("ssh-unknown-key", GOOD + '\n[ssh]\nkeepalive = 5\n', 5, "ssh.keepalive", "did you mean 'keepalive_s'?"),
    ("ssh-keepalive-zero", GOOD + '\n[ssh]\nkeepalive_s = 0\n', 5, "ssh.keepalive_s",
     "must be a number of seconds > 0, got 0"),
    ("ssh-config-not-string", GOOD + '\n[ssh]\nconnect_timeout_s = 5\nconfig = 3\n', 6, "ssh.config",
     "must be a string, got integer 3"),
    ("ssh-not-table", 'ssh = "gpu1"\n' + GOOD, 1, "ssh", "must be a table"),
    ("url-no-scheme", GOOD + 'url = "gpu1:30000"\n', 3, "profiles.a.url", "must be http://HOST:PORT or https://"),
    ("url-with-path", GOOD + 'url = "http://gpu1:30000/v1"\n', 3, "profiles.a.url", "must be http://HOST:PORT"),
    ("command-port-differs", '[profiles.a]\nport = 41108\ncommand = "specmon sim --port 41109"\n', 3,
     "profiles.a.command", "--port 41109 differs from port = 41108; make them the same"),
    ("command-port-equals-form", '[profiles.a]\ncommand = ["vllm", "serve", "m", "--port=8000"]\n', 2,
     "profiles.a.command", "--port 8000 differs from port = 30000 (the default; no port key)"),
    ("no-profiles", "[sweep]\nlevels = [1]\n", 1, "profiles", "no profiles defined"),
    ("url-with-password", GOOD + 'url = "http://user:s3cret@gpu1:30000"\n', 3, "profiles.a.url",
     "must not hold a user name or password"),
    ("levels-empty", GOOD + "[sweep]\nlevels = []\n", 4, "sweep.levels", "at least one concurrency level"),
    ("levels-duplicate", GOOD + "[sweep]\nlevels = [1, 5, 5, 10]\n", 4, "sweep.levels",
     "strictly increasing (5 then 5)"),
    ("levels-decreasing-multiline", GOOD + "[sweep]\nlevels = [\n  1,\n  10,\n  5,\n]\n", 4, "sweep.levels",
     "strictly increasing (10 then 5)"),
    ("levels-zero", GOOD + "[sweep]\nlevels = [0, 1]\n", 4, "sweep.levels", "must be a positive integer, got 0"),
    ("levels-string", GOOD + '[sweep]\nlevels = "1,2,5"\n', 4, "sweep.levels", "must be an array of concurrency"),
    ("rates-string", GOOD + '[sweep]\nrates = "1,2"\n', 4, "sweep.rates", "must be an array of request rates"),
    ("rates-zero", GOOD + "[sweep]\nlevels = [1]\nrates = [0, 1]\n", 5, "sweep.rates",
     "finite number of requests/s > 0, got 0"),
    ("rates-decreasing", GOOD + "[sweep]\nrates = [\n  4,\n  2.5,\n]\n", 4, "sweep.rates",
     "strictly increasing (4 then 2.5)"),
    ("rates-empty", GOOD + "[sweep]\nrates = []\n", 4, "sweep.rates", "at least one request rate"),
    ("slo-bad-key", GOOD + '[sweep]\nslo = "ttft:500,ttfb:9"\n', 4, "sweep.slo", "unknown target 'ttfb'"),
    ("slo-table", GOOD + "[sweep]\nslo = { ttft = 500 }\n", 4, "sweep.slo", 'a string of targets in ms'),
    ("experiment-rates", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nrates = [1, 2]\n', 7,
     "experiments.ab.rates", "experiments sweep concurrency levels only"),
    ("api-unknown", GOOD + '[sweep]\napi = "chatt"\n', 4, "sweep.api", "must be one of 'chat', 'completions'"),
    ("requests-and-duration", GOOD + "[sweep]\nrequests_per_level = 64\nduration_s = 30\n", 5, "sweep.duration_s",
     "set requests_per_level or duration_s, not both"),
    ("input-len-zero", GOOD + "[sweep]\ninput_len = 0\n", 4, "sweep.input_len", "must be an integer >= 1, got 0"),
    ("dataset-unknown", GOOD + '[sweep]\ndataset = "sharegtp"\n', 4, "sweep.dataset",
     "must be one of 'builtin', 'random', 'sharegpt', 'jsonl', 'specbench', got 'sharegtp' (did you mean 'sharegpt'?)"),
    ("dataset-file-without-path", GOOD + '[sweep]\nlevels = [1]\ndataset = "jsonl"\n', 5, "sweep.dataset",
     "dataset 'jsonl' needs dataset_path"),
    ("dataset-path-for-builtin", GOOD + '[sweep]\ndataset = "builtin"\ndataset_path = "p.jsonl"\n', 5,
     "sweep.dataset_path", "dataset 'builtin' takes no file"),
    ("input-range-too-big", GOOD + "[sweep]\ninput_range = 1.5\n", 4, "sweep.input_range",
     "must be a fraction in [0, 1), e.g. 0.2 for +-20 %, got 1.5"),
    ("output-range-string", GOOD + '[sweep]\noutput_range = "20%"\n', 4, "sweep.output_range",
     "must be a fraction in [0, 1), e.g. 0.2 for +-20 %, got string '20%'"),
    ("seed-negative", GOOD + "[sweep]\nseed = -1\n", 4, "sweep.seed", "must be an integer >= 0, got -1"),
    ("key-binding-not-string", GOOD + "[keys]\nquit = 5\n", 4, "keys.quit", "must be a non-empty key name"),
    # [keys] is checked at load by every command (issue 10 #9): ids, key names, and clashes after the remaps.
    ("key-binding-unknown-id", GOOD + '[keys]\nlunch = "x"\n', 4, "keys.lunch", "unknown binding id (known: "),
    ("key-binding-malformed", GOOD + '[keys]\nquit = "ctrl+q"\nstop = "ctrl+shift+nonsense"\n', 5, "keys.stop",
     "'nonsense' in 'ctrl+shift+nonsense' is not a key name"),
    ("key-binding-bad-modifier", GOOD + '[keys]\nstop = "cmd+s"\n', 4, "keys.stop", "'cmd' in 'cmd+s' is not a modifier"),
    ("key-binding-clash", GOOD + '[keys]\nlaunch = "s"\n', 4, "keys.launch", "key 's' is also bound to sweep"),
    ("key-binding-clash-between-remaps", GOOD + '[keys]\nlaunch = "L"\nstop = "x, L"\n', 4, "keys.launch",
     "key 'L' is also bound to stop"),
    ("dotted-keys", 'profiles.a.command = "x"\nprofiles.a.port = 0\n', 2, "profiles.a.port",
     "must be an integer in 1..65535, got 0"),
    # The locator must skip a multi-line string that looks like TOML and count its lines.
    ("after-multiline-string", '[profiles.a]\ncommand = """\n[profiles.zzz]\nprot = 1\n"""\nprot = 2\n', 6,
     "profiles.a.prot", "did you mean 'port'?"),
    ("experiment-unknown-profile", TWO + '\n[experiments.ab]\nprofiles = ["a", "bb"]\n', 7, "experiments.ab.profiles",
     "unknown profile 'bb' (did you mean 'b'?)"),
    ("experiment-one-profile", TWO + '[experiments.ab]\nprofiles = ["a"]\n', 6, "experiments.ab.profiles",
     "at least two profiles"),
    ("experiment-no-profiles", TWO + '[experiments.ab]\nrepeats = 2\n', 5, "experiments.ab.profiles", "missing"),
    ("experiment-on-failure", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\non_failure = "retyr"\n', 7,
     "experiments.ab.on_failure", "must be one of 'retry', 'skip', 'abort', got 'retyr' (did you mean 'retry'?)"),
    ("experiment-repeats-zero", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nrepeats = 0\n', 7,
     "experiments.ab.repeats", "must be an integer in 1..100, got 0"),
    ("experiment-levels", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nlevels = [4, 2]\n', 7,
     "experiments.ab.levels", "strictly increasing (4 then 2)"),
    ("experiment-gate", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nmax_load_s = -1\n', 7,
     "experiments.ab.max_load_s", "must be a number of seconds > 0"),
    ("experiment-unknown-key", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nrepeat = 3\n', 7,
     "experiments.ab.repeat", "did you mean 'repeats'?"),
    ("experiment-both-stop-rules", TWO + '[experiments.ab]\nprofiles = ["a", "b"]\nduration_s = 2\nrequests_per_level = 8\n',
     7, "experiments.ab.duration_s", "not both"),
]


def _write(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "profiles.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("text", "line", "key", "problem"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_config_names_file_line_and_key(tmp_path: Path, text: str, line: int, key: str | None,
                                            problem: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(UserError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    prefix = f"{path}:{line}: " + (f"{key}: " if key else "")
    assert message.startswith(prefix), message
    assert problem in message
    assert "\n" not in message


def test_several_problems_reports_the_first_in_file_order_and_counts_the_rest(tmp_path: Path) -> None:
    path = _write(tmp_path, '[profiles.b]\ncommand = "x"\nport = 0\n\n[profiles.a]\nprot = 1\n')
    with pytest.raises(UserError) as caught:
        load_config(path, env={})
    # Problems: b.port (line 3), a.prot (line 6), a.command missing (line 5) -> line 3 first.
    assert str(caught.value).startswith(f"{path}:3: profiles.b.port: ")
    assert str(caught.value).endswith("(and 2 more problems after this one)")


def test_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, b'[profiles.a]\ncommand = "x"\nworkdir = "/data/\xff"\n')
    with pytest.raises(UserError, match=rf"^{path}:3: not valid UTF-8"):
        load_config(path, env={})


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nope\.toml: no such file \(named by --config\)$"):
        load_config(tmp_path / "nope.toml", env={})
    with pytest.raises(UserError, match=r"no such file \(named by \$SPECMON_CONFIG\)$"):
        load_config(env={"SPECMON_CONFIG": str(tmp_path / "gone.toml")})
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path, env={})


def test_unknown_profile_lists_known_ones(tmp_path: Path) -> None:
    path = _write(tmp_path, GOOD + '\n[profiles.b]\ncommand = "y"\n')
    config = load_config(path, env={})
    with pytest.raises(UserError) as caught:
        config.profile("c")
    assert str(caught.value) == f"{path}: unknown profile 'c' (known: a, b)"


@pytest.mark.slow
@pytest.mark.parametrize(("text", "expected"), [
    (GOOD + "prot = 30001\n", "{path}:3: profiles.a.prot: unknown key (did you mean 'port'?)"),
    (GOOD + '\n[profiles.a.env]\n"BAD NAME" = "1"\n', '{path}:5: profiles.a.env."BAD NAME": bad environment'),
    ("[profiles.a\n", "{path}:1: invalid TOML:"),
    (GOOD + '[keys]\nlunch = "x"\n', "{path}:4: keys.lunch: unknown binding id"),
    (GOOD + '[keys]\nlaunch = "s"\n', "{path}:4: keys.launch: key 's' is also bound to sweep"),
    ('[profiles.a]\nport = 41108\ncommand = "specmon sim --port 41109"\n',
     "{path}:3: profiles.a.command: --port 41109 differs from port = 41108"),
])
def test_cli_prints_one_line_and_exits_2(tmp_path: Path, text: str, expected: str) -> None:
    path = _write(tmp_path, text)
    done = subprocess.run([specmon_script(), "--config", str(path), "profiles"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("specmon: error: " + expected.format(path=path)), done.stderr


@pytest.mark.slow
def test_cli_unknown_profile_via_python_m(tmp_path: Path) -> None:
    """`python -m specmon` and a SPECMON_CONFIG-found file behave the same as the script with --config."""
    path = _write(tmp_path, GOOD.replace("[profiles.a]", "[profiles.demo]") + 'server = "vlm"\n')
    done = subprocess.run([sys.executable, "-m", "specmon", "profiles"], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SPECMON_CONFIG": str(path)})
    assert done.returncode == 2
    assert done.stderr == (f"specmon: error: {path}:3: profiles.demo.server: must be one of 'sglang', 'vllm', "
                           "'other', got 'vlm' (did you mean 'vllm'?)\n")


@pytest.mark.slow
@pytest.mark.parametrize(("make", "expected"), [
    (lambda tmp: Path("/dev/zero"), "/dev/zero:1: a NUL byte at offset 0: not a text file (named by --config)"),
    (lambda tmp: _write(tmp, GOOD + "port = " + "[" * 500 + "]" * 500 + "\n"),
     "{path}:3: nested too deeply (arrays or tables inside each other hundreds of levels deep)"),
    (lambda tmp: _write(tmp, GOOD + "env = " + "{a = " * 500 + "1" + "}" * 500 + "\n"),
     "{path}:3: nested too deeply"),
    (lambda tmp: _write(tmp, GOOD + "# " + "x" * (1 << 20) + "\n"), "{path}:1: larger than 1 MiB: not a text file"),
])
def test_hostile_config_file_is_one_line_not_memory_or_recursion_error(
        tmp_path: Path, make: Callable[[Path], Path], expected: str) -> None:
    """`--config /dev/zero` read until MemoryError, and 500 nested arrays hit a RecursionError traceback."""
    path = make(tmp_path)
    done = subprocess.run([specmon_script(), "--config", str(path), "profiles"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("specmon: error: " + expected.format(path=path)), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize(("text", "expected"), [
    (GOOD + '"bad\\nkey" = 1\n', '{path}:3: profiles.a."bad\\nkey": unknown key'),
    (GOOD + '"x\\u001b]0;PWNED\\u0007" = 1\n', '{path}:3: profiles.a."x\\u001b]0;PWNED\\u0007": unknown key'),
    (GOOD.replace('command = "python3 -m http.server"', 'command = ["python3", "-m", "http.server\\u0000"]'),
     "{path}:2: profiles.a.command: contains a NUL byte (\\u0000), which no command, path or argument can hold"),
    (GOOD + 'notify_cmd = "echo hi\\u0000; rm -rf x"\n', "{path}:3: profiles.a.notify_cmd: contains a NUL byte"),
    (GOOD + 'workdir = "/tmp\\u0000/x"\n', "{path}:3: profiles.a.workdir: contains a NUL byte"),
])
def test_config_text_is_escaped_when_echoed_and_nul_bytes_are_refused(tmp_path: Path, text: str,
                                                                       expected: str) -> None:
    """A newline in a quoted key split the error over two lines and ESC in a key reached the terminal; a NUL in
    command/notify_cmd/workdir passed validation and later crashed `launch` (ValueError: embedded null byte)."""
    path = _write(tmp_path, text)
    done = subprocess.run([specmon_script(), "--config", str(path), "profiles"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "\x1b" not in done.stderr and "\x07" not in done.stderr
    assert done.stderr.startswith("specmon: error: " + expected.format(path=path)), done.stderr


@pytest.mark.slow
def test_profiles_table_escapes_control_characters_in_commands(tmp_path: Path) -> None:
    path = _write(tmp_path, '[profiles.a]\ncommand = ["echo", "\\u001b]0;PWNED\\u0007", "two\\nlines"]\n')
    done = subprocess.run([specmon_script(), "--config", str(path), "profiles"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    row = done.stdout.splitlines()[2]
    assert row.split(None, 4)[4] == "echo '\\x1b]0;PWNED\\x07' 'two\\x0alines'"
    assert len(done.stdout.splitlines()) == 4
@pytest.mark.slow
def test_a_server_command_without_port_is_a_warning_not_an_error(tmp_path: Path) -> None:
    text = ('[profiles.a]\nserver = "vllm"\nport = 8000\ncommand = "vllm serve m"\n\n'
            '[profiles.b]\nport = 9000\ncommand = ["specmon", "sim", "--port", "9000"]\n\n'
            '[profiles.c]\nserver = "other"\ncommand = "./serve.sh"\n')
    path = _write(tmp_path, text)
    config = load_config(path, env={})
    assert config.warnings == (f"{path}:4: profiles.a.command: has no --port: the vllm server picks its own default "
                               "port, while specmon probes port = 8000",)
    done = subprocess.run([specmon_script(), "--config", str(path), "profiles"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and "a" in done.stdout
    assert done.stderr == f"specmon: warning: {config.warnings[0]}\n"
