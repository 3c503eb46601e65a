"""Event source mapping FilterCriteria, evaluated by moto's EventBridge pattern engine (pinned in uv.lock).

Lambda matches filters against the record as the function would receive it, except that an SQS
`body` or a Kinesis `data` that holds JSON is matched as the decoded object.
https://docs.aws.amazon.com/lambda/latest/dg/invocation-eventfiltering.html
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from devstack.stack.moto_internals import EventPattern


class RecordFilter:
    def __init__(self, filter_criteria: dict[str, Any] | None) -> None:
        filters = (filter_criteria or {}).get("Filters", [])
        self.patterns = [EventPattern.load(f["Pattern"]) for f in filters]

    def matches(self, record: dict[str, Any]) -> bool:
        """No filters: everything passes. Several filters: any one may match (OR)."""
        if not self.patterns:
            return True
        view = _matchable(record)
        # moto types the event as EventBridge's envelope; its matcher reads any mapping (a stream record here).
        return any(pattern.matches_event(view) for pattern in self.patterns)  # type: ignore[arg-type]


def _matchable(record: dict[str, Any]) -> dict[str, Any]:
    view = dict(record)
    if isinstance(view.get("body"), str):
        view["body"] = _json_or_text(view["body"])
    kinesis = view.get("kinesis")
    if isinstance(kinesis, dict) and isinstance(kinesis.get("data"), str):
        try:
            decoded = base64.b64decode(kinesis["data"], validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            decoded = None
        view["data"] = _json_or_text(decoded) if decoded is not None else kinesis["data"]
    return view


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
