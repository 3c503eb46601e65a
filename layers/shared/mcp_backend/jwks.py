"""An issuer's signing keys (JWKS) and the one fetch that reads them: the foundations the MCP endpoint's resource
server (mcp/oauth.py) and the authorization server's upstream login (authorization/upstream.py) share.

The fetch is https only (plain http only on loopback), follows no redirects, reads at most 1 MiB, and draws its
connect, TLS, headers and body from one total deadline (netsafety.OutboundDeadline). The cache fetches at most
once per refresh interval and keeps serving the keys it holds when a refresh fails.
"""

from __future__ import annotations

import functools
import http.client
import json
import math
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_backend.netsafety import DeadlinePassed, OutboundDeadline, is_loopback_host
from mcp_backend.observability import logger
from mcp_backend.refusals import AuthenticationUnavailable

if TYPE_CHECKING:
    import jwt

Fetch = Callable[[str], bytes]


class JwksUnavailable(AuthenticationUnavailable):
    """The issuer's keys cannot be fetched (and none are cached, or the token's kid is not among them)."""

    logged = True  # JwksCache logs the cause once per refresh interval


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an error: the scheme check above holds for the one URL fetched (no https -> http hop)."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise urllib.error.HTTPError(req.full_url, code, f"{code} redirects are not followed", headers, fp)


class _WatchedConnection(http.client.HTTPConnection):
    """A connection under the fetch's deadline: once connected, its socket's timeout is the time left (for the
    TLS handshake and each read), and the watchdog holds its descriptor to shut it when the time is up."""

    deadline: OutboundDeadline

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(self.deadline.timeout())
        self.deadline.hold(self.sock)


class _WatchedHTTPSConnection(http.client.HTTPSConnection, _WatchedConnection):
    """HTTPSConnection's TLS over the connection _WatchedConnection makes (it comes next in the MRO)."""


class _WatchedHandler(urllib.request.HTTPHandler, urllib.request.HTTPSHandler):
    """urllib's http and https handlers, opening watched connections."""

    def __init__(self, deadline: OutboundDeadline) -> None:
        super().__init__()
        self.deadline = deadline

    def _connection(self, kind: type[_WatchedConnection], host: str, **kwargs: Any) -> _WatchedConnection:
        connection = kind(host, **kwargs)
        connection.deadline = self.deadline
        return connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(self._connection, _WatchedConnection), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        connection = functools.partial(self._connection, _WatchedHTTPSConnection)
        return self.do_open(connection, req, context=_tls_context())


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


