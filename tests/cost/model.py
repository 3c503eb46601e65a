"""The price of each unit of work: the counted requests and invocations times the cited price table
(prices.toml), and the idle cost per month; and the counts a change must not move unnoticed (expected.json)."""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.cost.counting import DAILY_JOB_LEASE, RATE_LIMIT_LEASE
from tests.cost.figures import Measurement, UnitFigures

HERE = Path(__file__).parent
PRICES_FILE = HERE / "prices.toml"
EXPECTED_FILE = HERE / "expected.json"
HOURS_PER_MONTH = 730  # 365 days x 24 h / 12: the month the idle figures are given for
GB = 1024**3

# The price each counted request is billed at (a DynamoDB request: one request unit, the items being under 1 KB
# written and 4 KB read). None: no charge of its own (a Lambda Invoke is billed as the invoked function's request,
# which is counted as an invocation). A request missing here stops `make cost` until it is priced.
REQUEST_PRICES: dict[str, str | None] = {
    "dynamodb:GetItem": "dynamodb_read_request_unit",
    "dynamodb:Query": "dynamodb_read_request_unit",
    "dynamodb:Scan": "dynamodb_read_request_unit",
    "dynamodb:BatchGetItem": "dynamodb_read_request_unit",
    "dynamodb:PutItem": "dynamodb_write_request_unit",
    "dynamodb:UpdateItem": "dynamodb_write_request_unit",
    RATE_LIMIT_LEASE: "dynamodb_write_request_unit",
    DAILY_JOB_LEASE: "dynamodb_write_request_unit",
    "dynamodb:DeleteItem": "dynamodb_write_request_unit",
    "dynamodb:BatchWriteItem": None,  # priced per item written (dynamodb_batch_items)
    # Priced per item (dynamodb_transaction_items): DynamoDB prepares and commits each item, two write request
    # units for an item up to 1 KB
    # (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html).
    "dynamodb:TransactWriteItems": None,
    "sqs:SendMessage": "sqs_request",
    "sqs:SendMessageBatch": "sqs_request",
    "sqs:ReceiveMessage": "sqs_request",
    "sqs:DeleteMessage": "sqs_request",
    "sqs:DeleteMessageBatch": "sqs_request",
    "sqs:ChangeMessageVisibilityBatch": "sqs_request",
    "kinesis:PutRecords": None,  # priced per record (data in), see kinesis_records
    "kinesis:PutRecord": None,
    "secretsmanager:GetSecretValue": "secrets_manager_api_call",
    "secretsmanager:PutSecretValue": "secrets_manager_api_call",
    "kms:Decrypt": "kms_request",
    "kms:GenerateDataKey": "kms_request",
    "sns:Publish": "sns_publish",
    "s3:GetObject": "s3_get",
    "s3:PutObject": None,  # large job results only; not priced here
    "lambda:Invoke": None,
}

# Requests whose charge is not per request but per what they carry (a line of their own).
SEPARATELY_PRICED = {
    "dynamodb:BatchWriteItem": "item written",
    "dynamodb:TransactWriteItems": "item written, two write units",
    "kinesis:PutRecords": "record put",
    "kinesis:PutRecord": "record put",
}


@dataclass(frozen=True)
class Price:
    key: str
    service: str
    item: str
    per: int
    usd: float | None
    source: str
    read: str
    verified: bool
    note: str

    def of(self, quantity: float) -> float | None:
        return None if self.usd is None else self.usd * quantity / self.per


def load_prices(path: Path = PRICES_FILE) -> dict[str, Price]:
    rows = tomllib.loads(path.read_text())
    return {
        key: Price(
            key=key,
            service=row["service"],
            item=row["item"],
            per=int(row["per"]),
            usd=row.get("usd"),
            source=row["source"],
            read=row["read"],
            verified=bool(row["verified"]),
            note=row.get("note", ""),
        )
        for key, row in rows.items()
    }


@dataclass(frozen=True)
class LineItem:
    what: str
    quantity: float
    price: Price | None  # None: no charge of its own

    @property
    def usd(self) -> float | None:
        return 0.0 if self.price is None else self.price.of(self.quantity)


