"""Network failures in words, from one place: every reader of a server (downloads, feeds, the update check, a
remote chat server) turns its exception into a :class:`NetFailure` here, so a person reads "the name
huggingface.co could not be found (DNS)" or "127.0.0.1:8080 refused the connection", never "ConnectError:
[Errno -2]" or "RemoteProtocolError: peer closed connection".

A failure has a ``kind`` (chosen from the exception types in its chain, never their text), the endpoint it
happened at, and whether a retry can help: a name that does not resolve, a refused connection, an unreachable
network or a certificate that fails do not get better a second later, so they are never retried (an offline
machine gives up at once); a reset, a 5xx, a 429 and a stall after data may. :func:`joined` names every
endpoint tried ("the mirror X refused the connection; huggingface.co could not be found (DNS)"), and
:func:`advice` says what to do for the set of kinds seen. Qt-free.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl
import threading
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

NetKind = Literal["name-not-resolved", "no-network", "connection-refused", "connect-timeout", "stalled",
                  "connection-lost", "server-error", "rate-limited", "http-error", "tls-certificate", "tls",
                  "too-slow"]

# Kinds where trying again the same endpoint soon may help; the rest go to the next endpoint at once.
RETRYABLE: frozenset[str] = frozenset({"stalled", "connection-lost", "server-error", "rate-limited"})
# Kinds that mean "this machine cannot reach that name at all": offline, or a wrong address.
OFFLINE: frozenset[str] = frozenset({"name-not-resolved", "no-network"})

_NO_NETWORK_ERRNOS = frozenset({errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EHOSTDOWN})


@dataclass(frozen=True)
class NetFailure:
    """One endpoint's failure: what (``kind``), where (``host``, with its port when the URL names one), in words.

    ``role`` ("mirror", "hub", "update server", …) goes before the host in the words; ``status`` is the HTTP
    status of an answer that was an error; ``seconds`` the deadline or the stall timeout a time-out kind passed;
    ``detail`` the technical text (exception type and message, the URL) for a tooltip or a log, never the words.
    """

    kind: NetKind
    host: str
    role: str = ""
    status: int | None = None
    seconds: float | None = None
    detail: str = ""

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE

    @property
    def who(self) -> str:
        return f"the {self.role} {self.host}" if self.role else self.host

    def clause(self) -> str:
        """The failure as a clause that starts in lower case: "huggingface.co could not be found (DNS)"."""
        who = self.who
        seconds = f" {_seconds(self.seconds)}" if self.seconds else ""
        name = f"the {self.role}'s name {self.host}" if self.role else f"the name {self.host}"
        words: dict[str, str] = {
            "name-not-resolved": f"{name} could not be found (DNS): no internet connection, or a wrong address",
            "no-network": f"{who} cannot be reached: this machine has no network connection",
            "connection-refused": f"{who} refused the connection (nothing listens at that address and port)",
            "connect-timeout": f"{who} did not answer (timed out while connecting)",
            "stalled": f"{who} stopped sending (timed out: no data for{seconds or ' a long while'})",
            "connection-lost": f"{who} closed the connection before the answer was complete",
            "server-error": f"{who} had a server error (HTTP {self.status})",
            "rate-limited": f"{who} is busy: too many requests (HTTP {self.status or 429})",
            "http-error": f"{who} answered with an error (HTTP {self.status})",
            "tls-certificate": f"the secure connection to {who} failed: its TLS certificate could not be verified",
            "tls": f"the secure connection to {who} failed (a TLS error)",
            "too-slow": f"{who} was too slow: the answer did not arrive within its{seconds or ''} deadline",
        }
        return words.get(self.kind, f"the connection to {who} failed")

    def sentence(self) -> str:
        """The clause as a sentence: capitalised, with a full stop."""
        return _sentence(self.clause())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "host": self.host, "role": self.role, "status": self.status,
                "seconds": self.seconds, "words": self.sentence(), "detail": self.detail}


def host_of(url: str) -> str:
    """The host a person recognises in ``url``: its name, with the port when the URL names one (no user, no path)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return url[:80]
    if not host:
        return url[:80]
    shown = f"[{host}]" if ":" in host else host
    return f"{shown}:{port}" if port is not None else shown


def kind_of(exc: BaseException) -> NetKind:
    """The kind of a transport failure, from the exception types in its chain (httpx wraps httpcore, which wraps
    the socket's ``OSError``); never from their text."""
    if isinstance(exc, httpx.ConnectTimeout | httpx.PoolTimeout):
        return "connect-timeout"
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
        return "stalled"
    seen: BaseException | None = exc
    for _ in range(10):
        if seen is None:
            break
        if isinstance(seen, socket.gaierror):
            return "name-not-resolved"  # EAI_NONAME, or EAI_AGAIN when no resolver answers (offline)
        if isinstance(seen, ssl.SSLCertVerificationError):
            return "tls-certificate"
        if isinstance(seen, ssl.SSLError):
            return "tls"
        if isinstance(seen, ConnectionRefusedError):
            return "connection-refused"
        if isinstance(seen, OSError) and seen.errno in _NO_NETWORK_ERRNOS:
            return "no-network"
        if isinstance(seen, TimeoutError) and isinstance(exc, httpx.ConnectError):
            return "connect-timeout"
        seen = seen.__cause__ or seen.__context__
    if isinstance(exc, httpx.ConnectError) and "CERTIFICATE_VERIFY_FAILED" in str(exc):
        return "tls-certificate"  # some TLS stacks keep only the text
    return "connection-lost"


