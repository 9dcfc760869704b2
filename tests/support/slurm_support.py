"""A real single-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's packages, every file in
a temp dir, started inside a PID namespace (`unshare --pid --fork --kill-child`) so that one SIGKILL ends the
daemons and every job they started, whatever state a test left them in.

The node (`localhost`, 2 CPUs) has two fake GPUs: character devices made with mknod (`/dev/null`'s numbers),
declared as `gres/gpu`, so jobs get CUDA_VISIBLE_DEVICES as on a GPU node. Ports are free ones picked at start, so
two clusters in one test run never meet. `../shared/reference/slurm.md` (the recipe this follows) says what each
setting does; clients need only `SLURM_CONF` (the fixture sets it for the test).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ports import free_port

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo",
            "unshare", "mknod")
START_TIMEOUT_S = 30.0


def slurm_available() -> str | None:
    """Why a real Slurm cannot run here (None when it can)."""
    missing = [name for name in BINARIES if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]
    if missing:
        return ("Slurm is not installed (missing " + ", ".join(missing) + "); "
                "apt-get install --no-install-recommends slurmctld slurmd munge slurm-client")
    if os.geteuid() != 0:
        return "the test Slurm cluster runs its daemons as root (SlurmUser=root, a PID namespace); not root here"
    return None


def _sbin(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    """A running test cluster: `conf` is its slurm.conf (what SLURM_CONF must name for every client)."""

    root: Path
    conf: Path
    process: subprocess.Popen[bytes]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> str:
        """A Slurm client command's stdout (`check`: a failure raises, with its stderr)."""
        done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def jobs(self) -> list[str]:
        """Ids of the jobs the controller still lists (any state)."""
        return self.run("squeue", "-h", "-o", "%i").split()

    def rpcs(self) -> dict[str, int]:
        """Requests the controller has answered so far, by message type (sdiag's counts; its own not counted)."""
        text = self.run("sdiag").split("by message type", 1)[1].split("by user", 1)[0]
        return {name: int(count) for name, count in re.findall(r"(\w+)\s+\(\s*\d+\)\s+count:(\d+)", text)
                if name != "REQUEST_STATS_INFO"}

    def fill_node(self, *options: str) -> str:
        """Submit a job that holds every CPU of the node (so the next job pends with reason Resources); its id."""
        return self.run("sbatch", "--parsable", "--job-name=filler", "--exclusive", f"--output={self.root}/filler.out",
                        *options, "--wrap", "sleep 600").strip().split(";")[0]

    def logs(self) -> str:
        """The daemons' logs, for a failing test's message."""
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                         for p in sorted((self.root / "log").glob("*")) + [self.root / "daemons.out"] if p.exists())


# The two-node cluster: node name -> its address. Both nodes are this machine; each has its own loopback address
# (Linux routes all of 127/8 to lo), so a server bound to n1's address answers there and nowhere else, and code
# that went to 127.0.0.1 instead of the node Slurm names is caught.
TWO_NODES = {"n1": "127.0.0.2", "n2": "127.0.0.3"}


def _node_lines(root: Path, nodes: dict[str, str] | None) -> list[str]:
    """slurm.conf's node lines (and gres.conf): one node `localhost` with two fake GPUs, or `nodes` (one CPU
    each, no GPUs), each slurmd on a port of its own."""
    if nodes is None:
        (root / "gres.conf").write_text(f"NodeName=localhost Name=gpu File={root}/dev/nvidia[0-1]\n")
        return [f"SlurmdPort={free_port()}", "NodeName=localhost CPUs=2 RealMemory=1000 Gres=gpu:2 State=UNKNOWN"]
    return [f"NodeName={name} NodeHostname=localhost NodeAddr={addr} Port={free_port()} CPUs=1 RealMemory=1000 "
            "State=UNKNOWN" for name, addr in nodes.items()]


# Where a cgroup v1 memory controller is mounted (Slurm's cgroup/v1 plugin needs no systemd, unlike its v2 one).
MEMORY_CGROUP = Path("/sys/fs/cgroup/memory")


def memory_cgroup_available() -> str | None:
    """Why Slurm cannot confine jobs' memory in cgroups here (None when it can)."""
    if not (MEMORY_CGROUP / "memory.limit_in_bytes").exists():
        return f"no cgroup v1 memory controller at {MEMORY_CGROUP} (Slurm 22.05's cgroup/v2 plugin needs systemd)"
    if not os.access(MEMORY_CGROUP, os.W_OK):
        return f"{MEMORY_CGROUP} is not writable here"
    return None


def _memory_lines(root: Path, memory_limits: str | None) -> list[str]:
    """slurm.conf's lines (and cgroup.conf) for how --mem is enforced: not at all (None); by polling each step's
    memory every second, slurmstepd killing it (`poll`: the job ends FAILED); or by the kernel in the job's memory
    cgroup (`cgroup`: the job ends OUT_OF_MEMORY). Slurm refuses both at once."""
    if memory_limits == "cgroup":
        (root / "cgroup.conf").write_text(f"CgroupPlugin=cgroup/v1\nCgroupMountpoint={MEMORY_CGROUP.parent}\n"
                                          "ConstrainRAMSpace=yes\nConstrainSwapSpace=yes\nAllowedSwapSpace=0\n"
                                          "ConstrainCores=no\nConstrainDevices=no\n")
        return ["TaskPlugin=task/cgroup", "JobAcctGatherType=jobacct_gather/none"]
    if memory_limits == "poll":
        return ["TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/linux", "JobAcctGatherFrequency=task=1",
                "JobAcctGatherParams=OverMemoryKill"]
    return ["TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none"]


