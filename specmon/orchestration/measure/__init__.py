"""Measuring servers: the sweep runner (`sweep`: one server, one load-generator child), sweeps of several ready
runs one after another and the URL of a profile's ready run (`comparison`) and the unattended, resumable A/B
experiment runner (`experiment`). Uses runs/ (the manager, readiness) and never the other way round."""
