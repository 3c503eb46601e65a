"""A loopback Lambda Invoke API, so function code (and `make invoke`) can call boto3's lambda.invoke
against the local stack: AWS_ENDPOINT_URL_LAMBDA points here.

https://docs.aws.amazon.com/lambda/latest/api/API_Invoke.html
- RequestResponse: 200 with the result, or 200 with X-Amz-Function-Error: Unhandled and the error;
- Event: 202, then the async invoker takes over (retries, destinations);
- DryRun: 204.
A durable function (DurableConfig) is started and stopped as Lambda's durable execution API does
(devstack.runtime.durable_functions): Invoke with X-Amz-Durable-Execution-Name answers 202 with the execution's ARN
in X-Amz-Durable-Execution-Arn; StopDurableExecution and SendDurableExecutionCallbackSuccess are served.
Plus local controls: POST /devstack/schedules/<LogicalId>/fire, GET /devstack/health, POST /devstack/fixture
(`make invoke` seeds a fixture's state), and an invocation's X-Devstack-Runtime header (`make invoke RUNTIME=`), the
Cognito pools' client-credentials token endpoint, POST /oauth2/token (devstack.stack.cognito), and their
managed login: discovery, /oauth2/authorize and the authorization-code grant (devstack.stack.cognito_login).
"""

from __future__ import annotations

import json
import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from devstack.runtime.durable_functions import LocalDurableFunctions
from devstack.runtime.function_errors import error_document
from devstack.stack.cognito_login import LocalManagedLogin

log = logging.getLogger("devstack.lambda_api")

_INVOKE_PATH = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")
_FIRE_PATH = re.compile(r"^/devstack/schedules/(?P<schedule>[^/]+)/fire$")
_STOP_PATH = re.compile(r"^/2025-12-01/durable-executions/(?P<arn>.+)/stop$")
_CALLBACK_PATH = re.compile(r"^/2025-12-01/durable-execution-callbacks/(?P<callback>[^/]+)/succeed$")
_DISCOVERY_PATH = re.compile(r"^/(?P<pool>[\w-]+_\w+)/\.well-known/openid-configuration$")


