"""Network-safety rules for URLs a caller hands us: the dataset fetcher and the probes both call such
URLs from inside the VPC-less Lambda network, where the runtime API and extensions listen on localhost
and 169.254.169.254 is the metadata endpoint. So: https only (plain http only on the local stack), every
resolved address public, and URL text that carries no credentials into logs, results or alerts.

Refusals are `UnsafeUrl`; their messages never echo a resolved address (that would map the private
network for the caller) or the URL's userinfo, query or fragment.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
MAX_ENDPOINT_URL_LENGTH = 2048
_NAT64_PREFIX = ipaddress.IPv6Network("64:ff9b::/96")


class UnsafeUrl(ValueError):
    """A URL the backend must not call."""


class HostNotResolved(UnsafeUrl):
    """The host has no address (DNS failure): nothing can be checked, so nothing is called."""


class PrivateAddress(UnsafeUrl):
    """The host resolves to at least one loopback, link-local, private or reserved address."""


class UnsafeEndpointUrl(UnsafeUrl):
    """Not an http(s) URL a probe may call."""


def allowed_schemes(*, allow_private_hosts: bool) -> frozenset[str]:
    """https; plain http too only where private hosts are allowed (the local stack)."""
    return frozenset({"https", "http"}) if allow_private_hosts else frozenset({"https"})


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


def public_addresses(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to, in resolver order; PrivateAddress if any one is not public.

    Checking all (not just the first) matters: the client may connect to any of them.
    """
    try:
        addresses: list[IPAddress] = [ipaddress.ip_address(host)]
    except ValueError:
        addresses = _resolve(host, port)
    if any(not is_public_address(address) for address in addresses):
        raise PrivateAddress("resolves to a private or reserved address")
    return addresses


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


def check_endpoint_url(url: str, *, allow_private_hosts: bool, resolve: bool = True) -> str:
    """The URL, if a probe may call it: https (http too on the local stack), no userinfo, and a host that
    resolves only to public addresses unless `allow_private_hosts` (the local stack's loopback endpoint)."""
    if len(url) > MAX_ENDPOINT_URL_LENGTH:
        raise UnsafeEndpointUrl("endpoint URL is too long")
    parts = urlsplit(url)
    schemes = allowed_schemes(allow_private_hosts=allow_private_hosts)
    if parts.scheme not in schemes:
        raise UnsafeEndpointUrl(f"endpoint URL must use {' or '.join(sorted(schemes))}")
    if not parts.hostname or parts.username or parts.password:
        raise UnsafeEndpointUrl("endpoint URL needs a host and no user info (pass credentials as auth)")
    if parts.query or parts.fragment:
        # The URL travels into probe results, envelopes and alert e-mails: no room for a token in it.
        raise UnsafeEndpointUrl("endpoint URL must have no query string or fragment (pass credentials as auth)")
    if resolve and not allow_private_hosts:
        try:
            public_addresses(parts.hostname, parts.port or 443)
        except UnsafeUrl:
            raise UnsafeEndpointUrl("endpoint host does not resolve to public addresses only") from None
    return url
