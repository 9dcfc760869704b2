"""Slurm as a host kind, the pure part: a profile's job request, the `sbatch` command line that submits a run, the
job's state as `scontrol show job -o` prints it (and as `squeue` lists many jobs at once), and what an ended job
means for the run.

A Slurm profile runs its server as a batch job: the run's launch.sh (command, env, workdir, every argument quoted)
is the batch script, the job's output file is the run's server.log (so the log parser, readiness and failure
verdicts work as for any run), and the job's name `specmon-<run id>` lets any specmon find it again.

A multi-node job (`nodes = N`) is one job whose batch script (`nodes_script`) starts one task per node with `srun`;
each task runs the launch.sh of its node rank's run (`<run id>-n<SLURM_NODEID>`, its log that run's server.log).
Rank 0's node is the first of the job's node list, and its address (Slurm's NodeAddr) is the master address the
script exports as SPECMON_MASTER_ADDR: the command's `{master_addr}` becomes that variable when the script runs.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from specmon.model.logs.clean import escape_controls

# Keys of a profile's [profiles.NAME.slurm] table, each an sbatch option.
STRING_OPTIONS = {"partition": "--partition", "account": "--account", "qos": "--qos", "gres": "--gres",
                  "constraint": "--constraint", "reservation": "--reservation", "mem": "--mem",
                  "time": "--time"}
INTEGER_OPTIONS = {"gpus": "--gpus", "nodes": "--nodes", "cpus": "--cpus-per-task"}
KEYS = tuple(STRING_OPTIONS) + tuple(INTEGER_OPTIONS) + ("extra_args",)
# Options specmon sets itself: an extra_args entry naming one would break the run's log or its job name.
OWN_OPTIONS = ("--output", "-o", "--error", "-e", "--job-name", "-J", "--comment", "--parsable", "--chdir", "-D",
               "--wrap", "--open-mode", "--array", "-a", "--requeue", "--no-requeue")
JOB_PREFIX = "specmon-"
MASTER_ADDR_VAR = "SPECMON_MASTER_ADDR"   # rank 0's node address, set by a multi-node job's script for each rank
TIME_WARN_S = 300   # a running job this close to its time limit (or a quarter of the limit, if shorter) is warned of

_TIME = re.compile(r"\d+(?::\d{1,2}){0,2}|\d+-\d{1,2}(?::\d{1,2}){0,2}")
_MEM = re.compile(r"\d+[KMGT]?", re.IGNORECASE)

# Job states (squeue/scontrol names) while the job is queued or holds its allocation.
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUED",
                 "REQUEUE_HOLD", "REQUEUE_FED", "SIGNALING", "STAGE_OUT", "RESV_DEL_HOLD", "STOPPED")


class SlurmEnd(str, enum.Enum):
    """What Slurm said ended a run's job, when the end was Slurm's doing and not the server's. A `str` enum: a member
    equals its word, the failure kind run records and `status --json` keep."""

    TIMEOUT = "timeout"
    NODE_FAIL = "node_fail"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"            # cancelled outside specmon
    BOOT_FAIL = "boot_fail"
    DEADLINE = "deadline"
    OUT_OF_MEMORY = "oom"              # Slurm's memory limit (the job's state, or slurmstepd's kill in its output)
    NO_SHARED_FS = "no_shared_fs"      # the job's node cannot see the run directory

    def __str__(self) -> str:
        return self.value


# Ended jobs whose end is Slurm's doing, not the server's: each is its own verdict (kind, what it means).
SLURM_ENDS = {
    "TIMEOUT": (SlurmEnd.TIMEOUT, "reached its time limit"),
    "NODE_FAIL": (SlurmEnd.NODE_FAIL, "ended because its node failed"),
    "PREEMPTED": (SlurmEnd.PREEMPTED, "was preempted"),
    "CANCELLED": (SlurmEnd.CANCELLED, "was cancelled outside specmon (scancel)"),
    "BOOT_FAIL": (SlurmEnd.BOOT_FAIL, "ended: its node failed to boot"),
    "DEADLINE": (SlurmEnd.DEADLINE, "reached its deadline"),
    "OUT_OF_MEMORY": (SlurmEnd.OUT_OF_MEMORY, "ran out of memory (Slurm's memory limit)"),
}


@dataclass(frozen=True)
class SlurmRequest:
    """What a profile asks Slurm for; None / () where the cluster's default applies."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None            # sbatch --time: MIN, MIN:SEC, H:M:S, D-H, D-H:M, D-H:M:S
    gpus: int | None = None
    gres: str | None = None
    nodes: int | None = None
    cpus: int | None = None            # --cpus-per-task
    mem: str | None = None             # --mem: 64G, 500M, ...
    constraint: str | None = None
    reservation: str | None = None
    extra_args: tuple[str, ...] = ()


