"""A 2025-era `tools/call` that asks its user: the question (`elicitation/create`) goes out on the call's own event
stream, and the client's answer, a separate POST, may land on any execution environment.

On Lambda an environment serves one request at a time, and the SDK's stateless transport has no channel for a
server-to-client request (`can_send_request=False`). So a 2025-era call of a tool that may ask (the tool table's
`asks`, or a submit tool with a `confirm` question), from a client whose session id says it declared elicitation
(mcp_backend.mcp.sessions), is served here through the SDK's `serve_one` with a dispatch context that can ask:

- the call's answer is an event stream, opened at once;
- a question gets a new unguessable id (`elicit-<uuid4>`), is opened in RateLimitTable for the caller
  (mcp_backend.elicitation_answers), then written to the stream; the call takes one of the caller's
  calls-in-flight slots for its wait;
- the POST that carries the client's answer (a JSON-RPC response with that id, the same session and caller) is
  written onto the item by whichever environment receives it, and answered 202;
- the waiting call takes the answer off the item (polling) and hands it to the SDK's `elicit_form`, which
  validates it; with no answer by its deadline the question fails and the tool answers a tool error.

Any other request, and a call whose client did not declare elicitation, is served as before.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import pydantic_core
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, REQUEST_TIMEOUT, JSONRPCError, JSONRPCResponse, RequestId
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from mcp_backend.api_keys import Principal
from mcp_backend.call_slots import SlotLease
from mcp_backend.elicitation_answers import MAX_ANSWER_BYTES, AnswerMailbox, NoSuchQuestion
from mcp_backend.mcp.auth import current_caller
from mcp_backend.mcp.sdk_internals import (
    CallOptions,
    Connection,
    MessageMetadata,
    NoBackChannelError,
    ServerMessageMetadata,
    TransportContext,
)
from mcp_backend.mcp.sessions import SESSION_HEADER, Session, SessionTokens, session_header
from mcp_backend.mcp.single_exchange import DirectlyServed, handshake_version, one_message, one_request, served
from mcp_backend.observability import logger
from mcp_backend.request_rate import RateLimitUnavailable

ASKED_METHOD = "elicitation/create"
ID_PREFIX = "elicit-"
# How often a waiting call looks for its answer: one conditional write each time (RateLimitTable, on demand).
ANSWER_POLL_SECONDS = 0.5
_TRANSPORT = TransportContext(kind="streamable-http", can_send_request=True)
_STREAM_HEADERS = [(b"content-type", b"text/event-stream")]


class CallSlots(Protocol):
    """The caller's calls-in-flight slots (mcp_backend.mcp.server.TierCallSlots)."""

    def take(self, principal: Principal) -> SlotLease | None: ...

    def give_back(self, lease: SlotLease) -> None: ...


class _EventStream:
    """The call's answer as an event stream: opened before the call runs, each message one `message` event."""

    def __init__(self, send: Send) -> None:
        self._send = send

    async def open(self) -> None:
        await self._send({"type": "http.response.start", "status": 200, "headers": _STREAM_HEADERS})

    async def event(self, message: Mapping[str, Any]) -> None:
        data = pydantic_core.to_json(message)
        await self._send(
            {"type": "http.response.body", "body": b"event: message\r\ndata: " + data + b"\r\n\r\n", "more_body": True}
        )

    async def end(self) -> None:
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})


@dataclass
class _AskingCall:
    """The dispatch context of one call on an open stream: notifications and questions ride its stream."""

    request_id: RequestId
    message_metadata: MessageMetadata
    stream: _EventStream
    ask: Callable[[str, Mapping[str, Any] | None], Awaitable[dict[str, Any]]]
    progress_token: str | int | None = None
    transport: TransportContext = _TRANSPORT
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = True

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if method != ASKED_METHOD:
            raise NoBackChannelError(method)
        return await self.ask(method, params)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = dict(params)
        await self.stream.event(message)

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        if self.progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


@dataclass
class _Waiting:
    """What one call's questions share: its stream, its caller, the slot it holds while it waits, and whether its
    client has hung up (a question then stops waiting)."""

    stream: _EventStream
    caller: Principal
    leases: list[SlotLease] = field(default_factory=list)
    hung_up: anyio.Event = field(default_factory=anyio.Event)


def _rpc_error(status: int, code: int, message: str) -> tuple[int, bytes]:
    return status, json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}).encode()


