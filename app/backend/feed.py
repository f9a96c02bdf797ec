"""The signed backend feed: one JSON index of prebuilt backend archives, and picking the one for this machine.

A GPU owner should not have to know that an RTX 4090 is sm_89 or which CUDA their driver runs: the publisher
lists every archive once (``fastmtp-backends.json``: file name, size, sha256, flavor, the CUDA version it was
built with, the oldest NVIDIA driver that runs it, the GPU architectures inside, the platform, the
llama-cpp-python version and the patch), signs it with the release key like any other signed file
(a detached Ed25519 ``.sig`` over its exact bytes, the same trust chain: :func:`app.release.trust.decide`),
and the app picks. :func:`select_archive` is the pure choice, :func:`install_from_feed` the whole way:
fetch (capped), verify, select, then the chosen archive goes through :func:`app.backend.prebuilt.install_prebuilt`
with its own signed claim, which must name the bytes the feed names. When nothing fits, the answer is
"build here", with the reason (:class:`NoFittingArchive`). ``docs/release-format.md`` is the written form.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote, urljoin, urlsplit, urlunsplit

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app import __version__ as app_version
from app.backend.events import EventSink
from app.backend.prebuilt import Events, InstalledPrebuilt, fetch_checked, install_prebuilt
from app.backend.signing import BackendClaim, backend_repo, claimed_repo, key_in
from app.core import paths, processes, settings_file
from app.core.cancel import CancelToken
from app.core.errors import BackendError, FastMTPError, VerificationError
from app.core.json_object import load_object
from app.core.platforms import system_name
from app.release import signing, trust
from app.release.catalog import backend_feed_url
from app.release.fetcher import FetchControl, FileRequest, pid_folder
from app.release.manifest import check_file_name, normalize_sha256
from app.release.verify import INTEGRITY_MAX_BYTES, read_capped

FORMAT = "fastmtp-backend-feed/1"
FEED_NAME = "fastmtp-backends.json"
SIGNATURE_SUFFIX = ".sig"
PLATFORMS = ("linux", "windows")
BUILD_HERE = "python -m app backend build"
NO_FIT_KIND = "no-fitting-archive"

Platform = Literal["linux", "windows"]
FeedFlavor = Literal["cpu", "cuda"]

# The driver each CUDA toolkit's GA release needs (NVIDIA's CUDA Toolkit release notes, table 3): what a backend
# built with that CUDA asks of the driver. The publisher may give another minimum per archive.
MIN_DRIVER: dict[str, dict[str, str]] = {
    "linux": {"11.8": "520.61.05", "12.0": "525.60.13", "12.1": "530.30.02", "12.2": "535.54.03",
              "12.3": "545.23.06", "12.4": "550.54.14", "12.5": "555.42.02", "12.6": "560.28.03",
              "12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"},
    "windows": {"11.8": "520.06", "12.0": "527.41", "12.1": "531.14", "12.2": "536.25", "12.3": "545.84",
                "12.4": "551.61", "12.5": "555.85", "12.6": "560.76", "12.8": "570.65", "12.9": "576.02",
                "13.0": "580.88"},
}

_ARCH = re.compile(r"\d{2,3}")


def min_driver_for(cuda: str, platform: str) -> str | None:
    """The oldest driver for a CUDA version: the table's GA entry; a newer minor of a major in the table (13.2)
    takes that major's first release's (NVIDIA's minor version compatibility: its compiled code runs there; the
    publisher gives --min-driver when its PTX needs the newer driver's compiler). None: unknown."""
    table = MIN_DRIVER.get(platform, {})
    if cuda in table:
        return table[cuda]
    major = cuda.split(".")[0]
    known = sorted((v for v in table if v.split(".")[0] == major and version_key(v) < version_key(cuda)),
                   key=version_key)
    return table[known[0]] if known else None
_DRIVER = re.compile(r"\d{2,4}(?:\.\d{1,4}){0,3}")
_CUDA = re.compile(r"\d{1,2}\.\d{1,2}")
FLOOR_FILE = "backend-feed-floor.json"  # in the data folder: the last feed version verified, per repository
VALID_DAYS = 180  # how long a feed signed today is good for, unless the publisher says otherwise
MAX_VERSION = 10**15

log = logging.getLogger(__name__)

_MALFORMED = ("The backend feed is malformed; nothing was installed. Tell whoever published it, or build here: "
              f"`{BUILD_HERE}`.")


# ----------------------------------------------------------------------------- versions and architectures


def version_key(text: str) -> tuple[int, ...]:
    """``550.54.14`` -> ``(550, 54, 14)``: drivers and CUDA versions compare as numbers, not as text."""
    return tuple(int(part) for part in text.split("."))


def normalize_arch(value: object, source: str = "--gpu-arch") -> str:
    """``sm_89``, ``89``, ``8.9`` or ``compute_89`` -> ``89`` (how archives and ``Gpu.cuda_arch`` name it)."""
    text = str(value).strip().lower().removeprefix("sm_").removeprefix("compute_").replace(".", "")
    if not _ARCH.fullmatch(text):
        raise VerificationError(f"{source}: {str(value)[:40]!r} is not a GPU architecture like sm_89 or 8.9.",
                                "Give the compute capability of the GPU (nvidia-smi --query-gpu=compute_cap).")
    return text


def normalize_driver(value: object, source: str = "--driver") -> str:
    text = str(value).strip()
    if not _DRIVER.fullmatch(text):
        raise VerificationError(f"{source}: {text[:40]!r} is not an NVIDIA driver version like 550.54.14.",
                                "Give the version `nvidia-smi` shows as Driver Version.")
    return text


_BUILD_ARCH = re.compile(r"(\d{2,3})([af]?)(?:-(real|virtual))?")


def normalize_build_arch(value: object, source: str) -> str:
    """An archive's architecture as CMake's CUDA_ARCHITECTURES names it: ``86`` (the GPU code and its PTX),
    ``86-real`` (the code only), ``90-virtual`` (PTX only; ``compute_90`` says the same), ``120a`` (the
    architecture-specific features: that GPU only). ``sm_86`` and ``8.6`` are read as ``86``."""
    text = str(value).strip().lower()
    if text.startswith("compute_"):
        text = text.removeprefix("compute_") + "-virtual"
    text = text.removeprefix("sm_")
    text = text.replace(".", "") if re.fullmatch(r"\d{1,2}\.\d[af]?(-real|-virtual)?", text) else text
    if not _BUILD_ARCH.fullmatch(text):
        raise VerificationError(f"{source}: {str(value)[:40]!r} is not a GPU architecture like 86, 90-virtual "
                                "or 120a.", _MALFORMED)
    return text


def arch_runs(build: str, gpu: str) -> str | None:
    """How code built for ``build`` runs on a GPU of compute capability ``gpu`` ("89"): "code" (its compiled code:
    the same major version, a minor not newer than the GPU's: sm_86 runs on sm_89, not on sm_75 or sm_90), "ptx"
    (a ``-virtual`` architecture: PTX the driver compiles on first use for any GPU at least as new: 90-virtual on
    sm_100 and sm_120), or None. ``120a`` (and a plain 12x, which ggml builds as 12xa) runs on exactly that GPU,
    an ``f`` architecture on its family. A plain ``86`` also embeds compute_86 PTX (CMake), but the pick does not
    count on it: a release names the PTX it means to ship as ``-virtual``, as llama.cpp's do."""
    match = _BUILD_ARCH.fullmatch(build)
    if match is None or not gpu.isdigit():
        return None
    number, special, mode = int(match.group(1)), match.group(2), match.group(3)
    target = int(gpu)
    if special == "a" or (not special and 120 <= number <= 129):
        return None if target != number else "ptx" if mode == "virtual" else "code"
    if mode == "virtual":
        return "ptx" if target >= number else None
    if target // 10 == number // 10 and target >= number:
        return "code"
    return None


def covers(archs: Sequence[str], gpu: str) -> str | None:
    """The best way any of ``archs`` runs on ``gpu``: "code" before "ptx"; None when none runs there."""
    ways = {arch_runs(arch, gpu) for arch in archs}
    return "code" if "code" in ways else "ptx" if "ptx" in ways else None


def arch_key(arch: str) -> tuple[int, str]:
    match = _BUILD_ARCH.fullmatch(arch)
    return (int(match.group(1)), arch) if match else (10**6, arch)


def sm(archs: Sequence[str]) -> str:
    """``sm_86, compute_90 (PTX), sm_120a``: GPUs' and archives' architectures in words."""
    def word(arch: str) -> str:
        match = _BUILD_ARCH.fullmatch(arch)
        if match and match.group(3) == "virtual":
            return f"compute_{match.group(1)}{match.group(2)} (PTX)"
        return f"sm_{match.group(1)}{match.group(2)}" if match else arch

    return ", ".join(word(arch) for arch in archs)


# ----------------------------------------------------------------------------- the format


@dataclass(frozen=True)
class FeedArchive:
    """One archive of the feed; its file sits next to the feed, with its own signed manifest beside it."""

    name: str
    size: int
    sha256: str
    flavor: FeedFlavor
    platform: Platform
    cuda_version: str | None  # the CUDA it was built with (None for CPU)
    min_driver: str | None  # the oldest NVIDIA driver it runs on (None for CPU)
    cuda_archs: tuple[str, ...]  # "75", "86", ... (empty for CPU)
    llama_cpp_python_version: str
    patch_id: str | None  # the sha256 of the d2t patch it was built with; None: unpatched

    def label(self) -> str:
        """``CUDA 12.8 for sm_86, sm_89 (linux)``, ``CPU (windows)``: the archive in words."""
        if self.flavor == "cpu":
            return f"CPU ({self.platform})"
        return f"CUDA {self.cuda_version} for {sm(self.cuda_archs)} ({self.platform})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256, "flavor": self.flavor,
                "platform": self.platform, "cuda_version": self.cuda_version, "min_driver": self.min_driver,
                "cuda_archs": list(self.cuda_archs), "llama_cpp_python_version": self.llama_cpp_python_version,
                "patch_id": self.patch_id}


