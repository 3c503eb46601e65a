"""The authorization server's ASGI app (uvicorn behind the Lambda Web Adapter, like the MCP endpoint).

Routes: the MCP SDK's (`/.well-known/oauth-authorization-server`, `/register`, `/authorize`, `/token`,
`/revoke`) with the metadata completed (`none` client authentication, client ID metadata documents), and
this server's own: `/jwks` (the signing key's public half), `/callback` (the upstream login's answer, which
shows the consent form) and `/consent` (the form's answer), `/healthz` for the adapter.

The issuer is `AUTHORIZATION_ISSUER`, or `https://<Host>` when that is empty (a function cannot be told its
own Function URL): the Host must be a Function URL host of the function's region or an allowed host, and one
app (provider, routes) is built per issuer. Registration is size-capped (400) and rate-limited per source
address and per server (429): mcp_backend.authorization.registration.
The consent page names the client, its redirect host, the resource and the scopes; its form carries a
CSRF token bound to a cookie set with the page, and the page may not be framed.
"""

from __future__ import annotations

import hmac
import html
import secrets
import threading
import urllib.parse
from typing import Any

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

from mcp_backend.authorization.clients import SCOPES, MetadataDocuments, is_metadata_url
from mcp_backend.authorization.provider import Provider
from mcp_backend.authorization.registration import RegistrationGate, replay
from mcp_backend.authorization.resource import Resources
from mcp_backend.authorization.signing import KmsSigner
from mcp_backend.authorization.store import AuthorizationStore, digest
from mcp_backend.authorization.upstream import Upstream, UpstreamLoginFailed
from mcp_backend.config import AuthorizationServerSettings, load_settings
from mcp_backend.hosts import HostPolicy
from mcp_backend.observability import logger

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


def create_app() -> ASGIApp:
    """uvicorn's factory (`--factory mcp_backend.authorization.app:create_app`)."""
    settings = load_settings(AuthorizationServerSettings)
    return AuthorizationServer(
        settings,
        AuthorizationStore(settings.authorization_table_name),
        KmsSigner(settings.authorization_signing_key_id),
        Upstream(settings),
        MetadataDocuments(
            tuple(host.lower() for host in settings.listed("redirect_hosts")),
            native_redirect_uris=settings.listed("native_redirect_uris"),
            allow_loopback_hosts=settings.authorization_allow_loopback_hosts,
        ),
    )


class AuthorizationServer:
    """Checks the Host, then hands the request to that issuer's app."""

    def __init__(
        self,
        settings: AuthorizationServerSettings,
        store: AuthorizationStore,
        signer: KmsSigner,
        upstream: Upstream,
        documents: MetadataDocuments,
        resources: Resources | None = None,
    ) -> None:
        self.settings = settings
        self.store, self.signer, self.upstream, self.documents = store, signer, upstream, documents
        self.resources = resources or Resources(settings)
        self._apps: dict[str, ASGIApp] = {}
        self._lock = threading.Lock()
        self._function_url_hosts = HostPolicy.for_region(settings.aws_region)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        issuer = self.issuer_for(scope)
        if issuer is None:
            await PlainTextResponse("unknown host", status_code=421)(scope, receive, send)
            return
        await self.app_for(issuer)(scope, receive, send)

    def issuer_for(self, scope: Scope) -> str | None:
        host = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), "").lower()
        if self.settings.authorization_issuer:
            return self.settings.authorization_issuer.rstrip("/")
        if self._function_url_hosts.host_allowed(host) or host in self.settings.listed("allowed_hosts"):
            return f"https://{host}"
        return None

    def app_for(self, issuer: str) -> ASGIApp:
        with self._lock:
            if issuer not in self._apps:
                provider = Provider(
                    issuer, self.settings, self.store, self.signer, self.upstream, self.documents, self.resources
                )
                self._apps[issuer] = issuer_app(provider)
            return self._apps[issuer]


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
        Route("/consent", endpoint=pages.consent, methods=["POST"]),
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
            routes.append(Route(path, endpoint=PublicClientRevocation(route), methods=["POST", "OPTIONS"]))
        elif path not in ("/.well-known/oauth-authorization-server", "/authorize"):
            routes.append(route)
    return Starlette(routes=routes)


