"""The MCP endpoint as one ASGI app: `uvicorn --factory mcp_backend.mcp.server:create_app`.

Layers, outermost first: RequestTelemetry (correlation id, cold start) -> EdgeOnly (Edge=CloudFront: 403 for a
request that did not come through the distribution) -> McpHttpGuard (host, origin,
405, auth, 415, event-stream hygiene) -> ResponseModes (JSON for answers ready at once, a tools/list alike
but for its id answered as before, an event stream for calls that report progress) -> the SDK's stateless
Streamable HTTP apps (both protocol eras) -> SDK middleware StrictArguments and ToolCallTelemetry -> the SDK's
low-level server over the tool, resource and prompt tables (mcp_backend.mcp.table_server).
With SnapStart on, AfterRestoreHook (mcp_backend.mcp.restore_hook) sits between RequestTelemetry and the guard.
"""

from __future__ import annotations

import gc

# Importing the SDK and the app makes over a hundred thousand objects that live as long as the process (most of
# them the pydantic models of both protocol eras), and the cyclic garbage collector ran some 60 times while they
# were made, for about a tenth of the cold start's CPU. It is paused from here until create_app has built the
# app, which then freezes what startup made (later runs skip it) and resumes it: docs/mcp-endpoint.md, "Cold
# start"; make bench measures what the pause is worth.
gc.disable()

from mcp_backend.lazy_imports import package_init_deferred

# The SDK's top-level packages re-export its client, stdio transports and MCPServer, none of which the endpoint
# runs (it imports the low-level server's modules by their full names); their __init__ runs only if one of those
# names is read: docs/mcp-endpoint.md, "Cold start".
package_init_deferred("mcp.server")

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, cast

from mcp.server.transport_security import TransportSecuritySettings
from starlette.types import ASGIApp

from mcp_backend import edge_origin
from mcp_backend.api_keys import Principal, SecretReader
from mcp_backend.aws import AwsClients, ClientFactory, LazyClient
from mcp_backend.call_slots import InFlightSlots, SlotLease
from mcp_backend.calllog.shipper import RecordShipper
from mcp_backend.calllog.writer import CallLogWriter
from mcp_backend.config import McpSettings, load_settings
from mcp_backend.doors import TOOL_DOORS
from mcp_backend.edge_origin import EdgeOnly, EdgeOriginCheck
from mcp_backend.elicitation_answers import AnswerMailbox
from mcp_backend.mcp.auth import ApiKeyAuthenticator, Authenticator
from mcp_backend.mcp.bindings import StrictArguments, ToolBindings
from mcp_backend.mcp.guard import HostPolicy, McpHttpGuard
from mcp_backend.mcp.iam_callers import IamCallerAuthenticator, signed_by_iam_caller
from mcp_backend.mcp.icons import SERVER_ICONS
from mcp_backend.mcp.internal_errors import InternalErrorsWithoutText
from mcp_backend.mcp.open_stream import OpenStreamExchange
from mcp_backend.mcp.prompts import PromptBindings
from mcp_backend.mcp.request_spans import TracedRequests
from mcp_backend.mcp.request_state_key import SharedRequestStateKey
from mcp_backend.mcp.resources import ResourceBindings
from mcp_backend.mcp.response_modes import ResponseModes
from mcp_backend.mcp.restore_hook import with_after_restore_hook
from mcp_backend.mcp.sessions import SessionTokens
from mcp_backend.mcp.single_exchange import SingleExchange
from mcp_backend.mcp.table_server import table_server
from mcp_backend.mcp.tasks import JobTasks, task_extensions
from mcp_backend.mcp.tasks_2025 import LegacyJobTasks
from mcp_backend.mcp.telemetry import RequestTelemetry, ToolCallTelemetry
from mcp_backend.observability import CurrentStdoutHandler, logger, tool_runs
from mcp_backend.request_rate import LeaseAhead, RateDecision, RequestRateLimiter, in_background
from mcp_backend.stack_urls import StackUrl
from mcp_backend.tiers import TIERS
from mcp_backend.tools.prompts import PROMPTS, Prompt
from mcp_backend.tools.resources import RESOURCES, ResourceKind
from mcp_backend.tools.services import ToolServices
from mcp_backend.tools.table import TOOLS, Tool, servable_tools
from mcp_backend.tracing.setup import configure as configure_tracing

