"""Remote servers the chat can use instead of the local engine: a llama-server (ours via ``serve``, or anyone's),
vLLM or any OpenAI-compatible endpoint.

Each server is a name, a base URL, an optional model name and whether TLS is verified (on unless the user turned it
off for this server). They are kept in ``<config>/remote-servers.json``; the API key never is: it lives in the
keyring under the server's name *and* origin (scheme, host, port), so a key is only ever sent to the host it was
given for: editing the URL to another host leaves the key behind. Qt-free.

The plain-HTTP rule: ``http://`` only to loopback or a private network (with a warning, since the key and the chat
travel unencrypted); a public address needs ``https://``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit

from app.core import netaddr, paths, secrets, settings_file
from app.core.errors import FastMTPError, StorageError

FILE_NAME = "remote-servers.json"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class RemoteError(FastMTPError):
    """A remote server cannot be added, reached, or used: its address, its key, or its answer."""

    kind = "remote"


class RemoteNetworkError(RemoteError):
    """The remote server could not be reached or the connection dropped (CLI exit code 3)."""

    kind = "remote-network"  # exit code 3 (core.errors.EXIT_CODES)


@dataclass(frozen=True)
class RemoteServer:
    name: str
    url: str  # normalized base URL: scheme://host[:port][/prefix], without a trailing "/v1"
    model: str = ""  # the model name to ask for ("" = the server's first, from /v1/models)
    verify_tls: bool = True

    @property
    def origin(self) -> str:
        return origin_of(self.url)

    @property
    def host(self) -> str:
        return urlsplit(self.url).hostname or ""

    @property
    def key_name(self) -> str:
        """The keyring user name of this server's API key: name and origin together."""
        return f"remote-api-key:{self.name}@{self.origin}"

    def api_key(self) -> str | None:
        return secrets.get_secret(self.key_name)

    def warning(self) -> str | None:
        """What the user should know about this server's connection (plain HTTP, TLS not verified), or None."""
        return check_url(self.url, self.verify_tls)[1]

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "has_key": self.api_key() is not None, "warning": self.warning()}


