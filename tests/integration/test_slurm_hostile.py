"""Slurm's client commands answering as a real Slurm cannot be made to: an sbatch that hangs, an `scontrol show
job` that never stops printing, one garbled answer, terminal escapes in a job's fields. The clients are a stand-in on
PATH (tests/fixtures/slurm/fake-slurm); everything of specmon runs as a user runs it (the CLI, a real subprocess)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import FIXTURES

pytestmark = pytest.mark.slow

FAKE = FIXTURES / "slurm" / "fake-slurm"
MEMORY_CAP = 1 << 30   # of address space for one `specmon status`: it needs a fraction of it


@pytest.fixture
def fake_slurm(tmp_path: Path, free_port: int) -> tuple[Path, dict[str, str]]:
    """(a profiles file with Slurm profile `s`, the environment whose PATH finds the stand-in clients first)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("sbatch", "scontrol", "squeue", "scancel"):
        (bin_dir / name).symlink_to(FAKE)
    config = tmp_path / "profiles.toml"
    config.write_text(f'[profiles.s]\ncommand = "specmon sim --port {free_port}"\nport = {free_port}\n'
                      '[profiles.s.slurm]\ngpus = 1\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
           "FAKE_SLURM_STATE": str(tmp_path / "answers")}
    return config, env


def specmon(config: Path, env: dict[str, str], *args: str, timeout: float = 120,
            **more_env: str) -> subprocess.CompletedProcess[str]:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    return subprocess.run([sys.executable, "-m", "specmon", "--config", str(config), *args],
                          env={**env, **more_env}, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, preexec_fn=cap)


def launched(config: Path, env: dict[str, str]) -> str:
    """Launch profile `s` (job 4242, queued as far as specmon knows); its run id."""
    done = specmon(config, env, "launch", "s")
    assert done.returncode == 0 and "(job 4242," in done.stderr, done.stderr
    return done.stdout.strip()


def test_an_endless_scontrol_answer_is_cut_short_not_read_into_memory(fake_slurm: tuple[Path, dict[str, str]]) -> None:
    config, env = fake_slurm
    launched(config, env)
    started = time.monotonic()
    shown = specmon(config, env, "status", FAKE_SLURM_JOB="endless")
    took = time.monotonic() - started
    assert shown.returncode == 0 and "Traceback" not in shown.stderr and "MemoryError" not in shown.stderr, \
        shown.stderr[-2000:]
    assert "launching" in shown.stdout, shown.stdout   # unknown this time: as recorded, neither lost nor failed
    assert took < 60, f"status took {took:.0f} s"


def test_one_garbled_scontrol_answer_leaves_a_running_job_unknown_not_lost(
        fake_slurm: tuple[Path, dict[str, str]]) -> None:
    config, env = fake_slurm
    launched(config, env)
    (Path(env["FAKE_SLURM_STATE"])).write_text("0")
    [first] = json.loads(specmon(config, env, "status", "--json", FAKE_SLURM_JOB="garbled").stdout)
    assert first["state"] == "launching", first
    [then] = json.loads(specmon(config, env, "status", "--json", FAKE_SLURM_JOB="garbled").stdout)
    assert then["state"] == "loading" and then["job"].startswith("RUNNING on localhost"), then


def test_terminal_escapes_in_scontrols_answer_reach_status_escaped(fake_slurm: tuple[Path, dict[str, str]]) -> None:
    config, env = fake_slurm
    launched(config, env)
    shown = specmon(config, env, "status", FAKE_SLURM_JOB="escape")
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout, repr(shown.stdout)
    assert "PENDING (\\x1b[2J\\x1b]52;c;aGk=\\x07Resources)" in shown.stdout, shown.stdout
    # The job's state as read, escaped where it is read: `jq -r .job` of the JSON prints no escape either.
    [run] = json.loads(specmon(config, env, "status", "--json", FAKE_SLURM_JOB="escape").stdout)
    assert run["job"].startswith("PENDING (\\x1b[2J\\x1b]52;c;aGk=\\x07Resources)"), run


def test_an_sbatch_that_never_answers_is_one_line_after_its_time_limit(
        fake_slurm: tuple[Path, dict[str, str]]) -> None:
    config, env = fake_slurm
    started = time.monotonic()
    done = specmon(config, env, "launch", "s", FAKE_SBATCH_HANG="1", timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "specmon: error: local: sbatch did not answer within 60 s", \
        done.stderr
    assert "Traceback" not in done.stderr and time.monotonic() - started < 200
    assert json.loads(specmon(config, env, "status", "--json").stdout) == []   # no run left as if submitted
