"""Your own model files: a registry of GGUF files already on disk, and a scan of the places they usually are.

A file is referenced where it is (``models add FILE``); it is copied into the models folder only when asked
(``--copy``). The registry is ``local-models.json`` in the config folder: each entry keeps the file's path,
what ``gguf inspect`` said about it (so listing costs one ``stat`` per file), its FastMTP sidecars, where on
the hub it comes from (when known) and its verification state (``app.release.hub_hash``), with the size and
modification time the state was established for: a file changed since is ``unverified`` again.

Qt-free; the Models page and the ``models add|scan|remove`` commands both call this module.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from app.core import paths, safe_paths, settings_file
from app.core.errors import FastMTPError, GGUFError, StorageError, UnsafeInputError
from app.core.hashing import sha256_file
from app.core.regular_files import kind_of
from app.core.units import format_bytes
from app.release.hub_hash import EXPLANATIONS, LABELS, HubCheck, HubOrigin, State, cached_blob_sha256, origin_from_path

FILE_NAME = "local-models.json"
FORMAT = "fastmtp-local-models"
VERSION = 1
QWEN35 = "qwen35"
Role = Literal["model", "sidecar", "other"]
_QUANT_IN_NAME = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[0-9A-Z]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)
_SKIP_SUFFIXES = (".partial", ".part", ".incomplete", ".tmp")
_SCAN_DEPTH = 6  # folders below a scan root (HF cache: models--x/snapshots/<rev>/sub/file.gguf)

log = logging.getLogger(__name__)


class LocalModelError(FastMTPError):
    """A local model file cannot be added, found or copied."""

    kind = "local-model"


# ----------------------------------------------------------------------------- what a file is


@dataclass(frozen=True)
class ModelFacts:
    """The ``gguf inspect`` summary of a file and whether the app can use it (and why not)."""

    architecture: str
    kind: str  # inspect's kind: target, mtp_sidecar_full, mtp_sidecar_d2t, other
    quantization: str
    size_bytes: int
    vocab_size: int | None
    n_embd: int | None
    mtp_head: bool  # a target with its nextn (MTP) layer
    sidecar: str  # "embedded" (a target's own MTP head), "full", "d2t", or "none"
    usable: bool
    reason: str  # why it can or cannot be used, in words

    @property
    def role(self) -> Role:
        if self.kind == "target":
            return "model"
        return "sidecar" if self.kind.startswith("mtp_sidecar") else "other"

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), role=self.role)

    @classmethod
    def from_dict(cls, data: Any) -> ModelFacts:
        """Facts as stored; ``TypeError`` when they are not an object of the right types (a hand-edited file)."""
        if not isinstance(data, dict):
            raise TypeError("the facts are not an object")
        kept = {k: v for k, v in data.items() if k in _FACT_TYPES}
        for name, value in kept.items():
            if not isinstance(value, _FACT_TYPES[name]) or (isinstance(value, bool) and _FACT_TYPES[name] is not bool):
                raise TypeError(f"the facts' {name} is not a {_FACT_TYPES[name]}")
        return cls(**kept)


# what each stored fact must be (local-models.json is editable by hand: a wrong type is a skipped entry)
_FACT_TYPES: dict[str, Any] = {
    "architecture": str, "kind": str, "quantization": str | type(None), "size_bytes": int,
    "vocab_size": int | type(None),
    "n_embd": int | type(None), "mtp_head": bool, "sidecar": str | type(None), "usable": bool, "reason": str}


def quantization_of(name: str, tensor_types: dict[str, int]) -> str:
    """The quantization: the tag in the file name (``Q4_K_M``) where there is one, else the commonest type of
    the file's weight tensors (norms are F32 in every quantization, so F32 only counts when nothing else is)."""
    match = _QUANT_IN_NAME.search(Path(name).stem)
    if match:
        return match.group(1).upper()
    weights = {t: n for t, n in tensor_types.items() if t not in ("F32", "I64", "I32")}
    pool = weights or tensor_types
    return max(pool, key=lambda t: pool[t]) if pool else "?"


