"""Looking at what runs on a host without changing it: a run's or profile's environment, versions and GPUs
(`environment`: `specmon env`, `diff`, `gpus` and the TUI's GPU/env pane), what an ended run's log says
(`runlog`: the TUI's card of a run that ended before it watched) and the serving view of every ready run's
`/metrics` (`serving`). Uses runs/ and never the other way round."""
