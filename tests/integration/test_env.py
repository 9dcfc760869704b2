"""Environment views, launch args and diffs: the pure model (specmon.model.machine.env) and `specmon env` / `specmon diff`
as a user runs them, with a real interpreter whose sitecustomize.py or .pth file injects NCCL variables and a real
launched process whose /proc/PID/environ is read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from lifecycle_support import kill_marked
from paths import FIXTURES, REPO
from sshd_support import Sshd

from specmon.model.machine.env import (
    REDACTED,
    EnvReport,
    Injection,
    NcclLog,
    ProcessEnv,
    Startup,
    confounds,
    diff_reports,
    key_launch_args,
    parse_environ,
    parse_nccl_log,
)
from specmon.model.sweeps.compare import ComparedRun, confound_warnings
from specmon.model.text.secrets import redact_env as redact

pytestmark = pytest.mark.slow

FIX = FIXTURES / "gpu"


# ---- model -----------------------------------------------------------------------------------------------------

def test_environ_and_family_filter_and_redaction() -> None:
    env = parse_environ(b"NCCL_PROTO=LL\0PATH=/bin\0HF_TOKEN=hf_abc\0EMPTY=\0junk\0A=b=c\0")
    assert env == {"NCCL_PROTO": "LL", "PATH": "/bin", "HF_TOKEN": "hf_abc", "EMPTY": "", "A": "b=c"}
    assert redact(env)["HF_TOKEN"] == REDACTED and redact(env)["NCCL_PROTO"] == "LL"


def test_real_host_env_capture_is_in_the_families() -> None:
    # env-nccl.txt: the NCCL/CUDA/TORCH/NVSHMEM variables of the real H200 host.
    report = EnvReport("profile a", "h200", launch_env=dict(
        line.split("=", 1) for line in (FIX / "env-nccl.txt").read_text().splitlines() if "=" in line))
    shown = report.to_json()["launch_env"]
    assert isinstance(shown, dict)
    assert shown["NCCL_NVLS_ENABLE"] == "0" and shown["NVSHMEM_DISABLE_NVLS"] == "1"
    assert "CUDAHOSTCXX" not in shown   # not in a family: one key (--all) away
    assert "CUDAHOSTCXX" in report.to_json(everything=True)["launch_env"]  # type: ignore[operator]


def test_nccl_log_lines() -> None:
    # NCCL's own INFO format ("host:pid:tid [rank] NCCL INFO ..."); no public log in real-logs/ has NCCL_DEBUG=INFO.
    log = parse_nccl_log([
        "node1:4242:4242 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
        "node1:4242:4242 [0] NCCL INFO NCCL version 2.21.5+cuda12.4",
        "node1:4242:4300 [0] NCCL INFO NCCL_PROTO set by environment to LL",
        "node1:4242:4300 [1] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0",
        "node1:4242:4300 [0] NCCL INFO NCCL_AUTH_TOKEN set by environment to s3cret",
    ])
    assert log.version == "2.21.5+cuda12.4"
    assert log.settings == {"NCCL_PROTO": "LL", "NCCL_IB_HCA": "mlx5_0", "NCCL_AUTH_TOKEN": REDACTED}


def test_key_launch_args_of_sglang_and_vllm() -> None:
    sglang = key_launch_args(["python", "-m", "sglang.launch_server", "--model-path", "m", "--tp", "8",
                              "--attention-backend", "fa3", "--mem-fraction-static=0.85",
                              "--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                              "--cuda-graph-bs", "1", "2", "4", "--disable-radix-cache", "--quantization", "fp8"])
    assert sglang == {"model": "m", "tp": "8", "attention backend": "fa3", "mem fraction": "0.85",
                      "speculative algorithm": "EAGLE3", "speculative num steps": "3", "cuda graph sizes": "1 2 4",
                      "quantization": "fp8"}
    vllm = key_launch_args(["vllm", "serve", "m", "-tp", "2", "--gpu-memory-utilization", "0.9", "--enforce-eager",
                            "--speculative-config", '{"method": "mtp"}'])
    assert vllm == {"tp": "2", "mem fraction": "0.9", "cuda graph disabled": "true",
                    "speculative config": '{"method": "mtp"}'}


def test_diff_names_each_view_and_confounds_prefer_the_injection() -> None:
    a = EnvReport("profile a", "local", launch_env={"NCCL_DEBUG": "INFO", "PATH": "/a"},
                  startup=Startup("py", (Injection("NCCL_PROTO", "LL", None, "/x/sitecustomize.py"),)),
                  processes=(ProcessEnv(10, "python", {"NCCL_PROTO": "LL", "SPECMON_RUN_ID": "r1"}, "server"),),
                  args={"tp": "2"}, versions={"torch": "2.5"}, facts={"kv cache tokens": "1000"})
    b = EnvReport("profile b", "local", launch_env={"NCCL_DEBUG": "INFO", "PATH": "/b"}, startup=Startup("py"),
                  processes=(ProcessEnv(20, "python", {"SPECMON_RUN_ID": "r2"}, "server"),),
                  nccl=NcclLog("2.21.5", {}), args={"tp": "4"}, versions={"torch": "2.5"},
                  facts={"kv cache tokens": "900"})
    diffs = diff_reports(a, b)
    assert [(d.section, d.key, d.a, d.b) for d in diffs] == [
        ("env: injected", "NCCL_PROTO", "LL", None), ("env: process", "NCCL_PROTO", "LL", None),
        ("args", "tp", "2", "4"), ("facts", "kv cache tokens", "1000", "900")]
    # KV tokens have the comparison's own 10% rule; speculative settings are what is being compared.
    assert confounds(diffs) == ["differs: NCCL_PROTO: LL vs (unset) [env: injected]", "differs: tp: 2 vs 4 [args]"]
    assert [d.key for d in diff_reports(a, b, everything=True)][:2] == ["PATH", "NCCL_PROTO"]


def test_comparison_confound_warnings_name_an_injected_nccl_variable() -> None:
    baseline = EnvReport("profile base", "local", startup=Startup("py"), args={"tp": "1"})
    eagle = EnvReport("profile eagle", "local", args={"tp": "1", "speculative algorithm": "EAGLE3"},
                      startup=Startup("py", (Injection("NCCL_PROTO", "LL", None, "/venv/sitecustomize.py"),)))
    warnings = confound_warnings([ComparedRun("base", setup=baseline), ComparedRun("eagle", setup=eagle)])
    assert warnings == ["eagle vs base: differs: NCCL_PROTO: (unset) vs LL [env: injected]"]
    # Without set-up facts on both sides the rule says nothing (it never guesses).
    assert confound_warnings([ComparedRun("base"), ComparedRun("eagle", setup=eagle)]) == []


# ---- specmon env / diff ----------------------------------------------------------------------------------------

def _specmon(config: Path, *args: str, timeout: float = 120,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), *args], capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=None if env is None else {**os.environ, **env})


@pytest.fixture
def profiles(tmp_path: Path) -> Iterator[Path]:
    """Profiles `ll` (a PYTHONPATH dir whose sitecustomize.py sets NCCL_PROTO=LL), `quiet` (a sitecustomize that
    sets nothing, like Debian's), `plain`, and `served` (a real process launched with NCCL_* in its env)."""
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text('import os\nos.environ["NCCL_PROTO"] = "LL"\n')
    quiet = tmp_path / "quiet"
    quiet.mkdir()
    (quiet / "sitecustomize.py").write_text("import os  # sets nothing, like Debian's apport hook\n")
    sleeper = json.dumps([sys.executable, "-c", "import time; time.sleep(300)"])
    config = tmp_path / "profiles.toml"
    config.write_text(
        f'[profiles.ll]\ncommand = "true"\npython = "{sys.executable}"\nport = 39101\n'
        f'env = {{ PYTHONPATH = "{inject}", NCCL_DEBUG = "INFO", HF_TOKEN = "hf_do_not_show" }}\n'
        f'[profiles.quiet]\ncommand = "true"\npython = "{sys.executable}"\nport = 39102\n'
        f'env = {{ PYTHONPATH = "{quiet}", NCCL_DEBUG = "INFO" }}\n'
        f'[profiles.plain]\ncommand = "true"\npython = "{sys.executable}"\nport = 39103\n'
        f'env = {{ NCCL_DEBUG = "INFO" }}\n'
        f'[profiles.served]\nserver = "other"\ncommand = {sleeper}\npython = "{sys.executable}"\nport = 39104\n'
        f'env = {{ NCCL_SOCKET_IFNAME = "lo", NCCL_CUMEM_ENABLE = "0", CUDA_DEVICE_MAX_CONNECTIONS = "1" }}\n')
    yield config
    status = _specmon(config, "status", "--json")
    runs = json.loads(status.stdout or "[]")
    for run in runs:
        if run["state"] in ("launching", "loading", "ready", "stopping"):
            _specmon(config, "stop", str(run["run_id"]), "--force")
    kill_marked(str(r["run_id"]) for r in runs)


def test_sitecustomize_injection_is_named_in_env_and_shows_in_diff(profiles: Path) -> None:
    shown = _specmon(profiles, "env", "ll")
    assert shown.returncode == 0, shown.stderr
    site = profiles.parent / "inject" / "sitecustomize.py"
    assert f"  NCCL_PROTO=LL  by {site}" in shown.stdout.splitlines()
    assert "hf_do_not_show" not in shown.stdout
    data = json.loads(_specmon(profiles, "env", "ll", "--json", "--all").stdout)
    assert {"name": "NCCL_PROTO", "value": "LL", "before": None, "file": str(site)} in data["injected"]
    assert data["launch_env"]["HF_TOKEN"] == REDACTED

    diff = _specmon(profiles, "diff", "ll", "plain")
    assert diff.returncode == 1, diff.stderr        # they differ
    assert "env: injected:" in diff.stdout and "  NCCL_PROTO  A LL  |  B (unset)" in diff.stdout
    as_json = json.loads(_specmon(profiles, "diff", "ll", "plain", "--json").stdout)
    assert {"section": "env: injected", "key": "NCCL_PROTO", "a": "LL", "b": None} in as_json["differences"]


def test_diff_of_the_demo_profiles_names_their_speculative_setup_and_kv_size_and_each_note_once() -> None:
    """Issue 35 #16: `specmon diff demo-baseline demo-eagle3` (and the TUI's `e` diff) said "no differences" beside
    the banner's "KV tokens 450k ≠ 400k": the demo's servers (`specmon sim`) spell their speculative set-up and KV
    size `--spec` and `--kv-tokens`, which the diff did not read. Its notes came twice (one per side, same host)."""
    demo = REPO / "specmon" / "demo_profiles.toml"
    diff = _specmon(demo, "diff", "demo-baseline", "demo-eagle3")
    assert diff.returncode == 1, diff.stdout + diff.stderr
    lines = diff.stdout.splitlines()
    assert "  kv cache tokens        A 450000  |  B 400000" in lines, diff.stdout
    assert "  speculative algorithm  A none  |  B eagle3" in lines, diff.stdout
    notes = [line for line in lines if line.startswith("note: ")]
    assert notes and len(notes) == len(set(notes)), diff.stdout


def test_a_sitecustomize_that_sets_nothing_is_no_injection(profiles: Path) -> None:
    data = json.loads(_specmon(profiles, "env", "quiet", "--json", "--all").stdout)
    assert [i for i in data["injected"] if i["name"].startswith("NCCL")] == []
    same = _specmon(profiles, "diff", "quiet", "plain")
    assert same.returncode == 0 and "no differences" in same.stdout, same.stdout + same.stderr


def test_pth_hook_in_a_venv_is_named(tmp_path: Path, profiles: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site_dir = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                   capture_output=True, text=True, check=True).stdout.strip())
    (site_dir / "zz_nccl.pth").write_text("import os; os.environ['NCCL_ALGO'] = 'Ring'\n")
    config = tmp_path / "venv.toml"
    config.write_text(f'[profiles.v]\ncommand = "true"\npython = "{python}"\n')
    data = json.loads(_specmon(config, "env", "v", "--json").stdout)
    assert data["python"] == str(python)
    assert {"name": "NCCL_ALGO", "value": "Ring", "before": None, "file": str(site_dir / "zz_nccl.pth")} \
        in data["injected"]