def inspect_facts(path: Path) -> ModelFacts:
    """What ``gguf inspect`` says about ``path``, and the usability verdict.

    Raises:
        GGUFError: the file is missing, not GGUF, or cut short.
    """
    from app.gguftools.inspect import inspect_gguf

    report = inspect_gguf(path)
    mtp = report.kind == "target" and report.nextn_layers > 0
    sidecar = {"mtp_sidecar_full": "full", "mtp_sidecar_d2t": "d2t"}.get(report.kind, "embedded" if mtp else "none")
    usable, reason = _verdict(report.architecture, report.kind, mtp)
    return ModelFacts(architecture=report.architecture or "?", kind=report.kind,
                      quantization=quantization_of(path.name, report.tensor_types), size_bytes=report.file_size,
                      vocab_size=report.vocab_size, n_embd=report.n_embd, mtp_head=mtp, sidecar=sidecar,
                      usable=usable, reason=reason)


def _verdict(architecture: str, kind: str, mtp: bool) -> tuple[bool, str]:
    if kind.startswith("mtp_sidecar"):
        what = "trimmed (d2t)" if kind.endswith("d2t") else "full"
        return False, (f"A {what} FastMTP draft sidecar, not a model: add its target model, then attach this file "
                       "to it (`models add TARGET --sidecar THIS`).")
    if kind != "target":
        return False, "Not a complete model (no transformer layers): nothing to chat with."
    if architecture != QWEN35:
        return False, (f"A '{architecture or 'unknown'}' model: FastMTP Chat runs Qwen3.8 models (llama.cpp's "
                       "qwen35 architecture, which Qwen3.8-27B uses).")
    if not mtp:
        return True, ("Usable with drafting off only: it has no MTP head (converted without its nextn layer), so "
                      "there is nothing to draft with and no FastMTP sidecar can be made from it.")
    return True, ("Usable: drafting with its embedded MTP head; make a FastMTP sidecar from it for the faster "
                  "trimmed draft head.")


# ----------------------------------------------------------------------------- the registry


@dataclass(frozen=True)
class Verification:
    """A file's verification state and what it was established for (size and mtime when checked)."""

    state: State = "unverified"
    sha256: str = ""
    expected_sha256: str = ""
    endpoint: str = ""
    checked: str = ""
    size: int | None = None
    mtime_ns: int | None = None
    detail: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.state]

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), label=self.label, explanation=self.detail or EXPLANATIONS[self.state])

    @classmethod
    def from_dict(cls, data: Any) -> Verification:
        if not isinstance(data, dict):
            return cls()
        names = set(cls.__dataclass_fields__)
        kept = {k: v for k, v in data.items() if k in names}
        if kept.get("state") not in LABELS:
            kept["state"] = "unverified"
        return cls(**kept)


@dataclass(frozen=True)
class LocalModel:
    """One registered model file (referenced in place unless it was copied)."""

    path: Path
    added: str
    facts: ModelFacts
    copied_from: str = ""
    origin: HubOrigin | None = None
    sidecar_d2t: Path | None = None
    sidecar_full: Path | None = None
    verification: Verification = field(default_factory=Verification)
    mtime_ns: int | None = None  # when the facts were read

    @property
    def key(self) -> str:
        """What the chat's selector and the settings remember: the path."""
        return str(self.path)

    @property
    def present(self) -> bool:
        return self.path.is_file()

    @property
    def state(self) -> State:
        """The verification state now: a file changed since its check is ``unverified`` again."""
        v = self.verification
        if v.state == "unverified" or not self.present:
            return "unverified"
        stat = self.path.stat()
        if v.size is not None and (stat.st_size != v.size or stat.st_mtime_ns != v.mtime_ns):
            return "unverified"
        return v.state

    @property
    def offered(self) -> bool:
        """Whether the chat offers it: present, usable, and not refused by a hub-hash mismatch."""
        return self.present and self.facts.usable and self.state != "hub-hash-mismatch"

    @property
    def problem(self) -> str:
        if not self.present:
            return f"The file is no longer at {self.path}: it was moved or deleted. Remove it or add it again."
        if self.state == "hub-hash-mismatch":
            return EXPLANATIONS["hub-hash-mismatch"]
        return "" if self.facts.usable else self.facts.reason

    def to_dict(self) -> dict[str, Any]:
        state = self.state
        verification = dict(self.verification.to_dict(), state=state, label=LABELS[state])
        if state != self.verification.state:
            verification["explanation"] = "The file changed since it was checked: " + EXPLANATIONS["unverified"]
        return {"path": str(self.path), "name": self.path.name, "added": self.added, "copied_from": self.copied_from,
                "present": self.present, "facts": self.facts.to_dict(),
                "origin": self.origin.to_dict() if self.origin else None,
                "sidecar_d2t": str(self.sidecar_d2t) if self.sidecar_d2t else None,
                "sidecar_full": str(self.sidecar_full) if self.sidecar_full else None,
                "verification": verification, "offered": self.offered, "problem": self.problem}

    def _stored(self) -> dict[str, Any]:
        return {"path": str(self.path), "added": self.added, "facts": self.facts.to_dict(),
                "copied_from": self.copied_from, "origin": self.origin.to_dict() if self.origin else None,
                "sidecar_d2t": str(self.sidecar_d2t) if self.sidecar_d2t else None,
                "sidecar_full": str(self.sidecar_full) if self.sidecar_full else None,
                "verification": asdict(self.verification), "mtime_ns": self.mtime_ns}

    @classmethod
    def _from_stored(cls, data: dict[str, Any]) -> LocalModel:
        origin = data.get("origin")
        return cls(path=Path(data["path"]), added=str(data.get("added", "")),
                   facts=ModelFacts.from_dict(data["facts"]), copied_from=str(data.get("copied_from") or ""),
                   origin=HubOrigin(**origin) if isinstance(origin, dict) else None,
                   sidecar_d2t=Path(data["sidecar_d2t"]) if data.get("sidecar_d2t") else None,
                   sidecar_full=Path(data["sidecar_full"]) if data.get("sidecar_full") else None,
                   verification=Verification.from_dict(data.get("verification")),
                   mtime_ns=data.get("mtime_ns") if isinstance(data.get("mtime_ns"), int) else None)


