"""How a tool asks its user mid-call: the 2026-07-28 multi-round-trip request (SEP-2322).

The first call answers `input_required` with one form elicitation (`inputRequests.confirm`, a JSON schema of one
boolean) and a `requestState` naming the question; the SDK's `RequestStateBoundary` seals that state under the
shared key (mcp_backend.mcp.request_state_key), binding it to this tool, these arguments and this caller. The
client retries the same call with `inputResponses.confirm` and the state; any execution environment opens it.

A tampered, expired or foreign state is the SDK's -32602 "Invalid or expired requestState". An answer missing or
not matching the requested schema is -32602 naming the field, as the spec answers invalid params. A declined or
cancelled form, or an endpoint that cannot ask (no shared key), is a tool execution error saying so.
A client of the 2025 era is asked as that era allows: an `elicitation/create` request on the call's open event
stream, answered by a separate POST that any execution environment may receive (mcp_backend.mcp.open_stream), when
its session says it declared elicitation (mcp_backend.mcp.sessions); otherwise the call that would ask ends with
a tool error saying why (CannotAsk), and nothing is queued.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError, NoBackChannelError
from mcp_types import (
    INVALID_PARAMS,
    ClientCapabilities,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
)
from mcp_types.version import is_version_at_least
from pydantic import BaseModel, ConfigDict, ValidationError

from mcp_backend.mcp.request_state_key import SharedRequestStateKey
from mcp_backend.tools.errors import CannotAsk

# The protocol version from which a request may be answered `input_required`.
ASKING_SINCE = "2026-07-28"
CONFIRM = "confirm"
# What the server seals between the rounds: which question was asked (the boundary binds tool, arguments, caller).
CONFIRM_STATE = "confirm/v1"
ELICITATION = ClientCapabilities(elicitation=ElicitationCapability())
NOT_DECLARED = (
    "this client did not declare elicitation when it initialized (or its session id has expired): initialize "
    "again with the elicitation capability"
)
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


async def ask_on_the_open_stream(
    ctx: ServerRequestContext[Any, Any], message: str, schema: dict[str, Any]
) -> ElicitResult:
    """The 2025 era's question: `elicitation/create` on the call's own event stream, and the client's answer.
    Raises CannotAsk when the client cannot be asked (another era, no declared elicitation, no channel) or did
    not answer in time (its message says which)."""
    if is_version_at_least(ctx.protocol_version, ASKING_SINCE):
        raise CannotAsk("from protocol 2026-07-28 a tool asks with input_required, not on the stream")
    if not ctx.session.check_client_capability(ELICITATION) or not ctx.session.can_send_request:
        raise CannotAsk(NOT_DECLARED)
    try:
        return await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    except NoBackChannelError:
        raise CannotAsk(NOT_DECLARED) from None
    except MCPError as error:
        raise CannotAsk(f"the question was not answered: {error.error.message}") from None
    except ValidationError:
        raise CannotAsk("the client's answer is not an elicitation result") from None


async def confirmed_on_the_open_stream(ctx: ServerRequestContext[Any, Any], question: str) -> None:
    """A 2025-era confirmation: returns once the user confirmed; else NotConfirmed saying why."""
    try:
        answer = await ask_on_the_open_stream(ctx, question, CONFIRM_SCHEMA)
    except CannotAsk as refused:
        raise NotConfirmed(f"This analysis needs your confirmation, and {refused}") from None
    try:
        accepted = confirmed({CONFIRM: answer.model_dump(mode="json", by_alias=True, exclude_none=True)})
    except MCPError:
        raise NotConfirmed("The answer does not fit the question (a boolean confirm): no job was queued.") from None
    if not accepted:
        raise NotConfirmed("Not confirmed: no job was queued.")
