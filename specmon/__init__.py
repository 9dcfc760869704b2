"""specmon: a terminal monitor for people who run large LLM inference servers.

Its floors, top to bottom (docs/development.md has the table; import-linter checks it):
    cli, commands/   the `specmon` command, one module per subcommand (front end)
    ui/              the Textual app (front end; the only place Textual is imported)
    orchestration/   the engine: runs/ (the run lifecycle), measure/ (sweeps, experiments), inspect/ (environment,
                     GPUs, serving view)
    sources/, loadgen/, sim/   I/O, side by side: reaching hosts and servers; the load generator; the simulated server
    model/           pure rules and data (stdlib only, no I/O)
    errors           the error types every floor raises"""

__version__ = "0.1.0"
