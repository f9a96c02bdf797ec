"""The models installed in the models folder: which target GGUF, which FastMTP sidecars, and whether they check out.

A release folder is one that holds the release's signed manifest (``fetch`` and ``verify`` leave it
there); the built-in demo model's folder has none and is not listed here. One folder may hold several
quantizations of the same release (each ``fetch --quant`` adds its file), so each target GGUF present
is one :class:`InstalledModel`, sharing the folder's sidecars.

Listing is cheap on purpose, because the window does it on every start and after every download:

- the integrity files are checked again in full (signatures with a trusted key, rollback floor,
  SHA256SUMS against the manifest): a few kilobytes;
- each model file is checked against the size the signed manifest gives, with one ``stat``;
- sha256 is **not** computed again: every file's hash was checked against the signed manifest before
  ``install`` moved it into the folder. ``python -m app verify DIR`` re-hashes everything on demand.

Which file is what comes from the names the signed manifest gives, with the same rules ``fetch``
uses (``docs/release-format.md``): a sidecar's name is the catalog's sidecar or carries ``FastMTP`` (or
``sidecar``); the d2t one is the catalog's (or named ``d2t`` / ``32K``), a second one is a full sidecar
(named ``full``); every other GGUF is a target, its quantization the catalog's tag in its name.
Reading GGUF headers instead would cost seconds per file (the 248K-token vocabulary); the engine
checks every pair when it loads it and says in words when a file does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core import paths
from app.core.errors import FastMTPError, VerificationError
from app.engine.modes import sidecar_kind
from app.release.catalog import Catalog, load_catalog, repo_slug
from app.release.manifest import parse_manifest
from app.release.verify import verify_metadata

if TYPE_CHECKING:
    from app.settings.app_settings import Settings


@dataclass(frozen=True)
class InstalledModel:
    """One target GGUF in a release folder, with the folder's sidecars and the result of the cheap checks."""

    folder: Path
    repo: str
    version: str
    quant: str  # the catalog's quantization name, or the file's stem when the catalog has none for it
    target: Path
    sidecar_d2t: Path | None
    sidecar_full: Path | None
    size_bytes: int  # the target file
    total_bytes: int  # the target and its sidecars
    verified: bool
    problem: str = ""  # why ``verified`` is False, in words (with what to do)
    fingerprint: str = ""  # the publisher key that signed the manifest, when it verified

    @property
    def key(self) -> str:
        """What the settings remember for this model: its target's path."""
        return str(self.target)

    @property
    def label(self) -> str:
        """A short name for menus: ``Q4_K_P (release 3)``."""
        return f"{self.quant} (release {self.version})"

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "repo": self.repo, "version": self.version, "quant": self.quant,
                "target": str(self.target),
                "sidecar_d2t": str(self.sidecar_d2t) if self.sidecar_d2t else None,
                "sidecar_full": str(self.sidecar_full) if self.sidecar_full else None,
                "size_bytes": self.size_bytes, "total_bytes": self.total_bytes, "verified": self.verified,
                "problem": self.problem, "fingerprint": self.fingerprint, "source": "release",
                "verification": self.verification()}

    def verification(self) -> dict[str, str]:
        """The state shared with ``verify`` and your own files: publisher-signed, or unverified (with why)."""
        from app.release.hub_hash import EXPLANATIONS, LABELS, State

        state: State = "publisher-signed" if self.verified else "unverified"
        return {"state": state, "label": LABELS[state],
                "explanation": EXPLANATIONS[state] if self.verified else self.problem}


def model_roots(settings: Settings | None = None) -> list[Path]:
    """Where models are looked for: the models folder of ``settings`` (default: the saved ones), then the one
    downloads go to, when it is another."""
    from app.settings import app_settings

    roots = [(settings or app_settings.load()).models_path(), paths.models_dir()]
    return [root for i, root in enumerate(roots) if root.resolve() not in (r.resolve() for r in roots[:i])]


