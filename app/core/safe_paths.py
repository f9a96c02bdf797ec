"""Names from outside are names, never paths: the one validator, the one containment check and the one unpacker.

Every identifier that arrives in a file or over the network and becomes part of a path (a backend id, a
repository name (:func:`check_repo`), a release or archive file name) goes through :func:`check_name`: a
fixed character set (ASCII letters, digits and ``. _ + -``), at most :data:`MAX_NAME` characters, no
separators, no ``.``/``..`` and no leading dot (the app's own working folders start with one), nothing
Windows would read as a drive, a stream or a device. :func:`child` joins such a name to its folder and
:func:`inside` checks, with every link resolved, that a destination stays strictly inside its folder before
anything is moved or deleted there.

:func:`extract_tar` unpacks an archive member by member under :class:`UnpackLimits` (total bytes and member
count, refused at the header, before the bytes are written), and refuses member paths that climb or are
absolute, links that could lead out of the folder (absolute, or with a ``..`` anywhere in the target), hard
links to anything but a file earlier in the archive, members written through an earlier file or link, and
anything that is not a regular file, a folder or a link (FIFOs, devices, sparse files).

Writes that cannot be redirected: :func:`open_new` creates a file of a fixed name without following a link and
only when nothing else is there, :func:`open_existing_or_new` reopens a partial download only when it is a plain
file of its own, and :func:`new_temporary` / :func:`write_replacing` / :func:`copy_replacing` write under a unique
random name and rename it into place, for every file written in a folder a user or a download names.

Every refusal is an :class:`~app.core.errors.UnsafeInputError` (CLI exit code 4) that names the source, the value
and the reason. docs/security.md lists where each boundary is checked. Qt-free.
"""

from __future__ import annotations

import contextlib
import errno
import lzma
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app.core.errors import UnsafeInputError

MAX_NAME = 200
"""The longest name accepted (a file system allows 255 bytes; a ``.partial`` or ``.old-`` affix must still fit)."""
_NAME = re.compile(r"[A-Za-z0-9._+-]+")
_BAD_CHAR = re.compile(r"[^A-Za-z0-9._+-]")
_WINDOWS_DEVICE = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9]|CONIN\$|CONOUT\$)(\..*)?", re.IGNORECASE)
_MAX_MEMBER_PATH = 1024
_MAX_DEPTH = 32
_MAX_HEADER = 1 << 16  # a GNU long name or a PAX header: tarfile reads it whole into memory before we see it

DAMAGED_ARCHIVE = (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error)
"""What reading a damaged or truncated compressed tar raises (xz broken mid-stream: ``LZMAError``; cut short:
``EOFError``; gzip: ``zlib.error``): callers catch these and say the archive is damaged, in words."""

UNPACK_FLOOR_BYTES = 512 << 20
UNPACK_RATIO = 16
UNPACK_MAX_BYTES = 16 << 30
UNPACK_MAX_MEMBERS = 20_000

DEFAULT_ADVICE = ("Nothing was written. Names that come from a file or the network must be plain names; this looks "
                  "like a path-traversal attempt or a broken file: do not use it, and tell whoever made it.")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}… ({len(text)} characters)"


def _problem(name: object) -> str | None:
    """Why ``name`` is not a plain name, or None when it is one."""
    if not isinstance(name, str):
        return f"it is a {type(name).__name__}, not text"
    if not name:
        return "it is empty"
    if len(name) > MAX_NAME:
        return f"it is {len(name)} characters long, at most {MAX_NAME} are allowed"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if name in (".", ".."):
        return f"{name!r} names a folder, not an entry in it"
    if name.startswith("."):
        return "it starts with a dot (hidden entries and the app's own working folders do)"
    if ":" in name:
        return "it contains ':', a drive letter or a file stream on Windows"
    bad = _BAD_CHAR.search(name)
    if bad is not None or not _NAME.fullmatch(name):
        char = bad.group(0) if bad is not None else name
        return f"it contains {char!r}; only ASCII letters, digits and . _ + - are allowed"
    if name.endswith("."):
        return "it ends with a dot, which Windows drops"
    if _WINDOWS_DEVICE.fullmatch(name):
        return "it is a device name on Windows"
    return None


