"""Lambda subscribers of SNS topics and targets of EventBridge pattern rules: moto delivers to neither, so the
local stack subscribes a queue of its own (a tap) on the function's behalf, and invokes the function
asynchronously with what arrives, in the shape SNS or EventBridge gives a Lambda subscriber."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devstack.stack.resources import LocalStack


@dataclass
class Tap:
    """A queue the dev stack subscribes on a function's behalf (SNS -> Lambda, rule -> Lambda)."""

    function: str
    queue_url: str
    kind: str  # "sns" or "events"
    subscription_arn: str = ""


def build_taps(stack: LocalStack, client: Callable[[str], Any], function_logical_id: Callable[[str], str]) -> list[Tap]:
    """A tap for every SNS subscription with protocol lambda and every Lambda target of a pattern rule."""
    sqs, sns, events = client("sqs"), client("sns"), client("events")
    taps: list[Tap] = []

    def tap_queue(name: str, function: str) -> Tap:
        url = sqs.create_queue(QueueName=f"devstack-tap-{name}"[:80])["QueueUrl"]
        tap = Tap(function=function, queue_url=url, kind="")
        taps.append(tap)
        return tap

    for logical_id, subscription in stack.active("AWS::SNS::Subscription").items():
        if subscription["Protocol"] != "lambda":
            continue
        tap = tap_queue(f"sns-{logical_id}", function_logical_id(subscription["Endpoint"]))
        attributes = {
            key: json.dumps(subscription[key]) if isinstance(subscription[key], dict) else str(subscription[key])
            for key in ("FilterPolicy", "FilterPolicyScope")
            if key in subscription
        }
        tap.kind = "sns"
        tap.subscription_arn = sns.subscribe(
            TopicArn=subscription["TopicArn"],
            Protocol="sqs",
            Endpoint=_queue_arn(sqs, tap.queue_url),
            Attributes=attributes,
        )["SubscriptionArn"]
    for logical_id, rule in stack.active("AWS::Events::Rule").items():
        if "EventPattern" not in rule:
            continue
        for target in rule.get("Targets", []):
            if target["Arn"].split(":")[2] != "lambda":
                continue
            tap = tap_queue(f"rule-{logical_id}-{target['Id']}", function_logical_id(target["Arn"]))
            tap.kind = "events"
            events.put_targets(
                Rule=stack.ensure(logical_id).ref,
                EventBusName=rule.get("EventBusName", "default"),
                Targets=[
                    {
                        "Id": f"devstack-tap-{target['Id']}",
                        "Arn": _queue_arn(sqs, tap.queue_url),
                        **{k: v for k, v in target.items() if k in ("Input", "InputPath")},
                    }
                ],
            )
    return taps


def drain_tap(tap: Tap, sqs: Any, submit: Callable[[str, Any], Any]) -> int:
    """Hand what the tap received to its function (asynchronously); returns how many messages."""
    messages = sqs.receive_message(QueueUrl=tap.queue_url, MaxNumberOfMessages=10).get("Messages", [])
    for message in messages:
        body = json.loads(message["Body"])
        payload = _sns_event(body, tap.subscription_arn) if tap.kind == "sns" else body
        submit(tap.function, payload)
        sqs.delete_message(QueueUrl=tap.queue_url, ReceiptHandle=message["ReceiptHandle"])
    return len(messages)


def _queue_arn(sqs: Any, url: str) -> str:
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def _sns_event(notification: dict[str, Any], subscription_arn: str) -> dict[str, Any]:
    """The SNS notification an SQS tap received, in the shape SNS gives a Lambda subscriber."""
    return {
        "Records": [
            {
                "EventSource": "aws:sns",
                "EventVersion": "1.0",
                "EventSubscriptionArn": subscription_arn,
                "Sns": {
                    "Type": notification.get("Type", "Notification"),
                    "MessageId": notification["MessageId"],
                    "TopicArn": notification["TopicArn"],
                    "Subject": notification.get("Subject"),
                    "Message": notification["Message"],
                    "Timestamp": notification["Timestamp"],
                    "SignatureVersion": notification.get("SignatureVersion", "1"),
                    "Signature": notification.get("Signature", ""),
                    "SigningCertUrl": notification.get("SigningCertURL", ""),
                    "UnsubscribeUrl": notification.get("UnsubscribeURL", ""),
                    "MessageAttributes": notification.get("MessageAttributes", {}),
                },
            }
        ]
    }
