"""The authorization server's ASGI app (uvicorn behind the Lambda Web Adapter, like the MCP endpoint).

Routes: the MCP SDK's (`/.well-known/oauth-authorization-server`, `/register`, `/authorize`, `/token`,
`/revoke`) with the metadata completed (`none` client authentication, client ID metadata documents), and
this server's own: `/jwks` (the signing key's public half), `/callback` (the upstream login's answer, which
shows the consent form) and `/consent` (the form's answer), `/healthz` for the adapter.

The issuer is pinned (mcp_backend.authorization.resource: `AUTHORIZATION_ISSUER`, else the SSM parameter the
template writes, read once): the Host header decides nothing. A request on another Host is served with the
pinned issuer in its metadata and answers; `/authorize` on another Host is redirected (307) to the issuer's, so
the browser's cookies and the consent page are the issuer's. Registration is size-capped (400) and
rate-limited per source address and per server (429): mcp_backend.authorization.registration.

Behind the edge (Edge=CloudFront with a custom domain: the issuer is that domain), a request without
CloudFront's origin header is refused (403) before anything else, as on the MCP endpoint
(mcp_backend.edge_origin). CloudFront sends the origin's Host (the Function URL's), never the viewer's, so
there the Host is not compared: a request that passed the check came through the issuer's distribution.

A login is bound to the browser that started it: `/authorize` sets a cookie holding a random value (HttpOnly,
Secure except on loopback http, SameSite=Lax because the upstream's redirect to `/callback` is a top-level
cross-site navigation) whose hash the transaction keeps; `/callback` without that cookie is a 400 page and the
transaction is spent, so a login link sent to someone else issues nothing.
The consent page leads with where the answer goes (the redirect host), names the operator, the resource and
the scopes, and shows the client's own `client_name` as unverified; its form carries a CSRF token bound to a
cookie set with the page, and the page may not be framed.
"""

from __future__ import annotations

import base64
import hmac
import html
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.routes import build_metadata, cors_middleware, create_auth_routes
from mcp.server.auth.settings import ClientRegistrationOptions, RevocationOptions
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, RequestBodyLimitMiddleware
from mcp.shared.auth import OAuthMetadata
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route, request_response
from starlette.types import ASGIApp, Receive, Scope, Send

from mcp_backend import edge_origin
from mcp_backend.authorization.clients import (
    SCOPES,
    Fetch,
    FetchLimited,
    MetadataDocuments,
    hashed_secret,
    is_metadata_url,
)
from mcp_backend.authorization.fetch_limits import SOURCE, DocumentFetchLimits
from mcp_backend.authorization.provider import BROWSER, TRANSACTION_SECONDS, Provider
from mcp_backend.authorization.registration import RegistrationGate, read_body, replay, source_of
from mcp_backend.authorization.resource import Resources, issuer_of
from mcp_backend.authorization.signing import KmsSigner
from mcp_backend.authorization.store import AuthorizationStore, digest
from mcp_backend.authorization.upstream import Upstream, UpstreamLoginFailed, UpstreamUnavailable
from mcp_backend.config import AuthorizationServerSettings, load_settings
from mcp_backend.edge_origin import EdgeOnly, EdgeOriginCheck
from mcp_backend.netsafety import is_loopback_host
from mcp_backend.observability import logger
from mcp_backend.stack_urls import StackUrl, StackUrlUnavailable

SCOPE_TEXT = {
    "read": "read its jobs, results and registered endpoints",
    "submit": "submit jobs, analyse datasets and register endpoints on your behalf",
}
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # same-origin, not no-referrer: under no-referrer browsers send `Origin: null` with the consent form, which
    # the Origin check must then refuse; nothing goes to other origins either way.
    "Referrer-Policy": "same-origin",
}
CSRF_COOKIE = "mcp_consent"
# The consent form is three short fields (transaction, csrf, decision): well under 1 KiB. A longer body is 413
# before it is parsed, as the SDK's handlers answer theirs.
CONSENT_MAX_BODY_BYTES = 16 * 1024
# The browser binding: `__Host-` on https (host-only, Secure, Path=/: no sibling host can plant one); plain on
# loopback http, where that prefix cannot be set.
BROWSER_COOKIE, LOOPBACK_BROWSER_COOKIE = "__Host-mcp_login", "mcp_login"
BROWSER_VALUE = re.compile(r"[A-Za-z0-9_-]{43}")
# How long the edge's origin secret is trusted before it is read again (a rotation keeps the previous value valid).
EDGE_SECRET_CACHE_SECONDS = 300.0


