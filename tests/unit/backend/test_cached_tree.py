"""Which ninja a cached CMake build tree was configured with: a tree whose ninja is gone is configured again."""

from __future__ import annotations

from pathlib import Path

from app.backend.builder import _configured_make_program


def test_the_recorded_make_program_is_read_from_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "CMakeCache.txt"
    cache.write_text("# comment\nCMAKE_BUILD_TYPE:STRING=Release\n"
                     "CMAKE_MAKE_PROGRAM:UNINITIALIZED=/gone/venv/bin/ninja\nGGML_CUDA:BOOL=OFF\n")
    assert _configured_make_program(cache) == "/gone/venv/bin/ninja"
    cache.write_text("CMAKE_BUILD_TYPE:STRING=Release\n")
    assert _configured_make_program(cache) is None
    assert _configured_make_program(tmp_path / "missing.txt") is None