def unpriced_request(key: str) -> str:
    return f"{key} has no entry in REQUEST_PRICES (tests/cost/model.py): price it before it ships"


def unit_line_items(unit: UnitFigures, measurement: Measurement, prices: dict[str, Price]) -> list[LineItem]:
    items: list[LineItem] = []
    for function, invocations in unit.invocations.items():
        items.append(LineItem(f"Lambda requests, {function}", invocations, prices["lambda_request"]))
        # Billed per 1 ms, rounded up; the duration is the median measured in-process on moto.
        seconds = math.ceil(unit.median_ms[function]) / 1000
        gb_seconds = invocations * measurement.memory_mb[function] / 1024 * seconds
        items.append(LineItem(f"Lambda GB-s, {function}", gb_seconds, prices["lambda_arm_gb_second"]))
    for key, count in unit.requests.items():
        if key not in REQUEST_PRICES:
            raise KeyError(unpriced_request(key))
        price_key = REQUEST_PRICES[key]
        what = f"{key} (priced below, per {SEPARATELY_PRICED[key]})" if key in SEPARATELY_PRICED else key
        items.append(LineItem(what, count, prices[price_key] if price_key else None))
    if unit.dynamodb_batch_items:
        items.append(
            LineItem("dynamodb:BatchWriteItem items", unit.dynamodb_batch_items, prices["dynamodb_write_request_unit"])
        )
    if unit.dynamodb_transaction_items:
        items.append(
            LineItem(
                "dynamodb:TransactWriteItems write units (2 per item)",
                2 * unit.dynamodb_transaction_items,
                prices["dynamodb_write_request_unit"],
            )
        )
    if unit.kinesis_records:
        # Each record is rounded up to 1 KB of data in (on-demand).
        kilobytes = unit.kinesis_records * max(1, math.ceil(unit.kinesis_bytes / unit.kinesis_records / 1024))
        items.append(
            LineItem(
                "Kinesis data in (GB, records rounded up to 1 KB)",
                kilobytes / 1024**2,
                prices["kinesis_on_demand_data_in_gb"],
            )
        )
    if unit.kinesis_bytes_read:
        items.append(
            LineItem("Kinesis data out (GB)", unit.kinesis_bytes_read / GB, prices["kinesis_on_demand_data_out_gb"])
        )
    if unit.log_bytes:
        items.append(
            LineItem("CloudWatch Logs ingestion (GB)", unit.log_bytes / GB, prices["cloudwatch_logs_ingestion_gb"])
        )
    return items


def total(items: list[LineItem]) -> tuple[float, list[LineItem]]:
    """The sum of what is priced, and the items with no price found."""
    priced = sum(item.usd or 0.0 for item in items)
    return priced, [item for item in items if item.usd is None]


@dataclass(frozen=True)
class IdleShape:
    """What a stack with no traffic is billed for in a month, for one set of parameters."""

    resources: dict[str, int]  # resources with a monthly charge of their own, by type, as created
    parameters: dict[str, Any]
    schedule_firings_per_hour: float
    long_polls_per_hour: float


def measured_shape(measurement: Measurement) -> IdleShape:
    """The idle shape of the stack `make cost` ran (its parameters, the resources and pollers it created)."""
    return IdleShape(
        resources=measurement.resources,
        parameters=measurement.parameters,
        schedule_firings_per_hour=measurement.units["idle schedule"].per_hour,
        long_polls_per_hour=measurement.idle_long_polls_per_hour,
    )


