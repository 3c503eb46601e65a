"""Configuration, parsed in one place: each function declares a settings model, the template sets the env."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

SettingsT = TypeVar("SettingsT", bound=BaseModel)


class Settings(BaseModel):
    """Field `job_table_name` is read from the variable JOB_TABLE_NAME, and so on."""

    model_config = ConfigDict(alias_generator=str.upper, populate_by_name=True, frozen=True, extra="ignore")

    environment: str = "dev"


class WorkerSettings(Settings):
    job_table_name: str
    idempotency_table_name: str
    # The same template parameter sets the function's Timeout and this value.
    function_timeout_seconds: int = Field(gt=0)
    # The same template parameter sets the queue's RedrivePolicy.maxReceiveCount and this value.
    job_max_receive_count: int = Field(gt=0)
    idempotency_ttl_seconds: int = Field(default=86400, gt=0)
    dataset_max_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    # Only the local stack sets this: lets the fetcher reach loopback/private hosts and plain http.
    dataset_allow_private_hosts: bool = False
    call_log_stream_name: str


class StreamConsumerSettings(Settings):
    """Every stream consumer: idempotent on the record's position, INPROGRESS expiry from its Timeout."""

    idempotency_table_name: str
    # The same template parameter sets the function's Timeout and this value.
    function_timeout_seconds: int = Field(gt=0)
    idempotency_ttl_seconds: int = Field(default=86400, gt=0)


class CallLogAnalyzerSettings(StreamConsumerSettings):
    alert_topic_arn: str
    # Errors of one tool (or failures of one endpoint) within one batch that raise an alert.
    error_alert_threshold: int = Field(gt=0)


class MonitorStreamSettings(StreamConsumerSettings):
    monitor_table_name: str


class DriftDetectorSettings(MonitorStreamSettings):
    call_log_stream_name: str


def load_settings(model: type[SettingsT], environ: Mapping[str, str] | None = None) -> SettingsT:
    return model.model_validate(dict(os.environ if environ is None else environ))