@dataclass(frozen=True)
class BackendFeed:
    repo: str
    date: str
    archives: tuple[FeedArchive, ...]
    version: int | None = None  # monotonic: a later feed of the repository never has a smaller one (the floor)
    expires: datetime | None = None  # after this the feed is stale and refused (an old one replayed)

    def to_dict(self) -> dict[str, Any]:
        return {"repo": self.repo, "date": self.date, "version": self.version,
                "expires": _iso(self.expires) if self.expires else None,
                "archives": [a.to_dict() for a in self.archives]}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _moment(value: object) -> datetime | None:
    """An ISO date with a time zone (``2026-06-01T12:00:00Z``) as an aware datetime; None when it is not one."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def _bad(source: str, what: str) -> VerificationError:
    return VerificationError(f"{source} is not a backend feed: {what}.", _MALFORMED)


def _load(data: bytes, source: str) -> dict[str, Any]:
    return load_object(data, lambda what: _bad(source, what))


def _archive(item: object, source: str, number: int) -> FeedArchive:
    where = f"{source}, archive {number}"
    if not isinstance(item, dict):
        raise _bad(where, f"a JSON {type(item).__name__}, expected an object")
    name = check_file_name(item.get("name"), where)
    where = f"{source}, {name}"
    size = item.get("size")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise _bad(where, f"the size is {size!r}, expected a whole number of bytes")
    flavor, platform = item.get("flavor"), item.get("platform")
    if flavor not in ("cpu", "cuda"):
        raise _bad(where, f"the flavor is {str(flavor)[:20]!r}, expected cpu or cuda")
    if platform not in PLATFORMS:
        raise _bad(where, f"the platform is {str(platform)[:20]!r}, expected one of {', '.join(PLATFORMS)}")
    llama = item.get("llama_cpp_python_version")
    if not isinstance(llama, str) or not llama:
        raise _bad(where, "it names no llama_cpp_python_version")
    patch = item.get("patch_id")
    if patch is not None and not isinstance(patch, str):
        raise _bad(where, "its patch_id is not text")
    archs_value = item.get("cuda_archs", [])
    if not isinstance(archs_value, list):
        raise _bad(where, "its cuda_archs is not a list")
    archs = tuple(normalize_build_arch(a, where) for a in archs_value)
    cuda, driver = item.get("cuda_version"), item.get("min_driver")
    if flavor == "cuda":
        if not isinstance(cuda, str) or not _CUDA.fullmatch(cuda):
            raise _bad(where, f"its cuda_version is {str(cuda)[:20]!r}, expected one like 12.4")
        if not archs:
            raise _bad(where, "a CUDA archive without cuda_archs")
        driver = normalize_driver(driver, f"{where}: min_driver")
    else:
        cuda, driver, archs = None, None, ()
    return FeedArchive(name, size, normalize_sha256(item.get("sha256"), where, name), flavor, platform,
                       cuda, driver, archs, llama, patch)


def parse_feed(data: bytes, source: str = FEED_NAME) -> BackendFeed:
    """The feed's bytes as a :class:`BackendFeed` (call after the signature checked, or in the publisher's tools)."""
    obj = _load(data, source)
    if obj.get("format") != FORMAT:
        raise _bad(source, f"its format is {str(obj.get('format'))[:60]!r}, expected {FORMAT!r}")
    repo = obj.get("repo")
    if not isinstance(repo, str) or not repo:
        raise _bad(source, "it names no repository")
    items = obj.get("archives")
    if not isinstance(items, list) or not items:
        raise _bad(source, "it lists no archives")
    archives = tuple(_archive(item, source, n) for n, item in enumerate(items, 1))
    names = [a.name for a in archives]
    if len(set(names)) != len(names):
        raise _bad(source, "it lists an archive twice")
    version, expires = obj.get("version"), obj.get("expires")
    if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                or not 0 < version < MAX_VERSION):
        raise _bad(source, f"its version is {str(version)[:30]!r}, expected a whole number from 1")
    moment = _moment(expires)
    if expires is not None and moment is None:
        raise _bad(source, f"its expiry is {str(expires)[:40]!r}, expected an ISO date like 2026-06-01T12:00:00Z")
    return BackendFeed(repo, str(obj.get("date", "")), archives, version, moment)


def served_key(data: bytes, source: str) -> Ed25519PublicKey | None:
    """The key the feed carries: a hint for :func:`trust.decide`, never trusted because it is there."""
    return key_in(_load(data, source), source, lambda what: _bad(source, what))


# ----------------------------------------------------------------------------- the publisher's side


def feed_entry(archive: Path, claim: BackendClaim, *, platform: Platform, flavor: FeedFlavor | None = None,
               cuda_version: str | None = None, cuda_archs: Sequence[str] | None = None,
               min_driver: str | None = None) -> FeedArchive:
    """The feed's line for a signed archive: what its claim says, unless the publisher labels it otherwise;
    the minimum driver defaults to the one the CUDA version's GA toolkit needs on ``platform``."""
    flavor = flavor or ("cuda" if claim.backend.get("flavor") == "cuda" else "cpu")
    cuda = cuda_version or claim.backend.get("cuda_version")
    archs = tuple(normalize_build_arch(a, archive.name) for a in (cuda_archs if cuda_archs is not None
                                                                   else claim.backend.get("cuda_archs") or []))
    if flavor == "cuda":
        cuda = ".".join(str(cuda or "").split(".")[:2])
        driver = min_driver or min_driver_for(cuda, platform)
        if driver is None:
            raise BackendError(f"{archive.name}: no minimum driver is known for CUDA {cuda or '?'} on {platform}.",
                               "Give it (--min-driver) from NVIDIA's CUDA Toolkit release notes.")
    else:
        cuda, driver, archs = None, None, ()
    return FeedArchive(claim.archive, claim.size, claim.sha256, flavor, platform, cuda, driver, archs,
                       str(claim.backend.get("llama_cpp_python_version") or ""), claim.backend.get("patch_sha256"))


