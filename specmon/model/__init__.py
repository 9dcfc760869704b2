"""Pure, synchronous logic: config, events, log parser, run-state reducer, sweep statistics. Stdlib only."""