class LambdaApi:
    def __init__(
        self,
        resolve: Callable[[str], str],
        invoke_sync: Callable[..., Any],  # (function, payload[, runtime])
        invoke_async: Callable[[str, Any], str],
        fire_schedule: Callable[[str], int],
        issue_token: Callable[[dict[str, str], str | None], tuple[int, dict[str, Any]]] | None = None,
        sam_env_vars: Callable[[], dict[str, dict[str, str]]] | None = None,
        login: LocalManagedLogin | None = None,
        prepare_fixture: Callable[[dict], dict[str, str | None]] | None = None,
        runtime: str = "inprocess",
        durable: LocalDurableFunctions | None = None,
    ) -> None:
        self.durable = durable
        self.runtime = runtime  # the stack's: an invocation runs there unless its X-Devstack-Runtime names another
        self.prepare_fixture = prepare_fixture
        self.issue_token = issue_token
        self.login = login
        self.sam_env_vars = sam_env_vars
        self.resolve = resolve
        self.invoke_sync = invoke_sync
        self.invoke_async = invoke_async
        self.fire_schedule = fire_schedule
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def serve(self, listener: socket.socket) -> None:
        host, port = listener.getsockname()[:2]
        self._server = make_server(host, port, Request.application(self._app), threaded=True, fd=listener.fileno())
        self._thread = threading.Thread(target=self._server.serve_forever, name="lambda-api", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _app(self, request: Request) -> Response:
        invoke = _INVOKE_PATH.match(request.path)
        if invoke and request.method == "POST":
            return self._invoke(invoke.group("name"), request)
        if self.durable is not None and request.method == "POST":
            answer = self._durable_call(request)
            if answer is not None:
                return answer
        fire = _FIRE_PATH.match(request.path)
        if fire and request.method == "POST":
            try:
                fired = self.fire_schedule(fire.group("schedule"))
            except LookupError as error:
                return _json({"Type": "User", "message": str(error)}, 404)
            return _json({"fired": fired}, 200)
        if self.login is not None:
            answer = self._login(request)
            if answer is not None:
                return answer
        if request.path == "/oauth2/token" and request.method == "POST" and self.issue_token is not None:
            status, body = self.issue_token(dict(request.form), request.headers.get("Authorization"))
            return Response(json.dumps(body), status=status, content_type="application/json")
        control = self._control(request)
        if control is not None:
            return control
        return _json({"Type": "User", "message": f"{request.method} {request.path} is not emulated"}, 404)

    def _control(self, request: Request) -> Response | None:
        """The stack's own /devstack/ routes beside the emulated APIs."""
        if request.path == "/devstack/sam-env-vars" and request.method == "GET" and self.sam_env_vars is not None:
            return Response(json.dumps(self.sam_env_vars()), status=200, content_type="application/json")
        if request.path == "/devstack/fixture" and request.method == "POST" and self.prepare_fixture is not None:
            state = request.get_json(silent=True)
            if not isinstance(state, dict):
                return _json({"Type": "User", "message": "the fixture state must be a JSON object"}, 400)
            return _json(self.prepare_fixture(state), 200)
        if request.path == "/devstack/health":
            return _json({"status": "ready"}, 200)
        return None

    def _durable_call(self, request: Request) -> Response | None:
        """StopDurableExecution and SendDurableExecutionCallbackSuccess; None for any other request."""
        assert self.durable is not None
        stop, callback = _STOP_PATH.match(request.path), _CALLBACK_PATH.match(request.path)
        try:
            if stop:
                error = request.get_json(silent=True) or {}
                self.durable.stop(
                    stop.group("arn"), str(error.get("ErrorType", "")), str(error.get("ErrorMessage", ""))
                )
                return _json({"StopTimestamp": time.time()}, 200)
            if callback:
                self.durable.answer(callback.group("callback"), request.get_data())
                return _json({}, 200)
        except self.durable.exceptions.ResourceNotFoundException as missing:
            return _json({"Type": "User", "message": str(missing)}, 404, "ResourceNotFoundException")
        return None

    def _start_durable(self, function: str, raw: str, request: Request) -> Response:
        assert self.durable is not None
        name = request.headers.get("X-Amz-Durable-Execution-Name") or str(uuid.uuid4())
        try:
            arn = self.durable.start(function, raw, name)
        except self.durable.exceptions.DurableExecutionAlreadyStartedException:
            message = f"durable execution {name} was started with another payload"
            return _json({"Type": "User", "message": message}, 409, "DurableExecutionAlreadyStartedException")
        return Response(status=202, headers={"X-Amz-Durable-Execution-Arn": arn})

    def _login(self, request: Request) -> Response | None:
        assert self.login is not None
        discovery = _DISCOVERY_PATH.match(request.path)
        if discovery and request.method == "GET":
            return _json(self.login.discovery(discovery.group("pool")), 200)
        if request.path == "/oauth2/authorize" and request.method == "GET":
            status, page = self.login.login_page(dict(request.args))
            return Response(page, status=status, content_type="text/html; charset=utf-8")
        if request.path == "/oauth2/authorize" and request.method == "POST":
            status, page, location = self.login.sign_in(dict(request.form))
            if location is not None:
                return Response(status=302, headers={"Location": location})
            return Response(page, status=status, content_type="text/html; charset=utf-8")
        if (
            request.path == "/oauth2/token"
            and request.method == "POST"
            and request.form.get("grant_type") == ("authorization_code")
        ):
            status, body = self.login.exchange(dict(request.form))
            return Response(json.dumps(body), status=status, content_type="application/json")
        return None

    def _invoke(self, name: str, request: Request) -> Response:
        try:
            function = self.resolve(name)
        except LookupError:
            return _json({"Type": "User", "message": f"Function not found: {name}"}, 404, "ResourceNotFoundException")
        raw = request.get_data(as_text=True) or "{}"
        try:
            payload = json.loads(raw)
        except ValueError:
            return _json(
                {"Type": "User", "message": "Could not parse request body into json"},
                400,
                "InvalidRequestContentException",
            )
        kind = request.headers.get("X-Amz-Invocation-Type", "RequestResponse")
        if self.durable is not None and self.durable.is_durable(function) and kind != "DryRun":
            return self._start_durable(function, raw, request)
        if kind == "DryRun":
            return Response(status=204)
        if kind == "Event":
            request_id = self.invoke_async(function, payload)
            return Response(status=202, headers={"X-Amzn-RequestId": request_id})
        # `make invoke RUNTIME=`: this invocation in the runtime named, whatever the stack's own.
        runtime = request.headers.get("X-Devstack-Runtime")
        try:
            result = self.invoke_sync(function, payload, runtime) if runtime else self.invoke_sync(function, payload)
        except Exception as error:  # noqa: BLE001 - reported the way Lambda reports an unhandled error
            return Response(
                json.dumps(error_document(error)),
                status=200,
                headers={
                    "X-Amz-Function-Error": "Unhandled",
                    "X-Amz-Executed-Version": "$LATEST",
                    "X-Devstack-Runtime": runtime or self.runtime,
                },
                content_type="application/json",
            )
        return Response(
            json.dumps(result),
            status=200,
            headers={"X-Amz-Executed-Version": "$LATEST", "X-Devstack-Runtime": runtime or self.runtime},
            content_type="application/json",
        )


def _json(body: dict[str, Any], status: int, error_type: str | None = None) -> Response:
    headers = {"X-Amzn-ErrorType": error_type} if error_type else {}
    return Response(json.dumps(body), status=status, headers=headers, content_type="application/json")
