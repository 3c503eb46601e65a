"""Powertools idempotency for jobs: keyed on jobId (required), validated against userId."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.idempotency import DynamoDBPersistenceLayer, IdempotencyConfig

# A Lambda is stopped at its timeout; this buffer covers the gap between that and the
# record's last write settling (seed 001: timeout + 5 s).
IN_PROGRESS_BUFFER_SECONDS = 5


class InProgressWindow:
    """A Lambda context whose remaining time is the function's configured timeout + buffer.

    Powertools sets an INPROGRESS record's expiry from the registered context's remaining time;
    it has no setting of its own. Registering this proxy makes the expiry follow the Timeout the
    template configures, so a record left by a killed invocation unblocks retries after it.
    """

    def __init__(self, context: Any, timeout_seconds: int) -> None:
        self._context = context
        self.window_millis = (timeout_seconds + IN_PROGRESS_BUFFER_SECONDS) * 1000

    def get_remaining_time_in_millis(self) -> int:
        return self.window_millis

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def job_idempotency(table_name: str, ttl_seconds: int, client: Any = None) -> tuple[IdempotencyConfig, Any]:
    # Powertools hashes the model's field names (model_dump), hence job_id/user_id, not the aliases.
    config = IdempotencyConfig(
        event_key_jmespath="job_id",
        payload_validation_jmespath="user_id",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=ttl_seconds,
    )
    persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=client)
    return config, persistence