if TYPE_CHECKING:
    from mypy_boto3_kinesis import KinesisClient

SERVER_NAME = "mcp-backend"
# The share of the function's timeout a question on a 2025-era call's stream may wait for its answer: the rest
# is the tool's own run after the answer and the answer's way out.
ANSWER_WAIT_SHARE = 0.8
CALL_LOG_SHUTDOWN_BUDGET_SECONDS = 0.25


def tool_bindings(settings: McpSettings, clients: AwsClients, table: Mapping[str, Tool] = TOOLS) -> ToolBindings:
    """The table's MCP tools this deployment can serve (a part that is off offers none of its tools), with the
    services each declares (AWS clients built on first use)."""
    services = ToolServices.from_settings(settings, clients)
    offered = servable_tools(table, services.available())
    services.require([tool for tool in offered.values() if tool.runs_sync], "McpServer")
    return ToolBindings(offered, services, settings.sync_call_deadline, request_state_key(settings, clients))


def request_state_key(settings: McpSettings, clients: AwsClients) -> SharedRequestStateKey:
    """RequestStateSecret, read at the first need (no part of a cold start), as ApiKeysSecret is; no secret named:
    no key, and no tool asks (fail closed)."""
    if not settings.request_state_secret_id:
        return SharedRequestStateKey(None)
    return SharedRequestStateKey(
        SecretReader(
            settings.request_state_secret_id,
            settings.parameters_secrets_extension_http_port,
            client_factory=lambda: clients("secretsmanager"),
        )
    )


class TierRateLimit:
    """Each request of a principal counted against its tier's requests per minute (RateLimitTable)."""

    def __init__(
        self,
        settings: McpSettings,
        clients: AwsClients,
        clock: Callable[[], float] = time.time,
        lease_ahead: LeaseAhead = in_background,
    ) -> None:
        self.settings = settings
        self.limiter = RequestRateLimiter(
            settings.rate_limit_table_name, LazyClient("dynamodb", clients), clock, lease_ahead=lease_ahead
        )
        # Read once: every request asks for its caller's row, and the settings do not change while the app runs.
        self._per_minute = {tier: settings.tier_limits(tier).requests_per_minute for tier in TIERS}

    def admit_locally(self, principal: Principal) -> RateDecision | None:
        return self.limiter.admit_locally(principal.user_id, self._limit(principal))

    def take(self, principal: Principal) -> RateDecision:
        return self.limiter.take(principal.user_id, self._limit(principal))

    def _limit(self, principal: Principal) -> int:
        limit = self._per_minute.get(principal.tier)
        return limit if limit is not None else self.settings.tier_limits(principal.tier).requests_per_minute


class TierCallSlots:
    """The requests of the doors that hold a slot (mcp_backend.doors: tools that reach the network, requests that
    wait for a task), per principal, at once across every instance (RateLimitTable's slots,
    mcp_backend.call_slots.InFlightSlots), within the tier's `calls_in_flight`."""

    def __init__(
        self,
        settings: McpSettings,
        clients: AwsClients,
        extend_off_path: LeaseAhead = in_background,
    ) -> None:
        self.settings = settings
        # A kept slot's extension runs off the request path, as the rate limit's lease ahead does.
        self.slots = InFlightSlots(
            settings.rate_limit_table_name, LazyClient("dynamodb", clients), extend_off_path=extend_off_path
        )
        # A slot is held until its call ends: a call may outlive its synchronous deadline (a tool that stops only
        # at its next check, a slow answer), never the function's timeout, which ends the invocation and resets
        # its environment. So the hold is the timeout: a slot never frees while its call runs.
        self.hold_seconds = settings.function_timeout_seconds

    def limit(self, principal: Principal) -> int:
        return self.settings.tier_limits(principal.tier).calls_in_flight

    def take(self, principal: Principal) -> SlotLease | None:
        return self.slots.take(principal.user_id, self.limit(principal), self.hold_seconds)

    def give_back(self, lease: SlotLease) -> None:
        self.slots.give_back(lease)


