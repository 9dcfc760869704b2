"""Facts about a machine (a host runs live on), parsed from what it prints: GPUs (gpu: nvidia-smi), a server's
environment and set-up (env), processes and ports (procfs: /proc text), and how specmon starts its own Python
children (interpreter)."""
