"""The product's build output as Lambda runs it: every function initializes from `.aws-sam/build`
in a Lambda-shaped sandbox through AWS's Runtime Interface Client, and McpServer starts from its own
start script behind the web adapter's wrapper, with only the variables Lambda sets."""

from __future__ import annotations

import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from devstack.__main__ import banner, issue_dev_keys
from devstack.runtime import execution_environment
from mcp_backend.jobs.store import JobStore
from tests.e2e.conftest import process_states, wait_until

pytestmark = pytest.mark.e2e

MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


@pytest.fixture
def lambda_stack(start_stack):
    return start_stack(runtime="lambda")


def test_mcp_server_starts_from_its_start_script_with_only_what_lambda_provides(lambda_stack):
    # Given the product stack in the Lambda runtime: McpServer's run.sh is run by the web adapter's
    # /opt/bootstrap wrapper in a sandbox whose environment is exactly Lambda's
    [key] = issue_dev_keys(lambda_stack).values()
    [web] = lambda_stack.web_functions.values()

    # When an MCP client lists the tools through the Function URL
    response = httpx.post(
        f"{web.url}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={**MCP_HEADERS, "authorization": f"Bearer {key}"},
        timeout=60,
    )

    # Then the app the start script launched answers, with the job tools
    assert response.status_code == 200, response.text
    assert "submit_analysis" in response.text


def test_mcp_server_answers_after_its_idle_environment_was_frozen(start_stack, monkeypatch):
    # Given the product stack in the Lambda runtime, environments frozen soon after they go idle
    monkeypatch.setattr(execution_environment, "FREEZE_AFTER_SECONDS", 0.1)
    stack = start_stack(runtime="lambda")
    [key] = issue_dev_keys(stack).values()
    [web] = stack.web_functions.values()
    [env] = stack.environment.lambda_runtime.pool(web.spec.logical_id).environments()

    # When McpServer's environment (the start script's uvicorn and the extension) has been frozen
    assert wait_until(lambda: set(process_states(env)) == {"T"}), process_states(env)

    # Then a request through the Function URL thaws it and the app answers, twice in a row
    for request_id in (1, 2):
        response = httpx.post(
            f"{web.url}/mcp",
            json={"jsonrpc": "2.0", "id": request_id, "method": "tools/list"},
            headers={**MCP_HEADERS, "authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert "submit_analysis" in response.text
        assert wait_until(lambda: set(process_states(env)) == {"T"}), process_states(env)


def test_every_function_of_the_template_initializes_from_its_build_output(lambda_stack):
    # Given the product stack in the Lambda runtime
    # When one environment of every function is started, as make dev does
    broken = lambda_stack.prewarm()

    # Then every handler path resolves and every import is satisfied by the layer and the runtime
    assert broken == {}
    assert "runtime:              lambda" in banner(lambda_stack, 1.0)


def test_a_function_that_fails_to_initialize_is_named_in_the_banner(lambda_stack):
    # Given a function whose handler path names nothing in its module
    runtime = lambda_stack.environment.lambda_runtime
    worker = runtime.functions["ToolWorker"]
    runtime.functions["ToolWorker"] = dataclasses.replace(
        worker, spec=dataclasses.replace(worker.spec, handler="app.no_such_handler")
    )

    # When the stack starts its environments
    broken = lambda_stack.prewarm()

    # Then the banner names the function and Lambda's error type
    assert list(broken) == ["ToolWorker"]
    assert "failed to start:      ToolWorker: Runtime.HandlerNotFound" in banner(lambda_stack, 1.0)


class SlowDataset:
    """A loopback dataset server that holds its first answer until released, counting requests."""

    def __init__(self) -> None:
        self.requests = 0
        self.first_request = threading.Event()
        self.release = threading.Event()
        dataset = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                dataset.requests += 1
                dataset.first_request.set()
                dataset.release.wait(60)
                body = b"region,amount\nnorth,1\nsouth,2\n"
                self.send_response(200)
                self.send_header("content-type", "text/csv")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/sales.csv"


def sqs_event(stack, job_id: str, message_id: str, dataset: str) -> dict:
    body = {"jobId": job_id, "userId": "user-e2e", "tool": "analyze_dataset", "input": {"dataset_url": dataset}}
    return {
        "Records": [
            {
                "messageId": message_id,
                "receiptHandle": f"handle-{message_id}",
                "body": json.dumps(body),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1700000000000"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": stack.environment.stack.ensure("JobQueue").attributes["Arn"],
                "awsRegion": "us-east-1",
            }
        ]
    }


def test_two_concurrent_deliveries_of_one_job_run_its_tool_once(lambda_stack):
    # Given a job whose dataset answers only when released, delivered to one ToolWorker environment
    dataset = SlowDataset()
    event = sqs_event(lambda_stack, "job-concurrent-01", "message-1", dataset.url)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(lambda_stack.environment.invoke, "ToolWorker", event)
        assert dataset.first_request.wait(120), "the first delivery never reached the tool"

        # When the same job is delivered again to a second environment while the first still runs
        second = lambda_stack.environment.invoke("ToolWorker", event)
        dataset.release.set()
        first_result = first.result(timeout=120)
    dataset.server.shutdown()

    # Then the second delivery found the job in progress and handed its record back for a retry,
    # the first completed it, and the tool fetched the dataset once
    assert second == {"batchItemFailures": [{"itemIdentifier": "message-1"}]}
    assert first_result == {"batchItemFailures": []}
    assert dataset.requests == 1
    item = JobStore(lambda_stack.environment.table_name("JobTable"), lambda_stack.client("dynamodb")).get(
        "job-concurrent-01"
    )
    assert (item["status"], item["runs"]) == ("SUCCEEDED", 1)
