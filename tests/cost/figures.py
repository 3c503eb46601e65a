"""What the cost model measures: per unit of work, and for the stack as a whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class UnitFigures:
    """What one unit of work costs in requests, averaged over its measured repetitions."""

    name: str
    description: str
    requests: dict[str, float]
    kinesis_records: float
    kinesis_bytes: float
    invocations: dict[str, float]
    median_ms: dict[str, float]  # per function: median wall time of one invocation, in-process on moto
    log_bytes: float
    dynamodb_batch_items: float = 0.0
    dynamodb_transaction_items: float = 0.0
    dynamodb_items_written: float = 0.0
    dynamodb_write_units: float = 0.0
    kinesis_bytes_read: float = 0.0
    per_hour: float = 0.0  # idle units: how many happen in an hour with the default parameters


@dataclass
class Measurement:
    units: dict[str, UnitFigures]
    memory_mb: dict[str, int]  # per function, from the template
    resources: dict[str, int]  # MONTHLY_RESOURCES as created
    parameters: dict[str, Any]  # the template's parameter values the stack ran with
    idle_long_polls_per_hour: float
    log_retention_days: list[int]  # of every log group the template declares
    repetitions: int
