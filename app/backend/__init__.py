"""The llama-cpp-python backend: pinned source, our d2t patch, the build, the installed builds."""
