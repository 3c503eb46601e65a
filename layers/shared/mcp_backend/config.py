"""Configuration, parsed in one place: each function declares a settings model, the template sets the env."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mcp_backend.tiers import LOWEST_TIER, TIERS, Tier

SettingsT = TypeVar("SettingsT", bound=BaseModel)
ASYMMETRIC_JWT_ALGORITHMS = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)


class Settings(BaseModel):
    """Field `job_table_name` is read from the variable JOB_TABLE_NAME, and so on. Each model's validator is
    built when the model is first used (`defer_build`): a function loads every function's settings model with
    this module, and builds only its own."""

    model_config = ConfigDict(
        alias_generator=str.upper, populate_by_name=True, frozen=True, extra="ignore", defer_build=True
    )

    environment: str = "dev"


class TracingSettings(Settings):
    """OpenTelemetry spans (mcp_backend.tracing): TRACING_MODE off (nothing loads), xray or otlp (spans go to the
    collector extension at the OTLP endpoint, which sends them on), a head-sampling ratio for traces that arrive
    without a sampled parent, and where spans are sent."""

    tracing_mode: Literal["off", "xray", "otlp"] = "off"
    tracing_sample_rate: float = Field(default=0.05, ge=0, le=1)
    # Tracing=otlp: an OTLP/HTTP endpoint taking JSON (a collector extension's receiver listens on localhost:4318).
    otel_exporter_otlp_traces_endpoint: str = "http://localhost:4318/v1/traces"
    aws_region: str = "us-east-1"
    aws_lambda_function_name: str = ""


class TierLimits(BaseModel):
    """What one tier may do (docs/security.md, "Limits by tier")."""

    model_config = ConfigDict(frozen=True)

    requests_per_minute: int = Field(gt=0)  # authenticated POSTs to the endpoint, per principal
    concurrent_jobs: int = Field(gt=0)  # PENDING or RUNNING jobs at once
    daily_jobs: int = Field(gt=0)  # jobs submitted per UTC day
    batch_items: int = Field(gt=0, le=100)  # items of one submit_*_batch call
    endpoints: int = Field(gt=0)  # registered probe endpoints
    # Calls of tools that reach the network (synchronous analyze_dataset) running at once, across instances.
    calls_in_flight: int = Field(gt=0)


class TierLimitSettings(Settings):
    """The limits table, one field per tier and limit (LIMIT_FREE_REQUESTS_PER_MINUTE, ...). The template sets
    the main ones from parameters; any other is changed by adding its variable to the function."""

    limit_free_requests_per_minute: int = Field(default=120, gt=0)
    limit_free_concurrent_jobs: int = Field(default=2, gt=0)
    limit_free_daily_jobs: int = Field(default=100, gt=0)
    limit_free_batch_items: int = Field(default=10, gt=0, le=100)
    limit_free_calls_in_flight: int = Field(default=2, gt=0)
    limit_free_endpoints: int = Field(default=3, gt=0)
    limit_pro_requests_per_minute: int = Field(default=1200, gt=0)
    limit_pro_concurrent_jobs: int = Field(default=20, gt=0)
    limit_pro_daily_jobs: int = Field(default=5000, gt=0)
    limit_pro_batch_items: int = Field(default=100, gt=0, le=100)
    limit_pro_calls_in_flight: int = Field(default=4, gt=0)
    limit_pro_endpoints: int = Field(default=25, gt=0)
    limit_internal_requests_per_minute: int = Field(default=6000, gt=0)
    limit_internal_concurrent_jobs: int = Field(default=100, gt=0)
    limit_internal_daily_jobs: int = Field(default=50000, gt=0)
    limit_internal_batch_items: int = Field(default=100, gt=0, le=100)
    limit_internal_calls_in_flight: int = Field(default=8, gt=0)
    limit_internal_endpoints: int = Field(default=100, gt=0)

    def tier_limits(self, tier: str) -> TierLimits:
        """The tier's limits; an unknown tier gets the lowest tier's (fail closed)."""
        names = _LIMIT_FIELDS.get(tier) or _LIMIT_FIELDS[LOWEST_TIER]
        return _tier_row(tuple(getattr(self, name) for name in names))


# Each tier's settings fields, in TierLimits' order; every request asks for its caller's row.
_LIMIT_FIELDS: dict[str, tuple[str, ...]] = {
    tier: tuple(f"limit_{tier}_{field}" for field in TierLimits.model_fields) for tier in TIERS
}


@lru_cache(maxsize=32)
def _tier_row(values: tuple[int, ...]) -> TierLimits:
    # One frozen row per distinct set of values: validated once, not on each request.
    return TierLimits(**dict(zip(TierLimits.model_fields, values, strict=True)))


class ToolSettings(TierLimitSettings):
    """What tools may be given wherever they run (mcp_backend.tools.services builds it): the endpoint and
    the worker both read these. A service whose variable is absent is not built, and a tool that declares it
    stops the function at start."""

    # Empty with the job pipeline off (JobPipeline Disabled: the endpoint then offers no job tool).
    job_table_name: str = ""
    # The jobs service (submitting, for tools that declare it) needs the queue; the worker only its DLQ.
    job_queue_url: str = ""
    job_dead_letter_queue_url: str = ""
    # The same template parameter sets the function's Timeout and this value.
    function_timeout_seconds: int = Field(default=120, gt=0)
    job_result_page_bytes: int = Field(default=256 * 1024, ge=64, le=4 * 1024 * 1024)  # far below the 20 MB stream cap
    # Results too large for a JobTable item (mcp_backend.jobs.results): written by the worker, read by the endpoint.
    job_result_bucket_name: str = ""
    # Registered probe endpoints (register_endpoint, list_endpoints, endpoint_status).
    monitor_table_name: str = ""
    # The KMS key endpoint tokens are sealed with (probes/endpoint_tokens.py); empty: a token is refused.
    endpoint_token_key_id: str = ""
    # Only the local stack sets this: register_endpoint accepts loopback (no other private address) and http.
    probe_allow_loopback_hosts: bool = False
    # A PENDING or RUNNING job holds one of its owner's concurrent-job slots until it ends, or at most this
    # long (a job whose worker was killed without recording an end frees its slot after it).
    job_slot_max_seconds: int = Field(default=6 * 3600, gt=0)
    # endpoint_status reports uptime over this many seconds of probe results.
    probe_uptime_window_seconds: int = Field(default=86400, gt=0)
    dataset_max_bytes: int = Field(default=50 * 1024 * 1024, gt=0)
    # Lambda sets it from the function's MemorySize (a reserved variable, in MB:
    # https://docs.aws.amazon.com/lambda/latest/dg/configuration-envvars.html#configuration-envvars-runtime);
    # half of it is shared by the analyses that run at once.
    aws_lambda_function_memory_size: int = Field(default=512, gt=0)
    # A job's result is refused past this (ResultTooLarge, permanent): far below what a page-by-page read costs.
    job_result_max_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    # s3:// datasets: the bucket tenants upload to (each under its own prefix), and comma-separated key
    # prefixes of it that every tenant may read (each ending in "/"); empty: none.
    dataset_bucket_name: str = ""
    dataset_shared_prefixes: str = ""
    # Only the local stack sets this: the fetcher may reach loopback (no other private address) and plain http.
    dataset_allow_loopback_hosts: bool = False
    # Empty: the call log is off (CallLog Disabled, docs/deploy.md "Profiles"); no record is written.
    call_log_stream_name: str = ""
    # DurableToolWorker's alias ARN (DurableWorker Enabled), else empty: the queued worker hands long jobs to it,
    # and a cancel stops the durable execution its job records.
    durable_worker_arn: str = ""

    def analyses_at_once(self) -> int:
        """How many analyses may share the function's memory: one per request on the endpoint (an environment
        serves one at a time); the worker overrides it with the records of a batch that run at once."""
        return 1

    def analysis_memory_budget_bytes(self) -> int:
        return self.aws_lambda_function_memory_size * 1024 * 1024 // 2 // self.analyses_at_once()

    def dataset_shared_prefix_list(self) -> tuple[str, ...]:
        return tuple(prefix.strip() for prefix in self.dataset_shared_prefixes.split(",") if prefix.strip())

    @model_validator(mode="after")
    def _shared_prefixes_are_folders(self) -> ToolSettings:
        # "team" would also share "team-secrets/...": a prefix must end at a folder boundary.
        for prefix in self.dataset_shared_prefix_list():
            if not prefix.endswith("/") or prefix.startswith("/") or ".." in prefix.split("/"):
                raise ValueError(f"DATASET_SHARED_PREFIXES: {prefix!r} must be a key prefix ending in '/'")
        return self


class WorkerSettings(ToolSettings):
    # The worker exists only with the job pipeline: its table and DLQ are required.
    job_table_name: str = Field(min_length=1)
    job_dead_letter_queue_url: str = Field(min_length=1)
    # The same template parameter sets the function's Timeout and this value: a run's claim on a job (its
    # RUNNING record, jobs/run_records.py) expires after it + 5 s.
    function_timeout_seconds: int = Field(gt=0)
    # The same template parameter sets the queue's RedrivePolicy.maxReceiveCount and this value.
    job_max_receive_count: int = Field(gt=0)
    # Records of one batch that run at once (their I/O overlaps); 1 runs them one after another.
    record_concurrency: int = Field(default=10, ge=1, le=10)
    # A job whose input is at least this many bytes runs in the durable worker (when DURABLE_WORKER_ARN is set).
    durable_job_min_bytes: int = Field(default=256 * 1024 * 1024, ge=1)
    # Each job's tool runs in a forked child process, so a run that exhausts memory ends alone
    # (mcp_backend.jobs.apart). False runs it in the record's thread (no isolation).
    tool_runs_apart: bool = True

    def analyses_at_once(self) -> int:
        return self.record_concurrency


class DurableWorkerSettings(ToolSettings):
    """DurableToolWorker (mcp_backend.jobs.durable): the job table it records on, and the bound its steps check."""

    job_table_name: str = Field(min_length=1)
    function_timeout_seconds: int = Field(gt=0)
    # The same template parameter sets the function's DurableConfig ExecutionTimeout and this value (1 s to 366
    # days: https://docs.aws.amazon.com/lambda/latest/api/API_DurableConfig.html).
    durable_execution_timeout_seconds: int = Field(default=86400, ge=1, le=31622400)


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
    # Platform reports (call-log-telemetry): timeouts of one function in one batch, and memory used as a
    # percentage of the function's limit, that raise an alert.
    timeout_alert_threshold: int = Field(default=3, gt=0)
    memory_alert_percent: int = Field(default=90, gt=0, le=100)
    # One alert per alert type and subject per this many seconds, across instances (calllog/alert_windows.py).
    alert_window_table_name: str
    alert_dedup_window_seconds: int = Field(default=900, gt=0)


class MonitorStreamSettings(StreamConsumerSettings):
    monitor_table_name: str


class DriftDetectorSettings(MonitorStreamSettings):
    call_log_stream_name: str


class McpSettings(ToolSettings):
    """The McpServer function's environment (template.yaml sets every variable)."""

    api_keys_secret_id: str
    # RequestStateSecret: the key every execution environment seals and opens a multi-round-trip requestState
    # with (mcp_backend.mcp.request_state_key); empty: no tool can ask its user anything (fail closed).
    request_state_secret_id: str = ""
    # Per-principal request counters (mcp_backend.request_rate); required: the endpoint does not start unlimited.
    rate_limit_table_name: str = Field(min_length=1)
    # apikey: bearer API keys only; oauth: JWT access tokens only; both: either (mcp_backend.mcp.auth).
    auth_mode: Literal["apikey", "oauth", "both"] = "apikey"
    # OAuth resource-server mode (auth_mode oauth or both): the authorization server whose tokens are accepted.
    oauth_issuer: str = ""
    oauth_jwks_url: str = ""  # empty: the jwks_uri of the issuer's /.well-known/openid-configuration
    # This resource's URL (the tokens' audience, RFC 8707), never taken from the request's Host.
    oauth_resource: str = ""
    oauth_audiences: str = ""  # comma-separated audiences accepted besides the resource URL
    # Tokens without `aud` (Cognito access tokens) are accepted only from these clients (`client_id`).
    oauth_client_ids: str = ""
    # Scope names are <prefix>read and <prefix>submit (Cognito: "<resource server identifier>/").
    oauth_scope_prefix: str = ""
    oauth_user_claim: str = "sub"  # the claim that becomes the caller's user id
    # The claim naming the caller's tier (the stack's own authorization server sets "tier"); empty: every OAuth
    # caller is free. With OAUTH_TIER_MAP (an external issuer: value=tier pairs, comma-separated), the claim's
    # value, or any of its values, maps to a tier: the highest mapped, the lowest tier when absent or unmapped.
    oauth_tier_claim: str = ""
    oauth_tier_map: str = ""
    # The stack's own authorization server: the SSM parameter holding this endpoint's URL (the template writes
    # it: the function cannot be told its own Function URL), the audience its tokens must name; read once.
    # OAUTH_RESOURCE, when set, is used instead. Never the request's Host.
    oauth_resource_parameter: str = ""
    # Edge=CloudFront: the secret holding the origin header CloudFront adds (mcp_backend.edge_origin); empty
    # with the edge off. IamCallers=Enabled: `arn-pattern=tier` pairs for SigV4 callers (mcp_backend.mcp.iam_callers).
    edge_origin_secret_id: str = ""
    iam_callers: bool = False
    iam_caller_tiers: str = ""
    oauth_algorithms: str = "RS256,ES256"
    oauth_leeway_seconds: float = Field(default=30.0, ge=0, le=300)
    oauth_jwks_cache_seconds: float = Field(default=3600.0, gt=0)
    # At most one JWKS fetch per this many seconds (an unknown `kid`, or retrying an unreachable JWKS).
    oauth_jwks_refresh_seconds: float = Field(default=30.0, gt=0)
    # Function URL hosts (*.lambda-url.<region>.on.aws) are allowed for AWS_REGION; custom domains are added here.
    aws_region: str = "us-east-1"
    mcp_allowed_hosts: str = ""  # comma-separated extra Host values, e.g. "mcp.example.com,127.0.0.1:8080"
    mcp_allowed_origins: str = ""  # comma-separated Origin values browsers may call from
    mcp_path: str = "/mcp"
    # Every synchronous fetch and analysis ends by this many seconds (CallDeadlineExceeded), well within the
    # function's timeout; a call slower than this belongs in a job (submit_analysis).
    sync_call_deadline_seconds: float = Field(default=60.0, gt=0)
    # A 2025-11-25 tasks/result answers a task still working after this many seconds (never past the synchronous
    # deadline): it holds a calls-in-flight slot while it waits, and the client polls tasks/get meanwhile.
    task_result_wait_seconds: float = Field(default=5.0, gt=0)
    # The largest request body served (413 past it): far below the 6 MB a Function URL takes.
    mcp_max_body_bytes: int = Field(default=256 * 1024, ge=1024, le=6 * 1024 * 1024)
    sse_keepalive_seconds: float = Field(default=15.0, gt=0)
    api_keys_cache_seconds: float = Field(default=300.0, ge=0)
    # The Parameters and Secrets extension listens here when its layer is attached; absent locally.
    parameters_secrets_extension_http_port: int = 2773
    # SnapStart on McpServer: the path the Lambda Web Adapter POSTs to after a restore, the variable it reads
    # itself (mcp_backend.mcp.restore_hook); empty: no hook served.
    aws_lwa_snapstart_after_restore_path: str = Field(default="", pattern=r"^(/[A-Za-z0-9._~-]+)*$")

    @staticmethod
    def _split(value: str) -> list[str]:
        return [item.strip() for item in value.split(",") if item.strip()]

    def extra_hosts(self) -> list[str]:
        return self._split(self.mcp_allowed_hosts)

    def allowed_origins(self) -> list[str]:
        return self._split(self.mcp_allowed_origins)

    @property
    def sync_call_deadline(self) -> float:
        """The deadline in force: never past 80 % of the function's timeout, so the call ends as a tool error with
        time left to answer, not as a Lambda timeout."""
        return min(self.sync_call_deadline_seconds, self.function_timeout_seconds * 0.8)

    @property
    def task_result_wait(self) -> float:
        """How long a tasks/result waits for a task still working: the setting, within the synchronous deadline."""
        return min(self.task_result_wait_seconds, self.sync_call_deadline)

    @model_validator(mode="after")
    def _oauth_is_configured(self) -> McpSettings:
        if self.auth_mode != "apikey" and not self.oauth_issuer:
            raise ValueError("AUTH_MODE oauth/both needs OAUTH_ISSUER")
        # The audience is configured, never the request's Host: with none of these no token could be bound here.
        bound = self.oauth_resource or self.oauth_audiences or self.oauth_client_ids or self.oauth_resource_parameter
        if self.auth_mode != "apikey" and not bound:
            raise ValueError("AUTH_MODE oauth/both needs OAUTH_RESOURCE (or OAUTH_AUDIENCES / OAUTH_CLIENT_IDS)")
        # Asymmetric algorithms only: `none` and HS* (a shared secret, or a public key misused as one) never.
        unsafe = set(self._split(self.oauth_algorithms)) - ASYMMETRIC_JWT_ALGORITHMS
        if unsafe or not self._split(self.oauth_algorithms):
            raise ValueError(f"OAUTH_ALGORITHMS must be a non-empty subset of {sorted(ASYMMETRIC_JWT_ALGORITHMS)}")
        tier_map(self.oauth_tier_map, "OAUTH_TIER_MAP")
        return self

    def oauth_list(self, name: str) -> list[str]:
        """A comma-separated OAuth setting (audiences, client_ids, algorithms) as a list."""
        return self._split(getattr(self, f"oauth_{name}"))


