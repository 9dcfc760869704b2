"""I/O sources, in plain asyncio (no Textual; sources/, loadgen/ and sim/ import none of each other).

How a host is reached:
    transport      the Transport protocol (shell commands, streams, files)   local   this machine
    ssh            over SSH (asyncssh), one shared connection per host        sshhttp HTTP through SSH channels
    sshlib         asyncssh, imported once without cryptography's DSA warnings
    sshwrites      an SSH link's packets of one moment sent in one write to its socket
    timelimit      time limits on awaits that never lose a cancellation
What the run engine does on a host, through its Transport:
    hostshell      HostOps, one host's shell as the run engine uses it: run directories, the launch wrapper,
                   processes, ports, launch locks
    slurm          Slurm's commands (submit, job state, nodes, cancel)
    tailer, follow following a run's log from a byte offset
    env, startup_probe   a server's environment        gpu   the GPU probe (nvidia-smi)
What a server answers, and files on disk:
    health         HTTP probes (/health, a test completion, server info)   scrape  /metrics, kept alive
    relayread      an SSH host's /metrics reads of one moment in one batch, and the serving view's standing
                   reads, through the program `metricsrelay` kept running on the host (a stdlib-only python3 script)
    resultfiles    result files and folders (specmon's and other load generators'), one read-error rule
    experimentfiles  an experiment's directory: its state, passes, done levels, acceptance"""