def _write_conf(root: Path, nodes: dict[str, str] | None, backfill_s: int, memory_limits: str | None,
                jobs_per_core: int) -> Path:
    conf = root / "slurm.conf"
    # Jobs that share one core (a fleet of light servers on a 2-core node): Slurm's OverSubscribe=FORCE:N.
    shared = f" OverSubscribe=FORCE:{jobs_per_core}" if jobs_per_core > 1 else ""
    conf.write_text("\n".join([
        "ClusterName=specmontest",
        "SlurmctldHost=localhost",
        f"SlurmctldPort={free_port()}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root}/munge/munge.socket",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
        f"SlurmctldPidFile={root}/slurmctld.pid",
        f"SlurmdPidFile={root}/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory" if memory_limits else "SelectTypeParameters=CR_Core",
        "SchedulerType=sched/backfill",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        *_memory_lines(root, memory_limits),
        "MpiDefault=none",
        "ReturnToService=2",
        "KillWait=2",
        "MinJobAge=300",
        # The backfill pass sets a pending job's expected start (every 30 s by default).
        f"SchedulerParameters=batch_sched_delay=0,bf_interval={backfill_s}",
        # A job in partition `urgent` preempts (cancels) jobs of `debug` on the nodes it needs: PREEMPTED.
        "PreemptType=preempt/partition_prio",
        "PreemptMode=CANCEL",
        "GresTypes=gpu",
        *_node_lines(root, nodes),
        f"PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP PriorityTier=1{shared}",
        f"PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP PriorityTier=2{shared}",
        "",
    ]))
    return conf


@contextmanager
def slurm_cluster(root: Path, nodes: dict[str, str] | None = None, unshared: Path | None = None,
                  backfill_s: int = 30, memory_limits: str | None = None,
                  jobs_per_core: int = 1) -> Iterator[SlurmCluster]:
    """Start a cluster under `root` (a fresh directory whose parents everyone may traverse: munged insists): the
    one node `localhost`, or `nodes` (name -> address, e.g. TWO_NODES); on exit every daemon and job of it is
    gone. `unshared`: a directory the nodes do not share with this machine (inside the cluster's mount namespace
    an empty tmpfs covers it, as a login node's home that the compute nodes do not mount). `backfill_s`: how often
    the backfill pass runs (Slurm's default, 30 s; it sets a pending job's expected start). `memory_limits`: a job
    over its --mem is killed, by slurmstepd's poll (`poll`) or in its memory cgroup (`cgroup`; see _memory_lines).
    `jobs_per_core`: how many jobs may share one core (1: a job's cores are its own, as Slurm's default)."""
    for sub in ("munge", "state", "spool", "log", "dev"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for path in (root, root / "munge"):
        path.chmod(0o755)   # munged refuses a socket directory others cannot reach
    for i in range(2):
        subprocess.run([_sbin("mknod"), "-m", "666", str(root / "dev" / f"nvidia{i}"), "c", "1", "3"], check=True)
    conf = _write_conf(root, nodes, backfill_s, memory_limits, jobs_per_core)
    subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={root}/munge/munge.key"], check=True,
                   capture_output=True)
    m = f"{root}/munge"
    start = (
        (f"mount -t tmpfs specmon-unshared {unshared} || exit 1; " if unshared is not None else "")
        + f"{_sbin('munged')} -S {m}/munge.socket --key-file={m}/munge.key --pid-file={m}/munged.pid "
        f"--log-file={m}/munged.log --seed-file={m}/munged.seed || exit 1; "
        f"{_sbin('slurmctld')} -D -f {conf} </dev/null >>{root}/log/ctld.out 2>&1 & "
        + "".join(f"{_sbin('slurmd')} -D -N {name} -f {conf} </dev/null >>{root}/log/slurmd-{name}.out 2>&1 & "
                  for name in (nodes or ["localhost"]))
        + "while :; do wait; sleep 1; done"
    )
    with open(root / "daemons.out", "wb") as out:
        process = subprocess.Popen(
            ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL", "bash", "-c", start],
            env={**os.environ, "SLURM_CONF": str(conf)}, stdin=subprocess.DEVNULL, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    cluster = SlurmCluster(root, conf, process)
    try:
        _wait_idle(cluster)
        yield cluster
    finally:
        # SIGKILL to unshare kills its child (--kill-child), the namespace's init: the kernel then ends every
        # process in the namespace, the daemons and each job's slurmstepd and tasks included.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        if memory_limits == "cgroup":   # the cgroups slurmd made (slurm_NODE/uid_0/...): empty ones go
            for path in sorted(MEMORY_CGROUP.glob("slurm_*/**/"), key=lambda p: -len(p.parts)):
                with contextlib.suppress(OSError):
                    path.rmdir()


def _wait_idle(cluster: SlurmCluster) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    state = ""
    while time.monotonic() < deadline:
        if cluster.process.poll() is not None:
            raise RuntimeError(f"the test Slurm's daemons ended at start\n{cluster.logs()}")
        state = cluster.run("sinfo", "-h", "-o", "%T", check=False).strip()
        if state == "idle":   # one line: every node idle
            return
        time.sleep(0.1)
    raise RuntimeError(f"the test Slurm's node is not idle after {START_TIMEOUT_S:.0f} s (sinfo: {state!r})\n"
                       f"{cluster.logs()}")
