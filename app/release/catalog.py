"""The release catalog (``resources/catalog.toml``) and the endpoints files are fetched from.

The catalog says what we expect before anything is downloaded: the repository, the quantizations and
their approximate sizes, the sidecar, the integrity files and the target's shape for the fit advice.
The signed manifest stays the truth about exact names, sizes and hashes.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from app.core import paths
from app.core.errors import FastMTPError
from app.core.netaddr import BadUrl, web_url
from app.core.resources import resources_dir
from app.core.safe_paths import check_repo

EndpointKind = Literal["hf", "plain"]
HUB_URL = "https://huggingface.co"


class CatalogError(FastMTPError):
    """The catalog or the user's endpoint list cannot be read, or a name is not in it."""

    kind = "catalog-invalid"  # exit code 2, bad usage (core.errors.EXIT_CODES)


@dataclass(frozen=True)
class CatalogFile:
    name: str
    file: str
    size: int | None
    approximate: bool


@dataclass(frozen=True)
class Integrity:
    """Names of the files that make up the release's trust chain."""

    checksums: str
    manifest: str
    provenance: str
    public_key: str
    patch: str
    patch_size: int | None
    signature_suffixes: tuple[str, ...]

    def signature_names(self, signed: str) -> list[str]:
        return [signed + suffix for suffix in self.signature_suffixes]

    @property
    def metadata_names(self) -> list[str]:
        """Every integrity file name except the patch (which is a payload file checked by the manifest)."""
        names = [self.checksums, self.manifest, self.provenance, self.public_key]
        return names + self.signature_names(self.manifest) + self.signature_names(self.provenance)


@dataclass(frozen=True)
class Architecture:
    n_embd: int
    n_layer: int
    full_attention_interval: int
    n_head_kv: int
    head_dim: int
    kv_bytes: int
    linear_v_heads: int
    linear_key_dim: int
    linear_value_dim: int
    conv_kernel: int
    mtp_layers: int
    overhead_mib: int


@dataclass(frozen=True)
class Endpoint:
    """Where release files can be fetched: an HF-compatible host or a plain base URL."""

    kind: EndpointKind
    url: str
    name: str = ""

    def file_url(self, repo: str, revision: str, file: str) -> str:
        base = self.url.rstrip("/")
        if self.kind == "hf":
            return f"{base}/{repo}/resolve/{quote(revision, safe='')}/{quote(file)}"
        return f"{base}/{quote(file)}"

    @property
    def is_hub(self) -> bool:
        return self.kind == "hf" and self.url.rstrip("/") == HUB_URL

    def to_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "url": self.url, "name": self.name}


@dataclass(frozen=True)
class Catalog:
    repo: str
    revision: str
    model: str
    default_quant: str
    endpoints: tuple[Endpoint, ...]
    sidecar: CatalogFile
    quants: tuple[CatalogFile, ...]
    integrity: Integrity
    architecture: Architecture
    backend_feed: str | None = None  # the signed index of prebuilt backends ([backend_feed] url)

    def quant(self, name: str) -> CatalogFile:
        for quant in self.quants:
            if quant.name.lower() == name.lower():
                return quant
        known = ", ".join(q.name for q in self.quants)
        raise CatalogError(f"Unknown quantization {name!r}.", f"Pick one of: {known}.")