def registry_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load_registry() -> list[LocalModel]:
    """The registered models; a damaged file reads as empty (and is rewritten by the next change)."""
    data = settings_file.load_json(registry_path())  # None: missing or damaged
    models = []
    entries = data.get("models") if isinstance(data, dict) else None
    for entry in entries if isinstance(entries, list) else []:
        try:
            if not isinstance(entry, dict) or not isinstance(entry.get("path"), str):
                raise TypeError("not an object with a path")
            models.append(LocalModel._from_stored(entry))
        except (KeyError, TypeError, ValueError) as exc:  # a damaged entry is skipped (the next change drops it)
            log.warning("%s: an entry is damaged (%s) and was skipped", registry_path(), exc)
            continue
    return models


def _save(models: list[LocalModel]) -> None:
    path = registry_path()
    body = {"format": FORMAT, "version": VERSION, "models": [m._stored() for m in models]}
    try:
        settings_file.write_json(path, body)
    except OSError as exc:
        raise StorageError(f"The list of your model files cannot be saved to {path}: {exc.strerror or exc}.",
                           "Check that the config folder is writable and the disk is not full.") from None


def find(path: Path | str, models: list[LocalModel] | None = None) -> LocalModel | None:
    wanted = Path(path).absolute()
    return next((m for m in (load_registry() if models is None else models) if m.path == wanted), None)


def _replace(updated: LocalModel) -> LocalModel:
    models = [m for m in load_registry() if m.path != updated.path]
    _save([*models, updated])
    return updated


def add(path: Path, *, copy: bool = False, origin: HubOrigin | None = None, sidecars: Iterable[Path] = (),
        on_bytes: Callable[[int, int], None] | None = None) -> LocalModel:
    """Register a target GGUF (in place, or copied into the models folder with ``copy``), with its sidecars.

    Sidecars given are checked against the target; ``FastMTP``/``sidecar`` files next to it that fit are
    attached too. Adding a file again refreshes its facts and keeps its verification.

    Raises:
        GGUFError: the file is not a readable GGUF.
        LocalModelError: it is a sidecar or not a model, or a sidecar does not fit.
    """
    source = Path(path).expanduser().absolute()
    given = [Path(s).absolute() for s in sidecars]
    if not source.is_file():
        try:
            mode = source.stat().st_mode
        except OSError:  # missing (or a dangling link)
            raise LocalModelError(f"There is no file at {source}.", "Check the path.", kind="not-found") from None
        raise LocalModelError(f"{source} is {kind_of(mode)}, not a model file.",
                              "Choose the .gguf file itself (inside a folder, pick the file)."
                              if stat.S_ISDIR(mode) else "Choose a .gguf file (llama.cpp's model format).",
                              kind="not-a-file")
    if source.suffix.lower() != ".gguf":
        raise LocalModelError(f"{source.name} is not a .gguf file.", "Choose a GGUF model file (llama.cpp's format).",
                              kind="not-gguf")
    facts = inspect_facts(source)
    if facts.role != "model" or not facts.usable:
        raise LocalModelError(f"{source.name} cannot be added as a model. {facts.reason}",
                              "Add the target model file instead." if facts.role == "sidecar"
                              else "Choose a Qwen3.8 (qwen35 architecture) GGUF with its MTP head.", kind="not-a-model")
    target = source
    copied_from = ""
    if copy:
        target = copy_into_models(source, on_bytes)
        copied_from = str(source)
    known = find(target)
    d2t, full = (known.sidecar_d2t, known.sidecar_full) if known else (None, None)
    for sidecar in [*given, *_neighbour_sidecars(source)]:
        kind = attachable_sidecar(target, sidecar, strict=sidecar in given)
        if kind == "d2t" and (d2t is None or sidecar in given):
            d2t = sidecar
        elif kind == "full" and (full is None or sidecar in given):
            full = sidecar
    origin = origin or (known.origin if known else None) or origin_from_path(source)
    verification = _release_state(target) or (known.verification if known else Verification())
    model = LocalModel(path=target, added=known.added if known else _now(), facts=facts, copied_from=copied_from,
                       origin=origin, sidecar_d2t=d2t, sidecar_full=full, verification=verification,
                       mtime_ns=target.stat().st_mtime_ns)
    return _replace(model)


