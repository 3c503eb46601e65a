"""Which Host and Origin values a function answers: the Function URL host rule both the MCP endpoint's guard and
the authorization server apply (a function cannot read its own URL, so it accepts the region's URL form)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


def function_url_hosts(region: str) -> str:
    """Every Function URL host of `region`, as a HostPolicy pattern (one DNS label before the domain)."""
    return f"*.lambda-url.{region}.on.aws"


@dataclass(frozen=True)
class HostPolicy:
    """Allowed Host and Origin values: exact, `name:*` (any port) or `*.suffix` (one DNS label deep)."""

    hosts: tuple[str, ...]
    origins: tuple[str, ...] = ()
    _host_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)
    _origin_patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_host_patterns", tuple(_pattern(h) for h in self.hosts))
        object.__setattr__(self, "_origin_patterns", tuple(_pattern(o) for o in self.origins))

    @classmethod
    def for_region(cls, region: str, extra_hosts: Iterable[str] = (), origins: Iterable[str] = ()) -> HostPolicy:
        # A function cannot read its own URL (the URL resource depends on it): allow the region's URL form.
        return cls(hosts=(function_url_hosts(region), *extra_hosts), origins=tuple(origins))

    def host_allowed(self, host: str | None) -> bool:
        return bool(host) and any(p.fullmatch(host.lower()) for p in self._host_patterns)  # type: ignore[union-attr]

    def origin_allowed(self, origin: str | None, host: str | None = None) -> bool:
        """Origin is absent for non-browser clients. A browser's must be listed, or be the request's own origin: an
        allowed Host over https (http on loopback only), which makes the request same-origin, so no CORS applies."""
        if origin is None:
            return True
        origin = origin.lower()
        return any(p.fullmatch(origin) for p in self._origin_patterns) or self._same_origin(origin, host)

    def _same_origin(self, origin: str, host: str | None) -> bool:
        if not host or not self.host_allowed(host):
            return False  # a rebound name sends matching Host and Origin: the Host rule decides first
        scheme, _, authority = origin.partition("://")
        return authority == host.lower() and (scheme == "https" or (scheme == "http" and _is_loopback(authority)))


def _is_loopback(authority: str) -> bool:
    name = authority.rsplit(":", 1)[0] if not authority.endswith("]") else authority
    name = name.strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _pattern(allowed: str) -> re.Pattern[str]:
    text = re.escape(allowed.lower())
    text = text.replace(r"\*\.", r"[a-z0-9-]+\.")  # *.suffix: one label
    text = re.sub(r":\\\*$", r":[0-9]+", text)  # name:* -> any port
    return re.compile(text)