def _get(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = table.get(key)
    if not isinstance(value, kind):
        raise CatalogError(f"resources/catalog.toml: [{where}] needs {key} ({kind.__name__}).",
                           "Reinstall the app: its catalog is damaged.")
    return value


def _file(table: dict[str, Any], where: str, name: str) -> CatalogFile:
    size = table.get("size_bytes")
    return CatalogFile(name=name, file=_get(table, "file", str, where),
                       size=size if isinstance(size, int) else None, approximate=bool(table.get("approximate", True)))


def parse_catalog(data: dict[str, Any]) -> Catalog:
    """Build a :class:`Catalog` from the TOML tables (kept separate from loading for tests)."""
    release = _get(data, "release", dict, "release")
    integ = _get(data, "integrity", dict, "integrity")
    arch = _get(data, "architecture", dict, "architecture")
    endpoints = tuple(Endpoint(kind=_endpoint_kind(e.get("kind")), url=_get(e, "url", str, "endpoints"),
                               name=str(e.get("name", ""))) for e in _get(data, "endpoints", list, "endpoints"))
    quants = tuple(_file(q, "quants", _get(q, "name", str, "quants")) for q in _get(data, "quants", list, "quants"))
    patch_size = integ.get("patch_size_bytes")
    return Catalog(
        repo=_get(release, "repo", str, "release"),
        revision=str(release.get("revision", "main")),
        model=_get(release, "model", str, "release"),
        default_quant=_get(release, "default_quant", str, "release"),
        endpoints=endpoints,
        sidecar=_file(_get(data, "sidecar", dict, "sidecar"), "sidecar", "sidecar"),
        quants=quants,
        integrity=Integrity(
            checksums=_get(integ, "checksums", str, "integrity"),
            manifest=_get(integ, "manifest", str, "integrity"),
            provenance=_get(integ, "provenance", str, "integrity"),
            public_key=_get(integ, "public_key", str, "integrity"),
            patch=_get(integ, "patch", str, "integrity"),
            patch_size=patch_size if isinstance(patch_size, int) else None,
            signature_suffixes=tuple(_get(integ, "signature_suffixes", list, "integrity")),
        ),
        architecture=Architecture(**{key: _get(arch, key, int, "architecture")
                                     for key in Architecture.__dataclass_fields__}),
        backend_feed=_backend_feed(data.get("backend_feed")),
    )


def _backend_feed(table: object) -> str | None:
    """``[backend_feed] url``: optional (a catalog without it offers no feed), but never a non-http(s) URL."""
    if table is None:
        return None
    url = table.get("url") if isinstance(table, dict) else None
    if not isinstance(url, str):
        raise CatalogError("resources/catalog.toml: [backend_feed] needs url (str).",
                           "Reinstall the app: its catalog is damaged.")
    return check_url(url) if url else None


BACKEND_FEED_ENV = "FASTMTP_BACKEND_FEED_URL"


def backend_feed_url(url: str | None = None) -> str:
    """Where the signed backend feed is: ``url`` (``--feed``), else ``FASTMTP_BACKEND_FEED_URL`` (a private
    mirror, tests), else the catalog's ``[backend_feed] url``."""
    chosen = url or os.environ.get(BACKEND_FEED_ENV) or load_catalog().backend_feed
    if not chosen:
        raise CatalogError("No backend feed is known: the catalog names none.",
                           f"Give its URL with --feed URL (or set {BACKEND_FEED_ENV}).")
    return check_url(chosen)


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalog shipped with the app (read once per process)."""
    path = resources_dir() / "catalog.toml"
    try:
        with path.open("rb") as handle:
            return parse_catalog(tomllib.load(handle))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogError(f"Cannot read the release catalog {path}: {exc}", "Reinstall the app.") from exc


def repo_slug(repo: str) -> str:
    """A folder name for a repository id: ``owner/name`` -> ``owner--name``.

    Raises:
        UnsafeInputError: the id is not a plain ``owner/name`` (``..``, more slashes, a drive, odd characters).
    """
    return check_repo(repo, "The repository setting", "Name the repository as owner/name (letters, digits, . _ + -); "
                      "nothing was written.").replace("/", "--")


# ----------------------------------------------------------------------------- user endpoints


def _endpoint_kind(value: object) -> EndpointKind:
    if value == "hf":
        return "hf"
    if value == "plain":
        return "plain"
    raise CatalogError(f"Unknown endpoint kind {value!r}.", "Use 'hf' (HF-compatible host) or 'plain' (base URL).")


def check_url(url: str) -> str:
    """Accept http(s) URLs with a well-formed host and a port from 1 to 65535 (``netaddr.web_url``, the one URL
    parser); anything else is a usage error the user can fix."""
    try:
        web_url(url)
    except BadUrl as exc:
        raise CatalogError(f"{url[:200]!r} is not an http(s) URL that can be used: {exc}.",
                           "Give a URL like https://mirror.example.org/models") from None
    return url.rstrip("/")


def _endpoints_file() -> Path:
    return paths.config_dir() / "endpoints.json"


def user_endpoints(*, checked: bool = True) -> list[Endpoint]:
    """Mirrors the user added, in the order they were added (tried before the hub).

    The file may have been edited by hand, so every URL is checked as ``mirror add`` checks it: a
    ``file:`` URL or one without a host is a :class:`CatalogError` that names it. ``checked=False`` gives
    the entries as written (for ``mirror remove`` and ``mirror add``, so a bad entry can be removed).
    """
    path = _endpoints_file()
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        endpoints = [Endpoint(kind=_endpoint_kind(e["kind"]), url=str(e["url"]), name=str(e.get("name", "")))
                     for e in data.get("endpoints", [])]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CatalogError(f"Cannot read the mirror list {path}: {exc}",
                           "Fix or delete that file; it holds only mirror URLs.") from exc
    if checked:
        for endpoint in endpoints:
            try:
                check_url(endpoint.url)
            except CatalogError:
                raise CatalogError(f"The mirror list {path} holds {endpoint.url!r}, which is not an http(s) URL "
                                   "with a host; it is refused.",
                                   f"Remove it with `python -m app mirror remove {endpoint.url}` or fix the file; "
                                   "mirrors are https:// (or http://) URLs.") from None
    return endpoints


def _save_user_endpoints(endpoints: list[Endpoint]) -> None:
    path = _endpoints_file()
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"endpoints": [e.to_dict() for e in endpoints]}, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def add_user_endpoint(kind: EndpointKind, url: str) -> Endpoint:
    endpoint = Endpoint(kind=kind, url=check_url(url))
    endpoints = [e for e in user_endpoints(checked=False) if e.url != endpoint.url]
    _save_user_endpoints([*endpoints, endpoint])
    return endpoint


def remove_user_endpoint(url: str) -> bool:
    endpoints = user_endpoints(checked=False)
    kept = [e for e in endpoints if e.url not in (url, url.rstrip("/"))]
    _save_user_endpoints(kept)
    return len(kept) != len(endpoints)


def endpoints_for(endpoint: str | None = None, base_url: str | None = None) -> list[Endpoint]:
    """The endpoints one fetch tries, in order: the one the user named, else their mirrors, then the hub."""
    if endpoint:
        return [Endpoint(kind="hf", url=check_url(endpoint), name="--endpoint")]
    if base_url:
        return [Endpoint(kind="plain", url=check_url(base_url), name="--base-url")]
    return [*user_endpoints(), *load_catalog().endpoints]