def remove(path: Path | str, *, delete_copy: bool = False) -> LocalModel:
    """Forget a registered file (never deletes it, except a copy the app made, with ``delete_copy``).

    Raises:
        LocalModelError: the file is not registered.
    """
    model = find(path)
    if model is None:
        raise LocalModelError(f"{path} is not one of your added model files.", "`python -m app models` lists them.",
                              kind="not-registered")
    if delete_copy and model.copied_from:
        _check_own_copy(model.path)
    _save([m for m in load_registry() if m.path != model.path])
    if delete_copy and model.copied_from:
        model.path.unlink(missing_ok=True)
    return model


def _copies_folder() -> Path:
    from app.settings import app_settings

    return app_settings.load().models_path() / "local"


def _check_own_copy(path: Path) -> None:
    """Only a file inside the copies folder is the app's to delete: the registry is a file anyone can edit."""
    folder = _copies_folder()
    try:
        safe_paths.inside(folder, path, "copy")
    except UnsafeInputError:
        raise LocalModelError(f"{path} is outside the folder of the app's copies ({folder}), so it was not deleted "
                              "and is still registered.", "Remove it without --delete-copy, and delete the file "
                              "yourself if you mean to.", kind="outside-copies") from None


def attach_sidecar(path: Path | str, sidecar: Path) -> LocalModel:
    """Attach a FastMTP sidecar (checked against the model) to a registered model.

    Raises:
        LocalModelError: the model is not registered, or the sidecar does not fit it.
    """
    model = find(path)
    if model is None:
        raise LocalModelError(f"{path} is not one of your added model files.", "Add it first: `models add FILE`.",
                              kind="not-registered")
    kind = attachable_sidecar(model.path, sidecar, strict=True)
    sidecar = Path(sidecar).absolute()
    updated = replace(model, sidecar_d2t=sidecar) if kind == "d2t" else replace(model, sidecar_full=sidecar)
    return _replace(updated)


def record_check(path: Path | str, check: HubCheck) -> LocalModel | None:
    """Keep a hub-hash result with the registered model (None when the file is not registered)."""
    model = find(path)
    if model is None:
        return None
    stat = model.path.stat()
    verification = Verification(state=check.state, sha256=check.actual_sha256, expected_sha256=check.expected_sha256,
                                endpoint=check.endpoint, checked=check.checked, size=stat.st_size,
                                mtime_ns=stat.st_mtime_ns)
    return _replace(replace(model, verification=verification, origin=check.origin))


def mark_signed(path: Path | str, fingerprint: str) -> LocalModel | None:
    """A registered file that ``verify DIR`` proved against its publisher's signed manifest."""
    model = find(path)
    if model is None:
        return None
    stat = model.path.stat()
    verification = Verification(state="publisher-signed", checked=_now(), size=stat.st_size,
                                mtime_ns=stat.st_mtime_ns, detail=f"Signed by the publisher key {fingerprint}.")
    return _replace(replace(model, verification=verification))


