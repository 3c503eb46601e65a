"""A part of the stack that is off (JobPipeline, CallLog or Probes Disabled) leaves its variables unset: the endpoint
and the worker cope, offering none of its tools and writing no record for it, from the environment template.yaml
gives them under each profile."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.stack.template import load_template
from mcp_backend.aws import AwsClients
from mcp_backend.calllog.models import CallLogEventType, CallLogRecord
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.mcp.server import tool_bindings
from mcp_backend.mcp.tasks import task_extensions
from mcp_backend.tools.table import TOOLS, Mode
from tests.template.test_profiles import Evaluation

TEMPLATE = load_template()
JOB_TOOLS = {"get_job", "list_failed_jobs", "cancel_job", "submit_analysis", "submit_analyses"}
ENDPOINT_TOOLS = {"register_endpoint", "unregister_endpoint", "list_endpoints", "endpoint_status"}
ALL_OFF = {"JobPipeline": "Disabled", "CallLog": "Disabled", "Probes": "Disabled"}


def unreachable_aws(service: str) -> Any:
    raise AssertionError(f"building the tools must not create a {service} client")


def endpoint_environment(**parameters: str) -> dict[str, str]:
    """McpServer's environment (Globals and its own) as CloudFormation would set it for these parameters."""
    evaluation = Evaluation(**parameters)
    variables = {
        **TEMPLATE.source["Globals"]["Function"]["Environment"]["Variables"],
        **TEMPLATE.resource("McpServer")["Properties"]["Environment"]["Variables"],
    }
    resolved = evaluation.scope.resolve(variables)
    return {name: str(value).lower() if isinstance(value, bool) else str(value) for name, value in resolved.items()}


def offered_tools(**parameters: str) -> set[str]:
    settings = load_settings(McpSettings, endpoint_environment(**parameters))
    bindings = tool_bindings(settings, AwsClients(unreachable_aws))
    return {binding.name for binding in bindings.bindings}


def test_with_every_part_on_the_endpoint_offers_every_tool():
    # Given the default parameters (every part on), when the endpoint binds the tool table
    offered = offered_tools()
    # Then the job tools, the endpoint tools and the synchronous analysis are all offered
    assert JOB_TOOLS | ENDPOINT_TOOLS | {"analyze_dataset"} <= offered


def test_without_the_job_pipeline_the_endpoint_offers_no_job_tool_and_no_tasks():
    # Given the endpoint's environment with the job pipeline off
    settings = load_settings(McpSettings, endpoint_environment(**ALL_OFF))
    # When it binds the tool table
    bindings = tool_bindings(settings, AwsClients(unreachable_aws))
    offered = {binding.name for binding in bindings.bindings}
    # Then no job tool (submit, get, list, cancel) nor endpoint tool is offered, and no Tasks extension
    assert offered & (JOB_TOOLS | ENDPOINT_TOOLS) == set()
    assert task_extensions(bindings.submissions) == []
    # And the analysis, which also runs as a job, is still offered synchronously (the table itself is unchanged)
    assert "analyze_dataset" in offered
    assert bindings.table["analyze_dataset"].mode is Mode.SYNC and TOOLS["analyze_dataset"].mode is Mode.BOTH


def test_without_probes_the_endpoint_offers_no_endpoint_tool_but_every_job_tool():
    # Given the minimal-like profile with jobs on and probes off
    offered = offered_tools(JobPipeline="Enabled", CallLog="Enabled", Probes="Disabled")
    # Then the endpoint tools are gone and the job tools are there
    assert offered & ENDPOINT_TOOLS == set()
    assert JOB_TOOLS <= offered


@pytest.mark.parametrize("parameters", [ALL_OFF, {"CallLog": "Disabled", "Probes": "Disabled"}])
def test_without_the_call_log_the_endpoint_is_given_no_stream(parameters):
    # Given the endpoint's environment with the call log off
    settings = load_settings(McpSettings, endpoint_environment(**parameters))
    # Then it has no stream to write to
    assert settings.call_log_stream_name == ""


def test_a_writer_without_a_stream_writes_nothing_and_counts_nothing_lost():
    # Given a writer with no stream (CallLog Disabled) and a Kinesis client that must not be called
    class NoKinesis:
        def put_records(self, **request: Any) -> dict:
            raise AssertionError("the call log is off: nothing may be put")

    writer = CallLogWriter("", NoKinesis())
    # When records are added and flushed
    writer.add(CallLogRecord(event_type=CallLogEventType.TOOL_CALL, user_id="u-1", tool_name="analyze_dataset"))
    outcome = writer.flush()
    # Then nothing was put, and nothing is reported lost
    assert (outcome.written, outcome.dropped, outcome.error_codes) == (0, 0, set())
