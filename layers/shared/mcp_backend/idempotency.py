"""Powertools idempotency, configured once for every consumer: a required key, a TTL, and an
INPROGRESS expiry that follows the function's configured timeout (timeout + 5 s).

Jobs are keyed on jobId and validated against the job's fingerprint, with the job item itself as the record
(jobs/run_records.py); stream records on their position in the stream, in IdempotencyTable.

Every other module takes Powertools' idempotency names from here: the package's `__init__` imports its DynamoDB
persistence layer, and with it boto3, which is most of a worker's import (docs/benchmarks.md, "Functions: cold
import and what each loads"). Here it is deferred: the submodules below import without it, and the DynamoDB
layer loads with the first record a consumer runs once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import aws_lambda_powertools.utilities  # noqa: F401 - its parents' __init__ run as usual: only the one below waits

from mcp_backend.lazy_imports import package_init_deferred

# Its __init__ runs when the first RunOnce builds its DynamoDB persistence layer (a name only the __init__ binds).
_powertools_idempotency = package_init_deferred("aws_lambda_powertools.utilities.idempotency")

from aws_lambda_powertools.utilities.idempotency.config import IdempotencyConfig
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyItemAlreadyExistsError,
    IdempotencyItemNotFoundError,
    IdempotencyKeyError,
    IdempotencyPersistenceLayerError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.idempotency.idempotency import idempotent_function
from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import STATUS_CONSTANTS, DataRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

__all__ = [
    "STATUS_CONSTANTS",
    "BasePersistenceLayer",
    "DataRecord",
    "IdempotencyAlreadyInProgressError",
    "IdempotencyItemAlreadyExistsError",
    "IdempotencyItemNotFoundError",
    "IdempotencyKeyError",
    "IdempotencyPersistenceLayerError",
    "IdempotencyValidationError",
    "RunOnce",
    "run_once_or_none",
]

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

# A Lambda is stopped at its timeout; this buffer covers the gap between that and the
# record's last write settling.
IN_PROGRESS_BUFFER_SECONDS = 5

ResultT = TypeVar("ResultT")


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


class RunOnce:
    """`fn`, run at most once per key: the key is read from the keyword argument `data_keyword_argument`.

    A repeated key returns the first run's (small, JSON-serialisable) result without running `fn`;
    a failed run stores nothing, so the retry runs again. The records live in IdempotencyTable (`table_name`)
    unless `persistence` builds a layer of its own.
    """

    def __init__(
        self,
        fn: Callable[..., ResultT],
        *,
        data_keyword_argument: str,
        key_jmespath: str,
        ttl_seconds: int,
        timeout_seconds: int,
        table_name: str = "",
        validation_jmespath: str | None = None,
        client: DynamoDBClient | None = None,
        persistence: Callable[[], BasePersistenceLayer] | None = None,
    ) -> None:
        self.timeout_seconds = timeout_seconds
        # Powertools hashes a pydantic model's field names (model_dump), never its JSON aliases.
        self.config = IdempotencyConfig(
            event_key_jmespath=key_jmespath,
            payload_validation_jmespath=validation_jmespath or "",
            raise_on_no_idempotency_key=True,
            expires_after_seconds=ttl_seconds,
        )
        self._fn = fn
        self._data_keyword_argument = data_keyword_argument
        self._table_name = table_name
        self._client = client
        self._persistence = persistence
        self._call: Callable[..., Any] | None = None
        self._building = threading.Lock()

    def idempotent_call(self) -> Callable[..., Any]:
        """`fn` wrapped by Powertools, built on the first record, not when the handler module loads: the
        persistence layer creates its DynamoDB client as it is constructed, and a cold start should pay
        for that only when used. Built once even when a batch's records arrive at once, each on its own
        thread (without the lock each would build a client of its own)."""
        if self._call is not None:
            return self._call
        with self._building:
            if self._call is not None:
                return self._call
            persistence = (
                self._persistence()
                if self._persistence is not None
                else _powertools_idempotency.DynamoDBPersistenceLayer(
                    table_name=self._table_name, boto3_client=self._client
                )
            )
            self._call = idempotent_function(
                data_keyword_argument=self._data_keyword_argument, config=self.config, persistence_store=persistence
            )(self._fn)
            return self._call

    def start_invocation(self, lambda_context: Any) -> None:
        # The proxy answers like the context it wraps, except for the remaining time.
        self.config.register_lambda_context(cast(LambdaContext, InProgressWindow(lambda_context, self.timeout_seconds)))

    def __call__(self, **kwargs: Any) -> Any:
        return self.idempotent_call()(**kwargs)


def run_once_or_none(
    fn: Callable[..., Any],
    settings: Any,
    *,
    data_keyword_argument: str,
    key_jmespath: str,
    idempotent: bool = True,
    client: DynamoDBClient | None = None,
    ttl_seconds: int | None = None,
) -> RunOnce | None:
    """RunOnce configured from a consumer's settings (idempotency table, TTL, function timeout);
    None when `idempotent` is False (tests that exercise the body alone)."""
    if not idempotent:
        return None
    return RunOnce(
        fn,
        data_keyword_argument=data_keyword_argument,
        key_jmespath=key_jmespath,
        table_name=settings.idempotency_table_name,
        ttl_seconds=ttl_seconds or settings.idempotency_ttl_seconds,
        timeout_seconds=settings.function_timeout_seconds,
        client=client,
    )