def attachable_sidecar(target: Path, sidecar: Path, *, strict: bool) -> Literal["d2t", "full"] | None:
    """``d2t`` or ``full`` when ``sidecar`` is an MTP sidecar made for ``target``; None (or, ``strict``, an error)."""
    from app.gguftools.inspect import inspect_gguf
    from app.gguftools.sidecar import check_pair

    try:
        side = inspect_gguf(sidecar)
        check_pair(inspect_gguf(target), side)
    except FastMTPError as exc:
        if strict:
            raise LocalModelError(f"{Path(sidecar).name} cannot be used with {target.name}: {exc.message}",
                                  exc.advice or "Choose the sidecar made for this model.", kind=exc.kind) from exc
        return None
    return "d2t" if side.kind == "mtp_sidecar_d2t" else "full"


def _release_state(path: Path) -> Verification | None:
    """``publisher-signed`` for a target in a release folder that checks out (as the chat's release listing checks
    it: signatures with a trusted key and sizes; every hash was checked when it was installed); else None."""
    from app.models.installed import list_installed
    from app.release.catalog import load_catalog

    if not (path.parent / load_catalog().integrity.manifest).is_file():
        return None
    for release in list_installed(path.parent.parent):
        if release.target == path and release.verified:
            stat = path.stat()
            return Verification(state="publisher-signed", checked=_now(), size=stat.st_size, mtime_ns=stat.st_mtime_ns,
                                detail=f"Release {release.version} of {release.repo}, signed by {release.fingerprint}; "
                                       "sizes checked now, every hash when it was installed (`verify FILE` "
                                       "re-hashes).")
    return None


def _neighbour_sidecars(target: Path) -> list[Path]:
    """GGUF files beside ``target`` whose names say they are MTP sidecars (checked before they are attached)."""
    try:
        siblings = sorted(target.parent.glob("*.gguf"))
    except OSError:
        return []
    words = ("fastmtp", "sidecar", "d2t", "mtp-draft", "mtp_draft")
    return [p for p in siblings if p != target and any(w in p.name.lower() for w in words)]


def copy_into_models(source: Path, on_bytes: Callable[[int, int], None] | None = None) -> Path:
    """Copy ``source`` to ``<models folder>/local/<name>`` (``.partial`` then renamed; nothing half-copied stays).

    A file already there with the same name is the copy only when its content is the same (size, then sha256);
    a different file keeps its name and the copy gets the next free one (``name-2.gguf``, ...).

    Raises:
        LocalModelError: not enough space, or the copy failed.
    """
    folder = paths.ensure_dir(_copies_folder(), "models")
    size = source.stat().st_size
    out = _copy_target(folder, source, size)
    if out.exists():
        return out  # the same bytes, copied before
    free = shutil.disk_usage(folder).free
    if free < size:
        raise LocalModelError(f"Copying {source.name} needs {format_bytes(size)}, but {folder} has "
                              f"{format_bytes(free)} free.", "Free some space, or add the file in place (no copy).",
                              kind="no-room")
    partial = out.with_name(out.name + ".partial")
    try:
        with source.open("rb") as src, partial.open("wb") as dst:
            done = 0
            while chunk := src.read(8 << 20):
                dst.write(chunk)
                done += len(chunk)
                if on_bytes is not None:
                    on_bytes(done, size)
        if out.exists() or out.is_symlink():
            raise LocalModelError(f"{out} appeared while {source.name} was being copied; it was left alone.",
                                  "Add the file again.", kind="copy-conflict")
        os.replace(partial, out)
    except OSError as exc:
        raise LocalModelError(f"{source.name} could not be copied to {folder}: {exc.strerror or exc}.",
                              "Check free space and permissions; nothing was kept.", kind="copy-failed") from None
    finally:
        partial.unlink(missing_ok=True)
    return out


def _copy_target(folder: Path, source: Path, size: int) -> Path:
    """Where the copy of ``source`` goes: an existing file with the same content (size and sha256), else the first
    free name of ``name``, ``name-2``, ``name-3``, ... (never another file of the same name)."""
    source_sha: str | None = None
    stem, suffix = os.path.splitext(source.name)
    for n in range(1, 1000):
        out = safe_paths.inside(folder, folder / (source.name if n == 1 else f"{stem}-{n}{suffix}"), "copy")
        if not out.exists() and not out.is_symlink():
            return out
        if out.is_file() and not out.is_symlink() and out.stat().st_size == size:
            source_sha = source_sha or sha256_file(source)
            if sha256_file(out) == source_sha:
                return out
    raise LocalModelError(f"{folder} already holds 999 other files named like {source.name}.",
                          "Remove the copies you do not need, or add the file in place (no copy).",
                          kind="too-many-copies")
