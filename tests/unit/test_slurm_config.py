"""A profile's [profiles.NAME.slurm] table: read into a SlurmRequest, each bad key one `FILE:LINE: key: problem`
line, and the sbatch command line it turns into."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmon.errors import UserError
from specmon.model.config import load_config
from specmon.model.runs.slurm import SlurmRequest, nodes_script, sbatch_argv

HEAD = '[profiles.a]\ncommand = "specmon sim --port 31000"\nport = 31000\n\n[profiles.a.slurm]\n'

CASES = [
    ("unknown-key", 'partiton = "gpu"\n', 6, "profiles.a.slurm.partiton", "did you mean 'partition'?"),
    ("time-format", 'time = "2 hours"\n', 6, "profiles.a.slurm.time", "must be a Slurm time limit"),
    ("mem-format", 'mem = "lots"\n', 6, "profiles.a.slurm.mem", "must be a size such as 64G"),
    ("gpus-zero", "gpus = 0\n", 6, "profiles.a.slurm.gpus", "must be an integer >= 1, got 0"),
    ("gpus-and-gres", 'gpus = 2\ngres = "gpu:a100:2"\n', 7, "profiles.a.slurm.gres", "not both"),
    ("two-words", 'partition = "gpu debug"\n', 6, "profiles.a.slurm.partition", "must be one word"),
    ("nodes-zero", "nodes = 0\n", 6, "profiles.a.slurm.nodes", "must be an integer >= 1, got 0"),
    ("extra-own-requeue", 'extra_args = ["--requeue"]\n', 6, "profiles.a.slurm.extra_args",
     "--requeue is set by specmon"),
    ("extra-not-option", 'extra_args = ["exclusive"]\n', 6, "profiles.a.slurm.extra_args", "starting with '-'"),
    ("extra-own-option", 'extra_args = ["--output=x.log"]\n', 6, "profiles.a.slurm.extra_args",
     "--output is set by specmon"),
    ("extra-own-short", 'extra_args = ["-Jname"]\n', 6, "profiles.a.slurm.extra_args", "-J is set by specmon"),
    # sbatch takes an unambiguous start of a long option for the option itself
    ("extra-own-prefix-output", 'extra_args = ["--outp=x.log"]\n', 6, "profiles.a.slurm.extra_args",
     "--outp (sbatch reads it as --output) is set by specmon"),
    ("extra-own-prefix-name", 'extra_args = ["--job-nam=x"]\n', 6, "profiles.a.slurm.extra_args",
     "--job-nam (sbatch reads it as --job-name) is set by specmon"),
    ("extra-own-prefix-chdir", 'extra_args = ["--chd=/tmp"]\n', 6, "profiles.a.slurm.extra_args",
     "--chd (sbatch reads it as --chdir) is set by specmon"),
    ("extra-type", 'extra_args = "--exclusive"\n', 6, "profiles.a.slurm.extra_args", "must be an array"),
]


@pytest.mark.parametrize(("text", "line", "key", "problem"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_slurm_key_names_file_line_and_key(tmp_path: Path, text: str, line: int, key: str, problem: str) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(HEAD + text)
    with pytest.raises(UserError) as caught:
        load_config(path, env={})
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: {key}: "), message
    assert problem in message and "\n" not in message


def test_slurm_with_ssh_hosts_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text('[profiles.a]\ncommand = "x"\nhosts = ["a", "b"]\n\n[profiles.a.slurm]\npartition = "gpu"\n')
    with pytest.raises(UserError, match=r":5: profiles\.a\.slurm: .*use slurm\.nodes"):
        load_config(path, env={})


def test_a_slurm_table_becomes_the_request_and_its_sbatch_command(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(HEAD + 'partition = "gpu"\naccount = "proj-1"\nqos = "high"\ntime = "1-02:00:00"\ngpus = 2\n'
                           'cpus = 16\nmem = "64G"\nconstraint = "a100|h100"\nreservation = "demo"\n'
                           'extra_args = ["--exclusive", "--signal=B:USR1@60"]\n')
    profile = load_config(path, env={}).profile("a")
    assert profile.slurm == SlurmRequest(partition="gpu", account="proj-1", qos="high", time="1-02:00:00", gpus=2,
                                         cpus=16, mem="64G", constraint="a100|h100", reservation="demo",
                                         extra_args=("--exclusive", "--signal=B:USR1@60"))
    argv = sbatch_argv(profile.slurm, "RUN", "/runs/RUN", "/runs/RUN/launch.sh")
    assert argv == ["sbatch", "--parsable", "--job-name=specmon-RUN", "--comment=specmon:RUN",
                    "--output=/runs/RUN/server.log", "--open-mode=append", "--chdir=/runs/RUN", "--no-requeue",
                    "--partition=gpu", "--account=proj-1", "--qos=high", "--constraint=a100|h100",
                    "--reservation=demo", "--mem=64G", "--time=1-02:00:00", "--gpus=2", "--cpus-per-task=16",
                    "--exclusive", "--signal=B:USR1@60", "/runs/RUN/launch.sh"]


def test_a_two_node_job_is_one_request_whose_script_starts_each_rank_by_slurms_node_id(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(HEAD + "nodes = 2\n")
    profile = load_config(path, env={}).profile("a")
    assert profile.slurm == SlurmRequest(nodes=2)
    script = nodes_script("RUN", "/runs", 2)
    assert "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 " in script and 'd="$1-n$SLURM_NODEID"' in script
    assert script.rstrip().endswith(" sh /runs/RUN")


def test_a_two_node_job_takes_a_master_port_but_no_master_addr(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(HEAD.replace("port = 31000\n", "port = 31000\nmaster_port = 5000\n") + "nodes = 2\n")
    assert load_config(path, env={}).profile("a").master_port == 5000
    path.write_text(HEAD.replace("port = 31000\n", 'port = 31000\nmaster_addr = "10.0.0.5"\n') + "nodes = 2\n")
    with pytest.raises(UserError, match=r":4: profiles\.a\.master_addr: a multi-node Slurm job's master address is "
                                        r"its rank 0 node's"):
        load_config(path, env={})
    path.write_text(HEAD.replace("port = 31000\n", "port = 31000\nmaster_port = 5000\n"))
    with pytest.raises(UserError, match=r":4: profiles\.a\.master_port: only for multi-node profiles"):
        load_config(path, env={})


def test_a_profile_without_slurm_table_is_no_slurm_profile(tmp_path: Path) -> None:
    path = tmp_path / "profiles.toml"
    path.write_text(HEAD.replace("\n[profiles.a.slurm]\n", ""))
    assert load_config(path, env={}).profile("a").slurm is None
