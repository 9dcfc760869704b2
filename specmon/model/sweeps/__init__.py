"""A sweep's figures and files: per-level statistics from per-request records (sweepstats), specmon's result
files (results), other load generators' files read and written (interop, interop_guidellm) and comparing
sweeps (compare: the ratio per level, the crossover)."""
