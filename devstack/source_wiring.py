"""The template's stream event source mappings (Kinesis, DynamoDB Streams) wired to the stack's functions, and
a notice for every mapping property the local stack does not emulate. SQS mappings are wired by
devstack.wired_stack (tests and `make invoke` use them without a server)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from devstack.front_doors.destinations import Destinations
from devstack.sources.streams import DynamoDBStreamEventSource, KinesisEventSource, StreamEventSource
from devstack.wired_stack import LocalEnvironment

_COMMON_MAPPING_PROPERTIES = {
    "FunctionName", "EventSourceArn", "BatchSize", "MaximumBatchingWindowInSeconds", "FunctionResponseTypes",
    "FilterCriteria", "Enabled",
}  # fmt: skip
_STREAM_MAPPING_PROPERTIES = _COMMON_MAPPING_PROPERTIES | {
    "StartingPosition", "StartingPositionTimestamp", "BisectBatchOnFunctionError", "MaximumRetryAttempts",
    "MaximumRecordAgeInSeconds", "DestinationConfig", "ParallelizationFactor",
}  # fmt: skip
_EMULATED_MAPPING_PROPERTIES = {
    # ScalingConfig's MaximumConcurrency caps the function's environments (docs/local-stack.md, the concurrency row).
    "sqs": _COMMON_MAPPING_PROPERTIES | {"ScalingConfig"},
    "kinesis": _STREAM_MAPPING_PROPERTIES,
    "dynamodb": _STREAM_MAPPING_PROPERTIES,
}


def stream_sources(
    environment: LocalEnvironment,
    destinations: Destinations,
    client: Callable[[str], Any],
    clock: Callable[[], dt.datetime],
    ttl_deletes: Callable[[dict[str, Any]], bool],
    notice: Callable[[str, str], None],
) -> dict[str, StreamEventSource]:
    """Every stream mapping's event source by logical id, started at its shards' LATEST positions."""
    sources: dict[str, StreamEventSource] = {}
    for logical_id, mapping in environment.stack.event_source_mappings().items():
        arn = mapping["EventSourceArn"]
        service = arn.split(":")[2]
        for name in sorted(set(mapping) - _EMULATED_MAPPING_PROPERTIES.get(service, set())):
            notice(logical_id, f"property {name} is not emulated (ignored)")
        if int(mapping.get("ParallelizationFactor", 1)) > 1:
            notice(logical_id, "ParallelizationFactor > 1: shards are read one batch at a time")
        if service == "sqs":
            continue
        function = environment.function_logical_id(str(mapping["FunctionName"]))
        common = {
            "mapping": mapping,
            "function_arn": environment.stack.function(function).arn,
            "invoke": lambda event, fid=function: environment.invoke(fid, event),
            "destinations": destinations,
            "region": "us-east-1",
            "clock": clock,
        }
        if service == "kinesis":
            sources[logical_id] = KinesisEventSource(**common, kinesis_client=client("kinesis"))
        elif service == "dynamodb":
            sources[logical_id] = DynamoDBStreamEventSource(
                **common, streams_client=client("dynamodbstreams"), ttl_deletes=ttl_deletes
            )
        else:
            notice(logical_id, f"event source {service} is not emulated")
    for source in sources.values():
        source.start()  # take LATEST positions now, before anything is written
    return sources
