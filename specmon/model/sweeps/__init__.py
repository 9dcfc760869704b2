"""A sweep's figures and files: per-level statistics from per-request records (sweepstats), specmon's result
files (results), other load generators' formats read and written (formats: one adapter per format) and comparing
sweeps (compare: the ratio per level, the crossover)."""
