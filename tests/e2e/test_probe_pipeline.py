"""The probe pipeline on the local stack, from the product template: schedule -> dispatcher -> async
ProbeWorker (a real MCP client against an MCP server on loopback) -> Destinations -> fan-out topic ->
recorder / filtered AlertHandler -> MonitorTable -> stream -> drift detector -> call log."""

from __future__ import annotations

import json
import socket

import anyio
import pytest

from mcp_backend.config import McpSettings
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes.registry import EndpointRegistry
from tests.e2e.conftest import Endpoint, mcp_client, mcp_environment, serve
from tests.kinesis import stream_json

pytestmark = pytest.mark.e2e

SCHEDULE = "ProbeSchedule"  # the EventBridge rule that triggers ProbeDispatcher


@pytest.fixture
def servers():
    running = []

    def start(app) -> int:
        server, thread, port = serve(app)
        running.append((server, thread))
        return port

    yield start
    for server, thread in running:
        server.should_exit = True
        thread.join(timeout=10)


def product_endpoint(stack, start) -> Endpoint:
    """The product's MCP app (McpServer's template environment) against the local stack."""
    from mcp_backend.api_keys import add_api_key
    from mcp_backend.mcp.server import create_app

    environment = mcp_environment(stack.environment, PROBE_ALLOW_LOOPBACK_HOSTS="true")
    secrets = stack.client("secretsmanager")
    alice = add_api_key(secrets, environment["API_KEYS_SECRET_ID"], "user-alice", "pro")
    bob = add_api_key(secrets, environment["API_KEYS_SECRET_ID"], "user-bob", "free")
    port = start(create_app(McpSettings.model_validate(environment)))
    return Endpoint(f"http://127.0.0.1:{port}/mcp", alice, bob, stack.environment)


def register_with_alices_key(endpoint: Endpoint) -> dict:
    """alice registers the app through its own register_endpoint tool, her API key as its bearer token."""

    async def register() -> dict:
        async with mcp_client(endpoint, "auto") as client:
            arguments = {"url": endpoint.url, "name": "local app", "auth": endpoint.alice_key}
            return (await client.call_tool("register_endpoint", arguments)).structured_content

    return anyio.run(register)


def registry(stack) -> EndpointRegistry:
    return EndpointRegistry(MonitorTable(stack.environment.table_name("MonitorTable"), stack.client("dynamodb")))


def probe_results(stack, server_id: str) -> list[dict]:
    return stack.client("dynamodb").query(
        TableName=stack.environment.table_name("MonitorTable"),
        KeyConditionExpression="serverId = :id AND begins_with(sortKey, :p)",
        ExpressionAttributeValues={":id": {"S": server_id}, ":p": {"S": "probe#"}},
    )["Items"]


def observe_alerts(stack) -> str:
    """An SQS queue subscribed to AlertTopic (raw delivery), as an email subscriber would see it."""
    sqs, sns = stack.client("sqs"), stack.client("sns")
    url = sqs.create_queue(QueueName="test-alert-observer")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    topic = stack.environment.stack.ensure("AlertTopic").ref
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn, Attributes={"RawMessageDelivery": "true"})
    return url


def drain(stack, url: str) -> list[dict]:
    found = []
    sqs = stack.client("sqs")
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            found.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return found


def worker_outcomes(stack) -> list:
    return [result for result in stack.async_invoker.results if result.function == "ProbeWorker"]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_probing_a_live_local_mcp_endpoint_stores_a_healthy_result(start_stack, servers):
    # Given the product stack and its MCP app on loopback, registered through its own tool with an API key
    stack = start_stack()
    endpoint = product_endpoint(stack, servers)

    registered = register_with_alices_key(endpoint)
    assert endpoint.alice_key not in json.dumps(registered)

    # When the probe schedule fires and everything settles
    assert stack.fire(SCHEDULE) == 1
    stack.settle()

    # Then the worker succeeded once and the recorder stored one healthy result with the tool count
    [outcome] = worker_outcomes(stack)
    assert outcome.condition == "Success"
    assert outcome.envelope["requestPayload"] == {"serverId": registered["serverId"], "endpoint": endpoint.url}
    [item] = probe_results(stack, registered["serverId"])
    assert item["status"]["S"] == "healthy"
    assert int(item["toolCount"]["N"]) == outcome.envelope["responsePayload"]["toolCount"] >= 8
    assert len(item["schemaHash"]["S"]) == 64 and int(item["expiresAt"]["N"]) > 0

    # And endpoint_status shows it to its owner, never the token, and nothing to another user
    async def statuses() -> tuple[dict, bool]:
        async with mcp_client(endpoint, "auto") as alice:
            own = (await alice.call_tool("endpoint_status", {"server_id": registered["serverId"]})).structured_content
        async with mcp_client(endpoint, "auto", key=endpoint.bob_key) as bob:
            other = await bob.call_tool("endpoint_status", {"server_id": registered["serverId"]})
            listed = (await bob.call_tool("list_endpoints", {})).structured_content
        return own, other.is_error and listed == {"endpoints": []}

    own, hidden = anyio.run(statuses)
    assert own["latest"]["status"] == "healthy" and own["uptime"]["ratio"] == 1.0 and own["hasAuth"] is True
    assert endpoint.alice_key not in json.dumps(own)
    assert hidden


