"""An experiment: its state file (experiment), the verdict over its repeats (verdict), a tuning grid's best setting
per load band (bands), the time it has left (eta) and its summary as JSON, CSV and Markdown (report)."""