def fetch_url(url: str, timeout: float = 3.0) -> bytes:
    """GET a JSON document from the authorization server: https only (plain http only on loopback), no redirects.

    `timeout` bounds the whole fetch (netsafety.OutboundDeadline): connect, TLS, headers and body draw from it,
    and at zero the connection is closed (DeadlinePassed, a TimeoutError)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme != "https" and not (parsed.scheme == "http" and is_loopback_host(parsed.hostname or "")):
        raise ValueError("the issuer's URLs must be https")
    request = urllib.request.Request(url, headers={"accept": "application/json"})  # noqa: S310 - checked above
    with OutboundDeadline(timeout) as deadline:
        opener = urllib.request.build_opener(_NoRedirects, _WatchedHandler(deadline))
        try:
            with opener.open(request, timeout=deadline.timeout(timeout)) as response:
                body = bytes(response.read(1024 * 1024))
        except (OSError, http.client.HTTPException):
            if deadline.expired:
                raise DeadlinePassed(deadline.message) from None
            raise
        if deadline.cut:  # a body that ends with its connection: the watchdog's cut is no end
            raise DeadlinePassed(deadline.message)
        return body


@dataclass(frozen=True)
class SigningKey:
    jwk: jwt.PyJWK
    declared_algorithm: str | None  # the JWK's own `alg`, when it names one


class JwksCache:
    """The issuer's signing keys by kid: cached for `cache_seconds`, fetched at most once per `refresh_seconds`.

    An unknown kid triggers one refresh (keys rotate), but a flood of made-up kids triggers at most one
    fetch per interval. Requests that need keys while that fetch is under way wait for it (single flight, up to
    `wait_seconds`) rather than being told 503. A failed refresh keeps serving the keys already held; with none
    held, or for an unknown kid, the failure is JwksUnavailable (503). The cause is logged once per interval.
    """

    def __init__(
        self,
        issuer: str,
        jwks_url: str = "",
        fetch: Fetch = fetch_url,
        cache_seconds: float = 3600.0,
        refresh_seconds: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        wait_seconds: float = 10.0,  # past the fetch's own deadline (fetch_url: 3 s per document, two at most)
    ) -> None:
        self.issuer = issuer
        self.wait_seconds = wait_seconds
        self.jwks_url = jwks_url
        self.fetch = fetch
        self.cache_seconds = cache_seconds
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self._keys: dict[str, SigningKey] | None = None
        self._fetched_at = float("-inf")
        self._attempted_at = float("-inf")
        self._lock = threading.Lock()
        self._in_flight: threading.Event | None = None  # set when the fetch under way ends, either way

    def key_for(self, kid: str) -> SigningKey | None:
        # The lock guards the cache's state only: the fetch runs outside it, so a slow issuer never holds up
        # requests whose keys are cached. A fetch is claimed (attempted_at) under the lock: one per interval.
        with self._lock:
            now = self.clock()
            keys = self._keys
            # Stale keys, or an unknown kid (a rotated key): fetch, at most once per refresh interval.
            wanted = keys is None or now - self._fetched_at > self.cache_seconds or kid not in keys
            in_flight = self._in_flight if wanted else None
            fetching = wanted and in_flight is None and now - self._attempted_at >= self.refresh_seconds
            if fetching:
                self._attempted_at = now
                self._in_flight = threading.Event()
        if in_flight is not None:
            return self._after(in_flight, kid, now)
        if fetching:
            try:
                return self._fetch_for(kid, now)
            finally:
                with self._lock:
                    done, self._in_flight = self._in_flight, None
                if done is not None:
                    done.set()
        if keys is None:
            raise JwksUnavailable("the issuer's keys are unavailable", self._retry_after(now))
        return keys.get(kid)

    def _after(self, in_flight: threading.Event, kid: str, now: float) -> SigningKey | None:
        """Another request's fetch is under way: its outcome, once it ends (or the wait's bound passes)."""
        in_flight.wait(self.wait_seconds)
        with self._lock:
            keys = self._keys
        if keys is None or (kid not in keys and not in_flight.is_set()):
            raise JwksUnavailable("the issuer's keys are unavailable", self._retry_after(now))
        return keys.get(kid)

    def _fetch_for(self, kid: str, now: float) -> SigningKey | None:
        try:
            loaded = self._load()
        except Exception as error:
            # Logged here, at most once per refresh interval, never per request; the type only, no URL contents.
            logger.error("OAuth issuer keys unavailable", extra={"error_type": type(error).__name__})
            with self._lock:
                keys = self._keys
                if keys is None or kid not in keys:
                    raise JwksUnavailable("the issuer's keys are unavailable", self._retry_after(now)) from error
                return keys[kid]  # keep serving the keys held
        with self._lock:
            self._keys, self._fetched_at = loaded, now
        return loaded.get(kid)

    def _retry_after(self, now: float) -> int:
        return max(1, math.ceil(self._attempted_at + self.refresh_seconds - now))

    def _load(self) -> dict[str, SigningKey]:
        # pyjwt and cryptography load with the first OAuth token, not with the app (API keys need neither).
        import jwt

        if not self.jwks_url:
            discovery = json.loads(self.fetch(self.issuer.rstrip("/") + "/.well-known/openid-configuration"))
            if discovery.get("issuer") != self.issuer or not isinstance(discovery.get("jwks_uri"), str):
                raise ValueError("the discovery document names another issuer or no jwks_uri")
            self.jwks_url = discovery["jwks_uri"]
        document = json.loads(self.fetch(self.jwks_url))
        keys: dict[str, SigningKey] = {}
        for entry in document.get("keys", []):
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or not entry.get("kid"):
                continue
            try:
                alg = entry.get("alg")
                keys[str(entry["kid"])] = SigningKey(jwt.PyJWK.from_dict(entry), alg if isinstance(alg, str) else None)
            except jwt.PyJWTError:
                continue  # a key type this process cannot use; the others still work
        return keys
