"""An AWS_IAM Function URL on loopback: Lambda's SigV4 check played with botocore's own signer.

Lambda refuses a request to an AWS_IAM URL that is unsigned, signed with an unknown key, with a wrong signature
or a timestamp more than five minutes off, with 403 before the function runs; a signed one reaches the function
with the caller in `requestContext.authorizer.iam` (accessKey, accountId, callerId, userArn, userId:
https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads). Here the signature is recomputed
over the request as received (the headers it names, the body) with the secret of the stack's test credentials,
and compared in constant time; the caller's identity is the one configured for that access key.
"""

from __future__ import annotations

import hmac
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from botocore.auth import SIGV4_TIMESTAMP, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from starlette.responses import JSONResponse

from devstack.front_doors.function_urls import REQUEST_CONTEXT_HEADER
from devstack.stack.resources import LOCAL_ACCOUNT

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/aws4_request,"
    r"\s*SignedHeaders=(?P<signed>[a-z0-9;-]+),\s*Signature=(?P<signature>[0-9a-f]{64})$"
)
MAX_CLOCK_SKEW = timedelta(minutes=5)


@dataclass(frozen=True)
class IamCaller:
    """Who a test access key belongs to, as Lambda would put it in the request context."""

    secret_key: str
    account_id: str
    user_arn: str
    caller_id: str

    def authorizer(self, access_key: str) -> dict[str, Any]:
        return {
            "iam": {
                "accessKey": access_key,
                "accountId": self.account_id,
                "callerId": self.caller_id,
                "cognitoIdentity": None,
                "principalOrgId": None,
                "userArn": self.user_arn,
                "userId": self.caller_id,
            }
        }


# The stack's test credentials (access key and secret "local", as every local client is given) sign as one local
# agent role.
LOCAL_IAM_CALLERS = {
    "local": IamCaller(
        secret_key="local",  # noqa: S106 - the local stack's fixed test credentials, not a secret
        account_id=LOCAL_ACCOUNT,
        user_arn=f"arn:aws:sts::{LOCAL_ACCOUNT}:assumed-role/local-agent/local",
        caller_id="AROALOCALAGENT:local",
    )
}


class SigV4Verified:
    """ASGI, in front of InvocationPerRequest: only a request correctly signed for `lambda` in `region` by a
    known key passes, and its request context gains `authorizer.iam`; anything else gets Lambda's 403."""

    def __init__(self, app: Any, region: str, callers: dict[str, IamCaller]) -> None:
        self.app = app
        self.region = region
        self.callers = callers

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, more = b"", True
        while more:  # a signed body is read whole to check its hash, then handed on as one message
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        access_key = self._verified_key(scope, body)
        if access_key is None:
            await JSONResponse({"Message": "Forbidden"}, status_code=403)(scope, receive, send)
            return
        headers = [
            (name, self._with_authorizer(value, access_key) if name == REQUEST_CONTEXT_HEADER else value)
            for name, value in scope["headers"]
        ]
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app({**scope, "headers": headers}, replay, send)

    def _with_authorizer(self, context: bytes, access_key: str) -> bytes:
        document = json.loads(context)
        document["authorizer"] = self.callers[access_key].authorizer(access_key)
        return json.dumps(document, separators=(",", ":")).encode()

    def _verified_key(self, scope: Any, body: bytes) -> str | None:
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        match = _AUTHORIZATION.match(headers.get("authorization", ""))
        if match is None or match["service"] != "lambda" or match["region"] != self.region:
            return None
        caller = self.callers.get(match["key"])
        stamp = headers.get("x-amz-date", "")
        try:
            signed_at = datetime.strptime(stamp, SIGV4_TIMESTAMP).replace(tzinfo=UTC)
        except ValueError:
            return None
        if caller is None or stamp[:8] != match["date"] or abs(datetime.now(UTC) - signed_at) > MAX_CLOCK_SKEW:
            return None
        signed = match["signed"].split(";")
        if "host" not in signed or any(name not in headers for name in signed):
            return None
        query = scope.get("query_string", b"").decode("latin-1")
        url = (
            f"http://{headers['host']}{scope['raw_path'].decode('latin-1') if scope.get('raw_path') else scope['path']}"
        )
        request = AWSRequest(
            method=scope["method"],
            url=url + (f"?{query}" if query else ""),
            data=body,
            headers={name: headers[name] for name in signed},
        )
        request.context["timestamp"] = stamp
        signer = SigV4Auth(Credentials(match["key"], caller.secret_key), "lambda", self.region)
        expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
        return match["key"] if hmac.compare_digest(expected, match["signature"]) else None
