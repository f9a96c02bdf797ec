"""Parse the release's manifest, provenance and SHA256SUMS, accepting the reasonable variants.

We have never seen the publisher's real files, so the parser is lenient about shape (``files`` as a
list or a dict, ``sha256``/``hash`` keys, versions as numbers or dotted strings) and strict about
substance: every error names the file and says what was expected. ``docs/release-format.md`` is the
written form of these rules.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.core.errors import VerificationError
from app.core.safe_paths import check_name

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_NAME_KEYS = ("name", "file", "filename", "path")
_HASH_KEYS = ("sha256", "hash", "sha256sum", "digest", "checksum")
_SIZE_KEYS = ("size", "bytes", "size_bytes", "length")
_VERSION_KEYS = ("version", "release_version", "manifest_version")
_DATE_KEYS = ("date", "created", "released", "timestamp", "created_at", "released_at")
_EXPIRY_KEYS = ("expires", "expiry", "expires_at", "valid_until", "not_after")
_VERSION_DIGITS = 100  # a longer version number is malformed (Python's int() refuses more than 4300 digits)


@dataclass(frozen=True)
class FileEntry:
    """One file the release vouches for."""

    name: str
    sha256: str
    size: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True)
class Version:
    """A manifest version: compared as a tuple of integers ("3", 3, "1.2.0", "2025.06.01")."""

    text: str
    key: tuple[int, ...]

    def __lt__(self, other: Version) -> bool:
        return self.key < other.key


@dataclass
class Manifest:
    source: str
    version: Version
    date: str
    expires: datetime | None
    files: dict[str, FileEntry]
    repo: str | None = None
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class Provenance:
    source: str
    llama_cpp_commit: str | None
    patch_sha256: str | None
    files: dict[str, FileEntry]
    raw: dict[str, Any] = field(default_factory=dict)


def check_file_name(name: object, source: str) -> str:
    """A plain file name (:func:`app.core.safe_paths.check_name`): no folders, no ``..``, no absolute paths or drive
    letters, nothing outside ASCII letters, digits and ``. _ + -``. Raises :class:`UnsafeInputError` (exit 4)."""
    return check_name(name, "file name", source,
                      "This looks like a path-traversal attempt or a broken release; nothing was written. Do not use "
                      "it, and report it to the publisher.")


def normalize_sha256(value: object, source: str, name: str) -> str:
    """Lower-case hex; accepts a ``sha256:`` prefix."""
    text = str(value).strip().lower() if isinstance(value, str) else ""
    text = text.removeprefix("sha256:").removeprefix("sha256-")
    if not _HEX64.match(text):
        raise VerificationError(f"{source}: the sha256 of {name} is {value!r}, expected 64 hex digits.",
                                "The release is malformed; report it to the publisher.")
    return text


def _first(mapping: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in mapping:
            return mapping[key]
    return None


def parse_version(value: object, source: str) -> Version:
    if isinstance(value, bool) or value is None:
        raise VerificationError(f"{source} has no version (expected one of the keys {', '.join(_VERSION_KEYS)}).",
                                "Without a version the app cannot refuse rollbacks; the release is not used.")
    if isinstance(value, int) and 0 <= value < 10**_VERSION_DIGITS:
        return Version(str(value), (value,))
    if isinstance(value, str):
        parts = re.findall(r"\d+", value)
        if parts and re.fullmatch(r"v?\d+([.\-_]\d+)*", value.strip()):
            if max(len(p) for p in parts) > _VERSION_DIGITS:
                raise VerificationError(f"{source}: version {_shown(value)} has a number longer than "
                                        f"{_VERSION_DIGITS} digits.", "Report the malformed release to the publisher.")
            return Version(value.strip(), tuple(int(p) for p in parts))
    raise VerificationError(f"{source}: version {_shown(value)} is not a number or a dotted version like 1.2.0.",
                            "Report the malformed release to the publisher.")


def _shown(value: object) -> str:
    """A value for a message, cut short: a hostile manifest's version can be megabytes long."""
    text = repr(value) if not isinstance(value, int) or value.bit_length() < 4000 else "<a huge number>"
    return text if len(text) <= 60 else f"{text[:40]}… ({len(text)} characters)"


def parse_time(value: object, source: str, what: str) -> datetime:
    """ISO 8601 date or date-time (``Z`` allowed); a bare date means the start of that day, UTC."""
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())  # 3.11: dates, date-times and a trailing Z
        except ValueError:
            parsed = None
        if parsed is not None:
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise VerificationError(f"{source}: {what} {value!r} is not an ISO 8601 date like 2025-06-01.",
                            "Report the malformed release to the publisher.")


def _entry(name: object, item: object, source: str) -> FileEntry:
    name = check_file_name(name, source)
    if isinstance(item, str):  # {"file.gguf": "<sha256>"}
        return FileEntry(name, normalize_sha256(item, source, name), None)
    if not isinstance(item, dict):
        raise VerificationError(f"{source}: the entry for {name} is {type(item).__name__}, expected an object "
                                "with sha256 and size.", "Report the malformed release to the publisher.")
    digest = _first(item, _HASH_KEYS)
    if digest is None:
        raise VerificationError(f"{source}: the entry for {name} has no sha256 (expected one of the keys "
                                f"{', '.join(_HASH_KEYS)}).", "Report the malformed release to the publisher.")
    size = _first(item, _SIZE_KEYS)
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
        raise VerificationError(f"{source}: the size of {name} is {size!r}, expected a whole number of bytes.",
                                "Report the malformed release to the publisher.")
    return FileEntry(name, normalize_sha256(digest, source, name), size)