@dataclass(frozen=True)
class WrittenFeed:
    feed: Path
    signature: Path
    fingerprint: str
    body: BackendFeed

    def to_dict(self) -> dict[str, Any]:
        return {"feed": str(self.feed), "signature": str(self.signature), "fingerprint": self.fingerprint,
                **self.body.to_dict()}


def write_feed(archives: Sequence[FeedArchive], key: Ed25519PrivateKey, out: Path, *,
               repo: str | None = None, name: str = FEED_NAME, version: int | None = None,
               expires: datetime | None = None, valid_days: float = VALID_DAYS) -> WrittenFeed:
    """Write ``out/<name>`` and its detached signature ``<name>.sig`` (publish them beside the archives).

    ``version`` (default: the signing time in seconds since 1970, so each later signing is larger) is the feed's
    monotonic version, ``expires`` (default: ``valid_days`` from now) when it goes stale; both are signed with it.
    """
    moment = datetime.now(UTC).replace(microsecond=0)
    version = int(moment.timestamp()) if version is None else version
    body = {"format": FORMAT, "repo": repo or backend_repo(), "date": _iso(moment), "version": version,
            "expires": _iso(expires or moment + timedelta(days=valid_days)),
            "archives": [a.to_dict() for a in archives],
            "public_key": signing.public_key_pem(key.public_key()).decode("ascii"),
            "tool": f"fastmtp-chat {app_version} backend sign-feed"}
    data = (json.dumps(body, indent=2) + "\n").encode("utf-8")
    parsed = parse_feed(data, name)  # what we publish, we could read back
    out.mkdir(parents=True, exist_ok=True)
    feed, sig = out / name, out / (name + SIGNATURE_SUFFIX)
    for path, content in ((feed, data), (sig, signing.sign(key, data))):
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, path)
    return WrittenFeed(feed, sig, signing.fingerprint(key.public_key()), parsed)