def create_app() -> ASGIApp:
    """uvicorn's factory (`--factory mcp_backend.authorization.app:create_app`)."""
    settings = load_settings(AuthorizationServerSettings)
    store = AuthorizationStore(settings.authorization_table_name)
    return AuthorizationServer(
        settings,
        store,
        KmsSigner(settings.authorization_signing_key_id),
        Upstream(settings),
        documents_for(settings, store),
    )


def documents_for(
    settings: AuthorizationServerSettings, store: AuthorizationStore, fetch: Fetch | None = None
) -> MetadataDocuments:
    """Client ID metadata documents under the same redirect rules as registration, fetched within the limits."""
    return MetadataDocuments(
        tuple(host.lower() for host in settings.listed("redirect_hosts")),
        native_redirect_uris=settings.listed("native_redirect_uris"),
        allow_loopback_hosts=settings.authorization_allow_loopback_hosts,
        fetch=fetch,
        admit=DocumentFetchLimits(store, settings),
    )


class AuthorizationServer:
    """Serves every request with the one pinned issuer's app (module docstring)."""

    def __init__(
        self,
        settings: AuthorizationServerSettings,
        store: AuthorizationStore,
        signer: KmsSigner,
        upstream: Upstream,
        documents: MetadataDocuments,
        resources: Resources | None = None,
        issuer: StackUrl | str | None = None,
        clock: Callable[[], float] = time.time,
        edge_check: EdgeOriginCheck | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.store, self.signer, self.upstream, self.documents = store, signer, upstream, documents
        self.resources = resources or Resources(settings)
        self.issuer = issuer if issuer is not None else issuer_of(settings)
        self._app: tuple[str, ASGIApp] | None = None
        self._lock = threading.Lock()
        if edge_check is None:
            edge_check = edge_origin.from_settings(settings.edge_origin_secret_id, EDGE_SECRET_CACHE_SECONDS)
        self.behind_edge = edge_check is not None
        self._edge_only = EdgeOnly(self._serve, edge_check)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        await self._edge_only(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            issuer, app = self._app if self._app is not None else await anyio.to_thread.run_sync(self.build)
        except StackUrlUnavailable:
            answer = {"error": "temporarily_unavailable", "error_description": "try again shortly"}
            headers = {"Cache-Control": "no-store", "Retry-After": "5"}
            await JSONResponse(answer, status_code=503, headers=headers)(scope, receive, send)
            return
        off_issuer_host = host_of(scope) != urllib.parse.urlsplit(issuer).netloc.lower()
        if scope.get("path") == "/authorize" and off_issuer_host and not self.behind_edge:
            query = scope.get("query_string", b"").decode("latin-1")
            target = f"{issuer}/authorize{'?' + query if query else ''}"
            await RedirectResponse(target, 307, headers={"Cache-Control": "no-store"})(scope, receive, send)
            return
        # Whichever handler fetches a client metadata document, the fetch counts for this request's source.
        source = SOURCE.set(source_of(scope))
        try:
            await app(scope, receive, send)
        finally:
            SOURCE.reset(source)

    def build(self) -> tuple[str, ASGIApp]:
        """The issuer's app, built once (the issuer's parameter is read here: off the event loop)."""
        with self._lock:
            if self._app is None:
                issuer = self.issuer if isinstance(self.issuer, str) else self.issuer.value().rstrip("/")
                provider = Provider(
                    issuer,
                    self.settings,
                    self.store,
                    self.signer,
                    self.upstream,
                    self.documents,
                    self.resources,
                    self.clock,
                )
                self._app = (issuer, issuer_app(provider))
            return self._app


def host_of(scope: Scope) -> str:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "").lower()


def issuer_app(provider: Provider) -> Starlette:
    issuer = AnyHttpUrl(provider.issuer)
    registration = ClientRegistrationOptions(enabled=True, valid_scopes=list(SCOPES), default_scopes=list(SCOPES))
    revocation = RevocationOptions(enabled=True)
    # Public clients (no secret: PKCE is their proof) and client ID metadata documents, which the SDK's
    # defaults leave out; the endpoints are the SDK's own. The issuer exactly as configured (RFC 8414 compares
    # it as a string: no trailing slash added).
    methods = ["none", "client_secret_post", "client_secret_basic"]
    metadata = OAuthMetadata.model_validate(
        {
            **build_metadata(issuer, None, registration, revocation).model_dump(mode="json", exclude_none=True),
            "issuer": provider.issuer,
            "token_endpoint_auth_methods_supported": methods,
            "revocation_endpoint_auth_methods_supported": methods,
            "client_id_metadata_document_supported": True,
            # Every answer to /authorize, code or error, carries `iss` (Provider.redirect).
            "authorization_response_iss_parameter_supported": True,
        }
    )
    sdk_routes = create_auth_routes(provider, issuer, None, registration, revocation)
    pages = ConsentPages(provider)
    routes: list[BaseRoute] = [
        Route(
            "/.well-known/oauth-authorization-server",
            endpoint=cors_middleware(MetadataHandler(metadata).handle, ["GET", "OPTIONS"]),
            methods=["GET", "OPTIONS"],
        ),
        Route("/jwks", endpoint=pages.jwks, methods=["GET"]),
        Route("/callback", endpoint=pages.callback, methods=["GET"]),
        Route(
            "/consent",
            endpoint=RequestBodyLimitMiddleware(request_response(pages.consent), CONSENT_MAX_BODY_BYTES),
            methods=["POST"],
        ),
        Route("/healthz", endpoint=lambda _: PlainTextResponse("ok"), methods=["GET"]),
        Route(
            "/authorize",
            endpoint=RequestBodyLimitMiddleware(
                request_response(DocumentClientAuthorization(provider).handle), DEFAULT_MAX_REQUEST_BODY_SIZE
            ),
            methods=["GET", "POST"],
        ),
    ]
    for route in sdk_routes:
        path = getattr(route, "path", "")
        if path == "/register":
            gate = RegistrationGate(route, provider.settings, provider.store)
            routes.append(Route(path, endpoint=gate, methods=["POST", "OPTIONS"]))
        elif path == "/revoke":
            revoke = HashedSecrets(PublicClientRevocation(ErrorAnswers(route.app)))
            routes.append(Route(path, endpoint=revoke, methods=["POST", "OPTIONS"]))
        elif path == "/token":
            token = HashedSecrets(ErrorAnswers(route.app))
            routes.append(Route(path, endpoint=token, methods=["POST", "OPTIONS"]))
        elif path not in ("/.well-known/oauth-authorization-server", "/authorize"):
            routes.append(route)
    return Starlette(routes=routes)


class DocumentClientAuthorization:
    """The SDK's /authorize, its error redirects naming the issuer, told why a client ID metadata document was
    refused: the SDK would only say "not found". 400 `invalid_request` without a redirect (RFC 6749 section
    4.1.2.1: no client, no redirect); the lookup is cached, so the SDK's own lookup that follows fetches nothing."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.inner = AuthorizationHandler(provider)
        self.secure = provider.issuer.startswith("https://")
        self.cookie = BROWSER_COOKIE if self.secure else LOOPBACK_BROWSER_COOKIE

    async def handle(self, request: Request) -> Response:
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        if isinstance(client_id, str) and is_metadata_url(client_id):
            try:
                found, reason = await self.provider.documents.lookup(client_id)
            except FetchLimited as limited:
                return fetch_limited(limited)
            if found is None:
                answer = {"error": "invalid_request", "error_description": f"client_id refused: {reason}"}
                return JSONResponse(answer, status_code=400, headers={"Cache-Control": "no-store"})
        # The browser's binding value: its own when it has one (two sign-ins in one browser both finish), else
        # a new one; the transaction keeps its hash (Provider.authorize).
        value = request.cookies.get(self.cookie, "")
        value = value if BROWSER_VALUE.fullmatch(value) else secrets.token_urlsafe(32)
        bound = BROWSER.set(digest(value))
        try:
            response = await self.inner.handle(request)
        except FetchLimited as limited:  # the document fell out of the cache between the lookup above and the SDK's
            return fetch_limited(limited)
        finally:
            BROWSER.reset(bound)
        if response.status_code == 302:
            response.set_cookie(
                self.cookie,
                value,
                max_age=TRANSACTION_SECONDS,
                path="/",
                secure=self.secure,
                httponly=True,
                samesite="lax",
            )
        return self.with_issuer(response)

    def with_issuer(self, response: Response) -> Response:
        """The SDK's error redirects to the client, with `iss` added (RFC 9207 section 2: every authorization
        response names the issuer). Its other redirect goes to the upstream login, which carries no `error`."""
        location = response.headers.get("location")
        if response.status_code != 302 or location is None:
            return response
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(location).query)
        if "error" in query and "iss" not in query:
            response.headers["location"] = f"{location}&{urllib.parse.urlencode({'iss': self.provider.issuer})}"
        return response


def fetch_limited(limited: FetchLimited) -> JSONResponse:
    """A client ID metadata document that may not be fetched now: 429 `temporarily_unavailable` with
    Retry-After, at every door that looks a client up (/authorize, /token, /revoke). Never 401 `invalid_client`,
    which tells a client its credentials are bad, for a limit it only has to wait out."""
    answer = {"error": "temporarily_unavailable", "error_description": str(limited)}
    headers = {"Cache-Control": "no-store", "Retry-After": str(limited.retry_after)}
    return JSONResponse(answer, status_code=429, headers=headers)


def upstream_unavailable(error: UpstreamUnavailable) -> JSONResponse:
    """A refresh whose user cannot be checked upstream right now: 503 `temporarily_unavailable` with Retry-After
    (the refresh token stays unspent)."""
    logger.warning("refresh re-check unavailable", extra={"reason": str(error)})
    answer = {"error": "temporarily_unavailable", "error_description": "the user cannot be checked now"}
    return JSONResponse(answer, status_code=503, headers={"Cache-Control": "no-store", "Retry-After": "5"})


class ErrorAnswers:
    """An SDK handler whose expected errors become their answers, never a 500. The SDK's client authentication
    calls the provider's get_client, and a refresh re-checks its user upstream, before it answers anything."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.inner(scope, receive, send)
        except FetchLimited as limited:
            await fetch_limited(limited)(scope, receive, send)
        except UpstreamUnavailable as error:
            await upstream_unavailable(error)(scope, receive, send)


