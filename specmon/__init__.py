"""specmon: a terminal monitor for people who run large LLM inference servers."""

__version__ = "0.1.0"
