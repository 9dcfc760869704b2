"""The load generator: runs in its own process with its own event loop."""