def time_problem(value: str) -> str | None:
    """Why `value` is no sbatch --time (None when it is one)."""
    if value == "UNLIMITED" or _TIME.fullmatch(value):
        return None
    return "must be a Slurm time limit: MINUTES, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS"


def name_problem(value: str) -> str | None:
    """Why `value` cannot be a partition, account, QOS, GRES, constraint or reservation name."""
    return None if value.isprintable() and not any(c.isspace() for c in value) else "must be one word"


def mem_problem(value: str) -> str | None:
    return None if _MEM.fullmatch(value) else "must be a size such as 64G, 500M or 8000 (MB)"


def extra_arg_problem(arg: str) -> str | None:
    """Why an extra_args entry cannot be passed to sbatch (None when it can)."""
    if not arg.startswith("-"):
        return f"each entry must be an sbatch option starting with '-', got {arg!r} (write --opt=value)"
    name = arg.split("=", 1)[0]
    if not name.startswith("--"):
        name = name[:2]   # a short option with its value attached: -ofile
    # sbatch takes any unambiguous start of a long option's name for it (--outp is --output).
    own = name if name in OWN_OPTIONS else next(
        (option for option in OWN_OPTIONS if len(name) > 2 and name.startswith("--") and option.startswith(name)), None)
    if own is not None:
        spelled = name if own == name else f"{name} (sbatch reads it as {own})"
        return f"{spelled} is set by specmon (the job's output is the run's log; its name finds the job again)"
    return None


def job_name(run_id: str) -> str:
    return JOB_PREFIX + run_id


def sbatch_argv(request: SlurmRequest, run_id: str, run_dir: str, script: str) -> list[str]:
    """The sbatch command that submits `script` as the run's job: its output is the run's server.log, run in the
    run directory; `--parsable` prints the job id. `--no-requeue`: a job whose node fails ends as NODE_FAIL (the
    run's verdict), rather than going back to the queue and starting the server again under the same run."""
    argv = ["sbatch", "--parsable", f"--job-name={job_name(run_id)}", f"--comment=specmon:{run_id}",
            f"--output={run_dir}/server.log", "--open-mode=append", f"--chdir={run_dir}", "--no-requeue"]
    for key, option in {**STRING_OPTIONS, **INTEGER_OPTIONS}.items():
        value = getattr(request, key)
        if value is not None:
            argv.append(f"{option}={value}")
    return argv + list(request.extra_args) + [script]


def nodes_script(run_id: str, runs_root: str, nnodes: int) -> str:
    """The batch script of a multi-node job (see the module docstring). Node rank r's run directory is
    `<runs_root>/<run_id>-n<r>`; srun's `SLURM_NODEID` picks it, so the rank is Slurm's own."""
    q = shlex.quote
    task = ('d="$1-n$SLURM_NODEID"; '
            f'echo "specmon: node rank $SLURM_NODEID on $SLURMD_NODENAME (master ${MASTER_ADDR_VAR})" >> "$d/server.log"; '
            'exec sh "$d/launch.sh" >> "$d/server.log" 2>&1')
    return "\n".join([
        "#!/bin/sh",
        f"# specmon multi-node run {run_id}: one task per node, node rank = SLURM_NODEID",
        'master=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        """addr=$(scontrol show node -o "$master" | sed -n 's/.* NodeAddr=\\([^ ]*\\).*/\\1/p')""",
        f'export {MASTER_ADDR_VAR}="${{addr:-$master}}"',
        f"exec srun --nodes={nnodes} --ntasks={nnodes} --ntasks-per-node=1 --kill-on-bad-exit=0 "
        f"sh -c {q(task)} sh {q(f'{runs_root}/{run_id}')}",
        "",
    ])