# ----------------------------------------------------------------------------- choosing (pure)


@dataclass(frozen=True)
class Machine:
    """What the choice depends on: the platform, the GPUs' architectures and the NVIDIA driver."""

    platform: str
    gpu_archs: tuple[str, ...] = ()
    driver: str | None = None

    def describe(self) -> str:
        if not self.gpu_archs:
            return f"{self.platform}, no NVIDIA GPU"
        return f"{self.platform}, {sm(self.gpu_archs)}, driver {self.driver or 'unknown'}"

    def to_dict(self) -> dict[str, Any]:
        return {"platform": self.platform, "gpu_archs": list(self.gpu_archs), "driver": self.driver}


@dataclass(frozen=True)
class Selection:
    """The archive for this machine and why, or (``archive`` None) why none fits: then build here."""

    machine: Machine
    archive: FeedArchive | None
    reason: str
    passed_over: tuple[str, ...] = ()  # each other archive, and why it was not the one

    @property
    def build_here(self) -> bool:
        return self.archive is None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"machine": self.machine.to_dict(),
                                "archive": self.archive.to_dict() if self.archive else None,
                                "reason": self.reason, "passed_over": list(self.passed_over),
                                "build_here": self.build_here}
        if self.build_here:
            data["advice"] = f"Build here: `{BUILD_HERE}`"
        return data


