"""An experiment: its state file (experiment), the verdict over its repeats (verdict) and its summary as JSON,
CSV and Markdown (report)."""
