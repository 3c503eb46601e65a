"""An in-process endpoint's fixed parts: settings naming tables that the tests' fake clients stand in for,
an authenticator that takes every token for alice's, and the app served in-process with its lifespan."""

from __future__ import annotations

from types import TracebackType
from typing import Any

import anyio
import httpx
from anyio.abc import TaskGroup
from starlette.types import ASGIApp

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


class EveryoneIs:
    """Takes every token for one principal's."""

    def __init__(self, principal: Principal) -> None:
        self.principal = principal

    async def authenticate(self, bearer_token: str, resource: str) -> Principal:
        return self.principal

    def challenge(self, resource: str, token_presented: bool) -> str:
        return "Bearer"

    def metadata(self, resource: str) -> None:
        return None

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return "Bearer"


class EveryoneIsAlice(EveryoneIs):
    def __init__(self) -> None:
        super().__init__(Principal(user_id="alice"))


class ServedInProcess:
    """`async with ServedInProcess(app) as client`: the app's lifespan started (as uvicorn starts it), an HTTP client
    that calls it in-process, and on exit the lifespan shut down and awaited. `sent` has the type of every lifespan
    message the app sent."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.sent: list[str] = []
        self._started, self._stopping = anyio.Event(), anyio.Event()
        self._inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        self._tasks: TaskGroup | None = None
        self._client: httpx.AsyncClient | None = None

    async def __aenter__(self) -> httpx.AsyncClient:
        self._tasks = anyio.create_task_group()
        await self._tasks.__aenter__()
        self._tasks.start_soon(self.app, {"type": "lifespan", "asgi": {"version": "3.0"}}, self._receive, self._send)
        await self._started.wait()
        self._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url=f"https://{HOST}")
        return self._client

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool | None:
        assert self._tasks is not None and self._client is not None
        await self._client.aclose()
        self._stopping.set()
        return await self._tasks.__aexit__(kind, error, traceback)

    async def _receive(self) -> dict[str, Any]:
        if len(self._inbox) == 1:
            await self._stopping.wait()
        return self._inbox.pop(0)

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message["type"])
        if message["type"] == "lifespan.startup.complete":
            self._started.set()
