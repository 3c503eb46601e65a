"""`make dev` starts each profile samconfig.toml names: the local stack runs only the functions the profile creates,
and its MCP endpoint offers only the tools of the parts that are on (a call to another is a clear error, no 500)."""

from __future__ import annotations

import asyncio
import signal

import pytest
from mcp.shared.exceptions import MCPError

from devstack.__main__ import issue_dev_keys
from tests.e2e.conftest import MAKE_DEV_GROUP, Endpoint, mcp_client, start_make_dev
from tests.profiles import PROFILE_NAMES, created_resources, deploy_scope, profile_parameters

pytestmark = pytest.mark.e2e

ENDPOINT_TOOLS = {"register_endpoint", "unregister_endpoint", "list_endpoints", "endpoint_status"}
JOB_TOOLS = {"get_job", "list_failed_jobs", "cancel_job", "submit_analysis", "submit_analyses"}


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_make_dev_starts_each_named_profile_with_only_its_parts(start_stack, profile):
    # Given a profile's parameters, as samconfig.toml names them
    parameters = profile_parameters(profile)
    expected = {
        logical_id
        for logical_id, resource in created_resources(deploy_scope(parameters)).items()
        if resource["Type"] == "AWS::Lambda::Function"
    }

    # When the local stack starts with them (as `make dev --parameter Name=Value` does) and a client lists the tools
    stack = start_stack(parameters=parameters)
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    endpoint = Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment)

    async def listed_and_refused() -> tuple[set[str], list[str]]:
        async with mcp_client(endpoint, "legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            refusals = []
            for absent in sorted((ENDPOINT_TOOLS | JOB_TOOLS) - names):
                try:
                    result = await client.call_tool(absent, {})
                    assert result.is_error, absent
                    refusals.append(absent)
                except MCPError as refused:
                    assert "Internal" not in str(refused), absent
                    refusals.append(absent)
            return names, refusals

    names, refusals = asyncio.run(listed_and_refused())

    # Then the stack runs exactly the profile's functions
    assert set(stack.environment.stack.functions()) == expected
    # And the endpoint offers the tools of the parts that are on, and refuses the others as a clear error
    assert "analyze_dataset" in names
    assert (JOB_TOOLS <= names) is (parameters["JobPipeline"] == "Enabled")
    assert (ENDPOINT_TOOLS <= names) is (parameters["Probes"] == "Enabled")
    assert set(refusals) == (ENDPOINT_TOOLS | JOB_TOOLS) - names


@MAKE_DEV_GROUP
@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_make_dev_itself_comes_up_with_each_profile_and_stops_on_ctrl_c(tmp_path, monkeypatch, profile):
    # Given `python -m devstack dev` (what make dev runs) with a profile's parameters, announcing itself in a file
    # of its own
    monkeypatch.setenv("DEVSTACK_RUNNING_FILE", str(tmp_path / "running.json"))
    options = [f"--parameter={name}={value}" for name, value in profile_parameters(profile).items()]

    # When it starts
    process, _, line = start_make_dev("--runtime", "inprocess", *options)
    try:
        # Then it reaches its banner (every resource of the profile created, its pollers running)
        assert "local stack ready" in line, line
    finally:
        # And Ctrl-C stops it cleanly
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=120) == 0
