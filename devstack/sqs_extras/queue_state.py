"""Queue messages kept across `make dev` runs (STATE=...): every message of a queue, visible, in flight or
delayed, with what SQS knows about it: id, body, message attributes, receive count and first-receive time,
sent time, message group and deduplication id, and when it becomes visible or its delay ends.

Read and written in moto's own backend, never through the API: a ReceiveMessage would count towards
maxReceiveCount, and SendMessage would make a new message (new id, receive count 0). So a poison job that
had two of its three receives before a restart has one left after it, as on a queue that never stopped, and
a message in flight at the stop becomes visible when its visibility timeout ends.
"""

from __future__ import annotations

import base64
from typing import Any

from devstack.stack.moto_internals import Message, queue_messages, sqs_queue

_FIELDS = (
    "sender_id",
    "sent_timestamp",
    "approximate_first_receive_timestamp",
    "approximate_receive_count",
    "deduplication_id",
    "group_id",
    "sequence_number",
    "visible_at",
    "delayed_until",
)


def saved_messages(account_id: str, region: str, name: str) -> list[dict[str, Any]]:
    queue = sqs_queue(account_id, region, name)
    if queue is None:
        return []
    with queue_messages(queue) as messages_of_queue:
        messages = list(messages_of_queue)
    return [
        {
            "id": message.id,
            "body": message.body,
            "message_attributes": {key: _encoded(value) for key, value in message.message_attributes.items()},
            "system_attributes": message.system_attributes,
            **{field: getattr(message, field) for field in _FIELDS},
        }
        for message in messages
    ]


def restore_messages(account_id: str, region: str, name: str, saved: list[dict[str, Any]]) -> int:
    """Put saved messages back as they were; returns how many. A message not visible yet is in flight."""
    queue = sqs_queue(account_id, region, name)
    if queue is None:
        return 0
    for entry in saved:
        message = Message(entry["id"], entry["body"], entry.get("system_attributes") or {})
        message.message_attributes = {key: _decoded(value) for key, value in entry["message_attributes"].items()}
        for field in _FIELDS:
            setattr(message, field, entry[field])
        with queue_messages(queue) as messages_of_queue:
            messages_of_queue.append(message)
            if not message.visible:
                queue.pending_messages.add(message)
    return len(saved)


def _encoded(value: dict[str, Any]) -> dict[str, Any]:
    binary = value.get("BinaryValue")
    if isinstance(binary, bytes):
        return {**value, "BinaryValue": base64.b64encode(binary).decode(), "base64": True}
    return dict(value)


def _decoded(value: dict[str, Any]) -> dict[str, Any]:
    if value.get("base64"):
        restored = {key: item for key, item in value.items() if key != "base64"}
        return {**restored, "BinaryValue": base64.b64decode(value["BinaryValue"])}
    return dict(value)
