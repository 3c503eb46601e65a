"""McpServer with SnapStart (McpServerSnapStart=PublishedVersions) from the build output in the Lambda runtime: its
environment goes through the Web Adapter's SnapStart lifecycle before any traffic (the after-restore hook, then the
readiness check again), and the restored environment answers MCP requests; the hook itself is unreachable through
the Function URL."""

from __future__ import annotations

import httpx
import pytest

from devstack.__main__ import issue_dev_keys

pytestmark = pytest.mark.e2e

HOOK = "/_lwa/after-restore"
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_a_restored_mcp_server_answers_and_its_hook_is_unreachable_from_outside(start_stack, capfd):
    # Given the stack with McpServer on SnapStart, in the Lambda runtime: its environment was initialized and then
    # restored (the adapter POSTed the app's after-restore hook and ran the readiness check again)
    stack = start_stack(runtime="lambda", parameters={"McpServerSnapStart": "PublishedVersions"})
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    pool = stack.environment.lambda_runtime.pool("McpServer")

    # When an MCP client lists the tools through the Function URL, and someone posts to the hook path through it
    listed = httpx.post(
        f"{web.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**MCP_HEADERS, "authorization": f"Bearer {key}"},
        timeout=60,
    )
    from_outside = httpx.post(f"{web.url}{HOOK}", timeout=60)
    output = capfd.readouterr()

    # Then the restored environment answers with the tool list (its key table read after the restore), the app
    # ran its refresh once per environment started, and the hook is refused from outside
    assert listed.status_code == 200, listed.text
    assert "submit_analysis" in listed.text
    assert output.out.count("refreshed after a SnapStart restore") == pool.cold_starts >= 1, output.out[-3000:]
    assert from_outside.status_code == 403
