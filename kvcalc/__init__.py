"""kvcalc: the KV cache of large language models, byte for byte as vLLM sizes it."""

__version__ = "0.1.0"
