"""One way to write a size: binary units, exact caps as whole numbers."""

from __future__ import annotations

import pytest

from app.core.units import GIB, KIB, MIB, format_bytes


@pytest.mark.parametrize(("n", "words"), [
    (0, "0 bytes"), (1, "1 byte"), (512, "512 bytes"), (64 * KIB, "64 KiB"), (1500, "1 KiB"), (8 * MIB, "8 MiB"),
    (MIB + MIB // 2, "1.5 MiB"), (16_500_000_000, "15.4 GiB"), (24 * GIB, "24 GiB"), (GIB - 1, "1024.0 MiB"),
])
def test_sizes_in_binary_units(n: int, words: str) -> None:
    assert format_bytes(n) == words
