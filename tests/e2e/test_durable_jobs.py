"""A durable job end to end on the stack make dev starts, with the durable worker on: submitted through the MCP
endpoint, handed by ToolWorker to DurableToolWorker (the testing SDK's runner behind the loopback Lambda API), and
read back through get_job."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aws_durable_execution_sdk_python.execution import InvocationStatus

from devstack.__main__ import issue_dev_keys
from devstack.wired_stack import DATASET_BUCKET, dataset_prefix
from mcp_backend.jobs.store import JobStore
from mcp_backend.tools import dataset_chunks
from tests.e2e.conftest import Endpoint, mcp_client, wait_until

pytestmark = pytest.mark.e2e

OWNER = "apikey:dev-user"
ROWS = 120


def test_a_durable_job_submitted_through_the_mcp_endpoint_completes_end_to_end(start_stack, monkeypatch):
    # Given make dev's stack with the durable worker on for datasets of 1 KiB or more, read in 512-byte chunks,
    # and a dataset of about 2 KB
    monkeypatch.setattr(dataset_chunks, "DURABLE_CHUNK_BYTES", 512)
    stack = start_stack(parameters={"DurableWorker": "Enabled", "DurableJobMinBytes": 1024})
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    endpoint = Endpoint(url=f"{web.url}/mcp", alice_key=key, bob_key=key, local=stack.environment)
    rows = "".join(f"{n},{'north' if n % 2 else 'south'},{n * 2.5}\n" for n in range(ROWS))
    dataset_key = f"{dataset_prefix(OWNER)}durable.csv"
    stack.client("s3").put_object(Bucket=DATASET_BUCKET, Key=dataset_key, Body=f"id,region,amount\n{rows}".encode())

    # When an MCP client submits its analysis, the stack's event sources deliver it, and the client reads the job
    async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        async with mcp_client(endpoint, "legacy") as client:
            return (await client.call_tool(tool, arguments)).structured_content

    submitted = asyncio.run(call("submit_analysis", {"dataset_url": f"s3://{DATASET_BUCKET}/{dataset_key}"}))
    job_id = submitted["jobId"]
    stack.settle()
    store = JobStore(stack.environment.table_name("JobTable"), stack.client("dynamodb"))
    assert wait_until(lambda: (store.get(job_id) or {}).get("status") == "SUCCEEDED", seconds=120)
    job = asyncio.run(call("get_job", {"job_id": job_id}))

    # Then it ran as a durable execution of DurableToolWorker, in several chunks, and get_job reads its result
    item = store.get(job_id)
    assert item is not None
    execution = stack.durable.result(item["durableExecutionArn"])
    assert execution.status is InvocationStatus.SUCCEEDED
    assert len([step for step in execution.operations if (step.name or "").startswith("chunk-")]) >= 3
    assert (job["status"], job["result"]["rowCount"], job["progress"]) == ("SUCCEEDED", ROWS, 1.0)
    assert [column["name"] for column in job["result"]["columns"]] == ["id", "region", "amount"]
    assert item["runs"] == 1
