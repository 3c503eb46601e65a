"""The template's Function URLs served on loopback, one port each from the stack's web port: a web-adapter
function's app in this process (in-process runtime) or behind the Web Adapter in its sandboxes (Lambda runtime),
with the variables the local stack changes for it (allowed hosts and origins, OAuth's resource and JWKS)."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

from devstack.front_doors.function_urls import NotAWebFunction, WebFunction
from devstack.front_doors.function_urls import serve as serve_web
from devstack.front_doors.iam_urls import LOCAL_IAM_CALLERS, SigV4Verified
from devstack.front_doors.web_adapter import serve_function_url
from devstack.ports import listen_on
from devstack.runtime.lambda_runtime import LambdaRuntime
from devstack.stack.cognito_login import set_callback_urls
from devstack.stack.intrinsics import Unsupported
from devstack.stack.template import Template
from devstack.wired_stack import LocalEnvironment

LOGIN_CLIENT_NAME = "mcp-authorization-server"  # the template's AuthorizationLoginClient


@dataclasses.dataclass(frozen=True)
class FunctionUrlSettings:
    host: str
    first_listener: socket.socket  # the first Function URL is served here, the next on the next port
    function_overrides: dict[str, str]
    aws_url: str  # where a created user pool's JWKS is served
    lambda_url: str = ""  # where the pools' local managed login is served
    # Function logical id -> the module:factory that builds its app in-process instead of its start script's
    # target (the conformance fixtures: devstack.conformance_fixtures).
    app_factories: dict[str, str] = dataclasses.field(default_factory=dict)


def serve_function_urls(
    template: Template,
    environment: LocalEnvironment,
    settings: FunctionUrlSettings,
    served: dict[str, WebFunction],
    notice: Callable[[str, str], None],
) -> None:
    """Serve each Function URL whose function runs a web app behind the Lambda Web Adapter, into `served`."""
    first_port = settings.first_listener.getsockname()[1]
    # The MCP endpoint keeps the stack's web port (an authorization server takes the ports after the others), and
    # authorization servers are served first, so the endpoints that trust them are given their loopback URLs.
    active = environment.stack.active("AWS::Lambda::Url")  # a URL whose condition is false is not served
    targets = [
        (logical_id, _url_target(template, url["Properties"]["TargetFunctionArn"]))
        for logical_id, url in template.resources("AWS::Lambda::Url").items()
        if logical_id in active
    ]
    targets.sort(key=lambda target: _is_authorization_server(environment, target[1]))
    planned = [(logical_id, function, first_port + index) for index, (logical_id, function) in enumerate(targets)]
    issuers: dict[str, str] = {}  # an authorization server's placeholder URL -> its loopback URL
    resource_parameters: list[str] = []  # where an authorization server reads the endpoint's URL
    for logical_id, function, port in sorted(
        planned, key=lambda plan: not _is_authorization_server(environment, plan[1])
    ):
        listener: socket.socket | None = None
        try:
            spec = environment.stack.function(function)
            listener = settings.first_listener if port == first_port else listen_on(settings.host, port)
            host = f"{settings.host}:{port}"
            # Browser pages on the stack's own loopback origins may call it, besides what the template allows.
            allowed = settings.function_overrides.get("MCP_ALLOWED_ORIGINS")
            allowed = allowed if allowed is not None else spec.environment.get("MCP_ALLOWED_ORIGINS", "")
            origins = [allowed, f"http://{host}", f"http://localhost:{port}"]
            oauth = _oauth_overrides(spec.environment, f"http://{host}", settings.aws_url, issuers)
            overrides = {
                **settings.function_overrides,
                # The Function URL host is not known locally; the loopback host stands in for it.
                "MCP_ALLOWED_HOSTS": f"{host},localhost:{port}",
                "MCP_ALLOWED_ORIGINS": ",".join(origin for origin in origins if origin),
                **oauth,
                **_authorization_server_overrides(spec.environment, settings.lambda_url),
            }
            lambda_runtime = environment.lambda_runtime
            signed = template.resources()[logical_id]["Properties"].get("AuthType") == "AWS_IAM"
            if signed and lambda_runtime is not None:
                # Never served unchecked: the SigV4 door wraps the in-process app only.
                raise NotAWebFunction("an AWS_IAM Function URL is served by the in-process runtime only")
            if lambda_runtime is not None:
                web = _serve_in_lambda_runtime(lambda_runtime, function, listener, overrides)
            elif signed:
                door = partial(SigV4Verified, region="us-east-1", callers=LOCAL_IAM_CALLERS)
                web = serve_web(spec, listener, "us-east-1", overrides, door, settings.app_factories.get(function))
            else:
                web = serve_web(
                    spec, listener, "us-east-1", overrides, factory_target=settings.app_factories.get(function)
                )
            served[logical_id] = web
            created = environment.stack.ensure(logical_id)
            if _is_authorization_server(environment, function):
                issuers[created.attributes["FunctionUrl"].rstrip("/")] = web.url
                set_callback_urls(environment.client("cognito-idp"), LOGIN_CLIENT_NAME, f"{web.url}/callback")
                # The template wrote the placeholder Function URL as the issuer; the server's is the loopback one
                # (read at its first request, so written before any).
                environment.client("ssm").put_parameter(
                    Name=spec.environment["AUTHORIZATION_ISSUER_PARAMETER"],
                    Value=web.url,
                    Type="String",
                    Overwrite=True,
                )
                resource_parameters.append(spec.environment.get("AUTHORIZATION_RESOURCE_PARAMETER", ""))
            if "OAUTH_RESOURCE" in oauth:
                # The template wrote the endpoint's placeholder URL; its tokens are for the loopback one.
                for name in filter(None, resource_parameters):
                    environment.client("ssm").put_parameter(
                        Name=name, Value=oauth["OAUTH_RESOURCE"], Type="String", Overwrite=True
                    )
            created.attributes["FunctionUrl"] = f"{web.url}/"
        except (NotAWebFunction, Unsupported, LookupError) as reason:
            notice(logical_id, f"Function URL not served: {reason}")
            if listener is not None and listener is not settings.first_listener:
                listener.close()  # taken for a URL that was not served (the stack closes its first at stop)


def _is_authorization_server(environment: LocalEnvironment, function: str) -> bool:
    try:
        return "AUTHORIZATION_TABLE_NAME" in environment.stack.function(function).environment
    except (Unsupported, LookupError):
        return False


def _authorization_server_overrides(environment: dict[str, str], lambda_url: str) -> dict[str, str]:
    """The authorization server: client metadata documents may be on loopback, and the stack's pool signs users
    in at the local managed login (devstack.stack.cognito_login). Its issuer is written to its parameter."""
    if "AUTHORIZATION_TABLE_NAME" not in environment:
        return {}
    overrides = {"AUTHORIZATION_ALLOW_LOOPBACK_HOSTS": "true"}
    pool = environment.get("UPSTREAM_USER_POOL_ID")
    if pool:
        overrides["UPSTREAM_ISSUER"] = f"{lambda_url}/{pool}"
    return overrides


def _oauth_overrides(environment: dict[str, str], url: str, aws_url: str, issuers: dict[str, str]) -> dict[str, str]:
    """OAuth mode: this URL is the resource, a created pool's JWKS is moto's (same keys, served locally), and the
    stack's own authorization server is its loopback URL."""
    if environment.get("AUTH_MODE", "apikey") == "apikey":
        return {}
    overrides = {} if environment.get("OAUTH_RESOURCE") else {"OAUTH_RESOURCE": f"{url}/mcp"}
    issuer = issuers.get(environment.get("OAUTH_ISSUER", ""))
    if issuer is not None:
        overrides.update(OAUTH_ISSUER=issuer, OAUTH_JWKS_URL=f"{issuer}/jwks")
    jwks = environment.get("OAUTH_JWKS_URL", "")
    cognito = "https://cognito-idp.us-east-1.amazonaws.com/"
    if jwks.startswith(cognito):
        overrides["OAUTH_JWKS_URL"] = f"{aws_url}/{jwks.removeprefix(cognito)}"
    return overrides


def _serve_in_lambda_runtime(
    runtime: LambdaRuntime, function: str, listener: socket.socket, overrides: dict[str, str]
) -> WebFunction:
    lambda_function = runtime.functions[function]
    if not lambda_function.exec_wrapper:
        raise NotAWebFunction(f"{function} has no AWS_LAMBDA_EXEC_WRAPPER (a Function URL event handler)")
    runtime.functions[function] = dataclasses.replace(
        lambda_function, environment={**lambda_function.environment, **overrides}
    )
    return serve_function_url(runtime.pool(function), listener)


def _url_target(template: Template, expression: Any) -> str:
    """Logical id of the function behind a Function URL's TargetFunctionArn (function or alias)."""
    target = expression.get("Ref") or expression.get("Fn::GetAtt", [""])[0]
    resource = template.resources().get(target, {})
    if resource.get("Type") == "AWS::Lambda::Alias":
        function = resource["Properties"]["FunctionName"]
        return function.get("Ref") or function.get("Fn::GetAtt", [""])[0]
    return target
