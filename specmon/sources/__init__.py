"""I/O sources: transports, log tailer, HTTP probes, GPU/env probes. Plain asyncio, no Textual."""
