"""Opening a file the user named, when only a regular file makes sense (a history export, a text corpus).

A device (``/dev/zero`` never ends), a FIFO (its ``open`` waits for a writer, deaf to Ctrl-C) or a folder is
refused before a byte is read: the file is opened without blocking (``O_NONBLOCK``) and checked with ``fstat`` on
the open descriptor, so it cannot be swapped between the check and the read. Qt-free.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO


class NotRegularFile(OSError):
    """The path names a device, a pipe, a socket or a folder."""


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: Path) -> tuple[BinaryIO, int]:
    """``path`` opened for reading in binary, and its size. Raises :class:`NotRegularFile` (its ``strerror`` says
    what the path is instead) or the ``OSError`` of the open (missing, permission denied)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(0, kind_of(info.st_mode), str(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return handle, info.st_size


_JSON_STRING = re.compile(rb'"(?:[^"\\]+|\\.)*"')


def json_shape_problem(raw: bytes, max_containers: int, max_values: int) -> str | None:
    """Why parsing ``raw`` as JSON would build more Python objects than ``max_containers`` lists and objects or
    ``max_values`` values in all, found before parsing (``json.loads`` of 250 MiB of ``[],`` builds 80 million
    lists, gigabytes); None when it stays within both. Brackets and commas inside strings do not count."""
    def over(text: bytes) -> str | None:
        containers = text.count(b"[") + text.count(b"{")
        if containers > max_containers:
            return f"it holds more than {max_containers:,} lists and objects"
        if text.count(b",") + containers > max_values:
            return f"it holds more than {max_values:,} values"
        return None

    if over(raw) is None:  # counted with the strings' characters too: an upper bound, so certainly within
        return None
    return over(_JSON_STRING.sub(b'""', raw))
