"""The state an event fixture declares beside itself, in `<fixture>.state.json`, written into a local stack (a
fresh one `make invoke` starts, or the running `make dev`): `endpoints` are MonitorTable endpoint registrations,
whose `url` and `authToken` may name the stack's own MCP endpoint (`{McpServerUrl}`) and a key it issued
(`{ApiKey}`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from devstack.front_doors.function_urls import WebFunction
from devstack.wired_stack import LocalEnvironment


def seed(
    environment: LocalEnvironment,
    web_functions: dict[str, WebFunction],
    client: Callable[[str], Any],
    state: dict,
    api_key: str | None,
) -> None:
    """Write the fixture's declared state into the stack."""
    if not state.get("endpoints"):
        return  # nothing to write (and a stack without MonitorTable, such as a test template's, has nowhere to)
    urls = [f"{web.url}/" for web in web_functions.values()]
    values = {"{McpServerUrl}": urls[0] if urls else "", "{ApiKey}": api_key or ""}

    def filled(text: str) -> str:
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        return text

    # The layer's own sealing (the stack's key issuance has put the layer on sys.path, as for the key format).
    from mcp_backend.monitor.items import AUTH_CIPHERTEXT
    from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher

    table = environment.table_name("MonitorTable")
    dynamodb = client("dynamodb")
    key_id = environment.stack.function("ProbeWorker").environment["ENDPOINT_TOKEN_KEY_ID"]
    cipher = EndpointTokenCipher(key_id, client("kms"))
    for endpoint in state.get("endpoints", []):
        item = {
            "serverId": {"S": endpoint["serverId"]},
            "sortKey": {"S": "endpoint"},
            "itemType": {"S": "endpoint"},
            "ownerId": {"S": endpoint.get("ownerId", "fixture")},
            "name": {"S": endpoint.get("name", "fixture endpoint")},
            "url": {"S": filled(endpoint["url"])},
            "registeredAt": {"S": "2026-01-01T00:00:00.000Z"},
        }
        if endpoint.get("authToken"):
            # Sealed as register_endpoint seals it: only ProbeWorker opens it, for this endpoint and owner.
            sealed = cipher.seal(endpoint["serverId"], item["ownerId"]["S"], filled(endpoint["authToken"]))
            item[AUTH_CIPHERTEXT] = {"B": sealed}
        dynamodb.put_item(TableName=table, Item=item)
