"""What `make dev STATE=<folder>` keeps between runs: every table's items and every queue's messages with their
SQS bookkeeping, written at the stop and restored at the next start."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from devstack.sqs_extras.queue_state import restore_messages, saved_messages
from devstack.wired_stack import LocalEnvironment

STATE_FILE = "state.json"  # in the stack's state folder
STATE_VERSION = 2  # state.json: messages with their SQS bookkeeping (1: bodies only)
ACCOUNT_ID, REGION = "123456789012", "us-east-1"  # moto's default account; the stack's one region


def save_state(path: Path, environment: LocalEnvironment, client: Callable[[str], Any]) -> None:
    dynamodb = client("dynamodb")
    state: dict[str, Any] = {"version": STATE_VERSION, "tables": {}, "queues": {}}
    for logical_id in environment.stack.active("AWS::DynamoDB::Table"):
        items = []
        for page in dynamodb.get_paginator("scan").paginate(
            TableName=environment.table_name(logical_id), ConsistentRead=True
        ):
            items.extend(page["Items"])
        state["tables"][logical_id] = items
    for logical_id in environment.stack.active("AWS::SQS::Queue"):
        state["queues"][logical_id] = saved_messages(ACCOUNT_ID, REGION, _queue_name(environment, logical_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside and renamed: a stop cut short leaves the previous state, never half of one.
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(state))
    os.replace(partial, path)


def restore_state(path: Path, environment: LocalEnvironment, client: Callable[[str], Any]) -> None:
    if not path.exists():
        return
    state = json.loads(path.read_text())
    dynamodb, sqs = client("dynamodb"), client("sqs")
    for logical_id, items in state.get("tables", {}).items():
        for item in items:
            dynamodb.put_item(TableName=environment.table_name(logical_id), Item=item)
    for logical_id, messages in state.get("queues", {}).items():
        if state.get("version") == STATE_VERSION:
            restore_messages(ACCOUNT_ID, REGION, _queue_name(environment, logical_id), messages)
        else:  # a state file of an older stack kept bodies only: they come back as new messages
            for body in messages:
                sqs.send_message(QueueUrl=environment.queue_url(logical_id), MessageBody=body)


def _queue_name(environment: LocalEnvironment, logical_id: str) -> str:
    return environment.queue_url(logical_id).rsplit("/", 1)[-1]