def _why_not(archive: FeedArchive, machine: Machine) -> str | None:
    """Why ``archive`` cannot run here; None when it can."""
    if archive.platform != machine.platform:
        return f"it is for {archive.platform}"
    if not machine.gpu_archs:
        return "it needs an NVIDIA GPU" if archive.flavor == "cuda" else None
    if archive.flavor == "cpu":
        return "a CPU backend, and this machine has an NVIDIA GPU"
    missing = [a for a in machine.gpu_archs if covers(archive.cuda_archs, a) is None]
    if missing:
        return f"it holds no {sm(missing)} (only {sm(archive.cuda_archs)})"
    if machine.driver is None:
        return "the NVIDIA driver version is unknown"
    if archive.min_driver and version_key(machine.driver) < version_key(archive.min_driver):
        return f"driver {machine.driver} is older than the {archive.min_driver} that CUDA {archive.cuda_version} needs"
    return None


def select_archive(archives: Sequence[FeedArchive], machine: Machine) -> Selection:
    """The archive to install on ``machine``: no GPU -> the CPU archive; with GPUs, one whose architectures include
    every GPU's and whose minimum driver is not newer than the installed one, the newest CUDA among them. None
    fits -> ``archive`` None and the reason, for "build here"."""
    why = {a.name: _why_not(a, machine) for a in archives}
    fits = [a for a in archives if why[a.name] is None]
    if fits:
        best = max(fits, key=lambda a: (version_key(a.cuda_version) if a.cuda_version else (),
                                        sum(covers(a.cuda_archs, g) == "code" for g in machine.gpu_archs)))
        passed = tuple(f"{a.name}: {why[a.name] or _older(a, best)}" for a in archives if a is not best)
        return Selection(machine, best, _chosen_reason(best, machine, len(fits)), passed)
    passed = tuple(f"{a.name}: {why[a.name]}" for a in archives)
    return Selection(machine, None, _no_fit_reason(archives, machine), passed)


def _older(archive: FeedArchive, best: FeedArchive) -> str:
    return f"CUDA {archive.cuda_version} is older than CUDA {best.cuda_version}, which this driver runs too"


def _chosen_reason(best: FeedArchive, machine: Machine, fitting: int) -> str:
    if best.flavor == "cpu":
        return f"No NVIDIA GPU here: {best.name} is the CPU backend for {machine.platform}."
    newest = " the newest CUDA this driver supports among" if fitting > 1 else ""
    jit = [g for g in machine.gpu_archs if covers(best.cuda_archs, g) == "ptx"]
    ptx = (f" ({sm(jit)} from PTX: the driver compiles it on first use, so the first start takes longer)"
           if jit else "")
    return (f"{best.name} holds {sm(machine.gpu_archs)}{ptx} (it is built for {sm(best.cuda_archs)}) and needs driver "
            f"{best.min_driver} for CUDA {best.cuda_version}; this one is {machine.driver}. "
            f"It is{newest or ' the only one of'} {fitting} fitting archive{'s' if fitting > 1 else ''}.")


def _no_fit_reason(archives: Sequence[FeedArchive], machine: Machine) -> str:
    """One sentence that names what is missing: the platform, the architecture, or the driver."""
    here = [a for a in archives if a.platform == machine.platform]
    if not here:
        return f"The feed has no archive for {machine.platform}."
    if not machine.gpu_archs:
        return f"No NVIDIA GPU here, and the feed has no CPU archive for {machine.platform}."
    cuda = [a for a in here if a.flavor == "cuda"]
    if not cuda:
        return f"The feed has no CUDA archive for {machine.platform}."
    missing = [g for g in machine.gpu_archs if not any(covers(a.cuda_archs, g) for a in cuda)]
    if missing:
        have = sorted({x for a in cuda for x in a.cuda_archs}, key=arch_key)
        return f"No archive for {sm(missing)} (the feed's CUDA archives hold {sm(have)})."
    holding = [a for a in cuda if all(covers(a.cuda_archs, g) for g in machine.gpu_archs)]
    if not holding:
        return f"No single archive holds all of {sm(machine.gpu_archs)}."
    if machine.driver is None:
        return ("The NVIDIA driver version is unknown (nvidia-smi did not say), so no CUDA archive can be checked "
                "against it; give it with --driver.")
    nearest = min(holding, key=lambda a: version_key(a.min_driver or "0"))
    return f"Driver {machine.driver} is older than the {nearest.min_driver} that CUDA {nearest.cuda_version} needs."


