"""IamCallers=Enabled on the local stack: the AWS_IAM Function URL is served only behind Lambda's SigV4 check, played
with botocore's signer and the stack's test credentials. An unsigned or wrongly signed request is refused with
Lambda's 403 before the app runs; a signed one reaches the endpoint.

SigV4 takes the Authorization header, so a signed request carries no bearer token: the endpoint admits it once the
guard takes the principal from the request context (mcp_backend.mcp.iam_callers.IamCallerAuthenticator); until
then the guard answers it 401, which is what this test sees past the door."""

from __future__ import annotations

import httpx

from tests.unit.test_iam_callers import SigV4

IAM_CALLERS = {
    "IamCallers": "Enabled",
    "IamCallerPrincipal": "123456789012",
    "CallLog": "Disabled",
    "Probes": "Disabled",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_the_aws_iam_url_refuses_unsigned_and_wrongly_signed_requests_and_lets_signed_ones_reach_the_endpoint(
    start_stack,
):
    # Given the local stack with IAM callers on, serving the AWS_IAM URL beside the public one
    stack = start_stack(parameters=IAM_CALLERS, runtime="inprocess")
    assert {"McpServerUrl", "McpServerIamUrl"} <= set(stack.web_functions)
    iam_url = f"{stack.web_functions['McpServerIamUrl'].url}/mcp"

    # When a client sends no signature, signs with the wrong secret, or signs with the stack's test credentials
    unsigned = httpx.post(iam_url, json=INITIALIZE, headers=HEADERS)
    wrong = httpx.post(iam_url, json=INITIALIZE, headers=HEADERS, auth=SigV4("local", "not-the-secret"))
    signed = httpx.post(iam_url, json=INITIALIZE, headers=HEADERS, auth=SigV4("local", "local"))

    # Then the first two are refused as Lambda refuses them, before the app runs
    assert (unsigned.status_code, wrong.status_code) == (403, 403)
    assert unsigned.json() == wrong.json() == {"Message": "Forbidden"}
    # And the signed one passes the door and is answered by the endpoint itself (a JSON-RPC answer)
    assert signed.status_code != 403
    assert signed.json()["jsonrpc"] == "2.0"
