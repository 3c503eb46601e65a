"""CloudFormation custom resources: the request CloudFormation sends a resource's function and the one
response it waits for (a PUT of JSON to the pre-signed ResponseURL), always sent, success or not, so a stack
never waits an hour for an answer that will not come.
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-requests.html and crpg-ref-responses.html
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_backend.observability import logger

# CloudFormation's response bucket answers on an amazonaws.com host (amazonaws.com.cn in China).
RESPONSE_HOST_SUFFIXES = (".amazonaws.com", ".amazonaws.com.cn")


class CustomResourceRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")

    request_type: Literal["Create", "Update", "Delete"] = Field(alias="RequestType")
    response_url: str = Field(alias="ResponseURL")
    stack_id: str = Field(alias="StackId")
    request_id: str = Field(alias="RequestId")
    logical_resource_id: str = Field(alias="LogicalResourceId")
    physical_resource_id: str | None = Field(default=None, alias="PhysicalResourceId")
    resource_properties: dict[str, Any] = Field(default_factory=dict, alias="ResourceProperties")


class CustomResourceResult(BaseModel):
    physical_resource_id: str
    data: dict[str, str] = Field(default_factory=dict)


class CustomResourceFailed(RuntimeError):
    """A refusal whose message is safe to show in the stack's events (no secrets, no raw exception text)."""


Sender = Callable[[str, bytes], None]


def put_response(url: str, body: bytes) -> None:
    """PUT the response to CloudFormation's pre-signed URL (https, an AWS host: nothing else is ever called)."""
    parsed = urllib.parse.urlsplit(url)
    host = parsed.hostname or ""
    if parsed.scheme != "https" or not host.endswith(RESPONSE_HOST_SUFFIXES):
        raise CustomResourceFailed("ResponseURL is not a CloudFormation response URL")
    # An empty Content-Type: the URL is signed without one.
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})  # noqa: S310
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - https, checked above
        response.read()


def respond_to_cloudformation(
    event: dict[str, Any],
    handle: Callable[[CustomResourceRequest], CustomResourceResult],
    send: Sender = put_response,
) -> str:
    """Run `handle` for the request and send CloudFormation its answer; returns the status sent."""
    try:
        request = CustomResourceRequest.model_validate(event)
    except ValidationError as error:
        # Without a ResponseURL there is no one to answer; this is not a CloudFormation request.
        logger.error("not a custom resource request", extra={"errors": error.error_count()})
        return "IGNORED"
    status, reason = "SUCCESS", ""
    try:
        result = handle(request)
    except CustomResourceFailed as error:
        status, reason = "FAILED", str(error)
        result = CustomResourceResult(physical_resource_id=request.physical_resource_id or request.request_id)
    except Exception as error:  # noqa: BLE001 - whatever failed, CloudFormation must hear of it
        status, reason = "FAILED", f"{type(error).__name__}: see the function's log"
        logger.exception("custom resource request failed", extra={"request_type": request.request_type})
        result = CustomResourceResult(physical_resource_id=request.physical_resource_id or request.request_id)
    body = {
        "Status": status,
        "Reason": reason or "OK",
        "PhysicalResourceId": result.physical_resource_id,
        "StackId": request.stack_id,
        "RequestId": request.request_id,
        "LogicalResourceId": request.logical_resource_id,
        "NoEcho": True,
        "Data": result.data,
    }
    send(request.response_url, json.dumps(body).encode())
    logger.info("custom resource answered", extra={"request_type": request.request_type, "status": status})
    return status
