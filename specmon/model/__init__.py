"""Pure, synchronous logic (stdlib only, and tomli on Python 3.10): no process, socket or screen, and no file written.
Its folders: config (profiles.toml, the key table), logs (launch-log parsing), runs (status, failure, run-state
reducer, multi-node, Slurm), machine (facts about a machine parsed from what it prints: GPUs, environment, /proc),
server (/metrics, acceptance), workload (arrivals, prompt sets, goodput), sweeps (statistics, result files, peer
formats, comparison), experiments (state, verdict, report), charts (chart series, level rows) and text (numbers,
text files, redaction)."""