def describe(exc: BaseException, url: str, *, role: str = "", seconds: float | None = None) -> NetFailure:
    """``exc`` (an ``httpx`` transport error or an ``OSError``) met while reading ``url``, as a :class:`NetFailure`.
    ``seconds``: the stall timeout, said with a stall."""
    kind = kind_of(exc)
    text = str(exc) or "no details"
    return NetFailure(kind, host_of(url), role, seconds=seconds if kind == "stalled" else None,
                      detail=f"{url}: {type(exc).__name__}: {text}"[:500])


def from_status(status: int, url: str, *, role: str = "") -> NetFailure:
    """An answer with an error status: a 5xx is a server error, 429 a busy server, anything else as it is."""
    kind: NetKind = "rate-limited" if status == 429 else "server-error" if status >= 500 or status == 408 \
        else "http-error"
    return NetFailure(kind, host_of(url), role, status=status, detail=f"{url}: HTTP {status}")


def too_slow(url: str, seconds: float, *, role: str = "") -> NetFailure:
    """The whole answer did not arrive before its total deadline (a server dripping bytes)."""
    return NetFailure("too-slow", host_of(url), role, seconds=seconds,
                      detail=f"{url}: past the total deadline of {_seconds(seconds)}")


def joined(failures: Sequence[NetFailure]) -> str:
    """Every endpoint's failure in one sentence, each named once: "The mirror x refused the connection;
    the name huggingface.co could not be found (DNS) …"."""
    return joined_words([failure.clause() for failure in failures])


def joined_words(clauses: Sequence[str]) -> str:
    """Clauses (a :meth:`NetFailure.clause` or a refusal's words) as one sentence, each said once."""
    unique: list[str] = []
    for clause in clauses:
        if clause and clause not in unique:
            unique.append(clause)
    return _sentence("; ".join(unique))


def advice(failures: Sequence[NetFailure]) -> str:
    """What to do, for the kinds seen (the most telling first)."""
    kinds = {f.kind for f in failures}
    if kinds and kinds <= OFFLINE:
        return "This machine may be offline: check the internet connection, then the address."
    if kinds & {"tls-certificate", "tls"}:
        return ("The connection may be intercepted: check the system clock and any proxy. Certificate checks are "
                "never turned off.")
    if kinds & OFFLINE:
        return "Check the internet connection and the addresses."
    if "connection-refused" in kinds:
        return "Check that the server is running and that its address and port are right."
    if kinds & {"server-error", "rate-limited", "http-error"}:
        return "The server has trouble: try again later (or another mirror)."
    return "Check the internet connection and try again."


def explain(exc: BaseException, url: str, *, role: str = "", seconds: float | None = None) -> str:
    """One failure as a sentence and its advice: for a place that has no words of its own to add."""
    failure = describe(exc, url, role=role, seconds=seconds)
    return f"{failure.sentence()} {advice([failure])}"


class LookupTimedOut(socket.gaierror):
    """The name's lookup did not end in time (no resolver answers: typically offline); read as a name not found."""


Lookup = Callable[[str, int], object]


def resolve_within(url: str, seconds: float, lookup: Lookup | None = None) -> None:
    """Look ``url``'s host up, giving up after ``seconds``: ``socket.gaierror`` when it does not resolve,
    :class:`LookupTimedOut` when no answer came in time.

    An unreachable resolver can hold ``getaddrinfo`` for 20 s and more, and no HTTP timeout covers it; asked first,
    in a thread of its own, an offline machine hears so within ``seconds``. Skipped for an IP address and when a
    proxy resolves the name instead (``HTTPS_PROXY`` and friends, as httpx reads them)."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host or _is_address(host) or _proxied(parts.scheme, host):
        return
    resolve = lookup or (lambda name, port: socket.getaddrinfo(name, port, type=socket.SOCK_STREAM))
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            resolve(host, parts.port or (443 if parts.scheme == "https" else 80))
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)
        else:
            outcome.append(None)
        done.set()

    done = threading.Event()
    threading.Thread(target=run, name="resolve", daemon=True).start()  # a stuck lookup is left to end by itself
    if not done.wait(seconds):
        raise LookupTimedOut(socket.EAI_AGAIN, f"no answer for {host} within {seconds:.0f} s")
    if outcome and isinstance(outcome[0], socket.gaierror):
        raise outcome[0]


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _proxied(scheme: str, host: str) -> bool:
    proxies = urllib.request.getproxies()
    if not (proxies.get(scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass(host)


def _sentence(clause: str) -> str:
    """Our own first word capitalised ("The mirror …"); a host name that starts the clause stays as written."""
    if not clause:
        return ""
    text = "T" + clause[1:] if clause.startswith("the ") else clause
    return text if text.endswith(".") else text + "."


def capital(clause: str) -> str:
    """A clause of this module at the start of a line (a progress row): "The mirror …"; a host name stays as is."""
    return "T" + clause[1:] if clause.startswith("the ") else clause


def lower_first(sentence: str) -> str:
    """A sentence of this module after a colon: "Could not reach X: the name … could not be found"."""
    return "t" + sentence[1:] if sentence.startswith("The ") else sentence


def _seconds(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds >= 10 or seconds == int(seconds) else f"{seconds:.1f} s"