def idle_line_items(
    measurement: Measurement, prices: dict[str, Price], shape: IdleShape | None = None
) -> list[LineItem]:
    """What the stack costs in a month with no traffic: at the parameters it ran with, or those of `shape` (a
    profile); a firing of the schedule is priced as measured."""
    shape = shape or measured_shape(measurement)
    resources = shape.resources
    streams = resources.get("AWS::Kinesis::Stream", 0)
    items: list[LineItem] = []
    if streams and shape.parameters.get("CallLogStreamMode", "ON_DEMAND") == "PROVISIONED":
        shards = int(shape.parameters.get("CallLogShardCount", 1))
        items.append(
            LineItem(
                f"Kinesis shard-hours (provisioned, {shards} shard{'s' if shards > 1 else ''})",
                shards * streams * HOURS_PER_MONTH,
                prices["kinesis_shard_hour"],
            )
        )
    elif streams:
        items.append(
            LineItem(
                "Kinesis stream-hours (on-demand)", streams * HOURS_PER_MONTH, prices["kinesis_on_demand_stream_hour"]
            )
        )
    items.append(
        LineItem(
            "Secrets Manager secrets",
            resources.get("AWS::SecretsManager::Secret", 0),
            prices["secrets_manager_secret_month"],
        )
    )
    items.append(LineItem("KMS keys", resources.get("AWS::KMS::Key", 0), prices["kms_key_month"]))
    items.append(
        LineItem("CloudWatch alarms", resources.get("AWS::CloudWatch::Alarm", 0), prices["cloudwatch_alarm_month"])
    )
    items.append(
        LineItem(
            "CloudWatch dashboards",
            resources.get("AWS::CloudWatch::Dashboard", 0),
            prices["cloudwatch_dashboard_month"],
        )
    )
    if resources.get("AWS::WAFv2::WebACL", 0):
        items.append(LineItem("WAF web ACLs", resources["AWS::WAFv2::WebACL"], prices["waf_web_acl_month"]))
        items.append(
            LineItem("WAF rules (each rule or rule group)", resources.get("WAF rules", 0), prices["waf_rule_month"])
        )
    if resources.get("interface VPC endpoint AZs", 0):
        items.append(
            LineItem(
                "VPC interface endpoint-hours (per AZ)",
                resources["interface VPC endpoint AZs"] * HOURS_PER_MONTH,
                prices["vpc_interface_endpoint_hour"],
            )
        )
    firings = shape.schedule_firings_per_hour * HOURS_PER_MONTH
    if firings:
        schedule = measurement.units["idle schedule"]
        items.append(
            LineItem("schedule firings (EventBridge)", firings, prices["eventbridge_scheduled_rule_invocation"])
        )
        for item in unit_line_items(schedule, measurement, prices):
            items.append(LineItem(f"{item.what}, per firing x {firings:,.0f}", item.quantity * firings, item.price))
    polls = shape.long_polls_per_hour * HOURS_PER_MONTH
    items.append(LineItem("SQS empty long polls of the event source mappings", polls, prices["sqs_request"]))
    return items


def counts(measurement: Measurement) -> dict[str, dict[str, Any]]:
    """Per unit: the AWS requests and the invocations it makes, the figures a change must not move unnoticed."""
    return {
        name: {"requests": dict(unit.requests), "invocations": dict(unit.invocations)}
        for name, unit in measurement.units.items()
    }


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, dict[str, Any]]:
    return json.loads(path.read_text())


def write_expected(measurement: Measurement, path: Path = EXPECTED_FILE) -> None:
    path.write_text(json.dumps(counts(measurement), indent=2, sort_keys=True) + "\n")


# Requests a shipper batches by time (the call-log RecordShipper: once a second or every 200 records): how many
# calls a unit makes depends on the traffic around it, not on the unit, and they are priced per record carried.
TIME_BATCHED = frozenset({"kinesis:PutRecords"})
# Requests made once per block (the rate-limit and daily-job leases): likewise set by the traffic around a unit.
AMORTIZED = frozenset({RATE_LIMIT_LEASE, DAILY_JOB_LEASE})


def count_changes(expected: dict[str, dict[str, Any]], counted: dict[str, dict[str, Any]]) -> list[str]:
    """Every unit / request (or invocation) whose count moved, one line each; time-batched requests aside."""
    changes = []
    for unit in sorted(set(expected) | set(counted)):
        for kind in ("requests", "invocations"):
            before = expected.get(unit, {}).get(kind, {})
            after = counted.get(unit, {}).get(kind, {})
            for key in sorted(set(before) | set(after)):
                if key in TIME_BATCHED or key in AMORTIZED:
                    continue
                if before.get(key, 0) != after.get(key, 0):
                    changes.append(f"{unit}: {key} {before.get(key, 0):g} -> {after.get(key, 0):g} per unit")
    return changes