def test_profile_nccl_env_reaches_the_server_process(profiles: Path) -> None:
    # CUDA_DEVICE_ORDER is in no profile: the server inherits it from the shell specmon runs in, as every process
    # started from that shell (a profile's python included) would.
    inherited = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    launched = _specmon(profiles, "launch", "served", env=inherited)
    assert launched.returncode == 0, launched.stderr
    deadline = time.monotonic() + 60
    while True:
        data = json.loads(_specmon(profiles, "env", "served", "--json").stdout)
        if data["process_env"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert data["subject"].startswith("run ")
    assert data["process_env"]["NCCL_SOCKET_IFNAME"] == "lo"
    assert data["process_env"]["NCCL_CUMEM_ENABLE"] == "0"
    assert data["process_env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert [p["role"] for p in data["processes"]] == ["server"]
    # The live run against a profile without those variables: its process env against that profile's effective one.
    run_id = data["subject"].split()[1]
    assert data["process_env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    diff = json.loads(_specmon(profiles, "diff", run_id, "plain", "--json", env=inherited).stdout)
    assert {"section": "env: effective", "key": "NCCL_SOCKET_IFNAME", "a": "lo", "b": None} in diff["differences"]
    # What both would inherit is no difference (it was shown as "PCI_BUS_ID vs (unset)").
    assert [d for d in diff["differences"] if d["key"] == "CUDA_DEVICE_ORDER"] == []
    # ... and what only the run inherited still is.
    elsewhere = json.loads(_specmon(profiles, "diff", run_id, "plain", "--json").stdout)
    assert {"section": "env: effective", "key": "CUDA_DEVICE_ORDER", "a": "PCI_BUS_ID", "b": None} \
        in elsewhere["differences"]


def test_env_and_diff_over_ssh_name_the_injecting_file(sshd: Sshd, tmp_path: Path) -> None:
    # The same probes through the SSH transport (the loopback sshd, host alias gpu1): the profile's python runs on
    # the host with the profile's env, exactly as the launch wrapper would start it.
    inject = tmp_path / "inject"
    inject.mkdir()
    (inject / "sitecustomize.py").write_text('import os\nos.environ["NCCL_PROTO"] = "LL"\n')
    config = tmp_path / "profiles.toml"
    config.write_text(
        f'[profiles.remote-ll]\nhost = "gpu1"\ncommand = "true"\npython = "{sys.executable}"\n'
        f'env = {{ PYTHONPATH = "{inject}" }}\n'
        f'[profiles.remote-plain]\nhost = "gpu1"\ncommand = "true"\npython = "{sys.executable}"\n'
        + sshd.ssh_table())
    data = json.loads(_specmon(config, "env", "remote-ll", "--json").stdout)
    assert data["host"] == "gpu1"
    assert {"name": "NCCL_PROTO", "value": "LL", "before": None, "file": str(inject / "sitecustomize.py")} \
        in data["injected"]
    diff = _specmon(config, "diff", "remote-ll", "remote-plain")
    assert diff.returncode == 1 and "  NCCL_PROTO  A LL  |  B (unset)" in diff.stdout, diff.stdout + diff.stderr


def test_env_without_nvidia_smi_or_frameworks_says_so_in_notes(tmp_path: Path) -> None:
    """No nvidia-smi and an interpreter with no torch: the report said nothing (`versions: {}`, `notes: []`), though
    a probe that cannot answer is to leave a `note:` line."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.cpu]\ncommand = "true"\npython = "{bare / "bin" / "python"}"\nport = 39105\n')
    shown = _specmon(config, "env", "cpu", env={"PATH": "/usr/bin:/bin"})
    assert shown.returncode == 0, shown.stderr
    notes = [line for line in shown.stdout.splitlines() if line.startswith("note:")]
    assert any("no nvidia-smi" in line for line in notes), shown.stdout
    assert any("none of torch, sglang, vllm" in line for line in notes), shown.stdout
    data = json.loads(_specmon(config, "env", "cpu", "--json", env={"PATH": "/usr/bin:/bin"}).stdout)
    assert data["versions"] == {} and len(data["notes"]) == 2