class ProbeDispatcherSettings(Settings):
    monitor_table_name: str
    probe_worker_function_name: str
    # An endpoint whose probes fail for this many days is no longer probed (one probes_stopped call-log record,
    # which alerts) until its owner registers it again.
    probe_stop_after_failing_days: int = Field(default=7, gt=0)
    # At most this many endpoints of one owner are probed per tick; the rest wait for the following ticks, in turn.
    probes_per_owner_per_tick: int = Field(default=25, gt=0)
    # ProbeSchedule's expression: the ticks' spacing, by which the budget's turn moves on.
    probe_schedule_expression: str = "rate(1 minute)"
    call_log_stream_name: str

    @property
    def tick_seconds(self) -> int:
        """The spacing of a rate() schedule's ticks; a cron() schedule's are taken as a minute apart."""
        match = re.fullmatch(r"rate\((\d+) (minute|hour|day)s?\)", self.probe_schedule_expression.strip())
        if match is None:
            return 60
        return int(match[1]) * {"minute": 60, "hour": 3600, "day": 86400}[match[2]]


class SelfProbeKeySettings(Settings):
    """The SelfProbeKey custom resource: registers the stack's Function URL (+ mcp_path) with a key it adds."""

    monitor_table_name: str
    api_keys_secret_id: str = Field(min_length=1)
    # The self-probe's key is sealed with this KMS key (the endpoint-token key) before it is stored.
    endpoint_token_key_id: str = ""
    mcp_path: str = "/mcp"
    # McpServer's alias (the template's Ref of McpServer.Alias): the URL registered must be its Function URL's.
    mcp_server_function: str = Field(min_length=1)


