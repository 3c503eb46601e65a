"""Network-safety rules for URLs a caller hands us: the dataset fetcher and the probes both call such
URLs from inside the VPC-less Lambda network, where the runtime API and extensions listen on localhost
and 169.254.169.254 is the metadata endpoint. So: https only (plain http only on the local stack), every
resolved address public, and URL text that carries no credentials into logs, results or alerts. The
local stack's policy (`allow_loopback_hosts`) adds plain http and loopback addresses, nothing else: a dev
stack on a laptop inside a company network must not be steerable at internal hosts.

Refusals are `UnsafeUrl`; their messages never echo a resolved address (that would map the private
network for the caller) or the URL's userinfo, query or fragment. A URL whose host or port cannot be
connected to is `MalformedUrl`, named by its fault.
"""

from __future__ import annotations

import ipaddress
import math
import socket
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, Self
from urllib.parse import SplitResult, urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_ENDPOINT_URL_LENGTH = 2048
# RFC 1035 section 2.3.4: labels of 63 octets or less, names of 255 octets or less on the wire (253 as text).
MAX_LABEL_LENGTH = 63
MAX_HOST_LENGTH = 253
_NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")


class UnsafeUrl(ValueError):
    """A URL the backend must not call."""


class HostNotResolved(UnsafeUrl):
    """The host has no address (DNS failure): nothing can be checked, so nothing is called."""


class PrivateAddress(UnsafeUrl):
    """The host resolves to at least one loopback, link-local, private or reserved address."""


class MalformedUrl(UnsafeUrl):
    """The URL cannot be parsed, or its host or port is not one a connection can be made to."""


class UnsafeEndpointUrl(UnsafeUrl):
    """Not an http(s) URL a probe may call."""


def allowed_schemes(*, allow_loopback_hosts: bool) -> frozenset[str]:
    """https; plain http too only where loopback hosts are allowed (the local stack)."""
    return frozenset({"https", "http"}) if allow_loopback_hosts else frozenset({"https"})


def split_url(url: str) -> SplitResult:
    """`urlsplit(url)`, its host and port valid for a connection; MalformedUrl naming the fault otherwise.

    The messages describe the fault, never the URL: its user info may hold credentials."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed "[" or a bracketed host that is no IPv6 address
        raise MalformedUrl("host is not valid: [ ] must enclose an IPv6 address") from None
    try:
        port = parts.port
    except ValueError:  # not a number, or above 65535
        port = 0
    if port == 0:
        raise MalformedUrl("port must be a number from 1 to 65535")
    if parts.hostname:
        _check_host_name(parts.hostname)
    return parts


def _check_host_name(host: str) -> None:
    if ":" in host:
        return  # an IPv6 literal: urlsplit has validated it
    if len(host) > MAX_HOST_LENGTH:
        raise MalformedUrl(f"host is longer than {MAX_HOST_LENGTH} characters")
    labels = host.removesuffix(".").split(".")
    if any(not label for label in labels):
        raise MalformedUrl("host has an empty label")
    if any(len(label) > MAX_LABEL_LENGTH for label in labels):
        raise MalformedUrl(f"host has a label longer than {MAX_LABEL_LENGTH} characters")
    try:
        host.encode("idna")  # a non-ASCII label too long once encoded, or not encodable at all
    except UnicodeError:
        raise MalformedUrl("host is not a valid host name") from None


def redact_url(url: str) -> str:
    """The URL without userinfo, query or fragment: the parts that carry credentials and tokens."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    host_and_port = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host_and_port, parts.path, "", ""))


