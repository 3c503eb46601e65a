"""The catalog a client reasons about: every listed tool publishes an outputSchema, and every tool's answer (each
shape it can take: a whole and a paged job, a failed and a cancelled one, a repeated submission, a batch with a
refused item, an endpoint before and after its probes) validates against it, as a client checking
structuredContent does."""

from __future__ import annotations

import datetime as dt
from typing import Any

import anyio
import boto3
import pytest
from jsonschema import Draft202012Validator  # type: ignore[import-untyped]  # the SDK client's own validator

from mcp_backend.monitor.items import ProbeResult, probe_result_item
from mcp_backend.monitor.table import MonitorTable
from tests.e2e.conftest import Endpoint, mcp_client

pytestmark = pytest.mark.e2e

SALES = "s3://local-datasets/apikey%3Auser-alice/sales.csv"
NOT_TEXT = "s3://local-datasets/apikey%3Auser-alice/not-text.csv"


def listed_output_schemas(endpoint: Endpoint, mode: str) -> dict[str, dict[str, Any]]:
    async def listing():
        async with mcp_client(endpoint, mode) as client:
            return (await client.list_tools()).tools

    return {tool.name: tool.output_schema for tool in anyio.run(listing)}


def call(endpoint: Endpoint, answers: list[tuple[str, Any]], name: str, arguments: dict[str, Any]) -> Any:
    """One successful tools/call; its structuredContent is kept for validation and returned."""

    async def one():
        async with mcp_client(endpoint, "2026-07-28") as client:
            return await client.call_tool(name, arguments)

    result = anyio.run(one)
    assert not result.is_error, result.content[0].text
    answers.append((name, result.structured_content))
    return result.structured_content


def record_a_probe(endpoint: Endpoint, server_id: str) -> None:
    """A healthy probe of the endpoint with a schema hash, as the recorder and drift detector store them."""
    table = MonitorTable(endpoint.local.table_name("MonitorTable"), boto3.client("dynamodb"))
    probed_at = dt.datetime.now(dt.UTC)
    result = {"serverId": server_id, "status": "healthy", "latencyMs": 42, "toolCount": 3, "schemaHash": "h1"}
    item = probe_result_item(result, probe_id="p1", probed_at=probed_at, expires_at=2_000_000_000)
    assert table.put_probe_results([item]) == set()
    plain = {name: next(iter(value.values())) for name, value in item.items()}
    table.record_schema_change(ProbeResult.model_validate(plain))


def test_every_tools_answer_validates_against_its_published_output_schema(endpoint_factory):
    # Given the endpoint (that may register loopback endpoints, and one whose job results come in 64-byte pages),
    # and a dataset that is not text
    endpoint = endpoint_factory(PROBE_ALLOW_LOOPBACK_HOSTS="true")
    paging = endpoint_factory(JOB_RESULT_PAGE_BYTES="64")
    boto3.client("s3").put_object(Bucket="local-datasets", Key="apikey:user-alice/not-text.csv", Body=b"\xff\xfe\x00")
    schemas = listed_output_schemas(endpoint, "2026-07-28")
    answers: list[tuple[str, Any]] = []

    # When every tool is called in each of its answer shapes
    call(endpoint, answers, "analyze_dataset", {"dataset_url": SALES, "options": {"output_format": "csv"}})
    done = call(endpoint, answers, "submit_analysis", {"dataset_url": SALES, "callId": "catalog-1"})["jobId"]
    call(endpoint, answers, "submit_analysis", {"dataset_url": SALES, "callId": "catalog-1"})  # repeated
    failed = call(endpoint, answers, "submit_analysis", {"dataset_url": NOT_TEXT})["jobId"]
    batch = call(endpoint, answers, "submit_analyses", {"items": [{"dataset_url": SALES}, {"dataset_url": "ftp://x"}]})
    cancelled = call(endpoint, answers, "submit_analysis", {"dataset_url": SALES})["jobId"]
    call(endpoint, answers, "cancel_job", {"job_id": cancelled})
    endpoint.local.sqs_source_for("ToolWorker").drain()
    for job_id in (done, failed, cancelled):
        call(endpoint, answers, "get_job", {"job_id": job_id})
    page = call(paging, answers, "get_job", {"job_id": done})
    call(paging, answers, "get_job", {"job_id": done, "cursor": page["nextCursor"]})
    call(endpoint, answers, "list_failed_jobs", {"limit": 1})
    server_id = call(endpoint, answers, "register_endpoint", {"url": "http://127.0.0.1:9/mcp", "name": "e"})["serverId"]
    call(endpoint, answers, "list_endpoints", {})
    call(endpoint, answers, "endpoint_status", {"server_id": server_id})  # never probed
    record_a_probe(endpoint, server_id)
    probed = call(endpoint, answers, "endpoint_status", {"server_id": server_id})
    call(endpoint, answers, "unregister_endpoint", {"server_id": server_id})

    # Then the shapes were the ones meant (a refused batch item, a paged result, a failure, a probe)
    assert [bool(item.get("error")) for item in batch["results"]] == [False, True]
    assert "resultChunk" in page and probed["latest"]["status"] == "healthy" and probed["lastSchemaChange"]
    assert {answer["status"] for name, answer in answers if name == "get_job"} >= {"SUCCEEDED", "FAILED", "CANCELLED"}
    # And every listed tool was called, and each answer validates against the tool's published outputSchema
    assert {name for name, _ in answers} == set(schemas)
    for name, answer in answers:
        Draft202012Validator.check_schema(schemas[name])
        errors = [error.message for error in Draft202012Validator(schemas[name]).iter_errors(answer)]
        assert errors == [], (name, errors)


def test_an_answer_that_breaks_its_schema_is_caught_by_the_same_check(endpoint):
    # Given the published schema of get_job
    schema = listed_output_schemas(endpoint, "2026-07-28")["get_job"]

    # When an answer lacks a required field or mistypes one, then the validator reports it (the check can fail)
    assert list(Draft202012Validator(schema).iter_errors({"status": "SUCCEEDED", "tool": None}))
    assert list(Draft202012Validator(schema).iter_errors({"jobId": "j", "status": "DONE", "tool": None}))


def test_both_protocol_eras_list_the_same_output_schemas(endpoint):
    # When a client of each era lists the tools
    # Then both see the same typed schemas (none is the bare {"type": "object"})
    legacy, modern = listed_output_schemas(endpoint, "legacy"), listed_output_schemas(endpoint, "2026-07-28")
    assert legacy == modern
    assert all(schema and schema.get("properties") for schema in modern.values())
