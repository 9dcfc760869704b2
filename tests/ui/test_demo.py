"""`specmon demo --headless`: launch both profiles on `specmon sim`, wait ready, sweep both, print the comparison,
and stop what it started. Run as the installed command, as a user would."""

from __future__ import annotations

import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from process_support import specmon_script

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def fast_profiles(path: Path, ports: dict[str, int], crash: str | None = None, refuse_all: str | None = None) -> Path:
    """Fast demo profiles; `crash` fails one's load, `refuse_all` gives one a context too short for any request."""
    text = []
    for name, port in ports.items():
        spec = "eagle3" if "eagle" in name else "none"
        fault = ', "--crash-at-shard", "2"' if name == crash else ""
        fault += ', "--context-length", "32"' if name == refuse_all else ""
        text.append(f'[profiles.{name}]\nport = {port}\ncommand = ["specmon", "sim", "--port", "{port}", '
                    f'"--shards", "4", "--load-seconds", "2", "--spec", "{spec}"{fault}]\n')
    text.append("[sweep]\nwarmup_requests = 0\noutput_len = 64\n")
    path.write_text("\n".join(text))
    return path


def test_headless_demo_prints_the_comparison_and_stops_its_servers(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    ports = {"base": free_port_factory(), "eagle": free_port_factory()}
    config = fast_profiles(tmp_path / "profiles.toml", ports)
    done = subprocess.run([specmon_script(), "--config", str(config), "demo", "--headless",
                           "--levels", "1,32", "--requests", "32", "--results-dir", str(tmp_path / "res")],
                          capture_output=True, text=True, timeout=140, cwd=tmp_path, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "base: loading shards" in out and "base: ready shards 4/4" in out and "eagle: ready shards 4/4" in out
    # Each level as `specmon sweep` prints it, as it finishes: no silent minute per profile (issue 35 #21).
    levels = [line.split(" out tok/s")[0].rsplit(": ", 1)[0] for line in out.splitlines() if " out tok/s, " in line]
    assert levels == ["base: level C=1", "base: level C=32", "eagle: level C=1", "eagle: level C=32"], out
    assert out.index("base: level C=32") < out.index("base: results in") < out.index("eagle: sweeping")
    table = [line.split() for line in out.splitlines() if line.startswith(("base ", "eagle "))]
    assert [(row[0], row[1]) for row in table] == [("base", "1"), ("base", "32"), ("eagle", "1"), ("eagle", "32")]
    # The sim's model: speculation carries several tokens per chunk; the baseline one.
    tokens_per_chunk = {(row[0], row[1]): float(row[4]) for row in table}
    assert tokens_per_chunk[("eagle", "32")] > 1.5 and tokens_per_chunk[("base", "32")] == 1.0
    # At C=32 the baseline is far ahead of EAGLE-3 (saturation ~770 vs ~350 tok/s in the sim's model).
    tput = {(row[0], row[1]): float(row[2]) for row in table}
    assert tput[("base", "32")] > 1.3 * tput[("eagle", "32")]
    # The crossover said in words (who leads on each side), as in the TUI.
    assert re.search(r"^crossover: (\w+ ahead below C≈[\d.]+, \w+ ahead above|no crossover in C=1\.\.32: \w+ ahead "
                     r"throughout)$", out, re.M), out
    assert len(list((tmp_path / "res").glob("*.jsonl"))) == 4  # results + per-request records, per profile
    assert all(port_is_free(p) for p in ports.values())


def test_headless_demo_refuses_a_level_it_could_not_fill_before_launching(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """16 requests cannot measure C=64 (it would really run at C=16): one line, exit 2, nothing launched."""
    ports = {"base": free_port_factory(), "eagle": free_port_factory()}
    config = fast_profiles(tmp_path / "profiles.toml", ports)
    done = subprocess.run([specmon_script(), "--config", str(config), "demo", "--headless",
                           "--levels", "1,4,16,64", "--requests", "16"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path, check=False)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and "one full wave" in done.stderr and "C=64" in done.stderr
    assert "launched" not in done.stdout


def test_headless_demo_reports_a_failed_load_and_exits_1(tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    ports = {"base": free_port_factory(), "eagle": free_port_factory()}
    config = fast_profiles(tmp_path / "profiles.toml", ports, crash="eagle")
    done = subprocess.run([specmon_script(), "--config", str(config), "demo", "--headless"],
                          capture_output=True, text=True, timeout=140, cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "eagle: FAILED: exception" in done.stdout
    assert all(port_is_free(p) for p in ports.values())


def test_headless_demo_whose_every_request_failed_exits_1_saying_why(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """Every request to one server failed (HTTP 400: its context is too short): the demo finished with exit 0 and
    a 'crossover' as if it had measured something; `specmon sweep` alone exited 1."""
    ports = {"base": free_port_factory(), "eagle": free_port_factory()}
    config = fast_profiles(tmp_path / "profiles.toml", ports, refuse_all="eagle")
    done = subprocess.run([specmon_script(), "--config", str(config), "demo", "--headless",
                           "--levels", "1,4", "--requests", "4", "--results-dir", str(tmp_path / "res")],
                          capture_output=True, text=True, timeout=140, cwd=tmp_path, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert re.search(r"demo failed: eagle: sweep measured nothing: all (\d+) requests failed \(http_4xx \1\); see .*eagle",
                     done.stderr), done.stderr
    assert "crossover" not in done.stdout
    assert all(port_is_free(p) for p in ports.values())



def test_headless_demo_started_beside_a_specmon_folder_runs(
        tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """Started from a clone's parent directory (it holds `specmon/`): the built-in profiles' `python -m specmon sim`
    and the load generator's `python -m specmon.loadgen` imported that folder as a namespace package and died
    (`FileNotFoundError: …/specmon/data/prompts.jsonl`, an ImportError). Their children are now isolated from the
    working directory."""
    (tmp_path / "specmon").mkdir()
    ports = [free_port_factory(), free_port_factory()]
    done = subprocess.run([specmon_script(), "demo", "--headless", "--ports", f"{ports[0]},{ports[1]}",
                           "--levels", "1", "--requests", "4", "--results-dir", str(tmp_path / "res")],
                          capture_output=True, text=True, timeout=140, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    table = [line.split() for line in done.stdout.splitlines() if line.startswith(("demo-baseline ", "demo-eagle3 "))]
    assert [(row[0], row[1]) for row in table] == [("demo-baseline", "1"), ("demo-eagle3", "1")], done.stdout
    assert all(port_is_free(p) for p in ports)
