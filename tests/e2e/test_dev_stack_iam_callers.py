"""IamCallers=Enabled on the local stack: the AWS_IAM Function URL is served only behind Lambda's SigV4 check, played
with botocore's signer and the stack's test credentials. An unsigned or wrongly signed request is refused with
Lambda's 403 before the app runs; a signed one reaches the endpoint.

SigV4 takes the Authorization header, so a signed request carries no bearer token: the guard takes the principal from
the request context Lambda fills (mcp_backend.mcp.iam_callers.IamCallerAuthenticator), and the caller calls tools as
its role. On the public URL a client-written request context names nobody."""

from __future__ import annotations

import json

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
    # And the signed one is served: the endpoint answers the handshake
    assert signed.status_code == 200, signed.text
    assert signed.json()["result"]["serverInfo"]


def test_a_sigv4_signed_client_calls_a_tool_as_its_role_and_a_forged_context_on_the_public_url_names_nobody(
    start_stack,
):
    # Given the local stack with IAM callers on
    stack = start_stack(parameters=IAM_CALLERS, runtime="inprocess")
    iam_url = f"{stack.web_functions['McpServerIamUrl'].url}/mcp"
    public_url = f"{stack.web_functions['McpServerUrl'].url}/mcp"
    legacy = {**HEADERS, "mcp-protocol-version": "2025-11-25"}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "get_job",
            "arguments": {"job_id": "job-00000000-0000-0000-0000-000000000000"},
        },
    }

    # When a client signs a tool call with the stack's test credentials, and another sends the same call to the public
    # URL with a request context naming an IAM caller and no token
    signed = httpx.post(iam_url, json=call, headers=legacy, auth=SigV4("local", "local"))
    forged_context = {"authorizer": {"iam": {"accountId": "1", "callerId": "AROAX:s", "userArn": "arn:aws:iam::1:x"}}}
    forged = httpx.post(public_url, json=call, headers={**legacy, "x-amzn-request-context": json.dumps(forged_context)})

    # Then the signed call is served as a tool call (its answer is the tool's, not an authentication error), and the
    # forged one is refused as unauthenticated
    assert signed.status_code == 200, signed.text
    assert "result" in signed.json()
    assert forged.status_code == 401
