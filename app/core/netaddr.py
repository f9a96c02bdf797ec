"""Where an address points: this machine, the local network, or the internet.

The rules built on it: plain HTTP to a remote server only on loopback or a private network (a key and the chat
would otherwise cross the internet unencrypted), and an RPC worker or ``serve`` bound to a public address only
when the user says so. A host name counts by what it resolves to now, and only when every address is private.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Literal

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


def is_loopback(host: str) -> bool:
    return classify(host) == "loopback"


def is_private(host: str) -> bool:
    """Loopback or a private network."""
    return classify(host) in ("loopback", "private")
