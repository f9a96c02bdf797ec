"""``resources/keys/``: only public Ed25519 keys, each named for a repository the app verifies (the model
publisher's ``[release] repo`` or the app's own ``[app_updates] repo``), and never a private key. The app's own
release key, once the maintainers have made it, sits here as ``fastmtp-chat--fastmtp-chat.pem`` and its
fingerprint is the catalog's ``[app_updates] fingerprint`` (resources/keys/README.md).
"""

from __future__ import annotations

import tomllib

from app.core.resources import resources_dir
from app.release import signing
from app.release.catalog import repo_slug

KEYS = resources_dir() / "keys"


def catalog() -> dict[str, dict[str, str]]:
    with (resources_dir() / "catalog.toml").open("rb") as handle:
        return tomllib.load(handle)


def test_the_apps_own_repository_id_is_the_one_its_update_feed_names() -> None:
    table = catalog()["app_updates"]
    assert table["repo"] == "fastmtp-chat/fastmtp-chat" and repo_slug(table["repo"]) == "fastmtp-chat--fastmtp-chat"
    assert "fastmtp-chat--fastmtp-chat.pem" in (KEYS / "README.md").read_text()


def test_only_public_keys_named_for_a_known_repository_are_shipped() -> None:
    repos = [catalog()["release"]["repo"], catalog()["app_updates"]["repo"]]
    for path in sorted(KEYS.iterdir()):
        if path.name == "README.md":
            continue
        assert path.suffix == ".pem", f"{path.name}: only <owner>--<name>*.pem files belong in resources/keys"
        assert any(path.name.startswith(repo_slug(repo)) for repo in repos), path.name
        data = path.read_bytes()
        assert b"PRIVATE" not in data, f"{path.name} holds a private key"
        signing.load_public_key(data, str(path))


def test_the_apps_own_key_matches_the_catalogs_fingerprint_when_shipped() -> None:
    table = catalog()["app_updates"]
    own = sorted(KEYS.glob(repo_slug(table["repo"]) + "*.pem"))
    fingerprints = {signing.fingerprint(signing.load_public_key(p.read_bytes(), str(p))) for p in own}
    if table["fingerprint"]:
        assert table["fingerprint"] in fingerprints, "the catalog names a fingerprint no shipped key has"
    else:
        assert not own, "ship the app's key and fill [app_updates] fingerprint together"


def test_the_private_marker_the_check_looks_for_is_what_keygen_writes() -> None:
    key = signing.generate_key()
    assert b"PRIVATE" in signing.private_key_pem(key)
    assert b"PRIVATE" not in signing.public_key_pem(key.public_key())