def monitor_stream_images(stack) -> list[dict]:
    """Every image MonitorTable's stream (NEW_AND_OLD_IMAGES) holds, as a consumer would read it."""
    streams = stack.client("dynamodbstreams")
    arn = stack.environment.stack.ensure("MonitorTable").attributes["StreamArn"]
    images = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        for record in streams.get_records(ShardIterator=iterator)["Records"]:
            images += [record["dynamodb"].get(name, {}) for name in ("NewImage", "OldImage")]
    return images


def test_a_registered_token_is_only_ciphertext_in_the_table_and_its_stream_and_the_probe_still_uses_it(
    start_stack, servers
):
    # Given the product stack and its MCP app on loopback
    stack = start_stack()
    endpoint = product_endpoint(stack, servers)

    # When alice registers it through the tool with her API key as its bearer token
    registered = register_with_alices_key(endpoint)

    # Then no item of MonitorTable and no image of its stream holds the token (as text or as bytes)
    items = stack.client("dynamodb").scan(TableName=stack.environment.table_name("MonitorTable"))["Items"]
    images = monitor_stream_images(stack)
    assert items and images
    for stored in (items, images):
        assert endpoint.alice_key not in repr(stored)
        assert endpoint.alice_key.encode() not in repr(stored).encode()
    [item] = [i for i in items if i["serverId"]["S"] == registered["serverId"]]
    assert "authToken" not in item and item["authTokenCiphertext"]["B"]

    # And when the schedule fires, the probe authenticated with it: the endpoint answered healthy (401 otherwise)
    stack.fire(SCHEDULE)
    stack.settle()
    [outcome] = worker_outcomes(stack)
    assert outcome.condition == "Success" and outcome.envelope["responsePayload"]["status"] == "healthy"


def test_a_dead_endpoint_fails_once_per_probe_and_alerts_once_per_incident_window(start_stack):
    # Given an endpoint on a closed port and a subscriber on AlertTopic
    stack = start_stack()
    registered = registry(stack).register("user-alice", f"http://127.0.0.1:{closed_port()}/mcp", "dead", None)
    alerts = observe_alerts(stack)

    # When the schedule fires and everything settles
    stack.fire(SCHEDULE)
    stack.settle()

    # Then exactly one OnFailure envelope (no retries), typed, and exactly one alert carrying its details
    [failure] = worker_outcomes(stack)
    assert failure.condition == "RetriesExhausted"
    assert failure.envelope["requestContext"]["approximateInvokeCount"] == 1
    assert failure.envelope["responsePayload"]["errorType"] == "ProbeUnreachable"
    [alert] = drain(stack, alerts)
    assert alert["serverId"] == registered["serverId"]
    assert alert["condition"] == "RetriesExhausted" and alert["approximateInvokeCount"] == 1
    assert alert["error"]["errorType"] == "ProbeUnreachable"
    assert probe_results(stack, registered["serverId"]) == []  # failures are not probe results

    # When the schedule fires again inside the same incident window
    stack.fire(SCHEDULE)
    stack.settle()

    # Then the second probe failed the same way, and no second alert was published
    assert [o.envelope["requestContext"]["approximateInvokeCount"] for o in worker_outcomes(stack)] == [1, 1]
    assert drain(stack, alerts) == []


def test_changing_the_probed_servers_tools_logs_schema_drift_through_the_stream(start_stack, servers):
    # Given a plain SDK MCP server with one tool, registered, and probed once (the baseline hash)
    from mcp.server.mcpserver import MCPServer

    stack = start_stack()
    server = MCPServer("drifting")

    def echo(text: str) -> str:
        """Echo the text."""
        return text

    server.add_tool(echo)
    port = servers(server.streamable_http_app(stateless_http=True))
    registered = registry(stack).register("user-alice", f"http://127.0.0.1:{port}/mcp", "drifting", None)
    stack.fire(SCHEDULE)
    stack.settle()
    stream = stack.environment.stack.ensure("CallLogStream").ref
    assert not [r for r in stream_json(stream) if r["eventType"] == "schema_drift"]

    # When the server gains a tool and is probed again
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    server.add_tool(shout)
    stack.fire(SCHEDULE)
    stack.settle()

    # Then one schema_drift record for this endpoint is on the call log, linking the two hashes
    hashes = [item["schemaHash"]["S"] for item in sorted(probe_results(stack, registered["serverId"]), key=str)]
    drift = [r for r in stream_json(stream) if r["eventType"] == "schema_drift"]
    assert len(drift) == 1 and drift[0]["serverId"] == registered["serverId"]
    assert {drift[0]["previousSchemaHash"], drift[0]["schemaHash"]} == set(hashes) and len(set(hashes)) == 2