def is_name(name: object) -> bool:
    """Whether ``name`` would pass :func:`check_name` (for state files that are ignored rather than refused)."""
    return _problem(name) is None


def check_name(name: object, what: str, source: str, advice: str = DEFAULT_ADVICE) -> str:
    """``name`` when it is a plain name (see the module's words), else an :class:`UnsafeInputError`.

    ``what`` says what the name is ("backend id", "file name"), ``source`` where it came from (a file name, a
    URL); both appear in the message.
    """
    reason = _problem(name)
    if reason is not None:
        raise UnsafeInputError(f"{source} names the {what} {_shown(name)}, which is not a plain {what}: {reason}.",
                               advice)
    assert isinstance(name, str)
    return name


def check_repo(repo: object, source: str, advice: str = DEFAULT_ADVICE) -> str:
    """A hub repository id, ``owner/name`` (or a bare ``name``), each part a plain name (:func:`check_name`); it
    becomes a folder name (``owner--name``), so it is refused like one. Returned unchanged."""
    parts = repo.split("/") if isinstance(repo, str) else [repo]
    reasons = [f"{_shown(part)}: {why}" for part in parts if (why := _problem(part)) is not None]
    if len(parts) > 2:
        reasons = [f"it has {len(parts) - 1} slashes"]
    if reasons:
        raise UnsafeInputError(f"{source} names the repository {_shown(repo)}, which is not a plain owner/name: "
                               f"{reasons[0]}.", advice)
    assert isinstance(repo, str)
    return repo


def inside(parent: Path, path: Path, what: str, advice: str = DEFAULT_ADVICE) -> Path:
    """``path`` when, with every link resolved, it lies strictly inside ``parent``; else an :class:`UnsafeInputError`.

    Call it on a destination before anything is moved, replaced or deleted there.
    """
    root = os.path.realpath(parent)
    real = os.path.realpath(path)
    if real == root or not real.startswith(root.rstrip(os.sep) + os.sep):
        raise UnsafeInputError(f"The {what} {path} is outside {parent} (it resolves to {real}); nothing was moved "
                               "or deleted.", advice)
    return path


def child(parent: Path, name: object, what: str, source: str, advice: str = DEFAULT_ADVICE) -> Path:
    """``parent / name`` for a plain ``name`` (:func:`check_name`) that stays inside ``parent`` (:func:`inside`)."""
    return inside(parent, parent / check_name(name, what, source, advice), what, advice)


# ----------------------------------------------------------------------------- writing where others may write

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_WRITE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
_WRITE_ON = (os.O_WRONLY | os.O_CREAT | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
             | getattr(os, "O_CLOEXEC", 0))  # O_NONBLOCK: a FIFO fails at once instead of waiting for a reader
LINK_ADVICE = ("Nothing was written through it. Something other than the app put a link (or another kind of entry) "
               "where the app writes its own files: remove it, and check who else can write to that folder.")


def _not_a_file(path: Path, what: str, kind: str) -> UnsafeInputError:
    return UnsafeInputError(f"The {what} {path} is {kind}, not a file the app wrote; the app does not write through "
                            "it.", LINK_ADVICE)