# ----------------------------------------------------------------------------- this machine




def parse_driver_version(text: str) -> str | None:
    """The driver from the header of plain ``nvidia-smi`` output ("Driver Version: 550.54.14")."""
    match = re.search(r"Driver Version\s*:\s*(\d+(?:\.\d+){0,3})", text)
    return match.group(1) if match else None


def detect_driver() -> str | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        proc = subprocess.run([smi], capture_output=True, text=True, timeout=30, check=False,
                              creationflags=processes.creationflags())
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_driver_version(proc.stdout) if proc.returncode == 0 else None


def detect_machine(gpu_archs: Sequence[str] | None = None, driver: str | None = None,
                   platform: str | None = None) -> Machine:
    """This machine; ``gpu_archs`` (``[]``: no GPU) and ``driver`` replace what nvidia-smi says."""
    from app.backend.toolchain import detect_gpus

    archs = [normalize_arch(a) for a in gpu_archs] if gpu_archs is not None else \
        [g.cuda_arch for g in detect_gpus()]
    ordered = tuple(sorted(set(archs), key=int))
    found = normalize_driver(driver) if driver else (detect_driver() if ordered else None)
    return Machine(system_name(platform), ordered, found)


# ----------------------------------------------------------------------------- fetching, verifying, installing


class NoFittingArchive(BackendError):
    """The feed holds no archive for this machine: build here instead (the reason says why)."""

    kind = NO_FIT_KIND  # exit code 1: not a verification failure, the feed is fine, it just has nothing for us

    def __init__(self, selection: Selection, feed_url: str) -> None:
        super().__init__(f"No prebuilt backend in the feed fits this machine ({selection.machine.describe()}): "
                         f"{selection.reason}",
                         f"Build here instead: `{BUILD_HERE}` (compiles the backend for this machine's GPU and "
                         "driver; a few minutes, later builds reuse the cache).")
        self.selection = selection
        self.feed_url = feed_url

    def to_dict(self) -> dict[str, Any]:
        """The error's words plus the reason, the command that builds here and the whole choice."""
        return {**super().to_dict(), "reason": self.selection.reason, "build_command": BUILD_HERE,
                "feed": self.feed_url, "selection": self.selection.to_dict()}

    def to_json(self) -> dict[str, Any]:
        """The CLI's ``--json`` error: :meth:`to_dict` with the machine-readable ``kind``."""
        return {**self.to_dict(), "kind": NO_FIT_KIND}


@dataclass(frozen=True)
class VerifiedFeed:
    """A feed whose signature holds with a trusted key."""

    url: str
    feed: BackendFeed
    fingerprint: str
    key_source: str  # "shipped", "user", or "new" (trusted now, pinned once an archive installed)
    sha256: str = ""  # of the feed's bytes, kept with the floor
    warning: str = ""  # the floor record was damaged and set aside (then a replay cannot be refused this once)

    def archive_url(self, archive: FeedArchive) -> str:
        return urljoin(self.url, quote(archive.name))

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "signed_by": self.fingerprint, "key_source": self.key_source,
                **self.feed.to_dict(), **({"warning": self.warning} if self.warning else {})}


# ----------------------------------------------------------------------------- the rollback floor


def _floor_path() -> Path:
    return paths.data_dir() / FLOOR_FILE


def _floor_entry(entry: object) -> bool:
    return isinstance(entry, dict) and isinstance(entry.get("version"), int) \
        and not isinstance(entry["version"], bool) and 0 < entry["version"] < MAX_VERSION


