"""The async-invocation record Lambda sends to a Destination, as it arrives in SQS after the fan-out
(SNS raw message delivery: the message body IS the envelope). The probe result is responsePayload on
success; on failure responsePayload holds errorType/errorMessage/stackTrace.
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.validation import describe_validation_error

SUCCESS = "Success"


class MalformedEnvelope(ValueError):
    """The message is not a Destinations envelope of a probe: the record fails and, after retries, goes to the DLQ."""


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")


class RequestContext(_Model):
    request_id: str = Field(alias="requestId", min_length=1)
    function_arn: str = Field(alias="functionArn")
    condition: str
    approximate_invoke_count: int = Field(alias="approximateInvokeCount", ge=0)


class ProbeTargetPayload(_Model):
    server_id: str = Field(alias="serverId", min_length=1, max_length=128)
    endpoint: str
    traceparent: str | None = None  # the dispatcher's span, with tracing on


class DestinationEnvelope(_Model):
    version: str
    timestamp: datetime
    request_context: RequestContext = Field(alias="requestContext")
    request_payload: ProbeTargetPayload = Field(alias="requestPayload")
    response_payload: dict[str, Any] | None = Field(default=None, alias="responsePayload")

    @property
    def succeeded(self) -> bool:
        return self.request_context.condition == SUCCESS

    @property
    def server_id(self) -> str:
        return self.request_payload.server_id

    @classmethod
    def from_body(cls, body: str | None) -> DestinationEnvelope:
        try:
            return cls.model_validate(json.loads(body or ""))
        except json.JSONDecodeError:
            raise MalformedEnvelope("message body is not JSON") from None
        except ValidationError as error:
            raise MalformedEnvelope(f"not a destinations envelope: {describe_validation_error(error)}") from None
