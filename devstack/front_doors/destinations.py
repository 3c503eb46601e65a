"""Delivery to the destination ARNs the template names: SQS, SNS, EventBridge and Lambda.

Used by async-invocation Destinations (OnSuccess/OnFailure) and by stream mappings' OnFailure.
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("devstack.destinations")


class Destinations:
    def __init__(
        self,
        client: Callable[[str], Any],
        queue_url_for_arn: Callable[[str], str],
        invoke_async: Callable[[str, Any], None] | None = None,
    ) -> None:
        self.client = client
        self.queue_url_for_arn = queue_url_for_arn
        self.invoke_async = invoke_async

    def deliver(self, arn: str, payload: dict[str, Any], success: bool | None = None) -> None:
        service = arn.split(":")[2]
        body = json.dumps(payload)
        if service == "sqs":
            self.client("sqs").send_message(QueueUrl=self.queue_url_for_arn(arn), MessageBody=body)
        elif service == "sns":
            self.client("sns").publish(TopicArn=arn, Message=body)
        elif service == "events":
            outcome = "Success" if success else "Failure"
            self.client("events").put_events(
                Entries=[
                    {
                        "EventBusName": arn,
                        "Source": "lambda",
                        "DetailType": f"Lambda Function Invocation Result - {outcome}",
                        "Detail": body,
                        "Resources": [payload.get("requestContext", {}).get("functionArn", "")],
                    }
                ]
            )
        elif service == "lambda" and self.invoke_async is not None:
            self.invoke_async(arn, payload)
        else:
            log.warning("destination %s is not emulated; record dropped", arn)
