"""Where an address points: this machine, the local network, or the internet.

The rules built on it: plain HTTP to a remote server only on loopback or a private network (a key and the chat
would otherwise cross the internet unencrypted), and an RPC worker or ``serve`` bound to a public address only
when the user says so. A host name counts by what it resolves to now, and only when every address is private.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, urlsplit

from app.core.errors import FastMTPError

Reach = Literal["loopback", "private", "public", "unresolved"]
EVERY_INTERFACE = ("0.0.0.0", "::")


def classify(host: str) -> Reach:
    """``loopback`` (this machine), ``private`` (10/8, 172.16/12, 192.168/16, 100.64/10, link-local, fc00::/7),
    ``public`` (anything else, and the every-interface addresses ``0.0.0.0`` / ``::``) or ``unresolved``."""
    host = host.strip().strip("[]")
    if host.lower() in ("localhost", "localhost.localdomain"):
        return "loopback"
    try:
        addresses = [ipaddress.ip_address(host.split("%")[0])]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            return "unresolved"
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    if not addresses:
        return "unresolved"
    if any(a.is_unspecified for a in addresses):
        return "public"  # listening on every interface includes the public ones
    if all(a.is_loopback for a in addresses):
        return "loopback"
    if all(a.is_loopback or a.is_private or a.is_link_local or _shared(a) for a in addresses):
        return "private"
    return "public"


def _shared(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """100.64.0.0/10, carrier-grade NAT and VPN meshes such as Tailscale: not reachable from the internet."""
    return isinstance(address, ipaddress.IPv4Address) and address in ipaddress.ip_network("100.64.0.0/10")


class BadUrl(ValueError):
    """A URL that cannot be used, in words: ``str(exc)`` completes "... is not a usable address: "."""


def web_url(url: str, schemes: tuple[str, ...] = ("http", "https")) -> SplitResult:
    """The one parser of a URL from outside (``--feed``, ``--base-url``, ``--url``, ``--endpoint``, a mirror, a
    remote server): its parts, or :class:`BadUrl` saying what is wrong. The scheme must be one of ``schemes``, the
    host present and well formed (a bracketed IPv6 address closed and valid, no spaces or control characters), the
    port, when given, ASCII digits from 1 to 65535: a port above it is refused, never wrapped (httpx would contact
    99999 - 65536)."""
    if any(ord(c) < 33 or c == "\x7f" for c in url):
        raise BadUrl("it holds a space or a control character")
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # an unclosed or invalid [IPv6] host
        raise BadUrl(f"its host is malformed ({exc})") from None
    if parts.scheme.lower() not in schemes:
        raise BadUrl(f"it does not start with {' or '.join(s + '://' for s in schemes)}")
    host_port = parts.netloc.rpartition("@")[2]
    if host_port.startswith("["):
        host, _, rest = host_port[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else None
        if rest and port_text is None:
            raise BadUrl("its host is malformed (text after the bracketed address)")
    else:
        host, colon, port_text_raw = host_port.partition(":")
        port_text = port_text_raw if colon else None
        if ":" in port_text_raw or "[" in host or "]" in host:
            raise BadUrl("its host is malformed (an IPv6 address must be in brackets)")
    if not host:
        raise BadUrl("it names no host")
    if port_text and (len(port_text) > 5 or not (port_text.isascii() and port_text.isdigit())
                      or not 1 <= int(port_text) <= 65_535):
        raise BadUrl(f"its port {port_text[:20]!r} is not a number from 1 to 65535")
    return parts


def is_loopback(host: str) -> bool:
    return classify(host) == "loopback"


def is_private(host: str) -> bool:
    """Loopback or a private network."""
    return classify(host) in ("loopback", "private")


@dataclass(frozen=True)
class Listener:
    """A server this machine starts, in the words ``check_bind`` needs: what it is, what reaching it exposes,
    and the flag that accepts a public address."""

    name: str  # "The RPC worker", "llama-server"
    exposure: str  # a sentence: what anyone who reaches the port gets
    public_risk: str  # the short reason a public address is refused
    override: str  # "pass --i-understand-no-auth if this network is yours alone"
    error: type[FastMTPError]


def check_bind(host: str, allow_public: bool, listener: Listener) -> str | None:
    """The one rule for where a server of ours may listen: loopback quietly, a local network with a warning, a
    public address (or every interface) only when ``allow_public``; an unresolvable name is refused. Returns the
    warning to show (None on loopback) or raises ``listener.error`` in words."""
    reach = classify(host)
    if reach == "loopback":
        return None
    if reach == "unresolved":
        raise listener.error(f"The address {host!r} cannot be resolved on this machine.",
                             "Give one of this machine's addresses, such as 127.0.0.1 or its local-network "
                             "address (192.168.x.x, 10.x.x.x).")
    if reach == "public" and not allow_public:
        where = "every network interface" if host in EVERY_INTERFACE else f"the public address {host}"
        raise listener.error(f"{listener.name} on {where} would let the internet reach it, and {listener.public_risk}.",
                             f"{listener.exposure} Bind to 127.0.0.1, a local-network address (192.168.x.x, "
                             f"10.x.x.x) or a VPN address, or {listener.override}.")
    return f"{listener.name} listens on {host}. {listener.exposure} Use it only on a network you trust."