def _entry_problem(mode: int, links: int) -> str | None:
    """Why an entry found where the app writes its own file must not be written through, or None when it is a plain
    file (a leftover of an interrupted run)."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if not stat.S_ISREG(mode):
        return "not a regular file"
    if links > 1:
        return "a hard link to another file"
    return None


def open_new(path: Path, what: str, mode: int = 0o644) -> BinaryIO:
    """``path`` created anew for writing in binary: never through a link (``O_NOFOLLOW``), never into a file that
    is already there (``O_EXCL``). A plain file left there (an interrupted run's) is removed first; a link, a hard
    link, a FIFO or a folder is refused with an :class:`UnsafeInputError` that names it (``what`` says what the
    file is). Use it for every temporary or final file with a fixed name in a folder a user or a download names."""
    for _ in range(2):
        try:
            return os.fdopen(os.open(path, _WRITE_NEW, mode), "wb")
        except FileExistsError:
            info = os.lstat(path)
            kind = _entry_problem(info.st_mode, info.st_nlink)
            if kind is not None:
                raise _not_a_file(path, what, kind) from None
            path.unlink()
    raise _not_a_file(path, what, "being written by another program at the same time")


def open_existing_or_new(path: Path, what: str, mode: int = 0o644) -> int:
    """A write descriptor on ``path`` (created when missing) to resume a partial download: never through a link,
    and only a plain file with no other name (a hard link planted there would write into another file)."""
    try:
        fd = os.open(path, _WRITE_ON, mode)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK) or path.is_symlink():
            raise _not_a_file(path, what, "a symbolic link") from None
        if exc.errno == errno.ENXIO:
            raise _not_a_file(path, what, "not a regular file") from None
        raise
    info = os.fstat(fd)
    kind = _entry_problem(info.st_mode, info.st_nlink)
    if kind is not None:
        os.close(fd)
        raise _not_a_file(path, what, kind)
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd


def new_temporary(final: Path, mode: int = 0o644) -> tuple[Path, BinaryIO]:
    """A new file beside ``final`` under a unique random hidden name (created exclusively, not through a link: a
    name planted in advance can never be the one used), open for writing; rename it over ``final`` when it is
    complete (``os.replace`` replaces a link at ``final`` itself, never what it points to)."""
    fd, name = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".incoming")
    with contextlib.suppress(OSError):
        os.fchmod(fd, mode)
    return Path(name), os.fdopen(fd, "wb")


def write_replacing(final: Path, data: bytes, mode: int = 0o644) -> None:
    """Write ``data`` as ``final`` atomically through :func:`new_temporary` (flushed to disk before the rename)."""
    tmp, handle = new_temporary(final, mode)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def copy_replacing(src: Path, final: Path, mode: int = 0o644) -> None:
    """Copy ``src`` to ``final`` atomically through :func:`new_temporary`, so a link planted at any name in
    ``final``'s folder is never written through and ``final`` ends up a file of its own."""
    tmp, handle = new_temporary(final, mode)
    try:
        with handle, src.open("rb") as reader:
            shutil.copyfileobj(reader, handle, 1 << 20)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


# ----------------------------------------------------------------------------- unpacking


@dataclass(frozen=True)
class UnpackLimits:
    """The most an archive may unpack to: total bytes of its files and number of members."""

    max_bytes: int
    max_members: int = UNPACK_MAX_MEMBERS

    @classmethod
    def for_archive(cls, archive_bytes: int) -> UnpackLimits:
        """Limits for an archive of this size when nothing signed says what it unpacks to: :data:`UNPACK_RATIO`
        times its size (at least :data:`UNPACK_FLOOR_BYTES`, at most :data:`UNPACK_MAX_BYTES`). A backend's
        libraries compress three to five times; a 2.5 MB archive that would unpack to 3 GiB is refused."""
        return cls(min(UNPACK_MAX_BYTES, max(UNPACK_FLOOR_BYTES, UNPACK_RATIO * max(0, archive_bytes))))


@dataclass(frozen=True)
class Extracted:
    bytes: int
    members: int


class _HugeHeader(Exception):
    """A GNU long name or PAX header larger than :data:`_MAX_HEADER` (raised before tarfile reads it)."""


class _CappedTarInfo(tarfile.TarInfo):
    """tarfile reads a long-name or PAX header's whole body into memory: refuse a huge one first."""

    def _proc_member(self, tar: tarfile.TarFile) -> Any:
        special = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                   tarfile.SOLARIS_XHDTYPE)
        if self.type in special and self.size > _MAX_HEADER:
            raise _HugeHeader(f"a {self.size}-byte extended header")
        return super()._proc_member(tar)  # type: ignore[misc]


def _split(path: str) -> tuple[list[str], str | None]:
    """The components of an archive path, or the reason it is not one that stays below its folder."""
    if not path:
        return [], "it is empty"
    if len(path) > _MAX_MEMBER_PATH:
        return [], f"it is {len(path)} characters long"
    if path.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", path):
        return [], "it is an absolute path"
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if not parts:
        return [], "it names the folder itself"
    if ".." in parts:
        return [], "it climbs out with '..'"
    if len(parts) > _MAX_DEPTH:
        return [], f"it is {len(parts)} folders deep"
    for part in parts:
        reason = _problem(part)
        if reason is not None:
            return [], f"{_shown(part)}: {reason}"
    return parts, None


