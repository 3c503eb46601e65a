"""DriftDetector and ExpiryRollup through their real handlers, on moto resources from template.yaml."""

from __future__ import annotations

import copy

import boto3
import pytest
from boto3.dynamodb.types import TypeDeserializer
from moto.kinesis.models import KinesisBackend

from mcp_backend.batch import UnexpectedEventSource
from tests.conftest import load_event
from tests.kinesis import delivered, stream_json

DRIFT = "DriftDetector"
ROLLUP = "ExpiryRollup"


def table(local) -> str:
    return local.table_name("MonitorTable")


def register_endpoint(
    local, server_id: str, schema_hash: str | None, since: str = "2026-11-28T08:00:00.000Z", owner: str = "user-a"
) -> None:
    # (the pinned stamps are safe: compared with each other, never with the clock; the items have no TTL)
    item = {
        "serverId": {"S": server_id},
        "sortKey": {"S": "endpoint"},
        "itemType": {"S": "endpoint"},
        "ownerId": {"S": owner},
    }
    if schema_hash:
        item |= {"lastSchemaHash": {"S": schema_hash}, "schemaHashSince": {"S": since}}
    boto3.client("dynamodb").put_item(TableName=table(local), Item=item)


def item(local, server_id: str, sort_key: str) -> dict | None:
    found = boto3.client("dynamodb").get_item(
        TableName=table(local), Key={"serverId": {"S": server_id}, "sortKey": {"S": sort_key}}
    )
    return {k: TypeDeserializer().deserialize(v) for k, v in found["Item"].items()} if "Item" in found else None


def drift_records(local) -> list[dict]:
    return [r for r in stream_json(local.stack.ensure("CallLogStream").ref) if r["eventType"] == "schema_drift"]


def probe_insert(schema_hash: str = "sha256:b2", probed_at: str = "2026-11-29T12:05:00.000Z", seq: int = 0) -> dict:
    event = load_event("monitor_table/probe-result-insert.json")
    record = event["Records"][0]
    image = record["dynamodb"]["NewImage"]
    image["schemaHash"]["S"] = schema_hash
    image["probedAt"]["S"] = probed_at
    image["sortKey"]["S"] = record["dynamodb"]["Keys"]["sortKey"]["S"] = f"probe#{probed_at}#p-{seq:04d}"
    record["dynamodb"]["SequenceNumber"] = str(int(record["dynamodb"]["SequenceNumber"]) + seq)
    return delivered(event, DRIFT)


# ---------------------------------------------------------------- drift detector
def test_a_changed_schema_hash_updates_the_endpoint_and_logs_exactly_one_schema_drift(local):
    # Given srv-weather registered with schema sha256:a1
    register_endpoint(local, "srv-weather", "sha256:a1")
    event = probe_insert("sha256:b2")

    # When the INSERT of a probe result with sha256:b2 is delivered, twice (at-least-once)
    first = local.invoke(DRIFT, event)
    second = local.invoke(DRIFT, event)

    # Then the endpoint holds the new hash and the call log exactly one schema_drift record
    assert first == second == {"batchItemFailures": []}
    endpoint = item(local, "srv-weather", "endpoint")
    assert (endpoint["lastSchemaHash"], endpoint["previousSchemaHash"]) == ("sha256:b2", "sha256:a1")
    (drift,) = drift_records(local)
    assert (drift["serverId"], drift["userId"]) == ("srv-weather", "user-a")  # the owner, whose alerts it counts in
    assert (drift["schemaHash"], drift["previousSchemaHash"]) == ("sha256:b2", "sha256:a1")


def test_an_unchanged_hash_a_first_hash_and_an_unregistered_endpoint_log_no_drift(local):
    # Given one endpoint on the same hash, one without a hash yet, and none for srv-ghost
    register_endpoint(local, "srv-weather", "sha256:b2")
    register_endpoint(local, "srv-new", None)
    events = [probe_insert("sha256:b2", seq=1)]
    baseline = probe_insert("sha256:n1", seq=2)
    baseline["Records"][0]["dynamodb"]["NewImage"]["serverId"]["S"] = "srv-new"
    ghost = probe_insert("sha256:g1", seq=3)
    ghost["Records"][0]["dynamodb"]["NewImage"]["serverId"]["S"] = "srv-ghost"

    # When their probe results arrive
    responses = [local.invoke(DRIFT, e) for e in [*events, baseline, ghost]]

    # Then nothing fails, nothing drifts, the new endpoint has its first hash, and no ghost is created
    assert all(r == {"batchItemFailures": []} for r in responses)
    assert drift_records(local) == []
    assert item(local, "srv-new", "endpoint")["lastSchemaHash"] == "sha256:n1"
    assert item(local, "srv-ghost", "endpoint") is None


