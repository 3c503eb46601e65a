"""IAM callers: a SigV4-signed request to the local AWS_IAM Function URL reaches the app with the caller in
`requestContext.authorizer.iam` and becomes a principal with its mapped tier; an unsigned or wrongly signed
request is refused with 403 as Lambda does; on the AuthType NONE URL a client-written context names no one."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import anyio
import httpx
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.requests import Request
from starlette.responses import JSONResponse

from devstack.front_doors.function_urls import InvocationPerRequest
from devstack.front_doors.iam_urls import IamCaller, SigV4Verified
from mcp_backend.mcp.iam_callers import IamCallerAuthenticator, TierMapError, parse_tier_map

REGION = "us-east-1"
ROLE_ARN = "arn:aws:sts::123456789012:assumed-role/ReportingAgent/session-1"
CALLERS = {"AKIDLOCALAGENT": IamCaller("agent-secret", "123456789012", ROLE_ARN, "AROAAGENT:session-1")}
AUTHENTICATOR = IamCallerAuthenticator.from_setting("arn:aws:sts::123456789012:assumed-role/Reporting*=pro")


async def whoami(scope: Any, receive: Any, send: Any) -> None:
    """An app answering the principal the IAM authenticator finds in the request it was given."""
    principal = AUTHENTICATOR.authenticate_request(scope["headers"])
    body = await Request(scope, receive).body()
    answer = {"principal": principal.model_dump() if principal else None, "body": body.decode()}
    await JSONResponse(answer)(scope, receive, send)


class SigV4(httpx.Auth):
    """httpx auth signing each request with botocore's SigV4 signer for the `lambda` service."""

    requires_request_body = True

    def __init__(self, access_key: str, secret_key: str) -> None:
        self.signer = SigV4Auth(Credentials(access_key, secret_key), "lambda", REGION)

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        signed = AWSRequest(
            method=request.method,
            url=str(request.url),
            data=request.content,
            headers={"host": request.headers["host"], "content-type": request.headers.get("content-type", "")},
        )
        self.signer.add_auth(signed)
        for name in ("Authorization", "X-Amz-Date"):
            request.headers[name] = signed.headers[name]
        yield request


def call(app: Any, auth: httpx.Auth | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:3001", auth=auth) as client:
            return await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers)

    return anyio.run(send)


IAM_URL = InvocationPerRequest(SigV4Verified(whoami, REGION, CALLERS))


def test_a_signed_request_reaches_the_app_as_the_callers_role_with_its_mapped_tier():
    # Given an agent signing with its role's key
    # When it calls the AWS_IAM URL
    answer = call(IAM_URL, SigV4("AKIDLOCALAGENT", "agent-secret"))
    # Then the app sees the role (not the session) as the principal, with the tier its ARN pattern maps to
    assert answer.status_code == 200
    assert answer.json()["principal"] == {"user_id": "iam:123456789012:AROAAGENT", "tier": "pro"}
    # And the body arrives whole after the check
    assert json.loads(answer.json()["body"])["method"] == "tools/list"


@pytest.mark.parametrize(
    "auth",
    [None, SigV4("AKIDLOCALAGENT", "wrong-secret"), SigV4("AKIDUNKNOWN", "agent-secret")],
    ids=["unsigned", "wrong-secret", "unknown-key"],
)
def test_an_unsigned_or_wrongly_signed_request_is_refused_with_403(auth):
    # Given no signature, a signature with the wrong secret, or an unknown key
    # When the request reaches the AWS_IAM URL
    answer = call(IAM_URL, auth)
    # Then it is refused as Lambda refuses it, before the app runs
    assert answer.status_code == 403
    assert "principal" not in answer.json()


def test_a_body_changed_after_signing_is_refused():
    # Given a request signed over one body and sent with another
    signed = AWSRequest(method="POST", url="http://127.0.0.1:3001/mcp", data=b"{}", headers={"host": "127.0.0.1:3001"})
    SigV4Auth(Credentials("AKIDLOCALAGENT", "agent-secret"), "lambda", REGION).add_auth(signed)
    headers = {"Authorization": signed.headers["Authorization"], "X-Amz-Date": signed.headers["X-Amz-Date"]}
    # When it is sent
    answer = call(IAM_URL, headers=headers)
    # Then the signature does not match and the request is refused
    assert answer.status_code == 403


def test_on_the_none_url_a_client_written_iam_context_names_no_one():
    # Given a client that writes its own request context naming an IAM caller
    forged = {"authorizer": {"iam": {"accountId": "123456789012", "callerId": "AROAX:s", "userArn": ROLE_ARN}}}
    # When it calls the AuthType NONE URL (the front door replaces the context, as the Web Adapter does)
    answer = call(InvocationPerRequest(whoami), headers={"x-amzn-request-context": json.dumps(forged)})
    # Then the IAM authenticator finds no caller
    assert answer.status_code == 200
    assert answer.json()["principal"] is None


def test_an_unmapped_role_gets_the_lowest_tier_and_a_malformed_map_is_refused():
    # Given a map that names another role only
    authenticator = IamCallerAuthenticator.from_setting("arn:aws:iam::123456789012:role/Other=internal")
    headers = [
        (b"x-amzn-request-context", json.dumps({"authorizer": CALLERS["AKIDLOCALAGENT"].authorizer("K")}).encode())
    ]
    # Then the agent's role is free
    principal = authenticator.authenticate_request(headers)
    assert principal is not None and principal.tier == "free"
    # And a map entry with an unknown tier is refused, naming its position and not its value
    with pytest.raises(TierMapError, match="entry 2") as refused:
        parse_tier_map("arn:*=pro,arn:aws:iam::1:role/Secret=gold")
    assert "Secret" not in str(refused.value)
