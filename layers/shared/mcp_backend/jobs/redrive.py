"""Redrive: move the job DLQ's messages back to JobQueue after a fix, with SQS's message move task.

    python -m mcp_backend.jobs.redrive --stack mcp-backend-dev [--dry-run]

Lists what the DLQ holds (peeked: VisibilityTimeout=0 leaves every message visible), marks each FAILED job
PENDING again with its failure kept in its history (JobTable, through the job store), then starts
StartMessageMoveTask with the DLQ as source and JobQueue as destination; `--dry-run` only lists.
https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
The queues and table come from the stack's outputs (JobQueueUrl, JobDeadLetterQueueUrl, JobTableName) or
from --queue-url, --dead-letter-queue-url and --table-name.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mcp_backend.aws import new_client
from mcp_backend.jobs.models import JobMessage
from mcp_backend.jobs.store import JobStore

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

PEEK_ROUNDS = 100  # ReceiveMessage returns at most 10 a call and a sample of the queue: peek until no news


@dataclass(frozen=True)
class RedriveQueues:
    queue_url: str
    dead_letter_queue_url: str
    table_name: str


def peek(sqs: SQSClient, queue_url: str) -> list[MessageTypeDef]:
    seen: dict[str, MessageTypeDef] = {}
    for _ in range(PEEK_ROUNDS):
        messages = sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, VisibilityTimeout=0, MessageAttributeNames=["All"]
        ).get("Messages", [])
        fresh = [message for message in messages if message["MessageId"] not in seen]
        if not fresh:
            break
        seen.update((message["MessageId"], message) for message in fresh)
    return list(seen.values())


def describe(message: MessageTypeDef) -> dict[str, Any]:
    """What an operator needs to decide: the job, its tool, and why it failed (never its input)."""
    attributes = {name: value.get("StringValue") for name, value in message.get("MessageAttributes", {}).items()}
    try:
        job = JobMessage.model_validate_json(message["Body"])
        identity: dict[str, str | None] = {"jobId": job.job_id, "userId": job.user_id, "tool": job.tool}
    except ValidationError:
        identity = {"jobId": None, "note": "not a job message"}
    return {
        "messageId": message["MessageId"],
        **identity,
        "failureType": attributes.get("failureType"),
        "failureReason": attributes.get("failureReason"),
    }


def redrive(queues: RedriveQueues, *, dry_run: bool, sqs: SQSClient, store: JobStore) -> dict[str, Any]:
    waiting = [describe(message) for message in peek(sqs, queues.dead_letter_queue_url)]
    report: dict[str, Any] = {"dryRun": dry_run, "messages": waiting}
    if dry_run or not waiting:
        return report
    pending_again = []
    for message in waiting:
        job = store.get(message["jobId"]) if message.get("jobId") else None
        if job is not None and job.get("userId") == message.get("userId") and store.mark_redriven(job):
            pending_again.append(message["jobId"])
    arns = sqs.get_queue_attributes(QueueUrl=queues.queue_url, AttributeNames=["QueueArn"])["Attributes"]
    dead_arns = sqs.get_queue_attributes(QueueUrl=queues.dead_letter_queue_url, AttributeNames=["QueueArn"])
    task = sqs.start_message_move_task(SourceArn=dead_arns["Attributes"]["QueueArn"], DestinationArn=arns["QueueArn"])
    report.update(pendingAgain=pending_again, taskHandle=task["TaskHandle"])
    tasks = sqs.list_message_move_tasks(SourceArn=dead_arns["Attributes"]["QueueArn"], MaxResults=1)["Results"]
    if tasks:
        report["task"] = {key: tasks[0].get(key) for key in ("Status", "ApproximateNumberOfMessagesMoved")}
    return report


def stack_queues(stack_name: str) -> RedriveQueues:
    stacks = new_client("cloudformation").describe_stacks(StackName=stack_name)["Stacks"]
    outputs = {output["OutputKey"]: output["OutputValue"] for output in stacks[0].get("Outputs", [])}
    return RedriveQueues(outputs["JobQueueUrl"], outputs["JobDeadLetterQueueUrl"], outputs["JobTableName"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_backend.jobs.redrive", description=__doc__.split("\n")[0])
    parser.add_argument("--stack", help="the deployed stack's name (its outputs name the queues and the table)")
    parser.add_argument("--queue-url")
    parser.add_argument("--dead-letter-queue-url")
    parser.add_argument("--table-name")
    parser.add_argument("--dry-run", action="store_true", help="list what would move; move nothing")
    args = parser.parse_args(argv)
    if args.stack:
        queues = stack_queues(args.stack)
    elif args.queue_url and args.dead_letter_queue_url and args.table_name:
        queues = RedriveQueues(args.queue_url, args.dead_letter_queue_url, args.table_name)
    else:
        parser.error("give --stack, or --queue-url, --dead-letter-queue-url and --table-name")
    sqs = new_client("sqs")
    report = redrive(queues, dry_run=args.dry_run, sqs=sqs, store=JobStore(queues.table_name))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