def origin_of(url: str) -> str:
    """``scheme://host:port`` with the default port spelled out, lower-case host."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = (parts.hostname or "").lower()
    return f"{parts.scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def check_url(url: str, verify_tls: bool = True) -> tuple[str, str | None]:
    """The normalized base URL and a warning to show (or None); RemoteError when the URL must not be used.

    Plain HTTP is allowed to loopback and private-network addresses only (warned: the key and the chat travel
    unencrypted), HTTPS anywhere (warned when its certificate is not verified).
    """
    text = url.strip()
    if "://" not in text:
        raise RemoteError(f"{url!r} is not a server address.",
                          "Write it with its scheme, such as https://gpu-box.example:8080 or http://192.168.1.20:8080.")
    try:  # the one URL parser: a malformed host or a port outside 1..65535 is refused (the scheme is checked below)
        parts = netaddr.web_url(text, (text.split("://", 1)[0].lower(),))
    except netaddr.BadUrl as exc:
        raise RemoteError(f"{url[:200]!r} is not a valid address: {exc}.",
                          "Write it like http://192.168.1.20:8080.") from None
    scheme, host = parts.scheme.lower(), parts.hostname or ""
    if scheme not in ("http", "https"):
        raise RemoteError(f"{url!r} uses {scheme}://, not http:// or https://.", "Use https:// (or http:// on your own "
                          "network).")
    if not host:
        raise RemoteError(f"{url!r} names no host.", "Write it like https://gpu-box.example:8080.")
    if parts.username or parts.password:
        raise RemoteError("The address carries a user name or password.",
                          "Leave them out of the address; give the API key separately (it is kept in the keyring).")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = parts.netloc.lower()
    normalized = f"{scheme}://{netloc}{path}"
    reach = netaddr.classify(host)
    if scheme == "http":
        if reach == "unresolved":
            raise RemoteError(f"{host} cannot be resolved on this machine.",
                              "Check the name, or give the server's IP address.")
        if reach == "public":
            raise RemoteError(f"Plain HTTP to {host} would send the chat and the API key across the internet "
                              "unencrypted.", f"Use https://{parts.netloc}{path} (with a certificate), or a "
                              "local-network address (192.168.x.x, 10.x.x.x) or a VPN.")
        if reach == "loopback":
            return normalized, "Plain HTTP on this machine (loopback): nothing leaves it."
        return normalized, (f"Plain HTTP to {host} on the local network: the chat and the API key are not encrypted "
                            "on the way. Use HTTPS if others share this network.")
    if not verify_tls:
        return normalized, (f"The certificate of {host} is not checked: anyone between here and the server could "
                            "read the chat and the API key. Turn the check back on once the certificate is valid.")
    return normalized, None


# ----------------------------------------------------------------------------- the list


def servers_path() -> Path:
    return paths.config_dir() / FILE_NAME


def load_servers(path: Path | None = None) -> list[RemoteServer]:
    """The saved servers; a damaged file gives none (it is rewritten by the next add or remove)."""
    data = settings_file.load_json(path or servers_path())  # None: missing or damaged
    servers: list[RemoteServer] = []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        name, url, model = item.get("name"), item.get("url"), item.get("model", "")
        verify = item.get("verify_tls", True)
        if isinstance(name, str) and isinstance(url, str) and isinstance(model, str) and isinstance(verify, bool) \
                and _NAME.match(name):
            servers.append(RemoteServer(name, url, model, verify))
    return servers


def _save(servers: list[RemoteServer], path: Path | None = None) -> None:
    path = path or servers_path()
    paths.ensure_dir(path.parent, "config")
    try:
        settings_file.write_json(path, [asdict(s) for s in servers])
    except OSError as exc:
        raise StorageError(f"The remote servers cannot be saved to {path}: {exc.strerror or type(exc).__name__}.",
                           "Check that the config folder is writable and the disk is not full.") from None


def get_server(name: str) -> RemoteServer:
    for server in load_servers():
        if server.name == name:
            return server
    known = ", ".join(s.name for s in load_servers()) or "none yet"
    raise RemoteError(f"There is no remote server named {name!r} (known: {known}).",
                      "Add it with `python -m app remote add NAME URL`.")


def add_server(name: str, url: str, api_key: str | None = None, model: str = "",
               verify_tls: bool = True) -> tuple[RemoteServer, str | None]:
    """Add (or replace) a server; the key goes to the keyring. Returns the server and its warning, if any."""
    if not _NAME.match(name):
        raise RemoteError(f"{name!r} cannot be a server name.",
                          "Use letters, digits, dots, dashes or underscores (up to 64), such as gpu-box.")
    normalized, warning = check_url(url, verify_tls)
    server = RemoteServer(name, normalized, model.strip(), verify_tls)
    others = [s for s in load_servers() if s.name != name]
    old = next((s for s in load_servers() if s.name == name), None)
    if old is not None and old.key_name != server.key_name:
        secrets.delete_secret(old.key_name)  # the key belonged to the old host: it does not follow the name
    if api_key is not None:
        key = api_key.strip()
        if key:
            if any(ch.isspace() for ch in key):
                raise RemoteError("That API key contains spaces.", "Copy the key again, without spaces or line breaks.")
            secrets.set_secret(server.key_name, key, "the server's API key")
        else:
            secrets.delete_secret(server.key_name)
    _save([*others, server])
    return server, warning


def remove_server(name: str) -> bool:
    """Forget a server and its key; False when there was none by that name."""
    servers = load_servers()
    gone = [s for s in servers if s.name == name]
    if not gone:
        return False
    for server in gone:
        secrets.delete_secret(server.key_name)
    _save([s for s in servers if s.name != name])
    return True