def is_public_address(address: IPAddress) -> bool:
    """True for a globally routable unicast address, judging IPv4 embedded in IPv6 by its IPv4 part."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return is_public_address(address.ipv4_mapped)
        if address in _NAT64_PREFIX:
            return is_public_address(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return not (
        address.is_loopback
        or address.is_link_local  # includes 169.254.169.254 (instance metadata)
        or address.is_private
        or address.is_reserved
        or address.is_multicast
        or address.is_unspecified
        or not address.is_global  # e.g. 100.64.0.0/10 shared address space
    )


def public_addresses(host: str, port: int, *, allow_loopback: bool = False) -> list[IPAddress]:
    """Every address `host` resolves to, in resolver order; PrivateAddress if any one is not public
    (loopback excepted when `allow_loopback`: the local stack's policy).

    Checking all (not just the first) matters: the client may connect to any of them.
    """
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        addresses = _resolve(host, port)
    if any(not (is_public_address(a) or (allow_loopback and _is_loopback(a))) for a in addresses):
        raise PrivateAddress("resolves to a private or reserved address")
    return addresses


def _is_loopback(address: IPAddress) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback


def is_loopback_host(host: str) -> bool:
    """`localhost` or a loopback address literal, as a URL names its host (no resolution)."""
    if host == "localhost":
        return True
    try:
        return _is_loopback(ipaddress.ip_address(host))
    except ValueError:
        return False


def _resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise HostNotResolved("the host does not resolve") from None
    addresses: list[IPAddress] = []
    for info in infos:
        # IPv6 sockaddrs may carry a "%scope" suffix.
        address = ipaddress.ip_address(str(info[4][0]).partition("%")[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise HostNotResolved("the host does not resolve")
    return addresses


def check_endpoint_url(url: str, *, allow_loopback_hosts: bool) -> str:
    """The URL, if a probe may call it (see `resolve_endpoint`)."""
    resolve_endpoint(url, allow_loopback_hosts=allow_loopback_hosts)
    return url


def resolve_endpoint(url: str, *, allow_loopback_hosts: bool) -> tuple[SplitResult, list[IPAddress]]:
    """The URL's parts and the addresses its host resolves to, if a probe may call it: https (http too on
    the local stack), no userinfo, no query or fragment, and every address public (or, under the local
    stack's policy, loopback). The probe connects to these addresses, never to a second DNS answer."""
    parts = _endpoint_parts(url, allow_loopback_hosts)
    assert parts.hostname is not None  # _endpoint_parts refuses a URL without one
    default_port = 443 if parts.scheme == "https" else 80
    try:
        addresses = public_addresses(parts.hostname, parts.port or default_port, allow_loopback=allow_loopback_hosts)
    except UnsafeUrl:
        where = "public or loopback addresses" if allow_loopback_hosts else "public addresses"
        raise UnsafeEndpointUrl(f"endpoint host does not resolve to {where} only") from None
    return parts, addresses


def _endpoint_parts(url: str, allow_loopback_hosts: bool) -> SplitResult:
    if len(url) > MAX_ENDPOINT_URL_LENGTH:
        raise UnsafeEndpointUrl("endpoint URL is too long")
    try:
        parts = split_url(url)
    except MalformedUrl as error:
        raise UnsafeEndpointUrl(f"endpoint URL {error}") from None
    schemes = allowed_schemes(allow_loopback_hosts=allow_loopback_hosts)
    if parts.scheme not in schemes:
        raise UnsafeEndpointUrl(f"endpoint URL must use {' or '.join(sorted(schemes))}")
    if not parts.hostname or parts.username or parts.password:
        raise UnsafeEndpointUrl("endpoint URL needs a host and no user info (pass credentials as auth)")
    if parts.query or parts.fragment:
        # The URL travels into probe results, envelopes and alert e-mails: no room for a token in it.
        raise UnsafeEndpointUrl("endpoint URL must have no query string or fragment (pass credentials as auth)")
    return parts


class DeadlinePassed(TimeoutError):
    """An outbound call ran out of its total time; the message names the deadline, never the URL."""


class OutboundDeadline:
    """One total time budget for an outbound HTTP exchange: connect, TLS, response headers, every redirect hop
    and the body all draw from the time left.

    Two mechanisms of httpx/httpcore enforce it. Each request's per-phase timeouts (connect, TLS, each read and
    write) are the time left, never more (`timeout`). Reads that each succeed quickly (a server trickling one
    byte at a time) would still go on, so a watchdog timer shuts down every connection the exchange opened once
    the time is up: the blocked read or handshake returns, the client closes the connection, and the caller sees
    `cut`. The sockets are learnt from httpcore's `trace` request extension (`request_extensions`), or handed
    over (`watch`). Use it as a context manager around the whole exchange (async code uses a cancel scope of the
    time left instead: probes.pinning).
    """

    def __init__(
        self, seconds: float, *, end: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.seconds = seconds  # as a duration, for the message that names it
        self.end = clock() + seconds if end is None else end
        self._clock = clock
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._connected: socket.socket | None = None
        self._handshake: socket.socket | None = None
        self._held: list[socket.socket] = []
        self._cut = False
        self._timer: threading.Timer | None = None

    @property
    def message(self) -> str:
        return f"the outbound call passed its {self.seconds:g} s deadline"

    def remaining(self) -> float:
        return max(0.0, self.end - self._clock())

    @property
    def expired(self) -> bool:
        return self._cut or self.remaining() <= 0

    @property
    def cut(self) -> bool:
        """True once the watchdog has shut the exchange's sockets: a body that then 'ended' was truncated."""
        return self._cut

    def check(self) -> None:
        """Raises DeadlinePassed once no time is left."""
        if self.expired:
            raise DeadlinePassed(self.message)

    def timeout(self, per_operation: float = math.inf) -> float:
        """The timeout for the next network operation: `per_operation`, or the time left if that is less.
        Raises DeadlinePassed once no time is left."""
        self.check()
        return min(per_operation, self.remaining())

    def request_extensions(self) -> dict[str, Any]:
        """httpcore's `trace` extension, which hands the watchdog each socket the request connects."""
        return {"trace": self._trace}

    def _trace(self, event_name: str, info: dict[str, Any]) -> None:
        if event_name == "connection.connect_tcp.complete":
            self._connected = _socket_of(info)
            if self._connected is not None:
                self.watch(self._connected)
        elif event_name == "connection.start_tls.started" and self._connected is not None:
            # The TLS socket takes the connection's descriptor over (the TCP socket object is detached): a
            # duplicate descriptor lets the watchdog shut the connection while the handshake runs.
            self._handshake = self._connected.dup()
            self.watch(self._handshake)
        elif event_name in ("connection.start_tls.complete", "connection.start_tls.failed"):
            self._close_handshake()  # the TLS socket holds the connection from here
            tls = _socket_of(info)
            if tls is not None:
                self.watch(tls)

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock` down when the time is up (at once, if it is up already)."""
        with self._lock:
            self._sockets.append(sock)
            if self._cut:  # connected after the time was up: shut at once
                _shut(sock)

    def hold(self, sock: socket.socket) -> None:
        """Watch a duplicate of `sock`'s descriptor until the exchange ends: unlike `sock`, it stays valid when a
        TLS socket takes the connection over, so the watchdog can shut the handshake too."""
        duplicate = sock.dup()
        with self._lock:
            self._held.append(duplicate)
        self.watch(duplicate)

    def _close_handshake(self) -> None:
        # Under the lock: the watchdog never shuts a descriptor this has closed (and the system may reuse).
        with self._lock:
            if self._handshake is not None:
                self._sockets.remove(self._handshake)
                self._handshake.close()
                self._handshake = None

    def _expire(self) -> None:
        with self._lock:
            self._cut = True
            for sock in self._sockets:
                _shut(sock)

    def __enter__(self) -> Self:
        self._timer = threading.Timer(self.remaining(), self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._close_handshake()
        with self._lock:
            for duplicate in self._held:
                self._sockets.remove(duplicate)
                duplicate.close()
            self._held.clear()


def _socket_of(info: dict[str, Any]) -> socket.socket | None:
    """The socket of the network stream a trace event returned, if any."""
    stream = info.get("return_value")
    sock = stream.get_extra_info("socket") if stream is not None else None
    return sock if isinstance(sock, socket.socket) else None


def _shut(sock: socket.socket) -> None:
    """Shut the connection down in both directions (the peer sees it closed, a blocked read returns at once).
    socket.socket's own shutdown, not SSLSocket's: this runs in the watchdog's thread while another reads."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass  # already closed, or never connected