class FormRewrite:
    """A POST form handed to the SDK's handler rewritten (`rewrite`); a body over 64 KiB is 413."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await self.inner(scope, receive, send)
            return
        body = await read_body(receive, 64 * 1024)
        if body is None:
            await JSONResponse({"error": "invalid_request"}, status_code=413)(scope, receive, send)
            return
        scope, body = self.rewrite(scope, body)
        await self.inner(scope, replay(body, receive), send)

    def rewrite(self, scope: Scope, body: bytes) -> tuple[Scope, bytes]:
        raise NotImplementedError


class PublicClientRevocation(FormRewrite):
    """RFC 7009 for public clients: the SDK's revocation request model requires a `client_secret` field even
    from a client that has none, so a form without one gets an empty one (which a public client's
    authentication ignores and a confidential client's refuses)."""

    def rewrite(self, scope: Scope, body: bytes) -> tuple[Scope, bytes]:
        if "client_secret" not in urllib.parse.parse_qs(body.decode("latin-1")):
            body += b"&client_secret=" if body else b"client_secret="
        return scope, body


class HashedSecrets(FormRewrite):
    """The table keeps a client secret's sha256 only (clients.hashed_secret), and the SDK compares the stored
    value with the presented one: so the presented secret, in the form or in HTTP Basic, reaches the SDK
    hashed. A public client's empty secret stays empty."""

    def rewrite(self, scope: Scope, body: bytes) -> tuple[Scope, bytes]:
        form = urllib.parse.parse_qsl(body.decode("latin-1"), keep_blank_values=True)
        if any(name == "client_secret" and value for name, value in form):
            hashed = [(n, hashed_secret(v) if n == "client_secret" and v else v) for n, v in form]
            body = urllib.parse.urlencode(hashed).encode("latin-1")
        headers = [(k, basic_hashed(v) if k == b"authorization" else v) for k, v in scope.get("headers", [])]
        return {**scope, "headers": headers}, body


def basic_hashed(value: bytes) -> bytes:
    """An HTTP Basic header with its password hashed (RFC 6749 section 2.3.1: both parts form-urlencoded);
    anything else unchanged, for the SDK to refuse."""
    if not value.startswith(b"Basic "):
        return value
    try:
        client_id, separator, secret = base64.b64decode(value[6:], validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return value
    if not separator or not secret:
        return value
    hashed = hashed_secret(urllib.parse.unquote(secret))
    return b"Basic " + base64.b64encode(f"{client_id}:{hashed}".encode())


class ConsentPages:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.secure_cookie = provider.issuer.startswith("https://")
        self.browser_cookie = BROWSER_COOKIE if self.secure_cookie else LOOPBACK_BROWSER_COOKIE
        self.operator = provider.settings.authorization_operator_name or "the operator of this MCP endpoint"

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(self.provider.signer.jwks(), headers={"Cache-Control": "public, max-age=300"})

    async def callback(self, request: Request) -> Response:
        transaction = request.query_params.get("state", "")
        record = self.provider.transaction(transaction)
        if record is None or record.get("_used") or "subject" in record:
            return page("This sign-in has expired or was already used. Start again from your MCP client.", 400)
        browser = request.cookies.get(self.browser_cookie, "")
        if not browser or not hmac.compare_digest(digest(browser).encode(), str(record.get("browser", "")).encode()):
            # Finished in another browser than the one that started it (a login link passed on): nothing issued.
            logger.warning("sign-in refused: not the browser that started it")
            self.provider.spend_transaction(transaction)
            return page(
                "This sign-in was started in another browser, or this browser's cookies were cleared. "
                "Nothing was shared. Start again from your MCP client on this device.",
                400,
            )
        code = request.query_params.get("code")
        if not code:
            self.provider.spend_transaction(transaction)
            return redirect(self.provider.redirect(record, error="access_denied"))
        try:
            identity = await self.provider.upstream.identity(
                code, self.provider.callback_url, record["upstream_verifier"], record["nonce"]
            )
        except UpstreamLoginFailed as error:
            logger.warning("upstream login failed", extra={"reason": str(error)})
            self.provider.spend_transaction(transaction)
            return redirect(self.provider.redirect(record, error="access_denied"))
        except Exception as error:  # noqa: BLE001 - the provider, its keys or an AWS call unavailable: never a 500
            logger.error("upstream login unavailable", extra={"error_type": type(error).__name__})
            self.provider.spend_transaction(transaction)
            return redirect(self.provider.redirect(record, error="temporarily_unavailable"))
        csrf = secrets.token_urlsafe(32)
        self.provider.remember_login(transaction, record, identity, csrf)
        client = await self.provider.get_client(record["client_id"])
        response = self.consent_page(transaction, record, csrf, client.client_name if client else None)
        response.set_cookie(
            CSRF_COOKIE, csrf, max_age=600, path="/consent", secure=self.secure_cookie, httponly=True, samesite="strict"
        )
        return response

    def consent_page(self, transaction: str, record: dict[str, Any], csrf: str, client_name: str | None) -> Response:
        """Leads with where the answer goes: the one thing a look-alike registration cannot choose freely (the
        redirect allow-list bounds it). The client's name is its own claim, shown as such."""
        redirect_uri = urllib.parse.urlsplit(record["redirect_uri"])
        e = html.escape
        scopes = "".join(f"<li><b>{e(s)}</b>: {e(SCOPE_TEXT.get(s, s))}</li>" for s in record["scopes"])
        host = redirect_uri.hostname or ""
        if redirect_uri.scheme == "http" and is_loopback_host(host):
            target = f"an app on this device (<b>{e(host)}</b>)"
        elif redirect_uri.scheme == "https":
            target = f"<b>{e(host)}</b>"
        else:
            target = f"the app that opens <b>{e(redirect_uri.scheme)}://{e(redirect_uri.netloc)}</b> links"
        client_id = record["client_id"]
        claimed = (
            f'<p>It calls itself <b>{e(client_name)}</b> <span class="warn">(name chosen by the app, not '
            "verified)</span>.</p>"
            if client_name
            else ""
        )
        document = urllib.parse.urlsplit(client_id).hostname if is_metadata_url(client_id) else None
        origin = f"its description is published at <b>{e(document or '')}</b>" if document else "it registered itself"
        body = (
            f"<h1>Give {target} access as you?</h1>"
            f"{claimed}"
            f'<p class="small">Client <code>{e(client_id)}</code>; {origin}. Access goes to '
            f"<code>{e(record['redirect_uri'])}</code>.</p>"
            f"<p>Signed in as <b>{e(record['name'])}</b> at <b>{e(self.operator)}</b>, for the MCP endpoint "
            f"<code>{e(record['resource'])}</code>. It may:</p><ul>{scopes}</ul>"
            "<p>Only allow this if you started it from an app you trust and the address above is that app's.</p>"
            '<form method="post" action="/consent">'
            f'<input type="hidden" name="transaction" value="{e(transaction)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit" name="decision" value="deny" id="deny">Deny</button>'
            '<button type="submit" name="decision" value="approve" id="approve">Allow</button></form>'
        )
        # form-action: this server, and the redirect's origin the answer's 302 goes to.
        target_origin = f"{redirect_uri.scheme}://{redirect_uri.netloc}"
        return page(body, 200, form_action=f"'self' {target_origin}")

    async def consent(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is not None and origin != self.provider.issuer:
            return page("This form must be sent from the sign-in page.", 403)
        form = await request.form()
        transaction, csrf = str(form.get("transaction", "")), str(form.get("csrf", ""))
        cookie = request.cookies.get(CSRF_COOKIE, "")
        record = self.provider.transaction(transaction)
        if (
            record is None
            or record.get("_used")
            or "csrf" not in record
            or not csrf
            or not hmac.compare_digest(cookie.encode(), csrf.encode())
            or not hmac.compare_digest(digest(csrf).encode(), str(record["csrf"]).encode())
        ):
            return page("This consent form has expired or was not sent from the sign-in page.", 403)
        if not self.provider.spend_transaction(transaction):
            return page("This consent form was already answered.", 403)
        if form.get("decision") != "approve":
            return redirect(self.provider.redirect(record, error="access_denied"))
        return redirect(self.provider.approve(transaction, record))


STYLE = (
    "body{font-family:system-ui,sans-serif;line-height:1.45;max-width:40em;margin:0 auto;padding:1em}"
    "h1{font-size:1.35em;overflow-wrap:anywhere}code{overflow-wrap:anywhere;font-size:.9em}"
    ".small{font-size:.9em;color:#444}.warn{color:#8a4b00}ul{padding-left:1.2em}"
    "form{display:flex;flex-wrap:wrap;gap:.75em;margin-top:1.5em}"
    "button{flex:1 1 10em;min-height:3em;font-size:1em;border-radius:.4em;border:1px solid #888;background:#fff}"
    "#approve{background:#1a56db;color:#fff;border-color:#1a56db}"
)


def page(body: str, status: int, form_action: str = "'self'") -> HTMLResponse:
    csp = f"default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}; frame-ancestors 'none'"
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in to the MCP endpoint</title>'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{STYLE}</style></head>'
        f"<body>{body}</body></html>"
    )
    return HTMLResponse(document, status_code=status, headers={**PAGE_HEADERS, "Content-Security-Policy": csp})


def redirect(url: str) -> Response:
    return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