def parse_files(value: object, source: str) -> dict[str, FileEntry]:
    """``files`` as a list of objects, or a dict from name to an object or to a bare sha256."""
    entries: list[FileEntry] = []
    if isinstance(value, dict):
        entries = [_entry(name, item, source) for name, item in value.items()]
    elif isinstance(value, list):
        for item in value:
            if not isinstance(item, dict):
                raise VerificationError(f"{source}: an item of 'files' is {item!r}, expected an object.",
                                        "Report the malformed release to the publisher.")
            entries.append(_entry(_first(item, _NAME_KEYS), item, source))
    else:
        raise VerificationError(f"{source} has no 'files' list (expected a list of {{name, size, sha256}} "
                                "objects or a dict from file name to them).",
                                "Report the malformed release to the publisher.")
    files: dict[str, FileEntry] = {}
    for entry in entries:
        if entry.name in files:
            raise VerificationError(f"{source} lists {entry.name} twice.", "Report the malformed release.")
        files[entry.name] = entry
    return files


def _load_json(data: bytes, source: str) -> dict[str, Any]:
    try:
        obj = json.loads(data.decode("utf-8-sig"))
    except RecursionError:
        raise VerificationError(f"{source} nests its JSON too deeply to be a release file.",
                                "Report the malformed release to the publisher.") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise VerificationError(f"{source} is not valid JSON: {exc}.",
                                "The download may be damaged; fetch it again.") from exc
    if not isinstance(obj, dict):
        raise VerificationError(f"{source} holds a JSON {type(obj).__name__}, expected an object.",
                                "Report the malformed release to the publisher.")
    return obj


def parse_manifest(data: bytes, source: str) -> Manifest:
    """Parse the manifest's bytes (already signature-checked by the caller)."""
    obj = _load_json(data, source)
    body: dict[str, Any] = obj["release"] if isinstance(obj.get("release"), dict) else obj
    version = parse_version(_first(body, _VERSION_KEYS), source)
    when = _first(body, _DATE_KEYS)
    if when is None:
        raise VerificationError(f"{source} has no date (expected one of the keys {', '.join(_DATE_KEYS)}).",
                                "Report the malformed release to the publisher.")
    parse_time(when, source, "the date")
    expiry = _first(body, _EXPIRY_KEYS)
    files = parse_files(_first(obj, ("files", "artifacts")) or _first(body, ("files", "artifacts")), source)
    if not files:
        raise VerificationError(f"{source} lists no files.", "Report the malformed release to the publisher.")
    repo = _first(body, ("repo", "repository", "repo_id"))
    return Manifest(source=source, version=version, date=str(when),
                    expires=parse_time(expiry, source, "the expiry") if expiry is not None else None,
                    files=files, repo=repo if isinstance(repo, str) else None, raw=obj)


def parse_provenance(data: bytes, source: str) -> Provenance:
    """Parse the provenance: what was built from what. Only the parts we can cross-check are required to be sane."""
    obj = _load_json(data, source)
    llama: dict[str, Any] = obj["llama_cpp"] if isinstance(obj.get("llama_cpp"), dict) else {}
    commit = _first(obj, ("llama_cpp_commit", "base_commit", "upstream_commit")) or _first(llama, ("commit",))
    patch = _first(obj, ("patch",)) or _first(llama, ("patch",))
    patch_hash = _first(patch, _HASH_KEYS) if isinstance(patch, dict) else _first(obj, ("patch_sha256",))
    files_value = _first(obj, ("files", "artifacts", "outputs"))
    return Provenance(
        source=source,
        llama_cpp_commit=str(commit) if commit is not None else None,
        patch_sha256=normalize_sha256(patch_hash, source, "the patch") if patch_hash is not None else None,
        files=parse_files(files_value, source) if files_value is not None else {},
        raw=obj,
    )


_SUMS_GNU = re.compile(r"^\\?([0-9A-Fa-f]{64}) [ *](.+)$")
_SUMS_BSD = re.compile(r"^SHA256 \((.+)\) = ([0-9A-Fa-f]{64})$")


def parse_sha256sums(text: str, source: str) -> dict[str, str]:
    """``sha256sum`` output (text or ``*binary`` mode) or BSD ``SHA256 (name) = hash`` lines; ``#`` comments."""
    sums: dict[str, str] = {}
    for number, raw_line in enumerate(text.splitlines(), 1):
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        gnu, bsd = _SUMS_GNU.match(line), _SUMS_BSD.match(line)
        if gnu:
            digest, name = gnu.group(1), gnu.group(2)
        elif bsd:
            name, digest = bsd.group(1), bsd.group(2)
        else:
            raise VerificationError(f"{source} line {number} is {raw_line[:80]!r}, expected '<sha256>  <file name>'.",
                                    "The checksum list is malformed; fetch it again or report it.")
        name = check_file_name(name, source)
        if name in sums and sums[name] != digest.lower():
            raise VerificationError(f"{source} gives two different hashes for {name}.", "Report the release.")
        sums[name] = digest.lower()
    if not sums:
        raise VerificationError(f"{source} is empty.", "Fetch it again; if it stays empty, report the release.")
    return sums


def format_sha256sums(files: dict[str, FileEntry]) -> str:
    return "".join(f"{entry.sha256}  {name}\n" for name, entry in sorted(files.items()))
