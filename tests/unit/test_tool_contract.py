"""The tool contract fails closed: every tool says what it may do and which services it uses; it gets those
services and no others, wherever it runs (the endpoint and the worker, each with the environment and the role
template.yaml gives it); a tool that writes is refused to a read-only token."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from devstack.stack.intrinsics import Scope
from devstack.stack.template import load_template
from mcp_backend.aws import AwsClients
from mcp_backend.config import McpSettings, ToolSettings, WorkerSettings, load_settings
from mcp_backend.jobs.store import JobStore
from mcp_backend.jobs.worker import JobWorker
from mcp_backend.mcp.auth import ScopedPrincipal
from mcp_backend.mcp.bindings import ToolBindings
from mcp_backend.mcp.guard import HostPolicy, McpHttpGuard
from mcp_backend.tools.context import ServiceNotDeclared, StrictInput, ToolContext, ToolOutput
from mcp_backend.tools.errors import ToolError
from mcp_backend.tools.services import MissingToolService, Service, ToolServices
from mcp_backend.tools.table import TOOLS, Access, Effect, Mode, Tool

TEMPLATE = load_template()
HOST = "abc.lambda-url.us-east-1.on.aws"
# The functions tools run in, and the settings each reads.
PLACES: dict[str, type[ToolSettings]] = {"McpServer": McpSettings, "ToolWorker": WorkerSettings}
# The template resources a service reads or writes: the function's role must name each of them.
SERVICE_RESOURCES = {Service.JOBS: {"JobTable", "JobQueue"}, Service.ENDPOINTS: {"MonitorTable"}}


def function_environment(function: str) -> dict[str, str]:
    """The function's environment as CloudFormation would set it with the default parameters."""
    scope = Scope(
        parameters=TEMPLATE.parameter_defaults(),
        mappings=TEMPLATE.expanded.get("Mappings", {}),
        conditions=TEMPLATE.expanded.get("Conditions", {}),
        region="us-east-1",
        account_id="123456789012",
        stack_name="contract",
        ref=lambda logical_id: f"ref-{logical_id}",
        get_att=lambda logical_id, attribute: f"arn-{logical_id}-{attribute}",
    )
    variables = TEMPLATE.resource(function)["Properties"]["Environment"]["Variables"]
    resolved = scope.resolve(variables)
    return {name: str(value).lower() if isinstance(value, bool) else str(value) for name, value in resolved.items()}


def services_of(function: str) -> ToolServices:
    settings = load_settings(PLACES[function], function_environment(function))
    return ToolServices.from_settings(settings, AwsClients(unreachable_aws))


def unreachable_aws(service: str) -> Any:
    raise AssertionError(f"building a tool context must not create a {service} client")


def role_policies(function: str) -> str:
    role = TEMPLATE.resource(function)["Properties"]["Role"]["Fn::GetAtt"][0]
    properties = TEMPLATE.resource(role)["Properties"]
    return json.dumps([properties.get("Policies", []), properties.get("ManagedPolicyArns", [])])


def places_of(tool: Tool) -> list[str]:
    return (["McpServer"] if tool.runs_sync else []) + (["ToolWorker"] if tool.runs_as_job else [])


TOOL_PLACES = [(name, place) for name, tool in TOOLS.items() for place in places_of(tool)]


class NoInput(StrictInput):
    pass


def uses_the_jobs_service(request: BaseModel, ctx: ToolContext) -> dict[str, Any]:
    ctx.job_service()
    return {}


def tool(**overrides: Any) -> Tool:
    fields: dict[str, Any] = {
        "name": "probe_tool",
        "description": "a tool of the test",
        "input_model": NoInput,
        "run": uses_the_jobs_service,
        "access": Access.SUBMIT,
        "services": frozenset(),
        "effect": Effect.NONE,
        "output_model": ToolOutput,
        "mode": Mode.JOB,
    }
    return Tool(**{**fields, **overrides})


