"""`specmon sim`: a simulated SGLang/vLLM server for machines with no GPU."""
