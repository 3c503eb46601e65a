"""An in-process endpoint's fixed parts: settings naming tables that the tests' fake clients stand in for,
and an authenticator that takes every token for alice's."""

from __future__ import annotations

from typing import Any

from mcp_backend.api_keys import Principal
from mcp_backend.config import McpSettings

HOST = "abc.lambda-url.us-east-1.on.aws"
SETTINGS = McpSettings.model_validate(
    {
        "JOB_TABLE_NAME": "jobs",
        "JOB_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        "JOB_DEAD_LETTER_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/jobs-dlq",
        "CALL_LOG_STREAM_NAME": "calls",
        "MONITOR_TABLE_NAME": "monitor",
        "RATE_LIMIT_TABLE_NAME": "rates",
        "API_KEYS_SECRET_ID": "keys",
    }
)


class RoomyRateTable:
    """Every request is within the caller's rate (the rate limit's conditional write succeeds)."""

    def update_item(self, **request: Any) -> dict[str, Any]:
        return {}


class EveryoneIsAlice:
    async def authenticate(self, bearer_token: str, resource: str) -> Principal:
        return Principal(user_id="alice")

    def challenge(self, resource: str, token_presented: bool) -> str:
        return "Bearer"

    def metadata(self, resource: str) -> None:
        return None

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return "Bearer"