def extract_tar(archive: Path, dest: Path, limits: UnpackLimits, source: str,
                advice: str = DEFAULT_ADVICE) -> Extracted:
    """Unpack the tar archive (any compression tarfile reads) into ``dest``, member by member, refusing whatever
    could leave ``dest`` or exceed ``limits`` (see the module's words) before it is written.

    A refusal may leave what was unpacked before it in ``dest``: unpack into a staging folder that is removed.

    Raises:
        UnsafeInputError: a refused member or limit. tarfile.TarError, EOFError, OSError: the archive is damaged
            or cannot be read or written (the caller says so in its own words).
    """
    def refuse(what: str) -> UnsafeInputError:
        return UnsafeInputError(f"{source} {what}.", advice)

    dest.mkdir(parents=True, exist_ok=True)
    total = count = 0
    kinds: dict[str, str] = {}  # member path -> "dir", "file" or "link", for every path written so far
    try:
        with tarfile.open(archive, "r:*", tarinfo=_CappedTarInfo) as tar:
            for member in tar:
                count += 1
                if count > limits.max_members:
                    raise refuse(f"holds more than {limits.max_members} members")
                parts, reason = _split(member.name)
                if reason is not None:
                    raise refuse(f"holds the member {_shown(member.name)}, which would not stay inside the folder it "
                                 f"unpacks to: {reason}")
                name = "/".join(parts)
                for depth in range(1, len(parts)):
                    above = "/".join(parts[:depth])
                    if kinds.setdefault(above, "dir") != "dir":
                        raise refuse(f"writes {_shown(member.name)} through {_shown(above)}, which is a file or a "
                                     "link, not a folder")
                kind = _kind(member, name, kinds, refuse)
                if kind == "file":
                    total += member.size
                    if total > limits.max_bytes:
                        raise refuse(f"unpacks to more than {limits.max_bytes} bytes (at least {total} with "
                                     f"{_shown(member.name)})")
                earlier = kinds.get(name)
                if earlier is not None and not (earlier == kind == "dir"):
                    raise refuse(f"holds {_shown(member.name)} twice, or over a folder")
                kinds[name] = kind
                member.name = name
                tar.extract(member, dest, set_attrs=kind != "dir", filter="data")
    except _HugeHeader as exc:
        raise refuse(f"holds {exc}, more than any file name needs") from None
    except tarfile.FilterError as exc:  # tarfile's own check, behind ours
        raise refuse(f"holds a member that would leave the folder it unpacks to ({exc})") from None
    return Extracted(total, count)


def _kind(member: tarfile.TarInfo, name: str, kinds: dict[str, str],
          refuse: Callable[[str], UnsafeInputError]) -> str:
    """"dir", "file" or "link" for a member that may be unpacked; a refusal for anything else."""
    if member.isdir():
        return "dir"
    if member.type in (tarfile.REGTYPE, tarfile.AREGTYPE):
        return "file"
    if member.issym():
        _parts, why = _split(member.linkname)
        if why is not None:
            raise refuse(f"holds the link {_shown(name)} -> {_shown(member.linkname)}, which could lead out of the "
                         f"folder it unpacks to: {why}; links in an archive must point down into their own folder")
        return "link"
    if member.islnk():
        parts, why = _split(member.linkname)
        target = "/".join(parts)
        if why is not None or kinds.get(target) != "file":
            raise refuse(f"holds the hard link {_shown(name)} -> {_shown(member.linkname)}, which is not a file "
                         "earlier in the archive; a hard link may only repeat a file inside the folder")
        member.linkname = target
        return "link"
    kinds_named = {tarfile.FIFOTYPE: "FIFO", tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
                   tarfile.CONTTYPE: "contiguous file", tarfile.GNUTYPE_SPARSE: "sparse file"}
    kind = kinds_named.get(member.type, "special entry")
    raise refuse(f"holds {_shown(name)}, which is not a regular file, a folder or a link (a {kind})")
