"""Every door into the stack and the controls it carries, in one table: the HTTP routes of McpServer and of
AuthorizationServer, and each JSON-RPC method and tool the MCP endpoint serves (both protocol eras, both task
flavours).

The MCP guard (mcp/guard.py) applies what the table says: a request's door is looked up from its method (and, for
tools/call, its tool) once the body is read, and a door with no entry is refused (JSON-RPC -32601). What every
POST to /mcp carries (the body cap, authentication, the request rate) is checked before the body is read, so every
method and tool door carries them too. `tests/unit/test_doors.py` enumerates the doors from the running apps and
fails on one without an entry.

A new method is one line in METHODS; a new tool gets its door from its own entry in the tool table (a tool that
reaches the network holds a call slot until its deadline, a job's submit tools take the tier's job quota).
`python -m mcp_backend.doors --markdown` prints docs/security.md's door table.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import pydantic_core

from mcp_backend.refusals import NoSuchDoor
from mcp_backend.tools.table import TOOLS, Access, Tool

MCP_PATH = "/mcp"
HEALTH_PATH = "/healthz"
METADATA_PATH = "/.well-known/oauth-protected-resource"
# What bounds how long a door's request can run.
AT_ONCE = "answers at once"
SYNC_CALL_DEADLINE = "SyncCallDeadlineSeconds"
TASK_RESULT_WAIT = "TaskResultWaitSeconds"
OUTBOUND_DEADLINE = "outbound deadline (netsafety)"
JOB_QUOTA = "daily_jobs, concurrent_jobs, batch_items"
# The caller's jobs read from JobTable (resources, prompts, completion): bounded by the AWS SDK's timeouts.
JOB_TABLE_READ = "JobTable read (AWS SDK timeouts)"
# A question on a 2025-era call's stream waits this share of the function's timeout for its answer.
ANSWER_WAIT = "answer wait (0.8 x McpServerTimeout)"
ANSWER_WRITE = "RateLimitTable write (AWS SDK timeouts)"


@dataclass(frozen=True)
class Controls:
    """What one door carries. `slot`: it holds one of the caller's calls-in-flight slots while it runs (it waits
    or reaches the network). `quota`: the tier quotas it takes (it creates work). `access`: the OAuth scope it
    needs (None: any authenticated caller)."""

    body_cap: bool = False
    auth: bool = False
    rate: bool = False
    slot: bool = False
    deadline: str = AT_ONCE
    quota: str = ""
    access: Access | None = None


# Every authenticated POST to /mcp: capped, authenticated and counted before its body is parsed.
MCP_POST = Controls(body_cap=True, auth=True, rate=True)
PUBLIC = Controls()

# McpServer's HTTP doors (the guard's paths), by (method, path). Any other is 404 (path) or 405 (method).
MCP_ROUTES: Mapping[tuple[str, str], Controls] = {
    ("POST", MCP_PATH): replace(MCP_POST, deadline="the method's or tool's"),
    ("GET", HEALTH_PATH): PUBLIC,
    ("HEAD", HEALTH_PATH): PUBLIC,
    ("GET", METADATA_PATH): PUBLIC,  # RFC 9728, OAuth mode only
    ("HEAD", METADATA_PATH): PUBLIC,
    ("GET", METADATA_PATH + MCP_PATH): PUBLIC,  # RFC 9728's path-suffixed form
    ("HEAD", METADATA_PATH + MCP_PATH): PUBLIC,
    ("OPTIONS", "*"): PUBLIC,  # CORS preflight of an allowed origin
}

# AuthorizationServer's routes (authorization/app.py), by (method, path): its own controls
# (docs/authorization-server.md); no McpServer control applies there.
# Body caps: the SDK's 1 MB on its handlers and /authorize, 16 KiB on /register and on /consent's form.
_SDK_FORM = Controls(body_cap=True)
AUTHORIZATION_ROUTES: Mapping[tuple[str, str], Controls] = {
    ("GET", "/.well-known/oauth-authorization-server"): PUBLIC,
    ("OPTIONS", "/.well-known/oauth-authorization-server"): PUBLIC,
    ("GET", "/jwks"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("GET", "/callback"): Controls(deadline=OUTBOUND_DEADLINE),  # the upstream token exchange: 5 s in total
    ("POST", "/consent"): _SDK_FORM,  # CSRF cookie and form token, Origin checked
    # A client metadata document: 3 s in total; its fetches counted per source and per document host, per minute.
    ("GET", "/authorize"): Controls(rate=True, deadline=OUTBOUND_DEADLINE),
    ("POST", "/authorize"): replace(_SDK_FORM, rate=True, deadline=OUTBOUND_DEADLINE),
    ("POST", "/register"): replace(_SDK_FORM, rate=True),  # per source address and per server, per hour
    ("OPTIONS", "/register"): PUBLIC,
    ("POST", "/token"): _SDK_FORM,  # public clients: PKCE, no client secret
    ("OPTIONS", "/token"): PUBLIC,
    ("POST", "/revoke"): _SDK_FORM,
    ("OPTIONS", "/revoke"): PUBLIC,
}

_READS_JOBS = replace(MCP_POST, deadline=JOB_TABLE_READ, access=Access.READ)
# The JSON-RPC methods McpServer serves, both eras (2025-11-25 handshake, 2026-07-28 stateless) and both task
# flavours (the Tasks extension, mcp/tasks.py; 2025-11-25 tasks, mcp/tasks_2025.py). One line per method.
METHODS: Mapping[str, Controls] = {
    "initialize": MCP_POST,  # 2025 handshake
    "notifications/initialized": MCP_POST,
    "notifications/cancelled": MCP_POST,
    "notifications/progress": MCP_POST,
    "notifications/roots/list_changed": MCP_POST,
    "ping": MCP_POST,
    "server/discover": MCP_POST,  # 2026-07-28
    "tools/list": MCP_POST,
    "tools/call": MCP_POST,  # and the called tool's door, below
    # The catalog listings need no scope; listing and reading the caller's resources, getting a prompt (it reads
    # the caller's jobs) and completing an argument (it lists the caller's job ids) read what get_job reads. Every
    # resource kind and prompt is READ (their tables: tests/unit/test_capability_tables.py).
    "prompts/list": MCP_POST,
    "prompts/get": _READS_JOBS,
    "resources/list": _READS_JOBS,
    "resources/templates/list": MCP_POST,
    "resources/read": _READS_JOBS,
    "completion/complete": _READS_JOBS,
    "tasks/get": MCP_POST,
    "tasks/update": MCP_POST,
    "tasks/cancel": replace(MCP_POST, access=Access.SUBMIT),  # stops the caller's queued work
    "tasks/result": replace(MCP_POST, slot=True, deadline=TASK_RESULT_WAIT),  # long-polls its task
}


# What a 2025-era tools/call sends its client on its open event stream (mcp/open_stream.py), by method: the call
# waits for the answer holding one of the caller's slots, taken when it asks, until the answer or its deadline.
SERVER_REQUESTS: Mapping[str, Controls] = {
    "elicitation/create": replace(MCP_POST, slot=True, deadline=ANSWER_WAIT),
}
# The client's answer to one of them: a POST of a JSON-RPC response (no method), written to RateLimitTable for
# the waiting call (mcp_backend.elicitation_answers), answered 202. It runs nothing: no slot, no scope.
ANSWERS = replace(MCP_POST, deadline=ANSWER_WRITE)


def tool_doors(table: Iterable[Tool]) -> dict[str, Controls]:
    """Each MCP tool of the table with its controls: a synchronous tool as it declares (a network tool holds a
    slot), a job's submit tools (one, many) with the tier's job quota."""
    doors: dict[str, Controls] = {}
    for tool in table:
        if tool.runs_sync:
            doors[tool.name] = replace(
                MCP_POST, slot=tool.reaches_network, deadline=SYNC_CALL_DEADLINE, access=tool.access
            )
        if tool.runs_as_job:
            submit = replace(MCP_POST, quota=JOB_QUOTA, access=Access.SUBMIT)
            doors[tool.submit_name] = doors[tool.submit_many_name] = submit
    return doors


TOOL_DOORS: Mapping[str, Controls] = tool_doors(TOOLS.values())
# A tools/call of a name the table lacks: the tool answers "Unknown tool" at once; the strictest scope (fail closed).
UNKNOWN_TOOL = replace(MCP_POST, access=Access.SUBMIT)


@dataclass(frozen=True, slots=True)
class Door:
    """What the guard applies to one request, decided from its body: made once per door when the table is built
    (a request of one message costs a dict lookup), merged for a batch."""

    slot: bool = False
    access: frozenset[Access] = frozenset()


def _door(controls: Controls) -> Door:
    return Door(controls.slot, frozenset({controls.access}) if controls.access is not None else frozenset())


# A body neither parser reads (the SDK answers its parse error, nothing runs): the strictest scope (fail closed).
UNREADABLE = Door(access=frozenset({Access.SUBMIT}))
# A reading of a body that was not made (a batch, or a body the parsers might read differently).
UNREAD: Any = object()
# A message without a method (a response, or one the SDK refuses as invalid): it runs nothing (ANSWERS).
NO_METHOD = _door(ANSWERS)


class DoorTable:
    """The doors of one endpoint, decided per request. The body is read by both parsers the SDK uses (pydantic_core
    in the handshake era, json in the stateless one) whenever they could disagree (an escape, a byte past ASCII, or
    a body one of them refuses), and the request gets the doors either reading finds: they never disagree in the
    caller's favour."""

    def __init__(self, methods: Mapping[str, Controls], tools: Mapping[str, Controls]) -> None:
        self._methods = {name: _door(controls) for name, controls in methods.items() if name != "tools/call"}
        self._tools = {name: _door(controls) for name, controls in tools.items()}
        self._unknown_tool = _door(UNKNOWN_TOOL)

    def decide(self, body: bytes) -> Door | NoSuchDoor:
        return self.read(body)[0]

    def read(self, body: bytes) -> tuple[Door | NoSuchDoor, Any]:
        """The body's door, and its one reading when both parsers read it alike (else UNREAD): the apps behind the
        guard use it rather than parse the body again."""
        try:
            first: Any = pydantic_core.from_json(body)  # a fifth of json's cost: the reading every body gets
        except (ValueError, RecursionError):
            first = UNREAD
        if isinstance(first, dict) and body.isascii() and b"\\" not in body:
            return self._of(first), first  # the usual request: one message, and json could read it no other way
        try:
            second: Any = json.loads(body)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            second = UNREAD
        readings = [reading for reading in (first, second) if reading is not UNREAD]
        if not readings:
            return UNREADABLE, UNREAD
        messages = [m for reading in readings for m in (reading if isinstance(reading, list) else [reading])]
        doors = [self._of(message) for message in messages]
        refused = next((door for door in doors if isinstance(door, NoSuchDoor)), None)
        if refused is not None:
            return refused, UNREAD
        found = [door for door in doors if isinstance(door, Door)]
        if len(readings) < 2:
            found.append(UNREADABLE)  # one parser refuses what the other reads: the strictest scope
        return Door(any(d.slot for d in found), frozenset().union(*(d.access for d in found))), UNREAD

    def _of(self, message: Any) -> Door | NoSuchDoor:
        if not isinstance(message, dict):
            return NO_METHOD
        method = message.get("method")
        if not isinstance(method, str):
            return NO_METHOD
        if method == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            return self._tools.get(name, self._unknown_tool) if isinstance(name, str) else self._unknown_tool
        door = self._methods.get(method)
        if door is None:
            request_id = message.get("id")
            return NoSuchDoor.of(method, request_id if isinstance(request_id, str | int) else None)
        return door


