"""The release trust chain: signatures, trusted keys, rollback, checksums, file checks, safe installs.

Every release here is made and signed in the test with a key made in the test; nothing touches the
network. Each failure must name the file and the check, and leave nothing in the models folder.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli import main
from app.core import paths
from app.core.errors import TrustError, VerificationError
from app.models.installed import default_destination
from app.release import signing, trust
from app.release.catalog import Endpoint, load_catalog
from app.release.install import install
from app.release.manifest import parse_manifest, parse_sha256sums
from app.release.publish import KeyPair, keygen, sign_release
from app.release.verify import VerifiedRelease, verified_release_patch, verify_metadata, verify_release

CATALOG = load_catalog()
INTEG = CATALOG.integrity
MODEL = CATALOG.quant("Q4_K_P").file
SIDECAR = CATALOG.sidecar.file
PATCH = INTEG.patch
FILES = {MODEL: b"GGUF" + bytes(range(256)) * 40, SIDECAR: b"GGUF-sidecar" * 300, PATCH: b"--- a/x\n+++ b/x\n"}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test gets its own config (trusted keys, rollback floor) and data (models) folders."""
    monkeypatch.setenv("FASTMTP_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("FASTMTP_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture
def key(tmp_path: Path) -> KeyPair:
    return keygen(tmp_path / "keys")


def make_release(folder: Path, key: KeyPair, version: str = "1", expires: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    sign_release(folder, key.private, version=version, expires=expires)
    return folder


@pytest.fixture
def release(tmp_path: Path, key: KeyPair) -> Path:
    return make_release(tmp_path / "release", key)


def resign_manifest(folder: Path, key: KeyPair, manifest: dict[str, Any]) -> None:
    """Write a hand-made manifest and sign it (a publisher's variant, or an attacker holding a key)."""
    data = json.dumps(manifest).encode()
    (folder / INTEG.manifest).write_bytes(data)
    private = signing.load_private_key(key.private)
    (folder / (INTEG.manifest + ".sig")).write_bytes(signing.sign(private, data))


def check_and_install(folder: Path, **kwargs: Any) -> VerifiedRelease:
    """Verify, then install what verified: the same order ``fetch`` uses."""
    result = verify_release(folder, **kwargs)
    install(result.metadata, {n: p for n, p in result.files.items()}, default_destination(CATALOG.repo))
    return result


def models_dir_is_empty() -> bool:
    return not any(paths.models_dir().rglob("*"))


def test_signed_release_verifies_and_installs_by_rename(release: Path, key: KeyPair) -> None:
    result = check_and_install(release, trust_fingerprint=key.fingerprint)
    dest = default_destination(CATALOG.repo)
    assert sorted(result.files) == sorted(FILES)
    for name, data in FILES.items():
        assert (dest / name).read_bytes() == data
        assert not (release / name).exists()  # moved, not copied
    assert (dest / INTEG.manifest).is_file() and (dest / (INTEG.manifest + ".sig")).is_file()
    again = verify_release(dest)  # the key is pinned now: no fingerprint needed
    assert again.metadata.fingerprint == key.fingerprint and not again.metadata.key_pinned_now


def test_wrong_signature_is_refused_and_nothing_installed(release: Path, key: KeyPair) -> None:
    sig = release / (INTEG.manifest + ".sig")
    sig.write_bytes(bytes([sig.read_bytes()[0] ^ 1]) + sig.read_bytes()[1:])
    with pytest.raises(VerificationError, match=f"signature of {INTEG.manifest} does not verify"):
        check_and_install(release, trust_fingerprint=key.fingerprint)
    assert models_dir_is_empty()
    assert trust.user_keys() == []  # a key whose signature failed is not pinned


def test_provenance_signature_is_checked_too(release: Path, key: KeyPair) -> None:
    (release / INTEG.provenance).write_bytes((release / INTEG.provenance).read_bytes().replace(b"4df29be", b"0000000"))
    with pytest.raises(VerificationError, match=f"signature of {INTEG.provenance} does not verify"):
        verify_release(release, trust_fingerprint=key.fingerprint)


def test_swapped_public_key_is_a_hard_stop(tmp_path: Path, release: Path, key: KeyPair) -> None:
    verify_release(release, trust_fingerprint=key.fingerprint)
    attacker = keygen(tmp_path / "attacker")
    forged = make_release(tmp_path / "forged", attacker, version="2")
    with pytest.raises(TrustError, match="PUBLISHER KEY HAS CHANGED") as info:
        check_and_install(forged)
    assert attacker.fingerprint in info.value.message and key.fingerprint in info.value.message
    with pytest.raises(TrustError, match=r"not the .* you asked to trust"):
        verify_release(forged, trust_fingerprint=key.fingerprint)
    assert models_dir_is_empty()


def test_real_key_served_with_a_forged_signature_fails(tmp_path: Path, release: Path, key: KeyPair) -> None:
    attacker = keygen(tmp_path / "attacker")
    manifest = json.loads((release / INTEG.manifest).read_text())
    resign_manifest(release, attacker, manifest)
    with pytest.raises(VerificationError, match="does not verify"):
        verify_release(release, trust_fingerprint=key.fingerprint)


def test_served_key_is_never_trusted_without_confirmation(release: Path) -> None:
    with pytest.raises(TrustError, match="no terminal") as info:
        check_and_install(release)
    assert "--trust-fingerprint" in info.value.advice
    assert models_dir_is_empty() and trust.user_keys() == []


def test_first_use_is_trusted_only_after_the_user_confirms(release: Path, key: KeyPair) -> None:
    asked: list[str] = []
    with pytest.raises(TrustError, match="did not trust"):
        verify_release(release, confirm=lambda repo, fp: asked.append(fp) is not None)
    assert asked == [key.fingerprint] and trust.user_keys() == []
    verify_release(release, confirm=lambda repo, fp: True)
    assert [k.fingerprint for k in trust.user_keys()] == [key.fingerprint]


def test_terminal_prompt_needs_a_typed_yes(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("builtins.input", lambda _prompt: "yes")
    assert trust.terminal_confirm("o/r", "abcd:ef01")
    assert "abcd:ef01" in capsys.readouterr().err
    monkeypatch.setattr("builtins.input", lambda _prompt: "y")
    assert not trust.terminal_confirm("o/r", "abcd:ef01")


def test_manifest_rollback_is_refused(tmp_path: Path, key: KeyPair) -> None:
    verify_release(make_release(tmp_path / "v2", key, version="2"), trust_fingerprint=key.fingerprint)
    with pytest.raises(VerificationError, match="version 1, older than version 2"):
        check_and_install(make_release(tmp_path / "v1", key, version="1"))
    assert models_dir_is_empty()


def test_same_version_with_other_contents_is_refused(tmp_path: Path, key: KeyPair) -> None:
    verify_release(make_release(tmp_path / "a", key, version="3"), trust_fingerprint=key.fingerprint)
    other = make_release(tmp_path / "b", key, version="3")
    (other / MODEL).write_bytes(b"other")
    sign_release(other, key.private, version="3")
    with pytest.raises(VerificationError, match="verified before with different contents"):
        verify_release(other)


def test_expired_manifest_warns(tmp_path: Path, key: KeyPair) -> None:
    result = verify_release(make_release(tmp_path / "r", key, expires="2001-01-01"), trust_fingerprint=key.fingerprint)
    assert any("expired on 2001-01-01" in w for w in result.metadata.warnings)


def test_sha256sums_disagreeing_with_the_manifest_fails(release: Path, key: KeyPair) -> None:
    sums = release / INTEG.checksums
    sums.write_text(sums.read_text().replace(sums.read_text()[:64], "0" * 64, 1))
    with pytest.raises(VerificationError, match=f"{INTEG.checksums} gives sha256 0+ for .*signed manifest gives"):
        check_and_install(release, trust_fingerprint=key.fingerprint)
    assert models_dir_is_empty()


def test_sha256sums_missing_a_file_fails(release: Path, key: KeyPair) -> None:
    sums = release / INTEG.checksums
    sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines() if PATCH not in line))
    with pytest.raises(VerificationError, match=f"does not list {PATCH}"):
        verify_release(release, trust_fingerprint=key.fingerprint)


@pytest.mark.parametrize("damage", ["tampered byte", "same-size corruption", "truncated", "longer"])
def test_damaged_model_file_fails_its_check(release: Path, key: KeyPair, damage: str) -> None:
    path = release / MODEL
    data = bytearray(path.read_bytes())
    if damage == "tampered byte":
        data[len(data) // 2] ^= 0x01
    elif damage == "same-size corruption":
        data = bytearray(b ^ 0x5A for b in data)
    elif damage == "truncated":
        del data[-1]
    else:
        data += b"\0"
    path.write_bytes(bytes(data))
    check = "sha256" if damage in ("tampered byte", "same-size corruption") else "size"
    with pytest.raises(VerificationError, match=f"{MODEL} failed the {check} check"):
        check_and_install(release, trust_fingerprint=key.fingerprint)
    assert models_dir_is_empty()


@pytest.mark.parametrize("name", ["../evil.gguf", "/etc/passwd", "C:evil.gguf", "c:\\x.gguf", "sub\\x.gguf",
                                  "sub/x.gguf", "..", ""])
def test_path_traversal_names_in_the_manifest_are_refused(release: Path, key: KeyPair, name: str) -> None:
    manifest = json.loads((release / INTEG.manifest).read_text())
    manifest["files"].append({"name": name, "size": 1, "sha256": "0" * 64})
    resign_manifest(release, key, manifest)
    with pytest.raises(VerificationError, match=r"not a plain file name|empty name"):
        check_and_install(release, trust_fingerprint=key.fingerprint)
    assert models_dir_is_empty()
    assert not (release.parent / "evil.gguf").exists()


def test_path_traversal_in_sha256sums_is_refused() -> None:
    with pytest.raises(VerificationError, match="not a plain file name"):
        parse_sha256sums(f"{'a' * 64}  ../../.bashrc\n", "SHA256SUMS")


@pytest.mark.parametrize("variant", ["base64 in .sig", "base64 in .sig.b64", "hex in .sig"])
def test_signature_variants_verify(release: Path, key: KeyPair, variant: str) -> None:
    for signed in (INTEG.manifest, INTEG.provenance):
        sig = release / (signed + ".sig")
        raw = sig.read_bytes()
        assert len(raw) == 64
        text = raw.hex() if variant.startswith("hex") else base64.b64encode(raw).decode() + "\n"
        if variant.endswith(".sig.b64"):
            sig.unlink()
            sig = release / (signed + ".sig.b64")
        sig.write_text(text)
    assert verify_release(release, trust_fingerprint=key.fingerprint).files


def test_garbage_signature_names_the_file(release: Path, key: KeyPair) -> None:
    (release / (INTEG.manifest + ".sig")).write_text("not a signature")
    with pytest.raises(VerificationError, match=r"\.sig is not a detached Ed25519 signature"):
        verify_release(release, trust_fingerprint=key.fingerprint)


def test_missing_signature_is_refused(release: Path, key: KeyPair) -> None:
    (release / (INTEG.provenance + ".sig")).unlink()
    with pytest.raises(VerificationError, match=f"signature of {INTEG.provenance} is missing"):
        verify_release(release, trust_fingerprint=key.fingerprint)


def test_manifest_variants_are_accepted(release: Path, key: KeyPair) -> None:
    manifest = json.loads((release / INTEG.manifest).read_text())
    variant = {"release": {"version": "1.2.0", "created": "2025-06-01"},
               "files": {f["name"]: {"hash": "sha256:" + f["sha256"].upper(), "bytes": f["size"]}
                         for f in manifest["files"]}}
    resign_manifest(release, key, variant)
    result = verify_release(release, trust_fingerprint=key.fingerprint)
    assert result.metadata.manifest.version.key == (1, 2, 0) and sorted(result.files) == sorted(FILES)


def test_manifest_without_version_names_file_and_key() -> None:
    data = json.dumps({"date": "2025-01-01", "files": [{"name": "a", "sha256": "0" * 64}]}).encode()
    with pytest.raises(VerificationError, match=f"{INTEG.manifest} has no version .*version"):
        parse_manifest(data, INTEG.manifest)


def test_release_patch_is_checked_before_use(release: Path, key: KeyPair) -> None:
    trust.pin_key(CATALOG.repo, signing.load_public_key(key.public.read_bytes(), "test"))
    assert verified_release_patch(release).read_bytes() == FILES[PATCH]
    (release / PATCH).write_bytes(FILES[PATCH].replace(b"x", b"y"))
    with pytest.raises(VerificationError, match=f"{PATCH} failed the sha256 check"):
        verified_release_patch(release)


def test_provenance_names_the_commit_and_patch_hash(release: Path, key: KeyPair) -> None:
    meta = verify_metadata(release, trust_fingerprint=key.fingerprint)
    assert meta.provenance.llama_cpp_commit == "4df29be"
    assert meta.provenance.patch_sha256 == meta.manifest.files[PATCH].sha256


def test_file_changed_after_verification_is_not_installed(release: Path, key: KeyPair) -> None:
    result = verify_release(release, trust_fingerprint=key.fingerprint)
    (release / SIDECAR).write_bytes(b"swapped")
    with pytest.raises(VerificationError, match=r"changed .* after it was verified"):
        install(result.metadata, result.files, default_destination(CATALOG.repo))
    assert models_dir_is_empty()


def test_private_key_inside_the_release_folder_is_refused(tmp_path: Path) -> None:
    pair = keygen(tmp_path / "r")
    with pytest.raises(Exception, match="inside the release folder"):
        sign_release(tmp_path / "r", pair.private)


def test_endpoint_urls() -> None:
    hub = Endpoint("hf", "https://huggingface.co")
    assert hub.file_url("o/r", "main", "a b.gguf") == "https://huggingface.co/o/r/resolve/main/a%20b.gguf"
    assert Endpoint("plain", "http://m.example/x/").file_url("o/r", "main", "f") == "http://m.example/x/f"


def test_cli_keygen_sign_trust_verify(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["release", "keygen", "--out", str(tmp_path / "k"), "--json"]) == 0
    fp = json.loads(capsys.readouterr().out)["fingerprint"]
    folder = tmp_path / "rel"
    folder.mkdir()
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    assert main(["release", "sign", "--dir", str(folder), "--key", str(tmp_path / "k" / "private.pem"),
                 "--version", "7", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "7"
    assert main(["verify", str(folder), "--json"]) == 4  # not trusted, no terminal
    assert "trust-fingerprint" in json.loads(capsys.readouterr().out)["advice"]
    assert main(["trust", "add", str(folder / INTEG.public_key)]) == 0
    assert fp in capsys.readouterr().out
    assert main(["verify", str(folder), "--json"]) == 0
    assert sorted(f["name"] for f in json.loads(capsys.readouterr().out)["verified"]) == sorted(FILES)
    assert main(["trust", "list", "--json"]) == 0
    assert [k["fingerprint"] for k in json.loads(capsys.readouterr().out)] == [fp]
    assert main(["trust", "remove", fp.replace(":", "")]) == 0
    assert trust.user_keys() == []
