"""FastMTP Chat: local Qwen3.8-27B chat with the FastMTP d2t draft sidecar on a patched llama.cpp."""

__version__ = "0.1.0"