def check_fresh(feed: BackendFeed, *, now: datetime | None = None) -> str:
    """Refuse a feed without a version or expiry, an expired one, or one older than the last verified for its
    repository (the floor); the warning when the floor record was damaged and set aside (else empty)."""
    advice = (f"Nothing was installed. A server offering an old feed may be hiding newer backends or fixes; try "
              f"again later, tell whoever published it, or build here: `{BUILD_HERE}`.")
    if feed.version is None or feed.expires is None:
        raise VerificationError("The backend feed carries no version or expiry (it was signed by an older "
                                "`backend sign-feed`), so an old feed replayed by a server could not be told from "
                                "the current one.", "Nothing was installed. Ask whoever published it to sign it "
                                f"again with a current FastMTP Chat, or build here: `{BUILD_HERE}`.")
    now = now or datetime.now(UTC)
    if feed.expires < now:
        raise VerificationError(f"The backend feed (version {feed.version}, signed {feed.date or 'on an unknown date'}"
                                f") expired on {_iso(feed.expires)}: it is stale.", advice)
    floors, damaged = settings_file.load_floors(_floor_path(), _floor_entry)
    warning = ""
    if damaged:
        warning = (f"The record of the last backend feed verified: {damaged} Until the next verified feed, an older "
                   "feed replayed by a server cannot be refused.")
        log.warning("%s", warning)
    seen = floors.get(feed.repo)
    if seen is not None and feed.version < seen["version"]:
        raise VerificationError(f"The backend feed is version {feed.version}, older than version {seen['version']} "
                                f"verified before{' (on ' + str(seen['date'])[:40] + ')' if seen.get('date') else ''}"
                                ": it was rolled back.", advice)
    return warning


def remember_floor(verified: VerifiedFeed) -> None:
    """Raise the floor of the feed's repository to its version (never lower it); a write that fails is logged:
    the feed verified, only a later replay of an older one would then go unnoticed."""
    feed = verified.feed
    if feed.version is None:
        return
    path = _floor_path()
    floors, _ = settings_file.load_floors(path, _floor_entry)
    seen = floors.get(feed.repo)
    if seen is not None and seen["version"] >= feed.version:
        return
    floors[feed.repo] = {"version": feed.version, "sha256": verified.sha256, "date": feed.date,
                         "verified": _iso(datetime.now(UTC))}
    try:
        paths.ensure_dir(path.parent, "data")
        settings_file.write_json(path, floors)
    except (OSError, FastMTPError) as exc:
        log.warning("cannot record the backend feed floor in %s: %s", path, exc)


def _refuse_legacy_after_own(legacy: str) -> None:
    """A feed claiming the model publisher's repository (signed before issue 35) once one of the app's own was
    verified here: an older way of publishing, replayed; refused like a rolled-back feed."""
    floors, _ = settings_file.load_floors(_floor_path(), _floor_entry)
    own = floors.get(backend_repo())
    if own is not None:
        raise VerificationError(f"The backend feed is signed for {legacy}, the way feeds were published before "
                                f"version {own['version']} of {backend_repo()}'s own feed was verified here: it was "
                                "rolled back.", "Nothing was installed. A server offering an old feed may be hiding "
                                f"newer backends or fixes; tell whoever published it, or build here: `{BUILD_HERE}`.")


def verify_feed(data: bytes, raw_signature: bytes, url: str, *, repo: str | None = None,
                trust_fingerprint: str | None = None, confirm: trust.Confirm | None = None) -> VerifiedFeed:
    """The key (trusted for ``repo``, exactly as for a release), the signature, then the contents.

    Raises:
        TrustError: the feed's key is not the one trusted (the message names both fingerprints) or not trusted.
        VerificationError: the signature does not hold, the feed is malformed or for another repository.
    """
    explicit = repo is not None
    repo = claimed_repo(repo, _load(data, FEED_NAME).get("repo"))  # the app's, or an older feed's legacy one
    if not explicit and repo != backend_repo():
        _refuse_legacy_after_own(repo)
    key, is_new = trust.decide(repo, served_key(data, FEED_NAME), trust_fingerprint=trust_fingerprint,
                               confirm=confirm)
    signing.verify(key, data, signing.decode_signature(raw_signature, FEED_NAME + SIGNATURE_SUFFIX), FEED_NAME)
    feed = parse_feed(data, FEED_NAME)
    if feed.repo != repo:
        raise VerificationError(f"The backend feed is signed for the repository {feed.repo}, not {repo}.",
                                f"Nothing was installed. Pass --repo {feed.repo} if you mean to trust its key.")
    warning = check_fresh(feed)
    fp = signing.fingerprint(key)
    known = [k.source for k in trust.trusted_keys(repo) if k.fingerprint == fp]
    verified = VerifiedFeed(url, feed, fp, "new" if is_new else (known or ["user"])[0],
                            hashlib.sha256(data).hexdigest(), warning)
    if not is_new:  # a key trusted only now raises the floor once an archive it signed installed
        remember_floor(verified)
    return verified


def _signature_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=parts.path + SIGNATURE_SUFFIX))


