"""Looking at what runs on a host without changing it: a run's or profile's environment, versions and GPUs
(`environment`: `specmon env`, `diff`, `gpus` and the TUI's GPU/env pane) and the serving view of every ready
run's `/metrics` (`serving`). Uses runs/ and never the other way round."""
