"""RunOnce builds its Powertools idempotency wrapper once per execution environment."""

from __future__ import annotations

import threading
import time
from typing import Any

import aws_lambda_powertools.utilities.idempotency as powertools_idempotency
import pytest

from mcp_backend.idempotency import RunOnce


def test_records_arriving_at_once_share_one_persistence_layer(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a RunOnce not used yet, and a count of the persistence layers built: each builds its own
    # DynamoDB client when none is injected, tens of ms of CPU
    built: list[Any] = []

    class CountedPersistence(powertools_idempotency.DynamoDBPersistenceLayer):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(self)
            time.sleep(0.05)  # as long as building a client takes: the other records arrive meanwhile
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(powertools_idempotency, "DynamoDBPersistenceLayer", CountedPersistence)
    run_once = RunOnce(
        lambda job: job,
        data_keyword_argument="job",
        key_jmespath="job_id",
        table_name="idempotency",
        ttl_seconds=3600,
        timeout_seconds=30,
        client=object(),
    )
    # When the ten records of a first batch, each on its own thread, reach it at the same moment
    start = threading.Barrier(10, timeout=10)
    wrapped: list[Any] = []

    def first_record() -> None:
        start.wait()
        wrapped.append(run_once.idempotent_call())

    threads = [threading.Thread(target=first_record) for _ in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    # Then one persistence layer was built, and every record runs through the same wrapper
    assert len(built) == 1
    assert len(wrapped) == 10 and all(call is wrapped[0] for call in wrapped)