def test_an_older_result_arriving_late_does_not_flip_the_hash_back(local):
    # Given the endpoint moved to sha256:b2 at 12:05
    register_endpoint(local, "srv-weather", "sha256:a1")
    local.invoke(DRIFT, probe_insert("sha256:b2", "2026-11-29T12:05:00.000Z", seq=1))

    # When a 12:04 result still carrying sha256:a1 is delivered afterwards
    local.invoke(DRIFT, probe_insert("sha256:a1", "2026-11-29T12:04:00.000Z", seq=2))

    # Then the endpoint keeps sha256:b2 and only the real change was logged
    assert item(local, "srv-weather", "endpoint")["lastSchemaHash"] == "sha256:b2"
    assert len(drift_records(local)) == 1


def test_a_failed_drift_record_fails_the_stream_record_and_its_retry_logs_it_once(local, monkeypatch):
    # Given a changed hash, and a call-log stream that refuses the write
    register_endpoint(local, "srv-weather", "sha256:a1")
    event = probe_insert("sha256:b2")
    real_put_records = KinesisBackend.put_records

    def refused(self, stream_arn, stream_name, records):
        return {"FailedRecordCount": len(records), "Records": [{"ErrorCode": "InternalFailure"} for _ in records]}

    monkeypatch.setattr(KinesisBackend, "put_records", refused)

    # When the record is delivered
    failed = local.invoke(DRIFT, event)

    # Then it is reported failed (the endpoint already moved on, yet the change is not lost)
    assert failed == {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["dynamodb"]["SequenceNumber"]}]}
    assert drift_records(local) == []

    # When the stream retries it after the call log recovered
    monkeypatch.setattr(KinesisBackend, "put_records", real_put_records)
    retried = local.invoke(DRIFT, event)

    # Then the change is logged exactly once, naming the endpoint's owner
    assert retried == {"batchItemFailures": []}
    assert [record["userId"] for record in drift_records(local)] == ["user-a"]


def test_a_malformed_probe_result_fails_alone(local):
    # Given a batch with a good probe result and one without a status
    register_endpoint(local, "srv-weather", "sha256:a1")
    good = probe_insert("sha256:b2", seq=1)["Records"][0]
    bad = copy.deepcopy(probe_insert("sha256:c3", seq=2)["Records"][0])
    del bad["dynamodb"]["NewImage"]["status"]

    # When both are delivered
    response = local.invoke(DRIFT, {"Records": [good, bad]})

    # Then only the malformed one is reported
    assert response == {"batchItemFailures": [{"itemIdentifier": bad["dynamodb"]["SequenceNumber"]}]}


# ---------------------------------------------------------------- expiry rollup
def test_ttl_expiries_fold_into_the_daily_rollup_once_even_when_redelivered(local):
    # Given three TTL-expired probe results of srv-weather on 2026-11-28 (healthy 180 ms, error, degraded 6200 ms)
    event = delivered(load_event("monitor_table/probe-result-ttl-remove.json"), ROLLUP)
    assert len(event["Records"]) == 3

    # When the batch is delivered, then delivered again
    assert local.invoke(ROLLUP, event) == {"batchItemFailures": []}
    assert local.invoke(ROLLUP, event) == {"batchItemFailures": []}

    # Then the day's rollup counts each result once
    rollup = item(local, "srv-weather", "rollup#2026-11-28")
    assert rollup["itemType"] == "probe_rollup" and rollup["day"] == "2026-11-28"
    assert (rollup["probeCount"], rollup["healthyCount"], rollup["errorCount"], rollup["degradedCount"]) == (3, 1, 1, 1)
    assert (rollup["latencySumMs"], rollup["latencySampleCount"], rollup["latencyMaxMs"]) == (6380, 2, 6200)


def test_a_manual_delete_never_reaches_the_rollup(local):
    # Given a probe result deleted by a person (no TTL userIdentity)
    event = delivered(load_event("monitor_table/probe-result-manual-remove.json"), ROLLUP)

    # Then the mapping's filter does not deliver it, and no rollup exists
    assert event["Records"] == []
    assert item(local, "srv-weather", "rollup#2026-11-28") is None


@pytest.mark.parametrize("function", [DRIFT, ROLLUP])
def test_non_dynamodb_event_fails_fast(local, function):
    with pytest.raises(UnexpectedEventSource, match="aws:dynamodb"):
        local.invoke(function, load_event("call_log_analyzer/error-burst.json"))
