"""`make redrive` against the running `make dev` stack: the operator's redrive (mcp_backend.jobs.redrive),
pointed at the stack's AWS endpoint and its JobQueue, JobDeadLetterQueue and JobTable. The move task
itself is answered by the stack (devstack.sqs_extras.move_tasks), as SQS answers it on AWS."""

from __future__ import annotations

import os

from devstack import shared_layer
from devstack.process_environment import LOCAL_CREDENTIALS
from devstack.stack.resources import LOCAL_STACK_NAME


def redrive_running_stack(aws_url: str, dry_run: bool) -> int:
    os.environ.update({**LOCAL_CREDENTIALS, "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": aws_url})
    shared_layer.put_on_path()  # the operator's tool ships in the layer
    from mcp_backend.aws import new_client
    from mcp_backend.jobs import redrive

    sqs = new_client("sqs")
    queue_url, dead_letter_queue_url = (
        sqs.get_queue_url(QueueName=f"{LOCAL_STACK_NAME}-{logical_id}")["QueueUrl"]
        for logical_id in ("JobQueue", "JobDeadLetterQueue")
    )
    arguments = ["--queue-url", queue_url, "--dead-letter-queue-url", dead_letter_queue_url]
    arguments += ["--table-name", f"{LOCAL_STACK_NAME}-JobTable"] + (["--dry-run"] if dry_run else [])
    return redrive.main(arguments)
