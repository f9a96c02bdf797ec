"""The only place that touches llama.cpp through ctypes: owning wrappers over its C handles."""
