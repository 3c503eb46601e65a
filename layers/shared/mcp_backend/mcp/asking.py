"""How a tool asks its user mid-call: the 2026-07-28 multi-round-trip request (SEP-2322).

The first call answers `input_required` with one form elicitation (`inputRequests.confirm`, a JSON schema of one
boolean) and a `requestState` naming the question; the SDK's `RequestStateBoundary` seals that state under the
shared key (mcp_backend.mcp.request_state_key), binding it to this tool, these arguments and this caller. The
client retries the same call with `inputResponses.confirm` and the state; any execution environment opens it.

A tampered, expired or foreign state is the SDK's -32602 "Invalid or expired requestState". An answer missing or
not matching the requested schema is -32602 naming the field, as the spec answers invalid params. A declined or
cancelled form, or an endpoint that cannot ask (no shared key), is a tool execution error saying so.
Clients of the 2025 era are not asked (the stateless endpoint has no back channel for `elicitation/create`): a
call that would ask runs as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, ElicitRequest, ElicitRequestFormParams, ElicitResult, InputRequiredResult
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_backend.mcp.request_state_key import SharedRequestStateKey

# The protocol version from which a request may be answered `input_required`.
ASKING_SINCE = "2026-07-28"
CONFIRM = "confirm"
# What the server seals between the rounds: which question was asked (the boundary binds tool, arguments, caller).
CONFIRM_STATE = "confirm/v1"
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        CONFIRM: {
            "type": "boolean",
            "title": "Run it",
            "description": "Queue this analysis now.",
        }
    },
    "required": [CONFIRM],
}


class NotConfirmed(Exception):
    """The call ends here, with a message written for the caller (declined, or asking is not possible)."""


class _Confirmation(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    confirm: bool


def confirm_request(question: str) -> ElicitRequest:
    """The form elicitation that asks `question`: one required boolean, `confirm`."""
    return ElicitRequest(params=ElicitRequestFormParams(message=question, requested_schema=CONFIRM_SCHEMA))


def confirmed(responses: Any) -> bool:
    """Whether `inputResponses` confirm (accept with `confirm: true`); False when declined, cancelled or
    `confirm: false`. MCPError -32602 when the answer is missing or does not match the requested schema."""
    answer = responses.get(CONFIRM) if isinstance(responses, Mapping) else None
    try:
        result = ElicitResult.model_validate(answer)
        accepted = result.action == "accept" and _Confirmation.model_validate(result.content or {}).confirm
    except ValidationError:
        raise MCPError(
            INVALID_PARAMS,
            f"inputResponses.{CONFIRM} must be an elicitation result whose content matches the requested schema "
            f'(an object with a boolean "{CONFIRM}")',
        ) from None
    return accepted


def confirmation(
    ctx_params: Mapping[str, Any] | None, protocol_version: str | None, question: str, key: SharedRequestStateKey
) -> InputRequiredResult | None:
    """None once the user confirmed (or for a client of an era that cannot be asked); the `input_required`
    answer when the question is still to be asked. Raises NotConfirmed or MCPError as the module says."""
    if protocol_version is None or not is_version_at_least(protocol_version, ASKING_SINCE):
        return None
    params = ctx_params or {}
    state = params.get("requestState")
    if state is None:
        if not key.available():
            raise NotConfirmed("This analysis needs your confirmation, and the endpoint cannot ask for it now.")
        return InputRequiredResult(input_requests={CONFIRM: confirm_request(question)}, request_state=CONFIRM_STATE)
    if state != CONFIRM_STATE:  # sealed by this endpoint, yet not a question this tool asks
        raise MCPError(INVALID_PARAMS, "Invalid or expired requestState", data={"reason": "invalid_request_state"})
    if not confirmed(params.get("inputResponses")):
        raise NotConfirmed("Not confirmed: no job was queued.")
    return None
