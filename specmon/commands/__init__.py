"""Headless front ends, one module per `specmon` subcommand (`launch`, `stop`, `restart`, `status`, `wait`,
`logs`, `forget`, `metrics`, `env`, `diff`, `gpus`, `sweep`, `compare`, `export`, `report`, `experiment`,
`logscan`, `profiles`, `trust`, `sim`, `demo`): each parses its arguments, calls the engine (a RunManager,
orchestration's measure/ and inspect/) and prints. They present, never orchestrate.

Shared by several: `_lifecycle` (the profiles file, a RunManager per command, progress and stop reports),
`_bulk` (stop/restart over a --profile/--host scope), `_args` (argument types), `_table` (tables)."""
