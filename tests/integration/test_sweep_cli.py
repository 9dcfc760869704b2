"""`specmon sweep` as a user runs it: a real fixture server, the installed command, files on disk, Ctrl-C."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from lifecycle_support import profile_toml
from paths import SUPPORT
from process_support import alive, run_specmon, specmon_script

from specmon.sources.resultfiles import read_results

pytestmark = pytest.mark.slow



@pytest.fixture
def server(free_port: int) -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port),
                             "--interval-s", "0.002", "--tokens-per-chunk", "3"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    yield f"http://127.0.0.1:{free_port}"
    proc.kill()
    proc.wait()


def test_sweep_url_writes_default_results_file_and_prints_table(server: str, tmp_path: Path) -> None:
    done = run_specmon("sweep", "--url", server, "--levels", "1,3", "--requests", "3", "--output-len", "9",
                   "--dataset", "random", "--input-len", "8", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (out,) = (tmp_path / "results").glob("127.0.0.1_*-*Z.jsonl")
    res = read_results(out)
    assert [lv.concurrency for lv in res.levels] == [1, 3]
    assert res.levels[0].output_tokens == 27 and res.levels[0].tokens_per_chunk == 3.0
    assert "level C=1:" in done.stderr and "level C=3:" in done.stderr   # progress on stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith(str(out.relative_to(tmp_path)))
    assert lines[1].split()[:4] == ["C", "ok", "fail", "out"]
    assert lines[2].split()[:3] == ["1", "3", "0"]


def test_sweep_of_a_profile_measures_its_ready_run_and_nothing_else(
        server: str, tmp_path: Path, free_port_factory: Callable[[], int]) -> None:
    """With no READY run of the profile and an unrelated server on its port, `specmon sweep PROFILE` measured that
    server, filed it under the profile's name and exited 0 (issue 35 #7). Now: one line saying the profile has no
    ready run; a ready run is measured; a server serving another model than the profile's is refused."""
    port = server.rsplit(":", 1)[1]   # the unrelated server (it serves 'fixture-model')

    def write_profile(model: str, port: int) -> None:
        (tmp_path / "profiles.toml").write_text(
            profile_toml("fix", port, "--model", model, load=0.5) +
            '[sweep]\nlevels = [2]\nrequests_per_level = 4\noutput_len = 6\ninput_len = 8\nwarmup_requests = 0\n')

    write_profile("org/fix", int(port))
    refused = run_specmon("sweep", "fix", "--out", "r.jsonl", cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, ""), refused.stderr
    assert refused.stderr == ("specmon: error: profile fix has no ready run (none launched from "
                              "profiles.toml): `specmon launch fix --wait` starts one; `--url URL` "
                              "measures any server on purpose\n")
    assert not (tmp_path / "r.jsonl").exists()

    server_port = free_port_factory()
    write_profile("org/fix", server_port)
    try:
        assert run_specmon("launch", "fix", "--wait", cwd=tmp_path).returncode == 0
        done = run_specmon("sweep", "fix", "--json", "--out", "r.jsonl", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        data = json.loads(done.stdout)
        assert data["meta"]["profile"] == "fix" and data["meta"]["model"] == "org/fix"
        assert data["meta"]["workload"]["levels"] == [2]                   # sweep defaults from the config
        assert [lv["requests_ok"] for lv in data["levels"]] == [4]
        assert read_results(tmp_path / "r.jsonl").meta.profile == "fix"
        # The profile now names another model than its ready run serves: not the profile's server, refused.
        write_profile("org/new", server_port)
        other = run_specmon("sweep", "fix", "--out", "o.jsonl", cwd=tmp_path)
        assert other.returncode == 2 and not (tmp_path / "o.jsonl").exists()
        assert other.stderr == (f"specmon: error: http://127.0.0.1:{server_port} serves 'org/fix', not profile fix's "
                                "model 'org/new': another server answers on its port? `--url` measures any server on "
                                "purpose\n")
        stopped = run_specmon("stop", "fix", cwd=tmp_path)
        assert stopped.returncode == 0, stopped.stderr
        after = run_specmon("sweep", "fix", cwd=tmp_path)
        assert after.returncode == 2 and "profile fix has no ready run (its latest, " in after.stderr
        assert ", is stopped): `specmon launch fix --wait` starts one" in after.stderr
    finally:
        run_specmon("stop", "fix", "--force", cwd=tmp_path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels", "1,x"], "--levels: levels: 'x' is not a positive whole number"),
        (["--requests", "0"], "--requests: must be >= 1"),
        (["--requests", "2", "--duration", "3"], "not allowed with argument"),
        (["--api-key-env", "A B"], "'A B' is not a valid environment variable name"),
        (["--levels", "8,4"], "levels must be strictly increasing (8 then 4)"),
        (["--levels", "4,4"], "levels must be strictly increasing (4 then 4)"),
        (["--levels", "1,64", "--requests", "16"], "requests per level (16) is below the highest level C=64"),
        (["--timeout", "inf"], "--timeout: must be a finite number > 0, got 'inf'"),
        (["--duration", "inf"], "--duration: must be a finite number > 0, got 'inf'"),
        (["--deadline", "nan"], "--deadline: must be a finite number > 0, got 'nan'"),
        (["--input-len", "512"], "--input-len/--input-range shape random prompts only; the builtin dataset's prompts"),
        (["--dataset", "jsonl"], "dataset jsonl needs a dataset path (--dataset-path FILE)"),
        (["--dataset", "random", "--dataset-path", "x.jsonl"], "dataset random takes no dataset path"),
        (["--output-range", "1"], "--output-range: must be a fraction in [0, 1)"),
    ],
)
def test_bad_arguments_are_one_line(server: str, tmp_path: Path, args: list[str], message: str) -> None:
    done = run_specmon("sweep", "--url", server, *args, cwd=tmp_path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_malformed_dataset_is_one_line_naming_file_and_line_before_anything_is_sent(server: str, tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text('{"question_id": 1, "category": "qa", "turns": ["Hi?"]}\n{"question_id": 2}\n')
    done = run_specmon("sweep", "--url", server, "--dataset", "specbench", "--dataset-path", "q.jsonl", "--out", "r.jsonl",
                   cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr == "specmon: error: q.jsonl:2: 'turns' must be a non-empty list of strings (SpecBench question.jsonl), got null\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.jsonl"]


def test_url_with_a_password_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """`--url http://user:pass@host` wrote the password into the meta line (and the file name) and then failed."""
    done = run_specmon("sweep", "--url", "http://user:s3cret@127.0.0.1:9", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "user name or password in the URL is not supported" in done.stderr and "s3cret" not in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_impossible_usage_keeps_the_level_and_a_sweep_of_failures_exits_1(tmp_path: Path, free_port: int) -> None:
    """usage.completion_tokens = 10**400 crashed the generator (OverflowError) and lost the level; a sweep whose
    every request failed exited 0, and its instantly failing levels were called client-bound."""
    proc = subprocess.Popen([sys.executable, str(SUPPORT / "hostile_http.py"), "--port", str(free_port), "--mode", "usage",
                             "--usage", '{"prompt_tokens": 3, "completion_tokens": 1' + "0" * 400 + "}"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        done = run_specmon("sweep", "--url", f"http://127.0.0.1:{free_port}", "--levels", "2", "--requests", "4",
                       "--warmup", "0", "--out", "r.jsonl", cwd=tmp_path)
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "bottleneck" not in done.stderr
    assert "sweep measured nothing: all 4 requests failed" in done.stderr
    (level,) = read_results(tmp_path / "r.jsonl").levels
    assert level.requests_ok == 0 and level.errors == {"bad_usage": 4} and level.output_tokens == 0


@pytest.mark.parametrize(("out", "message"), [
    ("afile/r.jsonl", "afile/r.jsonl: cannot create its directory afile (File exists)"),
    ("afile", "afile: already exists; choose another --out"),
    ("adir", "adir: already exists; choose another --out"),
])
def test_unwritable_out_is_one_line_before_any_request(tmp_path: Path, free_port: int, out: str, message: str) -> None:
    """--out through a file, or onto an existing file or directory, was a FileExistsError/FileNotFoundError traceback
    after the server had been probed; now it is one line naming the path, checked first (nothing listens on the
    URL, so an error about the server would mean the check came too late), and nothing is left behind."""
    (tmp_path / "afile").write_text("keep me\n")
    (tmp_path / "adir").mkdir()
    done = run_specmon("sweep", "--url", f"http://127.0.0.1:{free_port}", "--out", out, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert (tmp_path / "afile").read_text() == "keep me\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile"]


def test_unreachable_server_leaves_no_empty_results_file(tmp_path: Path, free_port: int) -> None:
    done = run_specmon("sweep", "--url", f"http://127.0.0.1:{free_port}", "--out", "r.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "cannot reach the server" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_unreachable_url_and_unknown_profile(free_port: int, tmp_path: Path) -> None:
    done = run_specmon("sweep", "--url", f"http://127.0.0.1:{free_port}", cwd=tmp_path)
    assert done.returncode == 2 and f"127.0.0.1:{free_port}: cannot reach the server" in done.stderr
    assert "Traceback" not in done.stderr
    done = run_specmon("sweep", "nosuch", cwd=tmp_path)
    assert done.returncode == 2 and "unknown profile 'nosuch'" in done.stderr


def test_ctrl_c_keeps_finished_levels(free_port: int, tmp_path: Path) -> None:
    srv = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.05"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        exe = specmon_script()
        proc = subprocess.Popen([exe, "sweep", "--url", f"http://127.0.0.1:{free_port}", "--levels", "1,2,4",
                                 "--requests", "4", "--output-len", "6", "--warmup", "0", "--out", "r.jsonl"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out = tmp_path / "r.jsonl"
        deadline = time.monotonic() + 60
        while not (out.exists() and len(out.read_text().splitlines()) >= 2):   # meta + first level
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        srv.kill()
        srv.wait()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    levels = read_results(out).levels
    assert 1 <= len(levels) < 3 and levels[0].requests_ok == 4
    assert stdout.splitlines()[1].split()[0] == "1"    # the finished levels' table


def _children_running_loadgen(ppid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes()
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if b"specmon.loadgen" in cmd and int(fields[1]) == ppid:
                out.append(int(entry))
    return out


def test_generator_stops_when_specmon_is_killed(free_port: int, tmp_path: Path) -> None:
    """The generator runs in its own session (a terminal's Ctrl-C reaches only specmon), so it must notice on its
    own that specmon died (its stdin closes) and stop instead of loading the server forever."""
    srv = subprocess.Popen([sys.executable, str(SUPPORT / "sse_server.py"), "--port", str(free_port), "--interval-s", "0.05"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout is not None and srv.stdout.readline().strip() == "ready"
        exe = specmon_script()
        proc = subprocess.Popen([exe, "sweep", "--url", f"http://127.0.0.1:{free_port}", "--levels", "4",
                                 "--duration", "60", "--output-len", "20", "--out", "r.jsonl"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (children := _children_running_loadgen(proc.pid)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in children):
            assert time.monotonic() < deadline, "the load generator outlived specmon"
            time.sleep(0.05)
    finally:
        srv.kill()
        srv.wait()


def test_records_file_cut_short_by_a_write_limit_still_ends_at_a_whole_line(server: str, tmp_path: Path) -> None:
    """The per-request records went through a buffered file: a flush the disk (here a real file size limit, as
    `ulimit -f` sets) took only in part left a torn last line. Now each flush appends whole lines or nothing."""
    limit = 9000   # the results file (about 2 KB here) fits; 80 records (about 14 KB) do not
    exe = specmon_script()
    done = subprocess.run(
        [exe, "sweep", "--url", server, "--levels", "1,4", "--requests", "40", "--output-len", "9", "--dataset", "random", "--input-len", "8",
         "--warmup", "0", "--out", "r.jsonl"], capture_output=True, text=True, timeout=90, cwd=tmp_path,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY)))
    assert done.returncode == 0, done.stderr
    assert "r.requests.jsonl: per-request records stopped (File too large); level results are still written" \
        in done.stderr
    records = (tmp_path / "r.requests.jsonl").read_bytes()
    assert 0 < len(records) <= limit and records.endswith(b"\n")
    assert all(json.loads(line)["ok"] for line in records.splitlines())
    assert [lv.requests_ok for lv in read_results(tmp_path / "r.jsonl").levels] == [40, 40]