class ProbeWorkerSettings(Settings):
    monitor_table_name: str
    # Opens the endpoint's sealed token (only this function may decrypt with the key).
    endpoint_token_key_id: str = ""
    # The same template parameter sets the function's Timeout and this value; the probe's own
    # deadline is derived from it (see probe_timeout_seconds), so a hung endpoint ends as ProbeTimeout,
    # not as a Lambda timeout without details.
    function_timeout_seconds: int = Field(gt=0)
    probe_degraded_latency_ms: int = Field(default=2000, gt=0)
    probe_mode: str = "auto"  # "auto" (server/discover, then initialize) or "legacy" (initialize only)
    # Only the local stack sets this: the probe may reach loopback (no other private address) and plain http.
    probe_allow_loopback_hosts: bool = False

    @property
    def probe_timeout_seconds(self) -> float:
        """The whole probe's deadline: the function timeout less a margin to return a typed error."""
        return max(1.0, min(self.function_timeout_seconds - 5.0, self.function_timeout_seconds * 0.8))


class ProbeRecorderSettings(Settings):
    monitor_table_name: str
    probe_result_ttl_seconds: int = Field(default=7 * 86400, gt=0)


class AlertHandlerSettings(Settings):
    idempotency_table_name: str
    # The same template parameter sets the function's Timeout and this value.
    function_timeout_seconds: int = Field(gt=0)
    idempotency_ttl_seconds: int = Field(default=86400, gt=0)
    alert_topic_arn: str
    # One alert per endpoint per window of this many seconds (windows are aligned to the epoch).
    alert_incident_window_seconds: int = Field(default=900, gt=0)