NO_SESSION = _rpc_error(
    400, INVALID_REQUEST, "Bad Request: an answer to elicitation/create needs the Mcp-Session-Id it was asked under"
)
SESSION_NOT_FOUND = _rpc_error(404, INVALID_REQUEST, "Session not found")
ANSWER_TOO_LARGE = _rpc_error(413, INVALID_REQUEST, f"Payload Too Large: an answer is at most {MAX_ANSWER_BYTES} bytes")
NOT_AN_ANSWER = _rpc_error(400, INVALID_REQUEST, "Bad Request: an answer is a JSON-RPC response with a result or error")
NO_SUCH_QUESTION = _rpc_error(400, INVALID_REQUEST, "Bad Request: no question of yours waits under this id")
ANSWERS_UNAVAILABLE = _rpc_error(503, INTERNAL_ERROR, "Service Unavailable: answers cannot be stored now")
ACCEPTED = (202, b"")


class OpenStreamExchange(DirectlyServed):
    """Serves the asking calls, the answers and the session ids of the module docstring; ResponseModes asks it
    first."""

    def __init__(
        self,
        server: Server[Any],
        sessions: SessionTokens,
        mailbox: AnswerMailbox,
        slots: CallSlots | None,
        asking_tools: Collection[str],
        wait_seconds: float,
        poll_seconds: float = ANSWER_POLL_SECONDS,
    ) -> None:
        super().__init__(server)
        self.sessions = sessions
        self.mailbox = mailbox
        self.slots = slots
        self.asking_tools = frozenset(asking_tools)
        # How long a question waits for its answer: within the function's timeout (mcp_backend.mcp.server).
        self.wait_seconds = wait_seconds
        self.poll_seconds = poll_seconds

    # -- the session id of a client that declares elicitation ---------------------------
    async def with_session_id(self, message: Any, send: Send) -> Send:
        """`send`, adding a session id to a successful `initialize` answer of a client that declares elicitation."""
        principal = current_caller()
        if principal is None or not isinstance(message, dict) or message.get("method") != "initialize":
            return send
        params = message.get("params")
        capabilities = params.get("capabilities") if isinstance(params, dict) else None
        if not isinstance(capabilities, dict) or not isinstance(capabilities.get("elicitation"), dict):
            return send
        token = await anyio.to_thread.run_sync(self.sessions.issue, principal.user_id, capabilities)
        if token is None:
            return send
        header = (SESSION_HEADER, token.encode())

        async def send_with_session(reply: Message) -> None:
            if reply["type"] == "http.response.start" and reply["status"] == 200:
                reply = {**reply, "headers": [*reply.get("headers", []), header]}
            await send(reply)

        return send_with_session

    # -- a call that may ask --------------------------------------------------------------
    async def serves(
        self, scope: Scope, receive: Receive, send: Send, body: bytes, message: Any, *, streams: bool
    ) -> bool:
        """Serve `message` when it is a 2025-era tools/call of a tool that may ask, from a caller whose session
        declared elicitation, or an answer to a question; False (nothing sent) for anything else. `streams`: the
        client accepts an event stream (else its call is refused by the SDK's transport, as before)."""
        if not isinstance(message, dict):
            return False
        if "method" not in message:
            answered = message.get("id")
            if isinstance(answered, str) and answered.startswith(ID_PREFIX):
                await self._deliver(scope, send, body, answered)
                return True
            return False
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if not streams or message.get("method") != "tools/call" or not isinstance(name, str):
            return False
        if name not in self.asking_tools:
            return False
        token, principal = session_header(scope), current_caller()
        if token is None or principal is None:
            return False  # no session: served as before, before the body is parsed again
        version, request = handshake_version(scope), one_request(body)
        if version is None or request is None:
            return False
        session = await anyio.to_thread.run_sync(self.sessions.open, token, principal.user_id)
        if session is None:
            return False
        await self._answer_call(scope, receive, send, request, version, session, principal)
        return True

    async def _answer_call(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        request: Any,
        version: str,
        session: Session,
        caller: Principal,
    ) -> None:
        stream = _EventStream(send)
        await stream.open()
        waiting = _Waiting(stream, caller)

        async def ask(method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
            return await self._ask(waiting, method, params)

        async def notice_a_hang_up() -> None:
            while (await receive())["type"] != "http.disconnect":
                continue
            waiting.hung_up.set()

        meta = (request.params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        metadata = ServerMessageMetadata(request_context=Request(scope, receive), can_send_request=True)
        call = _AskingCall(request.id, metadata, stream, ask, token if isinstance(token, str | int) else None)
        connection = Connection.from_envelope(version, None, {"elicitation": session.elicitation})
        async with anyio.create_task_group() as watching:
            watching.start_soon(notice_a_hang_up)
            try:
                reply = await served(self.server, call, request, connection, self._lifespan_state)
            finally:
                watching.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    for lease in waiting.leases:
                        if self.slots is not None:
                            await anyio.to_thread.run_sync(self.slots.give_back, lease)
        await stream.event(reply.model_dump(mode="json", by_alias=True, exclude_unset=True))
        await stream.end()

    async def _ask(self, waiting: _Waiting, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """One question on the stream and its answer's result; MCPError when it cannot be asked or is not
        answered (in time, or the client hung up): the tool turns it into a tool error."""
        if not waiting.leases and self.slots is not None:
            try:
                lease = await anyio.to_thread.run_sync(self.slots.take, waiting.caller)
            except RateLimitUnavailable:
                raise MCPError(INTERNAL_ERROR, "calls in flight cannot be counted now") from None
            if lease is None:
                raise MCPError(INTERNAL_ERROR, "all of your calls in flight are in use: try again when one ends")
            waiting.leases.append(lease)
        question = ID_PREFIX + str(uuid.uuid4())
        try:
            await anyio.to_thread.run_sync(self.mailbox.open, question, waiting.caller.user_id, self.wait_seconds)
        except RateLimitUnavailable:
            raise MCPError(INTERNAL_ERROR, "the answer cannot be waited for now") from None
        try:
            message = {"jsonrpc": "2.0", "id": question, "method": method, "params": dict(params or {})}
            await waiting.stream.event(message)
            answer = await self._wait(question, waiting.hung_up)
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.mailbox.close, question)
        if answer is None and waiting.hung_up.is_set():
            raise MCPError(REQUEST_TIMEOUT, "the client hung up")
        if answer is None:
            raise MCPError(REQUEST_TIMEOUT, f"no answer within {self.wait_seconds:g} seconds")
        reply = one_message(answer.encode())
        if isinstance(reply, JSONRPCError):
            raise MCPError(reply.error.code, reply.error.message)
        if isinstance(reply, JSONRPCResponse):
            return dict(reply.result)
        raise MCPError(INVALID_REQUEST, "the answer is not a JSON-RPC response")

    async def _wait(self, question: str, hung_up: anyio.Event) -> str | None:
        """The answer once it has arrived; None at the deadline, or as soon as the client hangs up."""
        deadline = anyio.current_time() + self.wait_seconds
        while not hung_up.is_set():
            try:
                answer = await anyio.to_thread.run_sync(self.mailbox.take, question)
            except RateLimitUnavailable as error:
                logger.warning("elicitation answer not readable; retrying", extra={"error_type": str(error)})
                answer = None
            if answer is not None:
                return answer
            if anyio.current_time() >= deadline:
                return None
            with anyio.move_on_after(self.poll_seconds):
                await hung_up.wait()
        return None

    # -- an answer ------------------------------------------------------------------------
    async def _deliver(self, scope: Scope, send: Send, body: bytes, question: str) -> None:
        """The client's answer, written for the call that waits for it, wherever it runs: 202, or the error."""
        status, payload = await self._stored(scope, body, question)
        headers = [(b"content-type", b"application/json")] if payload else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    async def _stored(self, scope: Scope, body: bytes, question: str) -> tuple[int, bytes]:
        caller, token = current_caller(), session_header(scope)
        if caller is None or token is None:
            return NO_SESSION
        session = await anyio.to_thread.run_sync(self.sessions.open, token, caller.user_id)
        if session is None:
            return SESSION_NOT_FOUND
        if len(body) > MAX_ANSWER_BYTES:
            return ANSWER_TOO_LARGE
        if not isinstance(one_message(body), JSONRPCResponse | JSONRPCError):
            return NOT_AN_ANSWER
        try:
            await anyio.to_thread.run_sync(self.mailbox.deliver, question, caller.user_id, body.decode())
        except NoSuchQuestion:
            return NO_SUCH_QUESTION
        except RateLimitUnavailable as error:
            logger.error("elicitation answer not stored", extra={"error_type": str(error)})
            return ANSWERS_UNAVAILABLE
        return ACCEPTED
