"""Does one job's trace reach X-Ray on a deployed stack (Tracing=xray)? `make smoke ... TRACE=1`.

The smoke check's client sends a sampled `traceparent` with every request; this module reads that trace back from
the Transaction Search log group through X-Ray's trace retrieval API (StartTraceRetrieval, then ListRetrievedTraces
in the OTEL format: one JSON document per span, its `name` among its fields) until it holds every span of one job,
from the request to the worker's tool run, or the wait is over. Spans take a while to be searchable after their
export, so it retrieves again until then.

The caller's credentials need `xray:StartTraceRetrieval` and `xray:ListRetrievedTraces`; the account needs
Transaction Search on, as Tracing=xray does (docs/operations.md, "Traces").
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

# The spans one submitted job's trace holds, as `make dev` shows them (tests/e2e/test_traces.py): the request, the
# SDK's MCP span, the queue hop's two ends, the worker's tool run.
ONE_JOB_SPANS = (
    "POST /mcp",
    "tools/call submit_analysis",
    "send JobQueue",
    "process JobQueue",
    "execute_tool analyze_dataset",
)
FINISHED = {"COMPLETE"}
FAILED = {"FAILED", "CANCELLED", "TIMEOUT"}
SPANS_DEADLINE_SECONDS = 600  # a bound on waiting for spans to be searchable, not a latency expectation
RETRIEVE_EVERY_SECONDS = 30
POLL_SECONDS = 3


def new_sampled_traceparent() -> tuple[str, str]:
    """A new W3C trace id (32 hex digits) and a `traceparent` naming a sampled client span in it."""
    trace_id, parent_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, f"00-{trace_id}-{parent_id}-01"


def xray_trace_id(trace_id: str) -> str:
    """The W3C trace id as X-Ray writes it: `1-<first 8 digits>-<other 24>`."""
    if len(trace_id) != 32 or any(c not in "0123456789abcdef" for c in trace_id):
        raise ValueError("a W3C trace id is 32 lowercase hex digits")
    return f"1-{trace_id[:8]}-{trace_id[8:]}"


def retrieved_span_names(
    xray: Any, trace_id: str, since: datetime, until: datetime, sleep: Callable[[float], None]
) -> set[str]:
    """One retrieval of the trace's spans between `since` and `until`: the names of the spans found."""
    token = xray.start_trace_retrieval(TraceIds=[xray_trace_id(trace_id)], StartTime=since, EndTime=until)[
        "RetrievalToken"
    ]
    names: set[str] = set()
    next_token: str | None = None
    while True:
        page = xray.list_retrieved_traces(
            RetrievalToken=token, TraceFormat="OTEL", **({"NextToken": next_token} if next_token else {})
        )
        status = page["RetrievalStatus"]
        if status in FAILED:
            raise RuntimeError(f"the trace retrieval ended {status}")
        if status not in FINISHED:
            sleep(POLL_SECONDS)
            continue
        for trace in page.get("Traces", []):
            names |= {name for span in trace.get("Spans", []) if (name := _span_name(span.get("Document", "")))}
        next_token = page.get("NextToken")
        if not next_token:
            return names


def missing_spans(
    xray: Any,
    trace_id: str,
    since: datetime,
    *,
    now: Callable[[], datetime],
    sleep: Callable[[float], None] = time.sleep,
    deadline_seconds: float = SPANS_DEADLINE_SECONDS,
) -> list[str]:
    """The spans of ONE_JOB_SPANS the trace still lacks once they are all there or the deadline has passed (empty:
    the whole job reached X-Ray)."""
    give_up = now() + timedelta(seconds=deadline_seconds)
    while True:
        found = retrieved_span_names(xray, trace_id, since - timedelta(minutes=1), now(), sleep)
        missing = [name for name in ONE_JOB_SPANS if name not in found]
        if not missing or now() >= give_up:
            return missing
        sleep(RETRIEVE_EVERY_SECONDS)


def _span_name(document: str) -> str | None:
    try:
        span = json.loads(document)
    except ValueError:
        return None
    name = span.get("name") if isinstance(span, dict) else None
    return name if isinstance(name, str) else None
