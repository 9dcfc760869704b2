"""The [ssh] table and `specmon trust` against the real loopback sshd (tests/support/sshd_support.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from process_support import run_specmon, specmon_script
from sshd_support import Sshd

from specmon.model.config import SshSettings, load_config

pytestmark = pytest.mark.slow


def test_ssh_table_defaults_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('[profiles.a]\ncommand = "x"\nhost = "gpu1"\n')
    config = load_config(tmp_path / "a.toml")
    assert config.ssh == SshSettings() and config.ssh.config == "~/.ssh/config"
    assert config.profiles["a"].host == "gpu1"
    (tmp_path / "c.toml").write_text('[profiles.a]\ncommand = "x"\nhost = "gpu1"\nurl = "http://gpu1:30000/"\n')
    direct = load_config(tmp_path / "c.toml").profiles["a"]
    assert direct.url == "http://gpu1:30000"
    (tmp_path / "b.toml").write_text('[profiles.a]\ncommand = "x"\n[ssh]\nconfig = "ssh/cfg"\n'
                                     'known_hosts = "/etc/kh"\nkeepalive_s = 2\nconnect_timeout_s = 4.5\n')
    ssh = load_config(tmp_path / "b.toml").ssh
    assert ssh == SshSettings(config=str(tmp_path / "ssh/cfg"), known_hosts="/etc/kh", connect_timeout_s=4.5,
                              keepalive_s=2.0)


def _profiles(tmp_path: Path, sshd: Sshd, known_hosts: Path) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text('[profiles.a]\ncommand = "x --port 30000"\nhost = "gpu2"\n\n'
                    f'[ssh]\nconfig = "{sshd.config}"\nknown_hosts = "{known_hosts}"\nconnect_timeout_s = 5\n')
    return path


def test_trust_shows_the_key_asks_and_appends_only_on_yes(sshd: Sshd, tmp_path: Path) -> None:
    known = tmp_path / "kh" / "known_hosts"     # does not exist yet: every key is unknown
    config = _profiles(tmp_path, sshd, known)
    fingerprint = subprocess.run(["ssh-keygen", "-lf", str(sshd.dir / "host_key.pub")], capture_output=True,
                                 text=True, check=True).stdout.split()[1]

    refused = run_specmon("--config", str(config), "trust", "gpu2", input="n\n")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert fingerprint in refused.stdout and "bastion" in refused.stdout   # the jump host's key is asked first
    assert refused.stderr.count("\n") == 1 and "not trusted; nothing was added" in refused.stderr
    assert not known.exists() or known.read_text() == ""

    # A run against the unknown host says what to do, in one line.
    status = run_specmon("--config", str(config), "launch", "a")
    assert status.returncode == 2 and "Traceback" not in status.stderr and status.stderr.count("\n") == 1
    assert "unknown host key" in status.stderr and "specmon trust gpu2" in status.stderr
    assert fingerprint in status.stderr

    done = run_specmon("--config", str(config), "trust", "gpu2", input="y\ny\n")
    assert done.returncode == 0, done.stderr
    assert "login works" in done.stdout
    lines = known.read_text().splitlines()
    assert lines == [f"[127.0.0.1]:{sshd.port} {sshd.host_key_line}"]   # bastion and gpu2 share one entry
    assert (known.stat().st_mode & 0o777) == 0o600

    again = run_specmon("--config", str(config), "trust", "gpu2", input="")
    assert again.returncode == 0 and "already trusted" in again.stdout


def test_trust_refuses_to_replace_a_changed_key(sshd: Sshd, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    known = tmp_path / "known_hosts"
    impostor = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known.write_text(f"[127.0.0.1]:{sshd.port} {impostor}\n")
    config = _profiles(tmp_path, sshd, known)
    done = run_specmon("--config", str(config), "trust", "gpu1", input="y\n")
    assert done.returncode == 2 and "HOST KEY CHANGED" in done.stderr and done.stderr.count("\n") == 1
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {impostor}\n"


def test_status_host_lists_runs_unknown_here_and_adopts_one(sshd: Sshd, tmp_path: Path, free_port: int) -> None:
    """A run launched from one jump box (its own local state) is found on the host by another, adopted, stopped."""
    import json
    import os
    import sys

    from lifecycle_support import kill_marked, marked_pids

    config = tmp_path / "profiles.toml"
    config.write_text(
        f'[profiles.far]\nhost = "gpu2"\nserver = "sglang"\nport = {free_port}\n'
        f'command = ["{sys.executable}", "-m", "specmon.sim", "--port", "{free_port}", "--time-scale", "0.05"]\n\n'
        + sshd.ssh_table(keepalive_s=5.0))

    def specmon(state: str, *args: str) -> subprocess.CompletedProcess[str]:
        exe = specmon_script()
        env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / state))
        return subprocess.run([exe, "--config", str(config), *args], capture_output=True, text=True, timeout=120,
                              env=env, stdin=subprocess.DEVNULL)

    launched = specmon("box-a", "launch", "far")
    assert launched.returncode == 0, launched.stderr
    run_id = json.loads(specmon("box-a", "status", "--json").stdout)[0]["run_id"]
    try:
        listed = specmon("box-b", "status", "--host", "gpu2")
        assert listed.returncode == 0, listed.stderr
        assert "not known here" in listed.stdout and run_id in listed.stdout and "running" in listed.stdout
        as_json = json.loads(specmon("box-b", "status", "--host", "gpu2", "--json").stdout)
        # The sshd (and its home) is shared by the session: earlier tests' runs on it are unknown to box-b too.
        mine = [r for r in as_json["adoptable"] if r["port"] == free_port]
        assert as_json["runs"] == [] and [r["run_id"] for r in mine] == [run_id]
        assert mine[0]["profile"] == "far" and mine[0]["running"] is True

        adopted = specmon("box-b", "status", "--host", "gpu2", "--adopt", run_id)
        assert adopted.returncode == 0, adopted.stderr
        # Adopted, it is listed as this box's run and no longer as unknown (other tests' runs may still be).
        unknown = adopted.stdout.partition("not known here")[2]
        assert f"adopted {run_id}" in adopted.stdout and run_id not in unknown, adopted.stdout
        runs = json.loads(specmon("box-b", "status", "--json").stdout)
        assert [(r["run_id"], r["host"]) for r in runs] == [(run_id, "gpu2")]
        assert runs[0]["state"] in ("loading", "ready")

        stopped = specmon("box-b", "stop", run_id)
        assert stopped.returncode == 0, stopped.stderr
        assert marked_pids(run_id) == []
        again = specmon("box-b", "status", "--host", "gpu2", "--adopt", run_id)
        assert again.returncode == 2 and "already known here" in again.stderr
    finally:
        kill_marked([run_id])


def test_cli_sweep_of_a_remote_profile_goes_through_the_forward_or_the_direct_url(
        sshd: Sshd, tmp_path: Path, free_port: int) -> None:
    """`specmon sweep PROFILE` for a profile on an SSH host: through a forward of the host's port (held for the
    sweep); with `url` set, straight to that URL."""
    import json
    import sys

    from lifecycle_support import kill_marked

    sim = [sys.executable, "-m", "specmon.sim", "--port", str(free_port), "--time-scale", "0.05"]
    config = tmp_path / "profiles.toml"
    config.write_text(
        f'[profiles.far]\nhost = "gpu1"\nport = {free_port}\ncommand = {json.dumps(sim)}\n\n'
        f'[profiles.near]\nhost = "gpu1"\nport = {free_port}\nurl = "http://localhost:{free_port}"\n'
        f'command = {json.dumps(sim)}\n\n' + sshd.ssh_table(keepalive_s=5.0))
    launched = run_specmon("--config", str(config), "launch", "far", "--wait")
    assert launched.returncode == 0, launched.stderr
    run_id = json.loads(run_specmon("--config", str(config), "status", "--json").stdout)[0]["run_id"]
    run_ids = [run_id]
    try:
        shown = run_specmon("--config", str(config), "status").stdout
        assert f"gpu1 127.0.0.1:{free_port} (over SSH)" in shown, shown
        for name, via_forward in (("far", True), ("near", False)):
            if name == "near":   # a sweep measures a profile's own ready run (issue 35 #7): near's, not far's
                assert run_specmon("--config", str(config), "stop", run_id).returncode == 0
                assert run_specmon("--config", str(config), "launch", "near", "--wait").returncode == 0
                run_id = next(r["run_id"] for r in json.loads(run_specmon("--config", str(config), "status", "--json")
                              .stdout) if r["profile"] == "near" and r["state"] == "ready")
                run_ids.append(run_id)
            out = tmp_path / f"{name}.jsonl"
            done = run_specmon("--config", str(config), "sweep", name, "--levels", "1", "--requests", "2",
                            "--output-len", "8", "--out", str(out), "--json")
            assert done.returncode == 0, done.stderr
            meta = json.loads(done.stdout)["meta"]
            assert json.loads(done.stdout)["levels"][0]["requests_ok"] == 2
            if via_forward:
                assert meta["url"].startswith("http://127.0.0.1:") and not meta["url"].endswith(f":{free_port}")
            else:
                assert meta["url"] == f"http://localhost:{free_port}"
        assert run_specmon("--config", str(config), "stop", run_id).returncode == 0
    finally:
        kill_marked(run_ids)
