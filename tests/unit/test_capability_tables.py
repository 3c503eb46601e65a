"""The resource and prompt tables: every entry declares what it needs, the endpoint serves only what it can, and
what each may do matches the scope the HTTP guard asks for its methods."""

from __future__ import annotations

from dataclasses import replace

import pytest

from mcp_backend.doors import METHODS
from mcp_backend.jobs.service import JobQueues, JobsService
from mcp_backend.mcp.prompts import PromptBindings
from mcp_backend.mcp.resources import ResourceBindings
from mcp_backend.tools.context import InvalidArguments, parse_arguments
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.prompts import PROMPTS
from mcp_backend.tools.resources import RESOURCES, ResourceKind
from mcp_backend.tools.services import Service, ToolServices
from mcp_backend.tools.table import Access


def test_every_resource_kind_and_prompt_is_read_as_the_guard_requires():
    # Given the scopes the door table asks of resources/read and prompts/get
    assert METHODS["resources/read"].access is METHODS["prompts/get"].access is Access.READ
    # Then every table entry is READ (a SUBMIT one would need a per-name door in mcp_backend/doors.py)
    assert {kind.access for kind in RESOURCES.values()} | {prompt.access for prompt in PROMPTS.values()} == {
        Access.READ
    }


def test_a_resource_kind_that_writes_is_refused():
    with pytest.raises(ValueError, match="access is READ"):
        replace(RESOURCES["job"], access=Access.SUBMIT)


def test_kinds_and_prompts_whose_services_are_absent_are_not_served():
    # Given a function without the jobs service (no JobTable)
    services = ToolServices(fetch_policy=FetchPolicy())
    assert Service.JOBS not in services.available()
    # When its resources and prompts are bound
    resources = ResourceBindings(RESOURCES, services)
    prompts = PromptBindings(PROMPTS, services, resources)
    # Then none that reads jobs is served: no template, no listing, no prompt; only the analysis view, which
    # reads nothing (analyze_dataset runs without jobs)
    assert [served.kind.name for served in resources.kinds] == ["analysis-view"] and resources.listing is None
    assert prompts.prompts == {}


def test_two_listing_kinds_are_refused():
    # Given a function with the jobs service, and two kinds that both list (one cursor cannot page both)
    jobs = JobsService(JobQueues(job_table_name="t", job_queue_url="q", job_dead_letter_queue_url="d"))
    services = ToolServices(fetch_policy=FetchPolicy(), jobs=jobs)
    listing: ResourceKind = RESOURCES["job"]
    table = {"a": listing, "b": replace(listing, name="b", uri_template="other://{jobId}")}
    # When they are bound, Then the table is refused
    with pytest.raises(ValueError, match="at most one"):
        ResourceBindings(table, services)
    # And the real table, with the same services, serves all its kinds
    assert [served.kind.name for served in ResourceBindings(RESOURCES, services).kinds] == [
        "job",
        "job-result",
        "analysis-view",
        "job-view",
    ]


def test_a_resource_kind_whose_template_and_variables_model_disagree_is_refused():
    # Given a function with the jobs service, and a kind whose URI template names a variable its model lacks
    jobs = JobsService(JobQueues(job_table_name="t", job_queue_url="q", job_dead_letter_queue_url="d"))
    services = ToolServices(fetch_policy=FetchPolicy(), jobs=jobs)
    renamed = replace(RESOURCES["job"], uri_template="job://{id}")
    # When it is bound, Then the table is refused naming both sides (a read would never see its variable)
    with pytest.raises(ValueError, match=r"job: the URI template's variables \['id'\] are not its model's \['jobId'\]"):
        ResourceBindings({"job": renamed}, services)


def test_prompt_arguments_and_template_variables_are_parsed_by_one_rule():
    # Given the models of a prompt's arguments and of a resource template's variables (strings on the wire)
    summarise = PROMPTS["summarise_analysis"].arguments_model
    result = RESOURCES["job-result"].variables
    # When each is given strings, Then pydantic converts them; a bad value is refused naming the field only
    assert parse_arguments(result, {"jobId": "a" * 8, "page": "2"}).model_dump() == {"jobId": "a" * 8, "page": 2}
    with pytest.raises(InvalidArguments, match=r"^job_id: ") as refused:
        parse_arguments(summarise, {"job_id": "<secret value>"})
    assert "secret" not in str(refused.value)
    with pytest.raises(InvalidArguments, match="page"):
        parse_arguments(result, {"jobId": "a" * 8, "page": "-1"})
