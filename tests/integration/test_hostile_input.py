"""Hostile input, third pass (issue 20): secrets never reach a shareable file or the terminal, every input file
is read bounded, strings from outside are made printable, experiment inputs are checked before a launch."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from paths import FIXTURES
from process_support import run_specmon, specmon_script
from simproc import free_port
from sshd_support import Sshd, sshd_available

from specmon.commands._table import table_text
from specmon.errors import UserError
from specmon.model.config import load_config
from specmon.model.experiments.experiment import ExperimentState, profile_setup, utc_now_iso
from specmon.model.machine.gpu import SmiError, parse_query
from specmon.model.workload.datasets import load_dataset
from specmon.orchestration.measure.experiment import save_state
from specmon.sources.ssh import SSHTransport
from specmon.sources.tailer import last_lines, read_range
from specmon.sources.transport import TransportError

SECRETS = ("sk-live0123456789", "hfsecret2", "pwsecret3", "toksecret4", "dbsecret5", "hfenvsecret6")
PROFILES = f"""
[profiles.leaky]
port = 1
command = ["python", "-m", "specmon", "sim", "--port", "1", "--api-key", "{SECRETS[0]}", "--hf-token={SECRETS[1]}",
           "--password", "{SECRETS[2]}", "--token={SECRETS[3]}"]
env = {{ DB_URL = "postgres://u:{SECRETS[4]}@db/x", HF_TOKEN = "{SECRETS[5]}", NCCL_DEBUG = "INFO" }}

[profiles.plain]
port = 2
command = ["python", "-m", "specmon", "sim", "--port", "2"]

