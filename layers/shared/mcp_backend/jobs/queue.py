"""What ToolWorker does to JobQueue messages besides consuming them: move a permanently failed job's
message to the DLQ itself, with the reason.

Nothing extends a running job's visibility: JobQueue's VisibilityTimeout is six times the worker's
Timeout (the WorkerTimeouts mapping), so Lambda stops a job long before its message can reappear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from mcp_backend.aws import client_or_lazy
from mcp_backend.jobs.models import JobError

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueTypeDef

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
    def __init__(self, dead_letter_queue_url: str, client: SQSClient | None = None) -> None:
        self.dead_letter_queue_url = dead_letter_queue_url
        self._client = client_or_lazy(client, "sqs")

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