@pytest.mark.parametrize("missing", ["access", "services", "effect", "output_model"])
def test_a_tool_that_does_not_say_its_access_services_effect_or_output_cannot_be_declared(missing):
    # Given a tool entry without one of the required fields
    fields = {
        "name": "new_tool",
        "description": "d",
        "input_model": NoInput,
        "run": uses_the_jobs_service,
        "access": Access.READ,
        "services": frozenset(),
        "effect": Effect.NONE,
        "output_model": ToolOutput,
    }
    del fields[missing]

    # When it is declared, then it is refused: there is no default to fall back on
    with pytest.raises(TypeError, match=missing):
        Tool(**fields)


@pytest.mark.parametrize("effect", [Effect.ADDS, Effect.CHANGES])
def test_a_read_tool_that_changes_something_cannot_be_declared(effect):
    # When a READ tool (read-only to clients) is declared as changing what the caller has
    # Then it is refused: a tool that writes needs SUBMIT
    with pytest.raises(ValueError, match="SUBMIT"):
        tool(access=Access.READ, effect=effect)


@pytest.mark.parametrize("mode", [Mode.JOB, Mode.BOTH])
def test_a_tool_that_answers_content_blocks_cannot_run_as_a_job(mode):
    # When a tool without an output model (it answers MCP content blocks) is declared as a job
    # Then it is refused: a job's result is JSON
    with pytest.raises(ValueError, match="runs only synchronously"):
        tool(output_model=None, mode=mode)


def test_a_content_answer_is_not_a_jobs_result():
    # Given a synchronous tool that answers content blocks
    blocks = tool(output_model=None, mode=Mode.SYNC, run=lambda request, ctx: [])

    # When it is run as a job would run it, then it fails as a tool error, not with a list for a result
    with pytest.raises(ToolError, match="answers content blocks"):
        blocks({}, ToolContext(tool_name="probe_tool", user_id="user-alice"))


@pytest.mark.parametrize(("name", "function"), TOOL_PLACES)
def test_every_tool_gets_exactly_the_services_it_declares_where_it_runs(name, function):
    # Given a tool of the table and a function it runs in, with the environment template.yaml gives that function
    declared = TOOLS[name]
    services = services_of(function)

    # When that function builds the tool's context
    services.require([declared], function)
    context = services.context_for(declared, "user-1")

    # Then every declared service is there, and an undeclared one is refused when reached for
    reach = {Service.JOBS: context.job_service, Service.ENDPOINTS: context.endpoint_registry}
    for service, get in reach.items():
        if service in declared.services:
            assert get() is not None
        else:
            with pytest.raises(ServiceNotDeclared, match=name):
                get()


@pytest.mark.parametrize(("name", "function"), TOOL_PLACES)
def test_the_role_of_each_function_reaches_what_its_tools_declare(name, function):
    # Given a tool's declared services and the function that runs it
    needed = set().union(*(SERVICE_RESOURCES[service] for service in TOOLS[name].services))

    # When the function's role policies are read from the expanded template
    policies = role_policies(function)

    # Then they name every resource those services use
    assert {resource for resource in needed if f'"{resource}"' not in policies} == set()


@pytest.mark.parametrize("function", sorted(PLACES))
def test_every_dataset_fetch_ends_before_the_function_times_out(function):
    # Given a function tools run in, with the environment template.yaml gives it (its timeout among it)
    timeout = float(function_environment(function)["FUNCTION_TIMEOUT_SECONDS"])

    # When it builds its dataset fetch policy
    policy = services_of(function).fetch_policy

    # Then every fetch has a total deadline that ends with time left to report the failure
    assert 0 < policy.fetch_deadline_seconds < timeout


def test_submit_tools_have_the_jobs_service_on_the_endpoint():
    # Given the endpoint's services, as the template configures McpServer
    services = services_of("McpServer")

    # When the MCP tools are generated from the table
    bindings = ToolBindings(TOOLS, services)

    # Then job submission has the jobs service
    assert bindings.jobs is services.jobs is not None


