"""A run as pure rules: its lifecycle status (runstatus), why it failed (failure), the state reduced from its log
events (runstate), multi-node runs (multinode) and Slurm as a host kind (slurm)."""
