"""Orchestration: the engine between the front ends (commands/, ui/) and the I/O (sources/, loadgen/), in three
floors:

    measure/   sweeps of a server, comparisons of several, the experiment runner (uses runs/)
    inspect/   a run's or host's environment and GPUs, and the serving view of ready runs (uses runs/)
    runs/      the run lifecycle: RunManager and its rooms (index, store, launch, stop, watch, reconcile, ...)

measure/ and inspect/ sit above runs/ and beside each other; runs/ imports neither (the import-linter contract
`orchestration-floors` in pyproject.toml checks it)."""