def test_a_job_tool_declaring_a_service_the_worker_lacks_stops_the_worker_at_start():
    # Given a job tool that declares the endpoints service, and the worker's environment (no MonitorTable)
    needs_endpoints = tool(services=frozenset({Service.ENDPOINTS}))
    settings = load_settings(WorkerSettings, function_environment("ToolWorker"))

    # When the worker is built, then it refuses to start, naming the tool, the service and the variable
    with pytest.raises(MissingToolService, match=r"probe_tool.*endpoints.*MONITOR_TABLE_NAME"):
        JobWorker(
            settings,
            JobStore(settings.job_table_name),
            {needs_endpoints.name: needs_endpoints},
            ToolServices.from_settings(settings, AwsClients()),
        )


def test_a_tool_reaching_for_an_undeclared_service_fails_permanently():
    # Given a tool that uses the jobs service without declaring it
    undeclared = tool(services=frozenset())
    services = services_of("ToolWorker")

    # When it runs, then the failure is a typed tool error that no retry would change
    with pytest.raises(ServiceNotDeclared) as raised:
        undeclared({}, services.context_for(undeclared, "user-1"))
    assert not raised.value.transient


class ReadOnlyToken:
    """An authenticator whose every caller holds an access token with the read scope only."""

    async def authenticate(self, bearer_token: str, resource: str) -> ScopedPrincipal:
        return ScopedPrincipal(user_id="reader", access=frozenset({Access.READ.value}))

    def challenge(self, resource: str, token_presented: bool) -> str:
        return "Bearer"

    def metadata(self, resource: str) -> None:
        return None

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return f'Bearer error="insufficient_scope", scope="{scope}"'


async def reached(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b"{}"})


def call_as_reader(tool_name: str) -> httpx.Response:
    bindings = ToolBindings(TOOLS, services_of("McpServer"))
    app = McpHttpGuard(
        reached,
        path="/mcp",
        hosts=HostPolicy(hosts=(HOST,)),
        authenticator=ReadOnlyToken(),
        tool_access=bindings.access,
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool_name, "arguments": {}}}

    async def send() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"https://{HOST}") as client:
            headers = {"accept": "application/json, text/event-stream", "authorization": "Bearer t"}
            return await client.post("/mcp", json=body, headers=headers)

    return anyio.run(send)


MCP_TOOLS = ToolBindings(
    TOOLS,
    ToolServices.from_settings(
        load_settings(McpSettings, function_environment("McpServer")), AwsClients(unreachable_aws)
    ),
).access


@pytest.mark.parametrize("tool_name", sorted(MCP_TOOLS))
def test_a_read_only_token_reaches_only_the_tools_that_read(tool_name):
    # Given an MCP tool generated from the table, and a caller whose token has only the read scope
    access = MCP_TOOLS[tool_name]

    # When the caller calls it
    response = call_as_reader(tool_name)

    # Then a tool that writes or queues work is refused with the scope it needs; a read tool is reached
    if access is Access.SUBMIT:
        assert response.status_code == 403
        assert 'scope="submit"' in response.headers["www-authenticate"]
    else:
        assert response.status_code == 200


def test_every_submit_and_write_tool_needs_the_submit_scope():
    # Given the MCP tools generated from the table
    # Then every tool that queues a job, and every synchronous tool declared SUBMIT, needs the submit scope
    expected_submit = {t.submit_name for t in TOOLS.values() if t.runs_as_job}
    expected_submit |= {t.submit_many_name for t in TOOLS.values() if t.runs_as_job}
    expected_submit |= {t.name for t in TOOLS.values() if t.runs_sync and t.access is Access.SUBMIT}
    assert {name for name, access in MCP_TOOLS.items() if access is Access.SUBMIT} == expected_submit
    assert "register_endpoint" in expected_submit