def markdown() -> str:
    """docs/security.md's door table."""
    lines = [
        "| door | body cap | authentication | request rate | call slot | deadline | tier quota | scope |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    mark = {True: "yes", False: "-"}

    def row(door: str, controls: Controls) -> str:
        cells = (
            door,
            mark[controls.body_cap],
            mark[controls.auth],
            mark[controls.rate],
            mark[controls.slot],
            controls.deadline,
            controls.quota or "-",
            controls.access.value if controls.access is not None else "-",
        )
        return "| " + " | ".join(cells) + " |"

    lines += [row(f"McpServer `{method} {path}`", c) for (method, path), c in MCP_ROUTES.items()]
    lines += [row(f"AuthorizationServer `{method} {path}`", c) for (method, path), c in AUTHORIZATION_ROUTES.items()]
    lines += [row(f"method `{name}`", c) for name, c in METHODS.items()]
    lines += [row(f"asked of the client: `{name}` (2025 era)", c) for name, c in SERVER_REQUESTS.items()]
    lines.append(row("answer to a question (a JSON-RPC response)", ANSWERS))
    lines += [row(f"tool `{name}`", c) for name, c in sorted(TOOL_DOORS.items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv != ["--markdown"]:
        sys.stderr.write("usage: python -m mcp_backend.doors --markdown\n")
        return 2
    sys.stdout.write(markdown())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