def list_installed(*roots: Path) -> list[InstalledModel]:
    """Every target GGUF in the release folders directly under ``roots`` (default: :func:`model_roots`).

    Unverified models are listed too, with ``verified=False`` and the reason in ``problem``, so the
    user sees why a downloaded model is not offered; callers that load models take verified ones only.
    Never raises for a damaged folder: its problem is reported on its models (or it is skipped when it
    holds no model file at all).
    """
    catalog = load_catalog()
    found: list[InstalledModel] = []
    for root in roots or model_roots():
        if not root.is_dir():
            continue
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and (p / catalog.integrity.manifest).is_file()):
            found.extend(models_in(folder, catalog))
    return found


def models_in(folder: Path, catalog: Catalog) -> list[InstalledModel]:
    manifest_path = folder / catalog.integrity.manifest
    try:  # unverified, only to learn the repository and the names; verified below
        manifest = parse_manifest(manifest_path.read_bytes(), catalog.integrity.manifest)
    except (OSError, FastMTPError) as exc:
        return _unreadable(folder, catalog, f"{manifest_path.name} cannot be read: {exc}")
    repo = manifest.repo or catalog.repo
    present = {name: folder / name for name in manifest.files if (folder / name).is_file()}
    sidecar_d2t, sidecar_full = _sidecars(catalog, present)
    targets = [n for n in present if n.lower().endswith(".gguf") and not _is_sidecar_name(n, catalog)]
    if not targets:
        return []
    problem, fingerprint = "", ""
    try:
        meta = verify_metadata(folder, repo=repo, confirm=None)
        fingerprint = meta.fingerprint
        for name, path in present.items():
            size = manifest.files[name].size
            if size is not None and path.stat().st_size != size:
                raise VerificationError(f"{name} is {path.stat().st_size} bytes, the signed manifest says {size}.",
                                        f"The file was changed or cut short; run `python -m app verify {folder}` "
                                        "or download it again.")
    except (OSError, FastMTPError) as exc:
        problem = str(exc)
    sidecar_bytes = sum(p.stat().st_size for p in (sidecar_d2t, sidecar_full) if p is not None)
    models = []
    for name in sorted(targets):
        size = present[name].stat().st_size
        models.append(InstalledModel(
            folder=folder, repo=repo, version=manifest.version.text, quant=_quant_of(name, catalog),
            target=present[name], sidecar_d2t=sidecar_d2t, sidecar_full=sidecar_full, size_bytes=size,
            total_bytes=size + sidecar_bytes, verified=not problem, problem=problem, fingerprint=fingerprint))
    return models


def _unreadable(folder: Path, catalog: Catalog, problem: str) -> list[InstalledModel]:
    """A folder whose manifest cannot be read: its quantization files are listed, none of them verified."""
    models = []
    for quant in catalog.quants:
        target = folder / quant.file
        if target.is_file():
            size = target.stat().st_size
            models.append(InstalledModel(folder=folder, repo=catalog.repo, version="?", quant=quant.name,
                                         target=target, sidecar_d2t=None, sidecar_full=None, size_bytes=size,
                                         total_bytes=size, verified=False,
                                         problem=problem + f"\nRun `python -m app verify {folder}`."))
    return models


def _is_sidecar_name(name: str, catalog: Catalog) -> bool:
    lowered = name.lower()
    return name == catalog.sidecar.file or "fastmtp" in lowered or "sidecar" in lowered


def _sidecars(catalog: Catalog, present: dict[str, Path]) -> tuple[Path | None, Path | None]:
    """The d2t sidecar and the full sidecar among the files, by :func:`sidecar_kind` (from each file's header;
    its name only when it cannot be read), the first of each."""
    names = sorted(n for n in present if n.lower().endswith(".gguf") and _is_sidecar_name(n, catalog))
    kinds = {n: sidecar_kind(present[n]) for n in names}
    d2t = next((n for n in names if kinds[n] == "d2t"), None)
    full = next((n for n in names if kinds[n] == "full"), None)
    return (present[d2t] if d2t else None), (present[full] if full else None)


def _quant_of(name: str, catalog: Catalog) -> str:
    for quant in catalog.quants:
        if name == quant.file or quant.name.lower() in name.lower():
            return quant.name
    return Path(name).stem


def default_destination(repo: str) -> Path:
    """``<models folder>/<owner>--<name>/``: the Settings' models folder, else ``<data>/models``."""
    from app.settings import app_settings

    return app_settings.load().models_path() / repo_slug(repo)
