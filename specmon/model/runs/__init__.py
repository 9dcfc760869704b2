"""A run as pure rules: its lifecycle status (runstatus), what specmon remembers of it between processes
(record), why it failed (failure), how it ended (verdicts), the state reduced from its log events (runstate),
multi-node runs (multinode), Slurm as a host kind (slurm), which runs a fleet command acts on (selection) and the
fleet at a glance (fleet)."""
