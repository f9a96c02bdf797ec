"""Sizes in words, one way everywhere: binary units (KiB, MiB, GiB), as the file managers and nvidia-smi count.

The window, the CLI and the messages once formatted bytes with four helpers and inline divisions that mixed GB
and GiB, so one file read as 16.5 GB on one page and 15.4 GiB on the next.
"""

from __future__ import annotations

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30


def format_bytes(n: float) -> str:
    """``512 bytes``, ``64 KiB``, ``4 MiB``, ``1.5 MiB``, ``16.5 GiB``: whole numbers where the size is exact
    (a cap such as 8 MiB), one decimal otherwise (KiB without)."""
    n = int(n)
    for unit, size in (("GiB", GIB), ("MiB", MIB)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    if n >= KIB:
        return f"{n // KIB} KiB" if n % KIB == 0 else f"{n / KIB:.0f} KiB"
    return f"{n} bytes" if n != 1 else "1 byte"


def format_tokens(n: int) -> str:
    """A token count as a person reads it on a meter: ``512``, ``3.1k``, ``32k``, ``262k``."""
    if n < 1000:
        return str(n)
    if n < 10_000:
        text = f"{n / 1000:.1f}"
        return (text[:-2] if text.endswith(".0") else text) + "k"
    return f"{n / 1000:.0f}k" if n % 1024 else f"{n // 1024}k"
