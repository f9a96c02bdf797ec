"""GGUF tools: inspect files, write qwen35 models, build FastMTP draft sidecars, make the demo model.

Qt-free and free of native code: everything here reads and writes files through the ``gguf`` package.
"""
