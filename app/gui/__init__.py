"""The PySide6 desktop window over the Qt-free core; nothing here touches ctypes or llama_cpp."""