[experiments.leak]
profiles = ["leaky", "plain"]
levels = [1]
"""


def assert_no_secret(text: str, where: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{where} holds {leaked}"


@pytest.fixture
def leaky(tmp_path: Path) -> Path:
    config = tmp_path / "profiles.toml"
    config.write_text(PROFILES)
    return config


@pytest.mark.slow
def test_item1_no_secret_flag_or_url_password_in_experiment_json_or_report_md(leaky: Path, tmp_path: Path) -> None:
    config = load_config(leaky)
    directory = tmp_path / "results" / "experiments" / "leak-1"
    state = ExperimentState(directory, config.experiment("leak"), utc_now_iso(), str(leaky),
                            setups={"leaky": profile_setup(config.profile("leaky"))})
    save_state(state)
    text = state.path.read_text()
    assert_no_secret(text, "experiment.json")
    assert os.stat(state.path).st_mode & 0o777 == 0o600
    setup = json.loads(text)["setups"]["leaky"]
    # What is not secret stays, so the report still says how the server was started.
    assert setup["command"][:4] == ["python", "-m", "specmon", "sim"] and setup["env"]["NCCL_DEBUG"] == "INFO"
    assert setup["env"]["DB_URL"] == "postgres://u:<redacted>@db/x"

    done = run_specmon("report", str(directory), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = directory / "report.md"
    assert "--api-key <redacted>" in report.read_text()
    assert_no_secret(report.read_text(), "report.md")
    assert os.stat(report).st_mode & 0o777 == 0o600


@pytest.mark.slow
def test_item1_an_old_experiment_json_holding_secrets_gives_a_report_without_them(leaky: Path, tmp_path: Path) -> None:
    config = load_config(leaky)
    directory = tmp_path / "leak-1"
    profile = config.profile("leaky")
    raw = {"host": "local", "server": "sglang", "port": 1, "command": list(profile.command), "env": dict(profile.env)}
    save_state(ExperimentState(directory, config.experiment("leak"), utc_now_iso(), str(leaky), setups={"leaky": raw}))
    done = run_specmon("report", str(directory), "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "<redacted>" in done.stdout
    assert_no_secret(done.stdout, "report --format json")


@pytest.mark.slow
def test_item1_profiles_json_and_env_all_hide_a_url_password_under_a_harmless_name(leaky: Path, tmp_path: Path) -> None:
    env = dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"),
               XDG_CONFIG_HOME=str(tmp_path / "cfg"), OTHER_URL="https://me:dbsecret5@example.invalid/")
    done = run_specmon("--config", str(leaky), "profiles", "--json", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert_no_secret(done.stdout, "profiles --json")
    assert json.loads(done.stdout)["profiles"][0]["env"]["DB_URL"] == "postgres://u:<redacted>@db/x"
    done = run_specmon("--config", str(leaky), "profiles", cwd=tmp_path, env=env)
    assert_no_secret(done.stdout, "profiles")
    for args in (("env", "leaky", "--all"), ("env", "leaky", "--all", "--json")):
        done = run_specmon("--config", str(leaky), *args, cwd=tmp_path, env=env)
        assert done.returncode == 0, done.stderr
        assert "DB_URL" in done.stdout
        assert_no_secret(done.stdout + done.stderr, " ".join(args))


# ---------------------------------------------------------------------------------------------------------------
# Item 2: a remote shell that prints at start-up


@pytest.fixture
def talking_sshd(tmp_path: Path) -> Iterator[Sshd]:
    """A real sshd of its own (its HOME gets a ~/.bashrc that the other tests' shared sshd must not see)."""
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    server = Sshd.start(tmp_path / "sshd")
    try:
        yield server
    finally:
        server.stop()


def _remote_processes(needle: str) -> list[int]:
    """Pids of processes here (the sshd is on loopback) whose command line holds `needle`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


@pytest.mark.slow
async def test_item2_a_bashrc_that_prints_on_stdout_and_stderr_leaves_commands_and_their_output_alone(
        talking_sshd: Sshd) -> None:
    (talking_sshd.home / ".bashrc").write_text('echo "Welcome to gpu1, load 0.3"\necho "module: ok" >&2\n'
                                              'printf "no newline here"\n')
    transport = SSHTransport("gpu1", talking_sshd.settings())
    try:
        result = await transport.run("echo hi; echo oops >&2; exit 3")
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"hi\n", b"oops\n")
        stream = transport.stream("printf 'a\\nb\\n'")
        await stream.start()
        chunks = b""
        while chunk := await stream.read_chunk():
            chunks += chunk
        await stream.aclose()
        assert chunks == b"a\nb\n"
    finally:
        await transport.close()


@pytest.mark.slow
async def test_item2_a_bashrc_printing_a_victims_process_group_never_gets_it_killed(talking_sshd: Sshd) -> None:
    victim = subprocess.Popen(["sleep", "300"], start_new_session=True)   # its own process group, pgid = pid
    (talking_sshd.home / ".bashrc").write_text(f"echo {victim.pid}\n")
    hung = "sleep 299.75"                      # the hung remote command (nvidia-smi that never answers)
    transport = SSHTransport("gpu1", talking_sshd.settings())
    try:
        with pytest.raises(TimeoutError):
            await transport.run(f"exec {hung}", timeout=2)
        deadline = time.monotonic() + 10
        while _remote_processes(hung) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not _remote_processes(hung), "the timed-out remote command is still running"
        assert victim.poll() is None, "an unrelated process group was killed"
    finally:
        await transport.close()
        victim.kill()
        victim.wait()


# ---------------------------------------------------------------------------------------------------------------
# Items 3, 4 and 8: every JSON and text input read bounded (depth, size, FIFOs and devices)

DEEP = "[" * 100_000


def _one_clean_line(done: subprocess.CompletedProcess[str], names: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr and "MemoryError" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and names in lines[0] and len(lines[0]) < 700, lines[:3]


def _isolated(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, HOME=str(tmp_path), XDG_STATE_HOME=str(tmp_path / "state"),
                XDG_CONFIG_HOME=str(tmp_path / "cfg"))


@pytest.mark.slow
@pytest.mark.parametrize("text", [DEEP, '{"type": "meta", "x": ' + DEEP + "\n", "{\"a\":" * 100_000],
                         ids=["array", "specmon-meta", "object"])
@pytest.mark.parametrize("command", [("compare",), ("report", "--format", "csv"), ("export", "--format", "vllm")],
                         ids=["compare", "report", "export"])
def test_item3_deeply_nested_result_file_is_one_line_naming_it(tmp_path: Path, text: str,
                                                                command: tuple[str, ...]) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text(text)
    files = (str(deep), str(deep)) if command == ("compare",) else (str(deep),)
    done = run_specmon(*command, *files, cwd=tmp_path, env=_isolated(tmp_path))
    _one_clean_line(done, str(deep))


@pytest.mark.parametrize("name", ["jsonl", "sharegpt"])
@pytest.mark.parametrize("text", [DEEP, '{"prompt": ' + DEEP, '[{"conversations": ' + DEEP],
                         ids=["array", "jsonl-line", "sharegpt-array"])
def test_item3_deeply_nested_dataset_is_one_line_naming_it(tmp_path: Path, name: str, text: str) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(text)
    with pytest.raises(UserError, match=rf"^{path}:1: "):
        load_dataset(name, str(path))


@pytest.mark.slow
def test_item3_item4_deep_or_endless_experiment_json_is_one_line_naming_it(tmp_path: Path) -> None:
    directory = tmp_path / "exp"
    directory.mkdir()
    (directory / "experiment.json").write_text(DEEP)
    _one_clean_line(run_specmon("report", str(directory), cwd=tmp_path, env=_isolated(tmp_path)), "experiment.json")
    (directory / "experiment.json").unlink()
    (directory / "experiment.json").symlink_to("/dev/zero")
    _one_clean_line(run_specmon("report", str(directory), cwd=tmp_path, env=_isolated(tmp_path)), "experiment.json")


@pytest.mark.slow
def test_item3_a_deep_local_run_record_is_listed_unreadable_not_a_traceback(tmp_path: Path) -> None:
    env = _isolated(tmp_path)
    runs = tmp_path / "state" / "specmon" / "runs"
    runs.mkdir(parents=True)
    (runs / "20260101-000000-abcdef.json").write_text(DEEP)
    done = run_specmon("status", "--all", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "20260101-000000-abcdef" in done.stdout and "unreadable" in done.stdout and "nested deeper" in done.stdout
    done = run_specmon("forget", "20260101-000000-abcdef", cwd=tmp_path, env=env)
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr


def test_item8_a_fifo_dataset_is_refused_at_once_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "prompts.jsonl"
    os.mkfifo(fifo)
    started = time.monotonic()
    with pytest.raises(UserError, match=rf"^{fifo}:1: a FIFO, not a regular file"):
        load_dataset("jsonl", str(fifo))
    assert time.monotonic() - started < 5


# ---------------------------------------------------------------------------------------------------------------
# Item 5: strings from outside reach the terminal escaped

OSC52 = "\x1b]52;c;aGFja2Vk\x07"      # "copy 'hacked' to the clipboard", then a colour code
FAKE_SMI = FIXTURES / "gpu" / "fake-nvidia-smi"


@pytest.mark.slow
def test_item5_a_gpu_name_with_terminal_escapes_is_shown_escaped(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKE_SMI)
    env = _isolated(tmp_path)
    env.update(PATH=f"{bin_dir}:{env['PATH']}", FAKE_SMI_NAME=f"H200{OSC52}\x1b[31mred")
    done = run_specmon("gpus", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "H200\\x1b]52;c;aGFja2Vk\\x07\\x1b[31mred" in done.stdout


@pytest.mark.slow
def test_item5_env_names_and_values_a_sitecustomize_injects_are_shown_escaped(tmp_path: Path) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(
        "import os\n"
        f"os.environ['NCCL_EVIL'] = {OSC52!r}\n"
        f"os.environ['NCCL_{OSC52}'] = 'x'\n")
    config = tmp_path / "profiles.toml"
    config.write_text('[profiles.p]\nport = 1\ncommand = ["python", "-m", "specmon", "sim", "--port", "1"]\n'
                      f'env = {{ PYTHONPATH = "{hooks}", NCCL_LAUNCH = "\\u001b[2J" }}\n')
    done = run_specmon("--config", str(config), "env", "p", "--all", cwd=tmp_path, env=_isolated(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "NCCL_EVIL" in done.stdout and "\\x1b]52;c;aGFja2Vk\\x07" in done.stdout
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout


def test_item5_table_cells_from_outside_are_escaped() -> None:
    """Every headless table (status --host's runs from a remote meta.json, per-category acceptance from a dataset's
    `category`) goes through table_text."""
    text = table_text(("profile", f"code{OSC52}"), [(f"p{OSC52}", "1.0")])
    assert "\x1b" not in text and "\x07" not in text and "p\\x1b]52" in text and "code\\x1b]52" in text


# ---------------------------------------------------------------------------------------------------------------
# Items 6, 7 and 10: experiment inputs checked before the first launch; bad output paths are one line


def _experiment_config(tmp_path: Path, extra: str = "") -> Path:
    config = tmp_path / "profiles.toml"
    parts = [f'[profiles.{name}]\nport = {port}\ncommand = ["python", "-m", "specmon", "sim", "--port", "{port}"]\n'
             for name, port in (("a", free_port()), ("b", free_port()))]
    config.write_text("".join(parts) + '[experiments.ab]\nprofiles = ["a", "b"]\nlevels = [1]\n' + extra)
    return config


def _no_run_launched(tmp_path: Path) -> None:
    runs = tmp_path / "state" / "specmon" / "runs"
    assert not (runs.is_dir() and list(runs.glob("*.json"))), "a server was launched"


@pytest.mark.slow
def test_item7_a_bad_experiment_dataset_is_refused_before_any_server_is_launched(tmp_path: Path) -> None:
    bad = tmp_path / "prompts.jsonl"
    bad.write_text('{"prompt": "fine"}\nroot:$6$salt$hash:19000:0:99999:7:::\n')
    config = _experiment_config(tmp_path, f'dataset = "jsonl"\ndataset_path = "{bad}"\n')
    done = run_specmon("--config", str(config), "experiment", "ab", "--results-dir", str(tmp_path / "results"),
                   cwd=tmp_path, env=_isolated(tmp_path))
    _one_clean_line(done, f"{bad}:2: not valid JSON")
    _no_run_launched(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["/proc/nope", "file", "long"])
def test_item6_an_unusable_results_dir_is_one_line_before_any_launch(tmp_path: Path, where: str) -> None:
    results = {"/proc/nope": Path("/proc/nope"), "file": tmp_path / "a-file", "long": tmp_path / ("x" * 300)}[where]
    (tmp_path / "a-file").write_text("")
    config = _experiment_config(tmp_path)
    done = run_specmon("--config", str(config), "experiment", "ab", "--results-dir", str(results), cwd=tmp_path,
                   env=_isolated(tmp_path))
    _one_clean_line(done, "cannot create the experiment's directory")
    _no_run_launched(tmp_path)


@pytest.mark.slow
def test_item10_resume_of_a_corrupt_experiment_json_names_the_corruption(tmp_path: Path) -> None:
    config = _experiment_config(tmp_path)
    state = tmp_path / "results" / "experiments" / "ab-20260101T000000Z" / "experiment.json"
    state.parent.mkdir(parents=True)
    state.write_text('{"type": "experiment", "schema": 1, "name": "ab", "spec": ')
    done = run_specmon("--config", str(config), "experiment", "ab", "--resume", "--results-dir",
                   str(tmp_path / "results"), cwd=tmp_path, env=_isolated(tmp_path))
    _one_clean_line(done, f"{state}: not a readable experiment state")
    _no_run_launched(tmp_path)


# ---------------------------------------------------------------------------------------------------------------
# Items 9 and 10: a ProxyJump loop and a 100,000-character host


@pytest.mark.slow
async def test_item9_a_proxyjump_loop_is_refused_at_once_not_followed_for_ever(talking_sshd: Sshd) -> None:
    with open(talking_sshd.config, "a") as fh:
        fh.write(f"\nHost loop\n  HostName 127.0.0.1\n  Port {talking_sshd.port}\n  User root\n"
                 f"  IdentityFile {talking_sshd.user_key}\n  ProxyJump loop\n")
    transport = SSHTransport("loop", talking_sshd.settings(connect_timeout_s=3.0))
    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"^loop: .*ssh_config: ProxyJump loop: (loop -> )+loop reaches loop twice$"):
            await asyncio.wait_for(transport.run("true"), 30)
        assert time.monotonic() - started < 3.0
    finally:
        await transport.close()


@pytest.mark.slow
def test_item10_a_100000_character_host_is_one_short_line_saying_so(tmp_path: Path) -> None:
    done = run_specmon("gpus", "a" * 100_000, cwd=tmp_path, env=_isolated(tmp_path))
    _one_clean_line(done, "100,000 characters long")
    assert "idna" not in done.stderr


# ---------------------------------------------------------------------------------------------------------------
# Item 8: a server.log that is a FIFO, `logscan /dev/zero`


@pytest.mark.slow
async def test_item8_a_fifo_server_log_is_refused_over_ssh_and_leaves_no_reader_on_the_host(
        sshd: Sshd, tmp_path: Path) -> None:
    fifo = tmp_path / "run" / "server.log"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    transport = SSHTransport("gpu1", sshd.settings())
    try:
        started = time.monotonic()
        with pytest.raises(TransportError, match=r"cannot read .*server.log: not a regular file"):
            await last_lines(transport, str(fifo), 50)
        assert await read_range(transport, str(fifo), 0, 100) == b""
        assert time.monotonic() - started < 20
        assert not _remote_processes(str(fifo)), "a reader of the FIFO was left on the host"
    finally:
        await transport.close()


@pytest.mark.slow
def test_item8_logscan_of_an_endless_device_is_refused(tmp_path: Path) -> None:
    done = subprocess.run([specmon_script(), "logscan", "/dev/zero"], capture_output=True,
                          text=True, timeout=30, cwd=tmp_path, check=False)
    _one_clean_line(done, "/dev/zero: a device, not a log file")


@pytest.mark.slow
async def test_item10_a_revoked_host_key_is_reported_as_revoked_not_changed(talking_sshd: Sshd) -> None:
    line = talking_sshd.known_hosts.read_text()
    talking_sshd.known_hosts.write_text(line + "@revoked " + line)
    transport = SSHTransport("gpu1", talking_sshd.settings())
    try:
        with pytest.raises(TransportError, match=r"^gpu1: the host key of \[127.0.0.1\]:\d+ \(ssh-ed25519 SHA256:\S+\) "
                                                 r"is marked @revoked in .*known_hosts; not connecting$"):
            await transport.run("true")
        assert "CHANGED" not in transport.link.detail and transport.link.refused
    finally:
        await transport.close()


@pytest.mark.slow
def test_item10_a_sweep_killed_during_its_probe_does_not_block_a_rerun_with_the_same_out(tmp_path: Path) -> None:
    import signal
    import socket

    silent = socket.socket()     # accepts the probe's connection, never answers it
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    port = silent.getsockname()[1]
    exe = specmon_script()
    env = _isolated(tmp_path)
    try:
        sweep = subprocess.Popen([exe, "sweep", "--url", f"http://127.0.0.1:{port}", "--out", "r.jsonl"], cwd=tmp_path,
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not (tmp_path / "r.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        sweep.send_signal(signal.SIGKILL)
        sweep.wait()
        assert (tmp_path / "r.jsonl").stat().st_size == 0    # what a kill during the probe leaves
    finally:
        silent.close()
    done = run_specmon("sweep", "--url", f"http://127.0.0.1:{port}", "--out", "r.jsonl", cwd=tmp_path, env=env)
    assert done.returncode == 2 and "cannot reach the server" in done.stderr, done.stderr
    assert "already exists" not in done.stderr and not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("line", ["NVIDIA-SMI has failed " + "y" * 10_000_000, "0, " * 3_000_000],
                         ids=["failure", "many-fields"])
def test_item10_a_10_mb_nvidia_smi_line_is_quoted_short_in_its_error(line: str) -> None:
    with pytest.raises(SmiError) as info:
        parse_query(line)
    assert len(str(info.value)) < 400 and "characters in all" in str(info.value)


# ---------------------------------------------------------------------------------------------------------------
# Items 3, 4, 5 and 11 on a host: a remote meta.json that is deep, huge, escaping or out of range


@pytest.mark.slow
def test_items_3_4_5_11_hostile_remote_meta_json_in_status_host_and_adopt(talking_sshd: Sshd, tmp_path: Path) -> None:
    runs = talking_sshd.home / ".specmon" / "runs"     # the legacy root: always searched
    metas = {
        "20260101-000000-aaaaaa": json.dumps({"run_id": "20260101-000000-aaaaaa", "profile": f"evil{OSC52}",
                                              "port": 70000, "launched_at": "2026-01-01T00:00:00Z"}),
        "20260101-000000-bbbbbb": '{"run_id": "20260101-000000-bbbbbb", "profile": ' + DEEP,
        "20260101-000000-cccccc": json.dumps({"run_id": "20260101-000000-cccccc", "pad": "x" * (3 << 20)}),
    }
    for run_id, text in metas.items():
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "meta.json").write_text(text)
    config = tmp_path / "profiles.toml"
    config.write_text('[profiles.far]\nhost = "gpu1"\nport = 30000\ncommand = ["true", "--port", "30000"]\n\n'
                      + talking_sshd.ssh_table())
    env = _isolated(tmp_path)
    done = run_specmon("--config", str(config), "status", "--host", "gpu1", cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert "evil\\x1b]52" in done.stdout and "bbbbbb" not in done.stdout and "cccccc" not in done.stdout
    done = run_specmon("--config", str(config), "status", "--host", "gpu1", "--adopt", "20260101-000000-aaaaaa",
                   cwd=tmp_path, env=env)
    _one_clean_line(done, "meta.json: port: 70000 is not a TCP port (1-65535); not adopted")


@pytest.mark.slow
def test_item6_export_of_a_result_with_a_5000_character_profile_writes_files_with_short_names(tmp_path: Path) -> None:
    """'File name too long' before the vLLM export wrote sweep folders (BENCH-<overrides>/run=N.json): the profile
    is no longer part of a file name."""
    from test_compare_cli import write_sweep

    write_sweep(tmp_path / "r.jsonl", "p" * 5000, {1: 10.0, 2: 20.0})
    done = run_specmon("export", "--format", "vllm", "r.jsonl", cwd=tmp_path, env=_isolated(tmp_path))
    assert done.returncode == 0, done.stderr[-500:]
    written = [p for p in (tmp_path / "r-vllm").rglob("*") if p.is_file()]
    assert written and all(len(part) <= 200 for p in written for part in p.relative_to(tmp_path).parts)