def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------- the scan


@dataclass(frozen=True)
class ScanRoot:
    label: str
    path: Path


@dataclass(frozen=True)
class FoundFile:
    """A ``.gguf`` the scan found, with what it is (or why it could not be read)."""

    path: Path
    where: str  # the scan root's label
    facts: ModelFacts | None
    error: str = ""
    origin: HubOrigin | None = None
    blob_sha256: str | None = None  # the HF cache's name for its bytes (a claim until checked)
    added: bool = False

    @property
    def usable(self) -> bool:
        return self.facts is not None and self.facts.usable

    @property
    def reason(self) -> str:
        return self.error or (self.facts.reason if self.facts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": str(self.path), "name": self.path.name, "where": self.where,
                "facts": self.facts.to_dict() if self.facts else None, "error": self.error,
                "usable": self.usable, "reason": self.reason, "added": self.added,
                "origin": self.origin.to_dict() if self.origin else None, "blob_sha256": self.blob_sha256,
                "verification": {"state": "unverified", "label": LABELS["unverified"],
                                 "explanation": EXPLANATIONS["unverified"]}}


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, as huggingface_hub finds it: HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(os.environ["XDG_CACHE_HOME"]).expanduser() if os.environ.get("XDG_CACHE_HOME") \
        else Path.home() / ".cache"
    return cache / "huggingface" / "hub"


def scan_roots(extra: Iterable[Path] = ()) -> list[ScanRoot]:
    """Where models usually are: LM Studio's models folders, the HF hub cache, ~/Downloads, the configured models
    folder, then ``extra``; each once (folders that do not exist are kept, the scan skips them)."""
    from app.settings import app_settings

    home = Path.home()
    roots = [ScanRoot("LM Studio", home / ".lmstudio" / "models"),
             ScanRoot("LM Studio", home / ".cache" / "lm-studio" / "models"),
             ScanRoot("Hugging Face cache", hf_hub_cache()),
             ScanRoot("Downloads", home / "Downloads"),
             ScanRoot("models folder", app_settings.load().models_path()),
             *(ScanRoot("folder", Path(p).expanduser()) for p in extra)]
    seen: set[Path] = set()
    unique = []
    for root in roots:
        key = root.path.absolute()
        if key not in seen:
            seen.add(key)
            unique.append(ScanRoot(root.label, key))
    return unique


def _gguf_files(root: Path) -> Iterator[Path]:
    """``.gguf`` files under ``root`` (symlinks followed: the HF cache's snapshots link to blobs), not too deep,
    hidden folders, HF ``blobs`` and unfinished downloads skipped."""
    base_depth = len(root.parts)
    for folder, dirs, files in os.walk(root, followlinks=False):
        depth = len(Path(folder).parts) - base_depth
        dirs[:] = [] if depth >= _SCAN_DEPTH else sorted(d for d in dirs if not d.startswith(".") and d != "blobs")
        for name in sorted(files):
            if name.lower().endswith(".gguf") and not name.lower().endswith(_SKIP_SUFFIXES):
                path = Path(folder) / name
                if path.is_file():
                    yield path


def scan(roots: Iterable[ScanRoot] | None = None, on_found: Callable[[FoundFile], None] | None = None,
         should_stop: Callable[[], bool] = lambda: False) -> list[FoundFile]:
    """Every ``.gguf`` under the roots (default :func:`scan_roots`), inspected; ``on_found`` hears each as found.

    A file seen twice (two roots, or a symlink) is listed once. Unreadable files are listed with the reason.
    """
    registered = {m.path for m in load_registry()}
    seen: set[Path] = set()
    found: list[FoundFile] = []
    for root in scan_roots() if roots is None else roots:
        if not root.path.is_dir():
            continue
        for path in _gguf_files(root.path):
            if should_stop():
                return found
            real = path.resolve()
            if real in seen:
                continue
            seen.add(real)
            try:
                facts: ModelFacts | None = inspect_facts(path)
                error = ""
            except (GGUFError, OSError) as exc:
                facts, error = None, (exc.message if isinstance(exc, FastMTPError) else str(exc))
            item = FoundFile(path=path.absolute(), where=root.label, facts=facts, error=error,
                             origin=origin_from_path(path), blob_sha256=cached_blob_sha256(path),
                             added=path.absolute() in registered)
            found.append(item)
            if on_found is not None:
                on_found(item)
    return found
