"""docs/cost.md from a measurement and the price table."""

from __future__ import annotations

import math
from typing import Any

from mcp_backend.jobs.quota_leases import daily_block
from mcp_backend.request_rate import block_size
from mcp_backend.tools.dataset_chunks import DURABLE_CHUNK_BYTES
from tests.cost.figures import Measurement
from tests.cost.model import GB, HOURS_PER_MONTH, LineItem, Price, idle_line_items, total, unit_line_items
from tests.cost.profiles import profile_idle

MILLION = 1_000_000


def money(usd: float | None, digits: int = 2) -> str:
    return "not priced" if usd is None else f"${usd:,.{digits}f}"


def price_text(price: Price | None) -> str:
    if price is None:
        return "no charge of its own"
    if price.usd is None:
        return f"no price found ({price.service}: {price.item})"
    mark = "" if price.verified else " (unverified)"
    per = "" if price.per == 1 else f" per {price.per:,}"
    return f"${price.usd:g}{per}{mark}"


def unpriced_names(items: list[LineItem]) -> str:
    return ", ".join(sorted({item.price.item for item in items if item.price is not None})) or "-"


def render(
    measurement: Measurement,
    prices: dict[str, Price],
    log_bytes_at: dict[str, dict[str, float]],
    spans: dict[str, dict[str, float]],
) -> str:
    """The page; log_bytes_at: each unit's log bytes at other LogLevels than the default; spans: each unit's spans
    with tracing on (tests.cost.units.span_volume)."""
    units = measurement.units
    params = measurement.parameters
    lines = [
        "# What the stack costs",
        "",
        "`make cost` runs each unit of work on the local stack (the template's default parameters, the functions",
        "in-process, moto on loopback), counts every AWS request and Lambda invocation it causes, and prices them",
        "from [tests/cost/prices.toml](../tests/cost/prices.toml): each price with the page it was read on and the",
        "date. It rewrites this page and the expected counts",
        "([tests/cost/expected.json](../tests/cost/expected.json)); `tests/functions/test_cost_model.py` fails,",
        "naming the unit and the request, when a change moves a count without them. US East (N. Virginia)",
        "prices, on-demand, free tiers left out.",
        "",
        f"Counted over {measurement.repetitions} runs of each unit after one unmeasured run (cold caches), so the",
        "figures are per warm unit. Everything a unit sets off downstream (the call-log consumer, the job worker,",
        "the probe pipeline) is in its count.",
        "",
        "## Per unit of work",
        "",
        "| unit | what | AWS requests | DynamoDB items written | DynamoDB write units | Lambda invocations "
        "| $ per unit | $ per million | not priced |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, unit in units.items():
        if name == "idle schedule":
            continue
        priced, missing = total(unit_line_items(unit, measurement, prices))
        requests = sum(unit.requests.values())
        invocations = sum(unit.invocations.values())
        lines.append(
            f"| {name} | {unit.description} | {requests:g} | {unit.dynamodb_items_written:g} "
            f"| {unit.dynamodb_write_units:g} | {invocations:g} | {money(priced, 7)} "
            f"| {money(priced * MILLION)} | {unpriced_names(missing)} |"
        )
    lines += ["", "### Each unit's requests", ""]
    for name, unit in units.items():
        lines += [
            f"**{name}** ({unit.description})",
            "",
            "| item | per unit | price | $ per million units |",
            "|---|---|---|---|",
        ]
        for item in unit_line_items(unit, measurement, prices):
            usd = item.usd
            lines.append(
                f"| {item.what} | {item.quantity:.6g} | {price_text(item.price)} "
                f"| {money(None if usd is None else usd * MILLION)} |"
            )
        durations = ", ".join(f"{function} {ms:.0f} ms" for function, ms in unit.median_ms.items())
        log_kb = unit.log_bytes / 1024
        lines += ["", f"Median invocation: {durations or '-'}; log output {log_kb:.1f} KB per unit.", ""]

    idle = idle_line_items(measurement, prices)
    priced, missing = total(idle)
    schedule = units["idle schedule"]
    lines += [
        "## Idle, per month",
        "",
        f"No traffic, {HOURS_PER_MONTH} hours; the schedules fire {schedule.per_hour:g} times an hour "
        f"(`ProbeScheduleExpression` {params.get('ProbeScheduleExpression')}) with no endpoint registered.",
        "",
        "| item | per month | price | $ per month |",
        "|---|---|---|---|",
    ]
    for item in idle:
        lines.append(f"| {item.what} | {item.quantity:,.6g} | {price_text(item.price)} | {money(item.usd)} |")
    lines += [
        f"| **total priced** | | | **{money(priced)}** |",
        "",
        f"That is {money(priced / HOURS_PER_MONTH, 4)} an hour before the unpriced lines.",
        "",
        f"Not priced (no page with the figure found): {unpriced_names(missing)}.",
        "",
        *per_profile(measurement, prices),
    ]
    lines += what_changes(measurement, prices, log_bytes_at)
    lines += tracing(prices, spans)
    lines += durable_jobs(prices, params)
    lines += [
        "## Prices",
        "",
        "| service | item | USD | per | source | read | verified | note |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for price in prices.values():
        usd = "no figure found" if price.usd is None else f"{price.usd:g}"
        verified = "yes" if price.verified else "**unverified**"
        lines.append(
            f"| {price.service} | {price.item} | {usd} | {price.per:,} | <{price.source}> | {price.read} "
            f"| {verified} | {price.note} |"
        )
    lines += ["", *method()]
    return "\n".join(lines) + "\n"


def column_of(item: LineItem) -> str:
    """The per-profile table's column of an idle line: the schedule's lines together, the others by kind."""
    if ", per firing" in item.what or item.what.startswith("schedule firings"):
        return "schedule (firings, ProbeDispatcher)"
    return item.what.split(" (")[0]


def per_profile(measurement: Measurement, prices: dict[str, Price]) -> list[str]:
    """The idle month of each profile samconfig.toml names and of each documented option on top of the full one."""
    rows = profile_idle(measurement, prices)
    kinds = [column_of(item) for _, _, _, items, _ in rows for item in items]
    columns = sorted(dict.fromkeys(kinds), key=lambda kind: not kind.startswith("Kinesis"))  # the stream first
    lines = [
        "## Idle, per profile",
        "",
        "The same month for each profile `samconfig.toml` names, and for each option of docs/deploy.md on top of "
        "the full profile: the template's resources as each would create them, priced as above (a schedule firing "
        "as measured). $ per month; a part that is off has no line.",
        "",
        "| setup | " + " | ".join(columns) + " | **total priced** | not priced |",
        "|---|" + "---|" * (len(columns) + 2),
    ]
    for name, _, priced, items, missing in rows:
        by_kind: dict[str, float] = {}
        for item in items:
            kind = column_of(item)
            by_kind[kind] = by_kind.get(kind, 0.0) + (item.usd or 0.0)
        cells = [money(by_kind[kind]) if kind in by_kind else "-" for kind in columns]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | **{money(priced)}** | {unpriced_names(missing)} |")
    waf = prices["waf_web_acl_month"]
    lines += [
        "",
        f"The edge (Edge=CloudFront): its web ACL is {money(waf.usd)} a month plus each rule ({price_text(waf)}; "
        f"{waf.note}); the distribution itself has no monthly charge, only per request and per byte out. Interface "
        "VPC endpoints are billed per hour in each AZ (one subnet per AZ assumed); gateway endpoints (DynamoDB, S3) "
        "are free. A customer-managed key is the customer's and is not counted.",
        "",
    ]
    return lines


def what_changes(
    measurement: Measurement, prices: dict[str, Price], log_bytes_at: dict[str, dict[str, float]]
) -> list[str]:
    params = measurement.parameters
    ingestion = prices["cloudwatch_logs_ingestion_gb"]
    secret_calls_month = 3600 / max(1, int(params.get("ApiKeysCacheSeconds", 300))) * HOURS_PER_MONTH
    secret_month = prices["secrets_manager_api_call"].of(secret_calls_month)
    level_rows = []
    for name, unit in measurement.units.items():
        cells = [f"{unit.log_bytes / 1024:.1f} KB, {money(ingestion.of(unit.log_bytes * MILLION / GB))}"]
        for at_level in log_bytes_at.values():
            other = at_level.get(name, 0.0)
            cells.append(f"{other / 1024:.1f} KB, {money(ingestion.of(other * MILLION / GB))}")
        level_rows.append(f"| {name} | " + " | ".join(cells) + " |")
    shard_month = prices["kinesis_shard_hour"].of(HOURS_PER_MONTH)
    stream_month = prices["kinesis_on_demand_stream_hour"].of(HOURS_PER_MONTH)
    memory = ", ".join(f"{function} {mb} MB" for function, mb in sorted(measurement.memory_mb.items()))
    retention = sorted(set(measurement.log_retention_days))
    schedule = measurement.units["idle schedule"]
    per_firing, _ = total(unit_line_items(schedule, measurement, prices))
    return [
        "## What changes the figures",
        "",
        f"- **Call-log stream mode** (`CallLogStreamMode`, default {params.get('CallLogStreamMode')}; `CallLog` "
        f"Disabled removes the stream). On-demand bills the stream per hour whether or not it is written: "
        f"{money(stream_month)} a month (unverified), plus data in per GB (each record rounded up to 1 KB). "
        f"Provisioned bills each shard per hour: {money(shard_month)} a month for one shard (unverified), plus PUT "
        "payload units (25 KB each). One provisioned shard takes 1 MB/s or 1,000 records/s in.",
        f"- **Log level and volume** (`LogLevel`, default {params.get('LogLevel')}; `LogSampleRate` "
        f"{params.get('LogSampleRate')}: that share of invocations logs at DEBUG anyway). CloudWatch Logs bills "
        "ingestion per GB; measured per unit (log output per unit, ingestion $ per million units):",
        "",
        "  | unit | " + " | ".join([f"{params.get('LogLevel')} (default)", *log_bytes_at]) + " |",
        "  |---|" + "---|" * (1 + len(log_bytes_at)),
        *[f"  {row}" for row in level_rows],
        "",
        "  Each level is measured in a process of its own (the loggers take their level at import). A level "
        "adds only what the code logs at it on these paths: the invocation events themselves are never logged "
        "(`log_event=False`), and the metric lines (embedded metric format, written at any level) stay.",
        f"- **Retention** (log groups keep {', '.join(str(days) for days in retention)} days). Storage is billed "
        "per GB-month (price not found): about the ingested GB per month times retention / 30 days.",
        f"- **Memory sizes** ({memory}). Lambda GB-s are memory x duration: the GB-s lines scale with MemorySize "
        "(and the CPU share with it, which shortens CPU-bound durations).",
        f"- **Probe schedule** (`ProbeScheduleExpression`, default {params.get('ProbeScheduleExpression')}). "
        f"Each firing costs {money(per_firing, 7)} with nothing registered (ProbeDispatcher and its requests); "
        "rate(5 minutes) divides the schedule lines of the idle total by 5. Each registered endpoint adds a "
        "probe cycle per firing (the probe row above).",
        "- **API-key cache** (`ApiKeysCacheSeconds`, default "
        f"{params.get('ApiKeysCacheSeconds')} s). McpServer reads the key table through the Parameters and "
        "Secrets extension, which caches it for SECRETS_MANAGER_TTL (at most 300 s: "
        "<https://github.com/aws-samples/aws-lambda-extensions/issues/104>): one GetSecretValue per execution "
        "environment per TTL while it serves, none per request (a warm unit above counts none): "
        f"{secret_calls_month:,.0f} calls, {money(secret_month)} a month for each environment kept busy all "
        "month (unverified price). A shorter cache costs more calls; 0 reads the secret on every request.",
        rate_limit_leases(params, prices["dynamodb_write_request_unit"]),
        daily_job_leases(params, prices["dynamodb_write_request_unit"]),
        "- **Alarm e-mail** (`AlarmEmail`, default empty). Setting it creates the alarm topic's KMS key: "
        f"{money(prices['kms_key_month'].of(1))} a month, and as much again for each yearly rotation's new "
        "backing key (`EnableKeyRotation`; <https://aws.amazon.com/kms/pricing/>).",
        "",
    ]


# The template's TracingSampleRate default: the share of traces recorded when a request brings no sampled parent.
DEFAULT_SAMPLE_RATE = 0.05


def tracing(prices: dict[str, Price], spans: dict[str, dict[str, float]]) -> list[str]:
    """What Tracing=xray adds per million units: the spans each unit writes (counted on the local stack, every
    trace sampled), priced as X-Ray prices them, with every unit traced and at the default sample rate."""
    recorded, ingestion = prices["xray_trace_recorded"], prices["xray_span_ingestion_gb"]
    logs = prices["cloudwatch_logs_ingestion_gb"]
    traces = recorded.of(MILLION) or 0.0
    rows = []
    for name in UNIT_ORDER:
        if name not in spans:
            continue
        count, size = spans[name]["spans"], spans[name]["bytes"]
        gb = size * MILLION / GB
        stand_in = logs.of(gb) or 0.0
        rows.append(
            f"| {name} | {count:.1f} | {size / 1024:.1f} KB | {gb:.2f} GB: {money(ingestion.of(gb))} "
            f"({money(stand_in)} at the Logs ingestion price) | {money(traces)} | "
            f"{money(traces + stand_in)} | {money((traces + stand_in) * DEFAULT_SAMPLE_RATE)} |"
        )
    return [
        "## Tracing",
        "",
        "`Tracing=xray` (off by default) sends each sampled trace's spans to X-Ray's OTLP endpoint "
        "([operations](operations.md#traces)). What it adds per million units, on top of the per-unit table "
        "above. Spans per unit and their size are counted on the local stack with `Tracing=otlp`, every trace "
        "sampled (`python -m tests.cost --spans`). X-Ray's OTLP endpoint needs CloudWatch Transaction Search, "
        "which bills spans as span ingestion per GB (no page with the figure was found: the column gives the "
        "volume, and the CloudWatch Logs ingestion price as a stand-in); without Transaction Search, X-Ray bills "
        f"each trace recorded ({money(recorded.of(MILLION))} per million, <https://aws.amazon.com/xray/pricing/>). "
        "The last two columns add both, an upper bound. `TracingSampleRate` (default "
        f"{DEFAULT_SAMPLE_RATE}) scales every tracing figure for requests without a sampled parent. What tracing "
        "adds to Lambda's duration (exporting after each response): [benchmarks](benchmarks.md), "
        '"Tracing on and off".',
        "",
        "| unit | spans | span bytes | span ingestion per million units | traces recorded per million, every unit "
        "sampled | both, every unit traced | both, default sample rate |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


UNIT_ORDER = ("tools/list", "tools/call", "job", "probe")

# A durable job's datasets, modeled (the local stack's cost run keeps DurableWorker at its default, off).
DURABLE_DATASETS_GIB = (0.25, 1, 10)
# Durable operations of a chunked job besides its chunks: the execution itself and the steps start, plan, result
# (mcp_backend.jobs.durable).
DURABLE_FIXED_OPERATIONS = 4


def durable_jobs(prices: dict[str, Price], params: dict[str, Any]) -> list[str]:
    """What a durable job adds (DurableWorker=Enabled): its operations priced per the Lambda pricing page, the
    checkpoint data as volume per KB a step stores, kept DurableRetentionDays after the job ends."""
    operation = prices["lambda_durable_operation"]
    written, retained = prices["lambda_durable_data_written_gb"], prices["lambda_durable_data_retained_gb_month"]
    retention_days = int(params.get("DurableRetentionDays", 7))
    rows = []
    for gib in DURABLE_DATASETS_GIB:
        chunks = math.ceil(gib * GB / DURABLE_CHUNK_BYTES)
        operations = chunks + DURABLE_FIXED_OPERATIONS
        per_kb_gb = operations * 1024 / GB
        rows.append(
            f"| {gib:g} GiB | {chunks:,} | {operations:,} | {money(operation.of(operations), 6)} "
            f"| {money(operation.of(operations * MILLION))} "
            f"| {per_kb_gb * 1024**2:,.0f} KB: {money(written.of(per_kb_gb))} "
            f"| {per_kb_gb * retention_days / 30 * 1024**2:,.1f} KB-months: {money(retained.of(per_kb_gb))} |"
        )
    return [
        "## Durable jobs",
        "",
        "`DurableWorker=Enabled` (off by default) runs a long job as a Lambda durable execution "
        "([job pipeline](job-pipeline.md)). Idle it bills nothing but its three alarms (the profile table above): "
        "the function is billed per request and GB-s like ToolWorker when it runs. Each job adds durable "
        f"operations at {price_text(operation)} ({operation.note}): the execution itself and its steps "
        f"(start, plan, one per {DURABLE_CHUNK_BYTES // 1024**2} MiB chunk of the dataset, result). An execution "
        "counts at most 3,000 operations and 100 MB of data written, as Lambda's metric descriptions give them "
        "(<https://docs.aws.amazon.com/lambda/latest/dg/durable-monitoring.html>). Each step's "
        "checkpoint is data written, kept as data retained until `DurableRetentionDays` "
        f"(default {retention_days}) after the job ends; both are billed per GB (no page with either figure was "
        "found: the columns give the volume for each KB a step stores, a partial aggregate of the dataset's "
        "columns). Modeled from the worker's steps, not counted on the local stack.",
        "",
        "| dataset | chunks | operations | $ per job (operations) | $ per million jobs | data written per KB a "
        "step stores | data retained, per KB a step stores |",
        "|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def rate_limit_leases(params: dict[str, Any], write: Price) -> str:
    tiers = []
    for tier in ("Free", "Pro"):
        limit = int(params.get(f"{tier}RequestsPerMinute", 0))
        if limit:
            block = block_size(limit)
            tiers.append(
                f"{tier.lower()} {limit} a minute, blocks of {block}: 1/{block} UpdateItem per request, "
                f"{money(write.of(MILLION / block))} per million requests"
            )
    return (
        "- **Request rate limit** (`FreeRequestsPerMinute`, `ProRequestsPerMinute`). An endpoint instance leases a "
        "block of a principal's requests (a tenth of its tier's limit, 1 to 50; a busy principal's leases ahead "
        "grow to about a second of its rate, at most a tenth of the limit) with one UpdateItem of "
        "RateLimitTable and admits them without a write, so whether a warm unit above counts one "
        "(`dynamodb:UpdateItem (rate-limit lease)`) depends on where it falls in a block. With one instance "
        "serving the principal: "
        + "; ".join(tiers)
        + ". Each further instance serving the principal in a minute adds a lease, and one more write finds a "
        "spent minute. The figures are the most a lease costs: a principal sending more than a block a second "
        "is leased more at a time."
    )


def daily_job_leases(params: dict[str, Any], write: Price) -> str:
    tiers = []
    for tier in ("Free", "Pro"):
        limit = int(params.get(f"{tier}DailyJobs", 0))
        if limit:
            block = daily_block(limit, 0)
            tiers.append(
                f"{tier.lower()} {limit:,} a day, a first block of {block}: 1/{block} UpdateItem per job, "
                f"{money(write.of(MILLION / block))} per million jobs"
            )
    return (
        "- **Daily job quota** (`FreeDailyJobs`, `ProDailyJobs`). An endpoint instance leases a block of a "
        "caller's jobs for the day (a tenth of what is left of the day's limit, 1 to 50) with one UpdateItem of "
        "JobTable and admits them without a write, so a warm job above counts none or one, by where it falls "
        "in a block: "
        + "; ".join(tiers)
        + ". Blocks shrink as the day fills, and each further instance serving the caller that day adds its "
        "own leases. A job's own items are three whatever the tier (the job, its claim, its end)."
    )


def method() -> list[str]:
    return [
        "## How the figures are counted",
        "",
        "- Requests: every call any boto3 client in the process makes (`tests/cost/counting.py` wraps botocore's "
        "`BaseClient._make_api_call`), so a function's lazily built clients count too. The local stack's own "
        "clients, which play AWS (event-source pollers, destinations, TTL sweeps, the SNS/EventBridge taps), "
        "count only where AWS bills the account: an SQS event source mapping's receives that return messages and "
        "its deletes, and destination deliveries to SQS/SNS/EventBridge. Kinesis reads by the mapping are "
        "billed per GB read in on-demand mode (counted as bytes, not requests); DynamoDB Streams reads by a "
        "Lambda trigger are not counted (no page on their price was found). An empty long poll is idle cost "
        "(one poller per mapping, 20 s polls, as the local stack "
        "polls; AWS may run more pollers per mapping).",
        "- Lambda: one request per invocation; McpServer is invoked once per HTTP request to its Function URL. "
        "Durations are the median wall time of each invocation measured in-process against moto on loopback, "
        "not AWS's: DynamoDB, SQS and Kinesis latencies on AWS differ, the Web Adapter hop is not in it, cold "
        "starts are left out. Priced at the Arm rate, rounded up to the millisecond.",
        "- DynamoDB: one request unit per request (items under 1 KB written, under 4 KB read, reads strongly "
        "consistent: an upper bound for eventually consistent ones); a Scan or Query reading more items costs more. "
        "A TransactWriteItems is one request but two write units per item it writes (prepare and commit: "
        "<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/read-write-operations.html>), priced "
        "on a line of its own; a BatchWriteItem, one write unit per item. Items written and write units are "
        "the tables' own (a refused conditional write writes nothing, but is billed a write unit: not counted). "
        "A global secondary index bills its own writes, which a request does not show "
        "(<https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html#GSI.Writes>): JobTable's "
        "`ActiveJobsByUser` adds two write units per job (the job put into it, and its end taking it out), "
        "`FailedJobsByUser` one per failed job, `JobsByUser` one per job (its put); not in the figures above.",
        "- Logs: the bytes the functions write to stdout while the unit runs (what CloudWatch Logs ingests), "
        "without the START/END/REPORT lines Lambda adds.",
        "",
    ]