class AuthorizationServerSettings(Settings):
    """The AuthorizationServer function (mcp_backend.authorization; docs/authorization-server.md)."""

    authorization_table_name: str = Field(min_length=1)
    # An ECC_NIST_P256 SIGN_VERIFY KMS key (id, ARN or alias): it signs every access token.
    authorization_signing_key_id: str = Field(min_length=1)
    # The issuer as is (tests); empty: the value of the SSM parameter below, which the template writes (the
    # function's own URL, which it cannot be told). Neither: every request is refused (503). Never the Host.
    authorization_issuer: str = ""
    authorization_issuer_parameter: str = ""
    # Edge=CloudFront with a custom domain: the secret holding the origin header CloudFront adds; a request without
    # it is refused (403) as on the endpoint (mcp_backend.edge_origin). Empty: served to anyone.
    edge_origin_secret_id: str = ""
    # Who runs this server, named on the consent page; empty: "the operator of this MCP endpoint".
    authorization_operator_name: str = ""
    aws_region: str = "us-east-1"
    # RFC 8707 resources tokens may be issued for (comma-separated); empty: the endpoint's URL, read from the
    # parameter below (mcp_backend.authorization.resource).
    authorization_resources: str = ""
    # The SSM parameter holding the endpoint's URL (the template writes it); empty: any https resource.
    authorization_resource_parameter: str = ""
    # Hosts an https redirect URI may name (comma-separated); empty: none (the template's default lists the
    # hosted clients'). Loopback http is always allowed.
    authorization_redirect_hosts: str = ""
    # Private-use scheme redirect URIs (RFC 8252 section 7.1) accepted exactly as listed, comma-separated: native
    # clients that register one (Cursor) besides their https and loopback ones. PKCE S256 binds the code to
    # the client that started the flow, so an app that intercepts the scheme cannot redeem it.
    authorization_native_redirect_uris: str = "cursor://anysphere.cursor-mcp/oauth/callback"
    access_token_seconds: int = Field(default=600, ge=60, le=3600)
    # A grant (the refresh tokens of one consent) ends this long after the consent, however often it is
    # refreshed: the user signs in again. Template parameter AuthorizationGrantDays.
    authorization_grant_days: int = Field(default=30, ge=1, le=365)
    authorization_code_seconds: int = Field(default=60, ge=10, le=600)
    # A registration not used for this long expires (its client then gets invalid_client and registers again).
    client_idle_seconds: int = Field(default=30 * 86400, ge=3600)
    registrations_per_hour: int = Field(default=20, gt=0)  # per source address (an IPv6 source: its /64)
    # For the whole server, whatever the sources: addresses are cheap to come by (an IPv6 /48 holds 65,536 /64s).
    registrations_per_hour_total: int = Field(default=500, gt=0)
    # Client metadata documents fetched (not found in the instance's cache) per minute, per source address (as
    # registrations count it) and per document host (the client_id URL's): a flood of distinct URLs cannot make
    # this server fetch without bound. A document already fetched is answered from the cache, uncounted.
    client_document_fetches_per_minute: int = Field(default=10, gt=0)
    client_document_fetches_per_minute_per_host: int = Field(default=60, gt=0)
    # Only the local stack sets this: client metadata documents on loopback, over plain http.
    authorization_allow_loopback_hosts: bool = False
    # The upstream OIDC provider users sign in with.
    upstream_issuer: str = Field(min_length=1)
    upstream_discovery_url: str = ""  # empty: <issuer>/.well-known/openid-configuration
    upstream_client_id: str = ""  # empty: the value of the SSM parameter upstream_client_id_parameter
    upstream_client_id_parameter: str = ""  # the stack's pool: /<stack>/authorization/login-client-id
    upstream_client_secret_id: str = ""  # a Secrets Manager secret holding the upstream client's secret, if any
    upstream_user_pool_id: str = ""  # the stack's pool, when it is the provider (the local stack serves its login)
    upstream_scopes: str = "openid email profile"
    upstream_groups_claim: str = "cognito:groups"
    # group=tier pairs, comma-separated (e.g. "paying=pro,staff=internal"); a user in no listed group is free.
    upstream_tier_map: str = ""

    @property
    def grant_seconds(self) -> int:
        return self.authorization_grant_days * 86400

    def tier_map(self) -> dict[str, Tier]:
        return tier_map(self.upstream_tier_map, "UPSTREAM_TIER_MAP")

    def listed(self, name: str) -> tuple[str, ...]:
        """A comma-separated setting (resources, redirect_hosts, native_redirect_uris) as a tuple."""
        value: str = getattr(self, f"authorization_{name}")
        return tuple(item.strip() for item in value.split(",") if item.strip())

    @model_validator(mode="after")
    def _tier_map_names_tiers(self) -> AuthorizationServerSettings:
        self.tier_map()
        return self


def tier_map(pairs: str, name: str) -> dict[str, Tier]:
    """`value=tier` pairs, comma-separated, as a dict; ValueError naming the setting for a pair that is not one."""
    mapped: dict[str, Tier] = {}
    for item in filter(str.strip, pairs.split(",")):
        value, _, tier = (part.strip() for part in item.partition("="))
        if not value or tier not in TIERS:
            raise ValueError(f"{name}: {item!r} must be value=" + "|".join(TIERS))
        mapped[value] = tier
    return mapped


def highest_tier(values: Any, mapping: Mapping[str, Tier]) -> Tier:
    """The highest tier any of the values maps to (a list, or a comma-separated string); the lowest otherwise."""
    if isinstance(values, str):
        values = values.split(",")
    if not isinstance(values, list):
        return LOWEST_TIER
    tiers = {mapping[value] for value in values if isinstance(value, str) and value in mapping}
    return max(tiers, key=TIERS.index, default=LOWEST_TIER)


def load_settings(model: type[SettingsT], environ: Mapping[str, str] | None = None) -> SettingsT:
    return model.model_validate(dict(os.environ if environ is None else environ))
