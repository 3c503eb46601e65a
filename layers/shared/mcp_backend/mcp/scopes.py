"""What an OAuth caller's scopes must cover for a request, and where the RFC 9728 metadata is served: the
HTTP guard's part of OAuth, kept apart from token verification (oauth.py), which the endpoint loads only when
OAuth is on."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pydantic_core

from mcp_backend.tools.table import Access

METADATA_PATH = "/.well-known/oauth-protected-resource"
# Methods other than tools/call that need a scope: cancelling a task stops the caller's queued work; listing and
# reading the caller's resources, getting a prompt (it reads the caller's jobs) and completing an argument (it
# lists the caller's job ids) read what get_job reads. Every resource kind and prompt is READ (their tables,
# tests/unit/test_capability_tables.py); the catalog listings (tools, templates, prompts) need no scope.
METHOD_ACCESS = {
    "tasks/cancel": Access.SUBMIT,
    "resources/list": Access.READ,
    "resources/read": Access.READ,
    "prompts/get": Access.READ,
    "completion/complete": Access.READ,
}


def required_access(body: bytes, tool_access: dict[str, Access]) -> set[Access]:
    """The scopes a JSON-RPC body needs: each `tools/call`'s tool's Access, METHOD_ACCESS's for the methods it
    names; nothing for other methods.

    The body is read by both parsers the SDK uses (pydantic_core in the handshake era, json in the modern
    one) and needs what either reading needs, so the two can never disagree in the caller's favour. An
    unknown tool, or a body either parser cannot read, needs SUBMIT (the strictest): fail closed."""
    needed: set[Access] = set()
    for parse in (pydantic_core.from_json, json.loads):
        try:
            parsed = parse(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            return {Access.SUBMIT}
        needed |= _access_of(parsed, tool_access)
    return needed


def _access_of(parsed: Any, tool_access: dict[str, Access]) -> set[Access]:
    messages: Iterable[Any] = parsed if isinstance(parsed, list) else [parsed]
    needed: set[Access] = set()
    for message in messages:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            needed.add(tool_access.get(name, Access.SUBMIT) if isinstance(name, str) else Access.SUBMIT)
        elif isinstance(message, dict) and message.get("method") in METHOD_ACCESS:
            needed.add(METHOD_ACCESS[message["method"]])
    return needed
