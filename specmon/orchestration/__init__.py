"""Orchestration: run controller, sweep runner. Uses sources and model."""
