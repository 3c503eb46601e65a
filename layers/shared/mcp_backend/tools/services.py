"""The services a tool may declare, built by one factory for both places tools run: the MCP endpoint
(synchronous tools, and the submit tools of job tools) and ToolWorker (job tools).

A tool gets exactly the services it declares: an undeclared one is a permanent `ServiceNotDeclared`
when the tool reaches for it. A declared service that a function cannot build (its environment lacks
the table or queue) stops that function at start, naming the tool, the service and the variable, so a
wiring mistake is a failed cold start and a failed contract test, never a job retried into the DLQ.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property, partial
from typing import TYPE_CHECKING, Protocol, cast

from mcp_backend.aws import AwsClients, LazyClient
from mcp_backend.config import TierLimits, TierLimitSettings, ToolSettings
from mcp_backend.jobs.service import JobQueues, JobsService
from mcp_backend.quotas import JobQuota
from mcp_backend.tiers import LOWEST_TIER
from mcp_backend.tools.context import CancellationCheck, ProgressCallback, ToolContext
from mcp_backend.tools.dataset_stream import FetchPolicy

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from mcp_backend.probes.registry import EndpointRegistry


class Service(StrEnum):
    """What a tool can be given besides its input and the caller."""

    JOBS = "jobs"  # the caller's jobs: JobTable and the job queues
    ENDPOINTS = "endpoints"  # the caller's registered probe endpoints: MonitorTable


# Every https dataset fetch ends within this share of the function's timeout, all hops and the body included.
FETCH_SHARE_OF_TIMEOUT = 0.8

# The environment variable each service is built from, for the error that names what is missing.
SERVICE_VARIABLES = {
    Service.JOBS: "JOB_TABLE_NAME, JOB_QUEUE_URL and JOB_DEAD_LETTER_QUEUE_URL",
    Service.ENDPOINTS: "MONITOR_TABLE_NAME",
}


class DeclaredTool(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def services(self) -> frozenset[Service]: ...


class MissingToolService(RuntimeError):
    """A tool declares a service this function's environment cannot build."""


@dataclass(frozen=True)
class ToolServices:
    """The services of one function, built once; AWS clients are created on first use."""

    fetch_policy: FetchPolicy
    jobs: JobsService | None = None
    # Builds the endpoints service when a tool first asks for it (None: this function has no MonitorTable).
    endpoint_registry: Callable[[], EndpointRegistry] | None = None
    allow_loopback_endpoints: bool = False
    uptime_window_seconds: int = 86400
    # The limits table per tier (configuration); every caller is held to its tier's row.
    limits: TierLimitSettings = field(default_factory=TierLimitSettings)
    job_slot_max_seconds: int = 6 * 3600

    @classmethod
    def from_settings(cls, settings: ToolSettings, clients: AwsClients) -> ToolServices:
        jobs = None
        if settings.job_table_name and settings.job_queue_url and settings.job_dead_letter_queue_url:
            queues = JobQueues(
                job_table_name=settings.job_table_name,
                job_queue_url=settings.job_queue_url,
                job_dead_letter_queue_url=settings.job_dead_letter_queue_url,
                result_page_bytes=settings.job_result_page_bytes,
                result_bucket_name=settings.job_result_bucket_name,
                durable_worker_arn=settings.durable_worker_arn,
            )
            jobs = JobsService(queues, clients)
        # MonitorTable.is_configured, without loading the monitor package.
        endpoints = partial(_endpoint_registry, settings, clients) if settings.monitor_table_name else None
        return cls(
            fetch_policy=FetchPolicy(
                max_bytes=settings.dataset_max_bytes,
                allow_loopback_hosts=settings.dataset_allow_loopback_hosts,
                dataset_bucket=settings.dataset_bucket_name,
                shared_prefixes=settings.dataset_shared_prefix_list(),
                memory_budget_bytes=settings.analysis_memory_budget_bytes(),
                # A job's fetch ends with time left to record its failure (a synchronous call's deadline is
                # shorter still: McpSettings.sync_call_deadline).
                fetch_deadline_seconds=settings.function_timeout_seconds * FETCH_SHARE_OF_TIMEOUT,
            ),
            jobs=jobs,
            endpoint_registry=endpoints,
            allow_loopback_endpoints=settings.probe_allow_loopback_hosts,
            uptime_window_seconds=settings.probe_uptime_window_seconds,
            limits=settings,
            job_slot_max_seconds=settings.job_slot_max_seconds,
        )

    @cached_property
    def endpoints(self) -> EndpointRegistry | None:
        return self.endpoint_registry() if self.endpoint_registry is not None else None

    def tier_limits(self, tier: str) -> TierLimits:
        return self.limits.tier_limits(tier)

    def job_quota(self, tier: str) -> JobQuota:
        limits = self.tier_limits(tier)
        return JobQuota(tier, limits.concurrent_jobs, limits.daily_jobs, self.job_slot_max_seconds)

    def available(self) -> frozenset[Service]:
        built = {Service.JOBS: self.jobs, Service.ENDPOINTS: self.endpoint_registry}
        return frozenset(service for service, instance in built.items() if instance is not None)

    def require(self, tools: Iterable[DeclaredTool], function: str) -> None:
        """Raises MissingToolService for the first tool that declares a service this function lacks."""
        available = self.available()
        for tool in tools:
            for service in sorted(tool.services - available):
                raise MissingToolService(
                    f"{function}: tool {tool.name!r} declares the {service} service, but the function's "
                    f"environment has no {SERVICE_VARIABLES[service]} (docs/adding-a-capability.md)"
                )

    def context_for(
        self,
        tool: DeclaredTool,
        user_id: str,
        progress: ProgressCallback | None = None,
        tier: str = LOWEST_TIER,
        cancelled: CancellationCheck | None = None,
        deadline_seconds: float | None = None,
    ) -> ToolContext:
        """What `tool` may use for `user_id` (of `tier`): the services it declares, nothing else. A synchronous
        call passes its deadline: its fetch and its checkpoints stop the call once it has passed."""
        fetch_policy = self.fetch_policy
        if deadline_seconds is not None:
            deadline = time.monotonic() + deadline_seconds
            fetch_policy = replace(fetch_policy, deadline=deadline, deadline_seconds=deadline_seconds)
        return ToolContext(
            tool_name=tool.name,
            user_id=user_id,
            tier=tier,
            limits=self.tier_limits(tier),
            fetch_policy=fetch_policy,
            progress=progress,
            jobs=self.jobs if Service.JOBS in tool.services else None,
            endpoints=self.endpoints if Service.ENDPOINTS in tool.services else None,
            allow_loopback_endpoints=self.allow_loopback_endpoints,
            uptime_window_seconds=self.uptime_window_seconds,
            cancelled=cancelled,
        )


def _endpoint_registry(settings: ToolSettings, clients: AwsClients) -> EndpointRegistry:
    """The endpoints service (MonitorTable, the token cipher), loaded on its tools' first call: the monitor and
    probes packages are no part of the endpoint's cold start."""
    from mcp_backend.monitor.table import MonitorTable
    from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
    from mcp_backend.probes.registry import EndpointRegistry

    cipher = None
    if settings.endpoint_token_key_id:
        cipher = EndpointTokenCipher(settings.endpoint_token_key_id, LazyClient("kms", clients))
    table = MonitorTable.from_settings(settings, cast("DynamoDBClient", LazyClient("dynamodb", clients)))
    return EndpointRegistry(table, cipher)