def parse_job_id(out: str) -> str | None:
    """The job id `sbatch --parsable` printed (`ID` or `ID;CLUSTER`), None when it printed none."""
    first = out.strip().split(";", 1)[0]
    return first if first.isdigit() else None


@dataclass(frozen=True)
class JobInfo:
    """One job as the controller sees it now."""

    job_id: str
    state: str                       # PENDING, RUNNING, TIMEOUT, ... (Slurm's words)
    reason: str | None = None        # why it waits (Priority, Resources, QOSMaxJobsPerUserLimit, ...)
    nodes: str | None = None         # the node list once it runs
    start: str | None = None         # Slurm's start time (an estimate while pending), as it prints it
    time_left_s: int | None = None   # before the time limit (None: unlimited or not running)
    time_limit_s: int | None = None  # None: unlimited
    exit_code: int | None = None     # of the batch script, once ended
    signal: int | None = None        # that ended it, once ended

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD")

    @property
    def running(self) -> bool:
        return self.active and not self.pending

    @property
    def near_time_limit(self) -> bool:
        """Running, and its time limit ends it soon: within TIME_WARN_S, or a quarter of the limit if that is less."""
        return (self.running and self.time_left_s is not None and self.time_limit_s is not None
                and self.time_left_s <= min(TIME_WARN_S, self.time_limit_s // 4))

    @property
    def ending(self) -> bool:
        """Its end has begun (COMPLETING: Slurm is ending its processes, at its time limit or otherwise; a busy
        node can stay there for seconds) or its time limit is near."""
        return self.state == "COMPLETING" or self.near_time_limit

    @property
    def start_epoch(self) -> float | None:
        """The start time as epoch seconds (Slurm prints the controller's local time), None when it has none."""
        try:
            return datetime.fromisoformat(self.start or "").timestamp()
        except ValueError:
            return None

    def describe(self) -> str:
        """One line for a card or `status`: `PENDING (Resources)`, `RUNNING on n1`, `TIMEOUT`."""
        if self.pending:
            text = f"{self.state} ({self.reason or 'None'})"
            if self.start and self.start not in ("N/A", "Unknown", "None"):
                text += f", start expected {self.start}"
            return text
        if self.running:
            text = f"{self.state} on {self.nodes or '?'}"
            if self.time_left_s is not None:
                text += f", {duration(self.time_left_s)} left"
            if self.near_time_limit:
                text += " before its time limit"
            return text
        return self.state


def duration(seconds: int) -> str:
    """12 s, 4 min 05 s, 2 h 03 min."""
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def slurm_seconds(text: str) -> int | None:
    """Seconds of a Slurm duration (`[D-]HH:MM:SS`, `MM:SS`); None for UNLIMITED, INVALID or anything else."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if m is None:
        return None
    days, hours, minutes, secs = (int(g) if g else 0 for g in m.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + secs


def _fields(line: str) -> Mapping[str, str]:
    """KEY=VALUE words of `scontrol show job -o` (values holding spaces keep only their first word); control
    characters in a value are shown escaped (`\\x1b`), never passed on to a terminal."""
    return {m.group(1): escape_controls(m.group(2)) for m in re.finditer(r"(?:^|\s)(\w+)=(\S*)", line)}


_JOB_ID = re.compile(r"\d+(?:[_+]\d+)?")
_STATE = re.compile(r"[A-Z][A-Z_]*")


def parse_scontrol_job(out: str) -> JobInfo | None:
    """The job `scontrol show job -o J` printed; None when it printed none that reads as one (no JobId and
    JobState, or not shaped as Slurm writes them)."""
    f = _fields(out.strip().splitlines()[0] if out.strip() else "")
    if not _JOB_ID.fullmatch(f.get("JobId", "")) or not _STATE.fullmatch(f.get("JobState", "")):
        return None
    state = f["JobState"]
    limit, run = slurm_seconds(f.get("TimeLimit", "")), slurm_seconds(f.get("RunTime", ""))
    code, _, sig = f.get("ExitCode", "").partition(":")
    nodes = f.get("NodeList", "")
    return JobInfo(
        job_id=f["JobId"], state=state,
        reason=f.get("Reason") if f.get("Reason") not in (None, "", "None") else None,
        nodes=nodes if nodes not in ("", "(null)") else None,
        start=f.get("StartTime"),
        time_left_s=max(0, limit - run) if limit is not None and run is not None and state == "RUNNING" else None,
        time_limit_s=limit,
        exit_code=int(code) if code.isdigit() and state not in ACTIVE_STATES else None,
        signal=int(sig) if sig.isdigit() and state not in ACTIVE_STATES else None,
    )


# What `squeue` prints of each job it lists, in scontrol's KEY=VALUE words (so parse_scontrol_job reads it): all
# that tells a queued or running job's state. An ended job's exit code and signal are scontrol's alone.
SQUEUE_FORMAT = "JobId=%i JobState=%T Reason=%r NodeList=%N StartTime=%S TimeLimit=%l RunTime=%M"


def squeue_argv(job_ids: Sequence[str]) -> list[str]:
    """The squeue command that lists `job_ids` (those still queued or running), one line each (SQUEUE_FORMAT)."""
    return ["squeue", "--noheader", f"--jobs={','.join(job_ids)}", f"--format={SQUEUE_FORMAT}"]


def parse_squeue_jobs(out: str) -> dict[str, JobInfo]:
    """Job id -> the job, of each line squeue printed in SQUEUE_FORMAT that reads as one."""
    jobs = (parse_scontrol_job(line) for line in out.splitlines())
    return {job.job_id: job for job in jobs if job is not None}


def parse_node_addresses(out: str) -> dict[str, str]:
    """Node name -> NodeAddr (the address Slurm itself reaches the node at) from `scontrol show node -o`."""
    addresses = {}
    for line in out.splitlines():
        f = _fields(line)
        if f.get("NodeName"):
            addresses[f["NodeName"]] = f.get("NodeAddr") or f["NodeName"]
    return addresses


# slurmstepd's words in a job's output when it kills a step over its --mem (jobacct_gather with OverMemoryKill, as
# seen from Slurm 22.05: the job then ends FAILED, not OUT_OF_MEMORY, which only the cgroup plugin reports).
MEMORY_KILL = "Exceeded job memory limit"


def over_memory(job: JobInfo, last_lines: Sequence[str]) -> tuple[SlurmEnd, str] | None:
    """(failure kind, message) of a job slurmstepd killed over its memory limit, told by its output's last lines."""
    if not any(MEMORY_KILL in line for line in last_lines):
        return None
    kind, what = SLURM_ENDS["OUT_OF_MEMORY"]
    return kind, f"Slurm job {job.job_id} {what}: slurmstepd killed it ({MEMORY_KILL.lower()}; Slurm says {job.state})"


def unseen_run_dir(job: JobInfo, host: str, run_dir: str) -> tuple[SlurmEnd, str]:
    """(failure kind, message) of a job that ended without starting the run's wrapper (no pid file): its node could
    not open the run's log or script, because the run directory is not on a file system it shares with `host`
    (Slurm says FAILED, JobLaunchFailure)."""
    said = job.state + (f", {job.reason}" if job.reason else "")
    return SlurmEnd.NO_SHARED_FS, (f"Slurm job {job.job_id} ended ({said}) before the run started: node {job.nodes or '?'} "
                            f"cannot see the run directory {run_dir} on {host}; it must be on a file system {host} "
                            "and the compute nodes share (set XDG_STATE_HOME to one on it)")


def slurm_failure(job: JobInfo) -> tuple[SlurmEnd, str] | None:
    """(failure kind, message) when an ended job's end was Slurm's doing; None when the server's own exit decides."""
    if job.state not in SLURM_ENDS:
        return None
    kind, what = SLURM_ENDS[job.state]
    return kind, f"Slurm job {job.job_id} {what}" + (f" ({job.reason})" if job.reason else "")
