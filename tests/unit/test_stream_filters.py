"""The stream mappings' FilterCriteria, read from template.yaml, against every stream fixture: what
each consumer is invoked with (healthy vs failing call-log events, INSERT vs MODIFY, TTL vs manual delete)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from devstack.sources.filters import RecordFilter
from mcp_backend.calllog.models import ACTIONABLE, KEPT_FOR_STREAM_READERS
from tests.conftest import EVENTS, ROOT, load_event
from tests.kinesis import mapping_of

ANALYZER, DRIFT, ROLLUP = "CallLogAnalyzer", "DriftDetector", "ExpiryRollup"
CONSUMERS_BY_SOURCE = {"aws:kinesis": [ANALYZER], "aws:dynamodb": [DRIFT, ROLLUP]}
T, F = True, False
# Per fixture, per consumer: does each record (in order) reach it?
EXPECTED = {
    "call_log_analyzer/mixed-batch.json": {
        # tool_call, tool_error, tool_call, job_failed, platform_report, non-JSON, invalid tool_error,
        # schema_drift, tool_error, tool_call
        ANALYZER: [F, T, F, T, T, F, T, T, T, F],
    },
    "call_log_analyzer/error-burst.json": {ANALYZER: [T] * 7},
    "monitor_table/probe-result-insert.json": {DRIFT: [T], ROLLUP: [F]},
    "monitor_table/endpoint-insert.json": {DRIFT: [F], ROLLUP: [F]},
    "monitor_table/endpoint-modify.json": {DRIFT: [F], ROLLUP: [F]},
    "monitor_table/probe-result-ttl-remove.json": {DRIFT: [F, F, F], ROLLUP: [T, T, T]},
    "monitor_table/probe-result-manual-remove.json": {DRIFT: [F], ROLLUP: [F]},
}
CASES = [(fixture, consumer) for fixture, by_consumer in EXPECTED.items() for consumer in by_consumer]


def stream_fixtures() -> set[str]:
    found = set()
    for path in EVENTS.rglob("*.json"):
        records = json.loads(path.read_text()).get("Records", [])
        if records and records[0].get("eventSource") in CONSUMERS_BY_SOURCE:
            found.add(str(path.relative_to(EVENTS)))
    return found


def test_every_stream_fixture_has_expectations_for_every_consumer_of_its_source():
    assert set(EXPECTED) == stream_fixtures()
    for fixture, by_consumer in EXPECTED.items():
        source = load_event(fixture)["Records"][0]["eventSource"]
        assert sorted(by_consumer) == sorted(CONSUMERS_BY_SOURCE[source]), fixture


@pytest.mark.parametrize(("fixture", "consumer"), CASES, ids=[f"{Path(f).stem}->{c}" for f, c in CASES])
def test_the_templates_filter_delivers_exactly_the_expected_records(fixture, consumer):
    # Given the consumer's FilterCriteria as template.yaml declares it
    record_filter = RecordFilter(mapping_of(consumer)["FilterCriteria"])

    # When every record of the fixture is evaluated
    matched = [record_filter.matches(record) for record in load_event(fixture)["Records"]]

    # Then exactly the expected ones pass
    assert matched == EXPECTED[fixture][consumer]


def test_the_analyzer_filter_passes_exactly_the_actionable_event_types():
    # Given one call-log record of each event type the shared model knows
    from mcp_backend.calllog.models import CallLogEventType

    record_filter = RecordFilter(mapping_of(ANALYZER)["FilterCriteria"])
    template = load_event("call_log_analyzer/mixed-batch.json")["Records"][0]

    def with_event_type(event_type: str) -> dict:
        data = json.dumps({"eventType": event_type}).encode()
        return {**template, "kinesis": {**template["kinesis"], "data": base64.b64encode(data).decode()}}

    # Then the filter lets through exactly the ones the analyzer acts on
    passed = {t for t in CallLogEventType if record_filter.matches(with_event_type(t))}
    assert passed == set(ACTIONABLE)


def test_a_manual_delete_differs_from_a_ttl_delete_only_by_its_user_identity():
    # Given a TTL delete, and the same record without the service identity, or with a person's
    ttl_record = load_event("monitor_table/probe-result-ttl-remove.json")["Records"][0]
    manual = {k: v for k, v in ttl_record.items() if k != "userIdentity"}
    by_a_person = {**ttl_record, "userIdentity": {"type": "AssumedRole", "principalId": "AROAEXAMPLE:alice"}}
    record_filter = RecordFilter(mapping_of(ROLLUP)["FilterCriteria"])

    # Then only the TTL delete reaches the rollup
    assert [record_filter.matches(r) for r in (ttl_record, manual, by_a_person)] == [True, False, False]


def producer_sources() -> list[str]:
    """The shared package's modules outside the call-log package (the model and the analyzer)."""
    package = ROOT / "layers" / "shared" / "mcp_backend"
    return [path.read_text() for path in package.rglob("*.py") if path.parent.name != "calllog"]


def test_every_event_type_the_analyzer_acts_on_has_a_producer():
    # Given the producers
    producers = producer_sources()

    # Then every event type the analyzer's filter lets through is written by one of them
    unproduced = {t for t in ACTIONABLE if not any(f"CallLogEventType.{t.name}" in source for source in producers)}
    assert unproduced == set()


def test_every_event_type_a_producer_writes_has_a_consumer():
    # Given every event type some producer writes
    from mcp_backend.calllog.models import CallLogEventType

    producers = producer_sources()
    produced = {t for t in CallLogEventType if any(f"CallLogEventType.{t.name}" in source for source in producers)}
    assert produced, "no producer found: the check would pass vacuously"

    # Then each is read by the analyzer (its filter passes it: the test above holds the filter to ACTIONABLE),
    # or is the usage record kept on the stream for the readers the docs name, and none is both
    unconsumed = produced - ACTIONABLE - KEPT_FOR_STREAM_READERS
    assert unconsumed == set()
    assert not ACTIONABLE & KEPT_FOR_STREAM_READERS
    streams_doc = (ROOT / "docs" / "streams.md").read_text()
    assert all(f"`{t}`" in streams_doc for t in KEPT_FOR_STREAM_READERS)
