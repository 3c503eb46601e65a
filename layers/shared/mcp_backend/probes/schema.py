"""A stable fingerprint of an MCP server's tool list: the drift detector compares these."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any


def canonical_tools(tools: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Name, description and inputSchema of each tool, sorted by name (order and other fields ignored)."""
    picked = [
        {"name": tool["name"], "description": tool.get("description") or "", "inputSchema": tool.get("inputSchema")}
        for tool in tools
    ]
    return sorted(picked, key=lambda tool: tool["name"])


def schema_hash(tools: Iterable[dict[str, Any]]) -> str:
    """sha256 hex of the canonical JSON (sorted keys, no whitespace) of the canonical tool list."""
    text = json.dumps(canonical_tools(tools), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