def default_authenticator(settings: McpSettings, clients: AwsClients) -> Authenticator:
    """API keys from ApiKeysSecret (through the Parameters and Secrets extension), OAuth access tokens, or
    either, by AuthMode."""
    reader = SecretReader(
        settings.api_keys_secret_id,
        settings.parameters_secrets_extension_http_port,
        client_factory=lambda: clients("secretsmanager"),
    )
    api_keys = ApiKeyAuthenticator(reader, settings.api_keys_cache_seconds)
    if settings.auth_mode == "apikey":
        return api_keys
    # Loaded only with OAuth on: token verification (its JWKS fetcher, PyJWT at the first token) is no part of
    # an API-key endpoint's cold start.
    from mcp_backend.mcp.oauth import EitherAuthenticator, OAuthAuthenticator

    oauth = OAuthAuthenticator.from_settings(settings)
    return oauth if settings.auth_mode == "oauth" else EitherAuthenticator(api_keys, oauth)


class _LibraryRecords(logging.Filter):
    """Records of loggers other than Powertools' own, which writes its lines with its own handler and also
    propagates them to the root (where pytest's caplog, say, reads them)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.name.startswith(logger.name)


def log_library_records_as_json() -> None:
    """The process's root logger, set once when the app is built: the libraries' records (the SDK's `mcp.*`,
    starlette, botocore) at WARNING and above, in Powertools' JSON format on stdout, each once. The SDK's
    low-level server configures no logging of its own (MCPServer would call `logging.basicConfig`)."""
    if any(isinstance(handler.filters[0], _LibraryRecords) for handler in logging.root.handlers if handler.filters):
        return
    handler = CurrentStdoutHandler()
    handler.setFormatter(logger.registered_formatter)
    handler.addFilter(_LibraryRecords())
    logging.root.addHandler(handler)
    logging.root.setLevel(logging.WARNING)


def create_app(
    settings: McpSettings | None = None,
    authenticator: Authenticator | None = None,
    client_factory: ClientFactory | None = None,
    *,
    rate_limit_clock: Callable[[], float] = time.time,
    lease_ahead: LeaseAhead = in_background,
    edge_check: EdgeOriginCheck | None = None,
    resource_table: Mapping[str, ResourceKind] = RESOURCES,
    prompt_table: Mapping[str, Prompt] = PROMPTS,
    tool_table: Mapping[str, Tool] = TOOLS,
    answer_wait_seconds: float | None = None,
) -> ASGIApp:
    """Build the endpoint. Settings default to the environment (the McpServer function's template entry);
    AWS clients are created on first use, from `client_factory` when given, else boto3. The rate limiter's clock
    and lease-ahead executor are injectable, so a test decides when a window turns and a lease ahead lands.
    The tool, resource and prompt tables are the backend's; only the local stack and tests pass others (the
    conformance fixtures, devstack/conformance_fixtures.py), in code: no setting of the template can. A question
    on a 2025-era call's stream waits `answer_wait_seconds` for its answer (default: a share of the timeout)."""
    settings = settings or load_settings(McpSettings)
    clients = AwsClients(client_factory)
    bindings = tool_bindings(settings, clients, tool_table)
    if authenticator is None:
        authenticator = default_authenticator(settings, clients)
    # CallLog Disabled leaves the stream's name unset: no shipper, no call-log records.
    call_log = (
        RecordShipper(
            CallLogWriter(settings.call_log_stream_name, cast("KinesisClient", LazyClient("kinesis", clients))),
            name="mcp-call-log",
        )
        if settings.call_log_stream_name
        else None
    )
    log_library_records_as_json()
    # The caller's jobs and results as resources, and the prompts, from their tables; only the kinds whose
    # services this function has are served.
    resources = ResourceBindings(resource_table, bindings.services)
    extensions = [*task_extensions(bindings.submissions), *resources.extensions()]
    # The 2025-11-25 task-augmented calls, on the extension's JobTable tasks; tasks/result waits a few seconds
    # for a task still working, in a calls-in-flight slot.
    legacy_tasks = [
        LegacyJobTasks(extension, settings.task_result_wait)
        for extension in extensions
        if isinstance(extension, JobTasks)
    ]
    server = table_server(
        SERVER_NAME,
        "Analyse CSV/JSON datasets: synchronously (analyze_dataset) or as queued jobs.",
        bindings,
        extensions=extensions,
        middleware=[
            InternalErrorsWithoutText(),
            StrictArguments(bindings.input_models),
            ToolCallTelemetry(call_log, bindings.input_models),
            *legacy_tasks,
        ],
        methods=[method for legacy in legacy_tasks for method in legacy.methods()],
        resources=resources,
        prompts=PromptBindings(prompt_table, bindings.services, resources),
        icons=SERVER_ICONS,
        request_state=bindings.request_state_key.security(SERVER_NAME),
    )
    # Host and Origin are checked by McpHttpGuard, which also knows the Function URL's wildcard host.
    transport_security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    json_app, stream_app = (
        server.streamable_http_app(
            streamable_http_path=settings.mcp_path,
            stateless_http=True,
            json_response=json_response,
            transport_security=transport_security,
        )
        for json_response in (True, False)
    )
    call_slots = TierCallSlots(settings, clients, lease_ahead)
    # 2025-era calls that ask their user on their stream, and the answers (any environment receives them).
    open_stream = OpenStreamExchange(
        server,
        SessionTokens(bindings.request_state_key),
        AnswerMailbox(settings.rate_limit_table_name, LazyClient("dynamodb", clients)),
        call_slots,
        bindings.asking_tools,
        answer_wait_seconds or settings.function_timeout_seconds * ANSWER_WAIT_SHARE,
    )
    sdk_app = ResponseModes(json_app, stream_app, bindings.streaming_tools, SingleExchange(server), open_stream)
    guard = McpHttpGuard(
        sdk_app,
        path=settings.mcp_path,
        hosts=HostPolicy.for_region(settings.aws_region, settings.extra_hosts(), settings.allowed_origins()),
        authenticator=authenticator,
        keepalive_seconds=settings.sse_keepalive_seconds,
        resource=settings.oauth_resource,
        pinned_resource=StackUrl(settings.oauth_resource_parameter) if settings.oauth_resource_parameter else None,
        rate_limit=TierRateLimit(settings, clients, rate_limit_clock, lease_ahead),
        call_slots=call_slots,
        # Tools beyond the backend's table (the conformance fixtures) get a door with their scope.
        tool_access={name: access for name, access in bindings.access.items() if name not in TOOL_DOORS},
        max_body_bytes=settings.mcp_max_body_bytes,
        iam_callers=IamCallerAuthenticator.from_setting(settings.iam_caller_tiers) if settings.iam_callers else None,
    )
    # Lambda gives the runtime up to 300 ms of its shutdown after SIGTERM when external extensions are attached
    # (https://github.com/aws-samples/graceful-shutdown-with-aws-lambda): pending call-log records go out then.
    # Edge=CloudFront: off-edge requests are refused before the guard (mcp_backend.edge_origin); an IAM caller's
    # signed request never comes through the edge.
    if edge_check is None:
        edge_check = edge_origin.from_settings(
            settings.edge_origin_secret_id, settings.api_keys_cache_seconds, exempt=signed_by_iam_caller
        )
    edge_only = EdgeOnly(guard, edge_check)
    guarded = with_after_restore_hook(edge_only, settings.aws_lwa_snapstart_after_restore_path, authenticator)
    app = RequestTelemetry(
        # With tracing off (the default) no span middleware is in the request's path at all.
        TracedRequests(guarded) if configure_tracing() else guarded,
        on_shutdown=[tool_runs.flush]
        + ([lambda: call_log.close(CALL_LOG_SHUTDOWN_BUDGET_SECONDS)] if call_log is not None else []),
    )
    resume_collection_after_startup()
    return app


def resume_collection_after_startup() -> None:
    """Once, after the first app is built: what startup made moves to the collector's permanent generation
    (`gc.freeze`) and the collector, paused since this module was imported, runs again. No collection first:
    it would cost tens of milliseconds and free no memory worth them (the few cycles startup left stay)."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()
