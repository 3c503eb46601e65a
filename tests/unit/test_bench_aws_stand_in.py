"""The endpoint bench's AWS stand-in (tests/bench/aws_stand_in.py) in front of a loopback moto server: botocore
accepts what it answers; a static table's GetItem is moto's answer, kept; a call log's PutRecords is accepted
without reaching moto; every other call reaches moto; and it reports how it answered each."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import httpx
import pytest
from moto.server import ThreadedMotoServer

from tests.bench.aws_stand_in import ANSWERED, StandIn

JOBS, COUNTERS = "jobs", "counters"


def _client(service: str, url: str) -> Any:
    return boto3.client(
        service, endpoint_url=url, region_name="us-east-1", aws_access_key_id="bench", aws_secret_access_key="bench"
    )


@pytest.fixture
def moto_url() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    dynamodb = _client("dynamodb", url)
    for table in (JOBS, COUNTERS):
        dynamodb.create_table(
            TableName=table,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
    dynamodb.put_item(TableName=JOBS, Item={"id": {"S": "job-1"}, "status": {"S": "SUCCEEDED"}})
    _client("kinesis", url).create_stream(StreamName="calls", ShardCount=1)
    yield url
    httpx.post(f"{url}/moto-api/reset")  # the server's backends are this process's: the next test starts empty
    server.stop()


@pytest.fixture
def stand_in(moto_url: str) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    started = threading.Event()
    address: dict[str, Any] = {}

    async def serve() -> None:
        server = await asyncio.start_server(StandIn(moto_url, {JOBS}).serve, "127.0.0.1", 0)
        address["port"] = server.sockets[0].getsockname()[1]
        address["server"] = server
        started.set()
        await server.serve_forever()

    thread = threading.Thread(target=lambda: loop.run_until_complete(_quietly(serve())), daemon=True)
    thread.start()
    assert started.wait(10), "the stand-in did not start"
    yield f"http://127.0.0.1:{address['port']}"
    loop.call_soon_threadsafe(address["server"].close)
    thread.join(10)


async def _quietly(serving: Any) -> None:
    try:
        await serving
    except asyncio.CancelledError:
        pass


def test_a_static_tables_item_is_read_through_the_stand_in_as_moto_has_it(stand_in, moto_url):
    # Given the stand-in in front of moto, the jobs table static
    dynamodb = _client("dynamodb", stand_in)

    # When a job and an unknown job are each read twice through the stand-in
    reads = [dynamodb.get_item(TableName=JOBS, Key={"id": {"S": job}}) for job in ("job-1", "job-1", "nope", "nope")]

    # Then botocore accepted every answer (its CRC32 included), and they are moto's
    expected = _client("dynamodb", moto_url).get_item(TableName=JOBS, Key={"id": {"S": "job-1"}})["Item"]
    assert [read.get("Item") for read in reads] == [expected, expected, None, None]
    assert httpx.get(stand_in + ANSWERED).json()["kept"] == 4


def test_a_call_logs_records_are_accepted_without_reaching_moto(stand_in, moto_url):
    # Given the stand-in in front of moto, with a stream in moto
    kinesis = _client("kinesis", stand_in)

    # When three records are put through the stand-in
    answer = kinesis.put_records(StreamName="calls", Records=[{"Data": b"x", "PartitionKey": "p"}] * 3)

    # Then each is accepted, with its own sequence number, and moto's stream holds none of them
    assert answer["FailedRecordCount"] == 0
    assert len({record["SequenceNumber"] for record in answer["Records"]}) == 3
    moto_kinesis = _client("kinesis", moto_url)
    shard = moto_kinesis.get_shard_iterator(
        StreamName="calls", ShardId="shardId-000000000000", ShardIteratorType="TRIM_HORIZON"
    )
    assert moto_kinesis.get_records(ShardIterator=shard["ShardIterator"])["Records"] == []
    assert httpx.get(stand_in + ANSWERED).json()["put_records"] == 1


def test_every_other_call_reaches_moto(stand_in, moto_url):
    # Given the stand-in in front of moto, the counters table not static
    dynamodb = _client("dynamodb", stand_in)

    # When a counter is added to twice and read, through the stand-in
    for _ in range(2):
        dynamodb.update_item(
            TableName=COUNTERS,
            Key={"id": {"S": "c"}},
            UpdateExpression="ADD n :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )
    read = dynamodb.get_item(TableName=COUNTERS, Key={"id": {"S": "c"}})

    # Then moto holds the count and the read saw it: none of it was answered from memory
    stored = _client("dynamodb", moto_url).get_item(TableName=COUNTERS, Key={"id": {"S": "c"}})["Item"]
    assert stored["n"] == {"N": "2"} and read["Item"] == stored
    assert httpx.get(stand_in + ANSWERED).json() == {"kept": 0, "put_records": 0, "forwarded": 3}
