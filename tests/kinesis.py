"""Reading the local call-log stream back, and delivering its records the way Lambda does."""

from __future__ import annotations

import base64
import json
from typing import Any

import boto3


def stream_records(stream_name: str) -> list[dict[str, Any]]:
    """Every record on the stream, shard by shard (moto gives an ON_DEMAND stream 4 shards)."""
    kinesis = boto3.client("kinesis")
    found = []
    shards = kinesis.list_shards(StreamName=stream_name)["Shards"]
    for shard in shards:
        iterator = kinesis.get_shard_iterator(
            StreamName=stream_name, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        while iterator:
            response = kinesis.get_records(ShardIterator=iterator, Limit=1000)
            for record in response["Records"]:
                found.append({"ShardId": shard["ShardId"], **record})
            if not response["Records"]:
                break
            iterator = response.get("NextShardIterator")
    return found


def stream_json(stream_name: str) -> list[dict[str, Any]]:
    return [json.loads(record["Data"]) for record in stream_records(stream_name)]


def lambda_event(records: list[dict[str, Any]], stream_arn: str, region: str = "us-east-1") -> dict[str, Any]:
    """A Kinesis event in the exact shape Lambda delivers, for records as GetRecords returned them."""
    return {
        "Records": [
            {
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": record["PartitionKey"],
                    "sequenceNumber": record["SequenceNumber"],
                    "data": base64.b64encode(record["Data"]).decode(),
                    "approximateArrivalTimestamp": record["ApproximateArrivalTimestamp"].timestamp(),
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                # Lambda's eventID is "<shardId>:<sequenceNumber>".
                "eventID": f"{record['ShardId']}:{record['SequenceNumber']}",
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/local-stream-consumer",
                "awsRegion": region,
                "eventSourceARN": stream_arn,
            }
            for record in records
        ]
    }


def mapping_of(function_logical_id: str) -> dict[str, Any]:
    """The (single) event source mapping of a function, as template.yaml declares it."""
    from devstack.stack.template import load_template

    found = [
        resource["Properties"]
        for resource in load_template().resources("AWS::Lambda::EventSourceMapping").values()
        if resource["Properties"]["FunctionName"] == {"Ref": function_logical_id}
    ]
    if len(found) != 1:
        raise LookupError(f"{function_logical_id} has {len(found)} event source mappings")
    return found[0]


def delivered(event: dict[str, Any], function_logical_id: str) -> dict[str, Any]:
    """What Lambda would invoke the function with: the records its mapping's FilterCriteria let through."""
    from devstack.sources.filters import RecordFilter

    record_filter = RecordFilter(mapping_of(function_logical_id).get("FilterCriteria"))
    return {"Records": [record for record in event["Records"] if record_filter.matches(record)]}
