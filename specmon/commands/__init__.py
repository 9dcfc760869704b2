"""Headless command front ends, one module per `specmon` subcommand."""