def read_feed(url: str | None = None, *, repo: str | None = None, trust_fingerprint: str | None = None,
              confirm: trust.Confirm | None = None, on_event: EventSink | None = None,
              cancel: CancelToken | None = None) -> VerifiedFeed:
    """Fetch the feed and its signature (each capped at 1 MiB, afresh, through the release fetcher), verify them.

    ``url`` defaults to the catalog's ``[backend_feed]`` (``FASTMTP_BACKEND_FEED_URL`` replaces it).
    """
    url = backend_feed_url(url)
    events = Events(on_event)
    cancel = cancel or CancelToken()
    # this run's own folder; those of killed runs (their process is gone) are removed first
    folder = pid_folder(paths.ensure_dir(paths.data_dir() / "downloads" / "backends", "downloads"), "feed")
    control = FetchControl()
    cancel.set_kill(control.cancel)
    try:
        events.emit("step", f"downloading the backend feed {url}", 1)
        shutil.rmtree(folder, ignore_errors=True)
        requests = [FileRequest(FEED_NAME, [url], max_size=INTEGRITY_MAX_BYTES),
                    FileRequest(FEED_NAME + SIGNATURE_SUFFIX, [_signature_url(url)], max_size=INTEGRITY_MAX_BYTES)]
        fetch_checked(requests, folder, control, events, cancel)
        data = read_capped(folder / FEED_NAME, "backend feed")
        raw_signature = read_capped(folder / (FEED_NAME + SIGNATURE_SUFFIX), "backend feed signature")
    finally:
        cancel.set_kill(None)
        shutil.rmtree(folder, ignore_errors=True)
    events.emit("step", "checking the feed's signature, the publisher key, its version and expiry", 3)
    verified = verify_feed(data, raw_signature, url, repo=repo, trust_fingerprint=trust_fingerprint,
                           confirm=confirm)
    if verified.warning:
        events.emit("log", verified.warning)
    return verified


def claim_check(archive: FeedArchive) -> Callable[[BackendClaim], None]:
    """The archive's own signed claim must name the bytes and the backend the feed names."""

    def check(claim: BackendClaim) -> None:
        pairs = (("name", claim.archive, archive.name), ("size", claim.size, archive.size),
                 ("sha256", claim.sha256, archive.sha256),
                 ("llama_cpp_python_version", claim.backend.get("llama_cpp_python_version"),
                  archive.llama_cpp_python_version),
                 ("patch", claim.backend.get("patch_sha256"), archive.patch_id))
        differ = [f"{what} is {signed!r} in its signed manifest, {listed!r} in the feed"
                  for what, signed, listed in pairs if signed != listed]
        if differ:
            raise VerificationError(f"{archive.name} is not the archive the feed lists: " + "; ".join(differ) + ".",
                                    "Nothing was installed. The feed and the archive do not belong together; "
                                    "tell whoever published them.")

    return check


@dataclass(frozen=True)
class FeedInstall:
    """What ``backend install --feed`` did: the feed, the choice, and the installed backend."""

    feed: VerifiedFeed
    selection: Selection
    installed: InstalledPrebuilt

    def to_dict(self) -> dict[str, Any]:
        return {**self.installed.to_dict(), "feed": self.feed.url, "feed_signed_by": self.feed.fingerprint,
                "selection": self.selection.to_dict()}


def install_from_feed(url: str | None = None, *, machine: Machine | None = None, repo: str | None = None,
                      trust_fingerprint: str | None = None, confirm: trust.Confirm | None = None,
                      activate: bool = True, on_event: EventSink | None = None,
                      on_selection: Callable[[Selection], None] | None = None,
                      cancel: CancelToken | None = None) -> FeedInstall:
    """Fetch and verify the feed, pick the archive for ``machine`` (detected by default), then install it as a
    signed prebuilt backend (its signed claim, sha256 and self-test, as ``backend install URL``).

    Raises:
        NoFittingArchive: nothing in the feed fits; its message is the reason, its advice "build here".
        TrustError, VerificationError, DownloadError, BuildCancelled, BackendError: as :func:`install_prebuilt`.
    """
    cancel = cancel or CancelToken()
    verified = read_feed(url, repo=repo, trust_fingerprint=trust_fingerprint, confirm=confirm, on_event=on_event,
                         cancel=cancel)
    machine = machine or detect_machine()
    selection = select_archive(verified.feed.archives, machine)
    if on_selection is not None:
        on_selection(selection)
    if selection.archive is None:
        raise NoFittingArchive(selection, verified.url)
    chosen = selection.archive
    Events(on_event).emit("step", f"picked {chosen.name} ({chosen.label()}): {selection.reason}", 5)
    # the feed's key, already trusted (or confirmed just now), must sign the archive too: no second question
    installed = install_prebuilt(verified.archive_url(chosen), repo=verified.feed.repo,
                                 trust_fingerprint=verified.fingerprint, confirm=None, activate=activate,
                                 on_event=on_event, cancel=cancel, check_claim=claim_check(chosen))
    remember_floor(verified)
    return FeedInstall(verified, selection, installed)
