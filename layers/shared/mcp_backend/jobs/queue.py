"""What ToolWorker does to JobQueue messages besides consuming them: keep a long job's message hidden
(ChangeMessageVisibility) and move a permanently failed job's message to the DLQ itself, with the reason.

ChangeMessageVisibility counts the new timeout from the call and accepts 0-43200 s, at most 12 hours
after the receive
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_ChangeMessageVisibility.html).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from mcp_backend.aws import client_or_lazy
from mcp_backend.jobs.models import JobError
from mcp_backend.observability import logger

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

MAX_VISIBILITY_TIMEOUT_SECONDS = 43200  # 12 hours, ChangeMessageVisibility's ceiling
BATCH_LIMIT = 10  # entries per ChangeMessageVisibilityBatch
JOB_TYPE_ATTRIBUTE = "jobType"
# What a dead-lettered message carries besides its body, so the DLQ alone says why it is there.
FAILURE_TYPE_ATTRIBUTE = "failureType"
FAILURE_REASON_ATTRIBUTE = "failureReason"
SOURCE_MESSAGE_ATTRIBUTE = "sourceMessageId"


def job_type_of(record: SQSRecord) -> str | None:
    """The message's jobType String attribute (the tool it names), None when it has none."""
    attribute = record.message_attributes[JOB_TYPE_ATTRIBUTE]
    if attribute is None or attribute.data_type != "String":
        return None
    return attribute.string_value


class JobQueueMessages:
    def __init__(self, queue_url: str, dead_letter_queue_url: str, client: SQSClient | None = None) -> None:
        self.queue_url = queue_url
        self.dead_letter_queue_url = dead_letter_queue_url
        self._client = client_or_lazy(client, "sqs")

    def extend_visibility(self, receipt_handles: list[str], seconds: int) -> None:
        """Hide each message `seconds` more from now; a handle SQS refuses (deleted, expired) is logged and
        left alone: the heartbeat must never fail the job it protects."""
        seconds = max(0, min(seconds, MAX_VISIBILITY_TIMEOUT_SECONDS))
        for start in range(0, len(receipt_handles), BATCH_LIMIT):
            chunk = receipt_handles[start : start + BATCH_LIMIT]
            try:
                response = self._client.change_message_visibility_batch(
                    QueueUrl=self.queue_url,
                    Entries=[
                        {"Id": str(index), "ReceiptHandle": handle, "VisibilityTimeout": seconds}
                        for index, handle in enumerate(chunk)
                    ],
                )
            except Exception as error:  # noqa: BLE001 - a missed extension only risks a duplicate delivery
                logger.warning("visibility not extended", extra={"error_type": type(error).__name__})
                continue
            for failed in response.get("Failed", []):
                logger.warning("visibility not extended", extra={"error_code": failed.get("Code")})

    def dead_letter(self, record: SQSRecord, error: JobError) -> str:
        """Send the message's body to the DLQ with why it failed; returns the DLQ message's id.

        Raises when SQS refuses: the record then fails and stays on JobQueue, so nothing is lost.
        """
        attributes: dict[str, MessageAttributeValueTypeDef] = {
            FAILURE_TYPE_ATTRIBUTE: {"DataType": "String", "StringValue": error.type},
            FAILURE_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": error.message or "-"},
            SOURCE_MESSAGE_ATTRIBUTE: {"DataType": "String", "StringValue": record.message_id},
        }
        job_type = job_type_of(record)
        if job_type:
            attributes[JOB_TYPE_ATTRIBUTE] = {"DataType": "String", "StringValue": job_type}
        sent = self._client.send_message(
            QueueUrl=self.dead_letter_queue_url, MessageBody=record.body or "-", MessageAttributes=attributes
        )
        return str(sent["MessageId"])