class DocumentClientAuthorization:
    """The SDK's /authorize, told why a client ID metadata document was refused: the SDK would only say
    "not found". 400 `invalid_request` without a redirect (RFC 6749 section 4.1.2.1: no client, no redirect);
    the lookup is cached, so the SDK's own lookup that follows fetches nothing."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.inner = AuthorizationHandler(provider)

    async def handle(self, request: Request) -> Response:
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        if isinstance(client_id, str) and is_metadata_url(client_id):
            found, reason = await self.provider.documents.lookup(client_id)
            if found is None:
                answer = {"error": "invalid_request", "error_description": f"client_id refused: {reason}"}
                return JSONResponse(answer, status_code=400, headers={"Cache-Control": "no-store"})
        return await self.inner.handle(request)


class PublicClientRevocation:
    """RFC 7009 for public clients: the SDK's revocation request model requires a `client_secret` field even
    from a client that has none, so a form without one gets an empty one (which a public client's
    authentication ignores and a confidential client's refuses)."""

    def __init__(self, route: Route) -> None:
        self.inner = route.app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await self.inner(scope, receive, send)
            return
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > 64 * 1024:
                await JSONResponse({"error": "invalid_request"}, status_code=413)(scope, receive, send)
                return
        if "client_secret" not in urllib.parse.parse_qs(body.decode("latin-1")):
            body += b"&client_secret=" if body else b"client_secret="
        await self.inner(scope, replay(body, receive), send)


class ConsentPages:
    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.secure_cookie = provider.issuer.startswith("https://")

    async def jwks(self, request: Request) -> Response:
        return JSONResponse(self.provider.signer.jwks(), headers={"Cache-Control": "public, max-age=300"})

    async def callback(self, request: Request) -> Response:
        transaction = request.query_params.get("state", "")
        record = self.provider.transaction(transaction)
        if record is None or record.get("_used") or "subject" in record:
            return page("This sign-in has expired or was already used. Start again from your MCP client.", 400)
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
        redirect_uri = urllib.parse.urlsplit(record["redirect_uri"])
        e = html.escape
        scopes = "".join(f"<li><b>{e(s)}</b>: {e(SCOPE_TEXT.get(s, s))}</li>" for s in record["scopes"])
        name = client_name or record["client_id"]
        body = (
            f"<h1>Allow {e(name)}?</h1>"
            f"<p>Signed in as <b>{e(record['name'])}</b>.</p>"
            f"<p><b>{e(name)}</b> (client <code>{e(record['client_id'])}</code>) asks to use "
            f"<code>{e(record['resource'])}</code> as you, and will receive access at "
            f"<b>{e(redirect_uri.hostname or '')}</b>. It may:</p><ul>{scopes}</ul>"
            '<form method="post" action="/consent">'
            f'<input type="hidden" name="transaction" value="{e(transaction)}">'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">'
            '<button type="submit" name="decision" value="approve" id="approve">Allow</button> '
            '<button type="submit" name="decision" value="deny" id="deny">Deny</button></form>'
        )
        # form-action: this server, and the redirect's origin the answer's 302 goes to.
        target = f"{redirect_uri.scheme}://{redirect_uri.netloc}"
        return page(body, 200, form_action=f"'self' {target}")

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


def page(body: str, status: int, form_action: str = "'self'") -> HTMLResponse:
    csp = f"default-src 'none'; style-src 'unsafe-inline'; form-action {form_action}; frame-ancestors 'none'"
    document = (
        '<!doctype html><html><head><meta charset="utf-8"><title>Sign in to the MCP endpoint</title>'
        '<meta name="viewport" content="width=device-width"></head>'
        f'<body style="font-family:sans-serif;max-width:40em;margin:2em auto">{body}</body></html>'
    )
    return HTMLResponse(document, status_code=status, headers={**PAGE_HEADERS, "Content-Security-Policy": csp})


def redirect(url: str) -> Response:
    return RedirectResponse(url, status_code=302, headers={"Cache-Control": "no-store"})
