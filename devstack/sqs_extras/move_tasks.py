"""SQS message move tasks (StartMessageMoveTask, ListMessageMoveTasks), which moto does not implement,
answered in front of the moto server.

https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html
- the source is a queue that is another queue's dead-letter queue; the destination is DestinationArn
  (without one AWS returns messages to their original source queues, which is not emulated: refused);
- one active task per source queue; a task moves the messages that are in the source when it runs.
The emulated task runs to completion inside the Start call (body and message attributes copied, then
the source message deleted), so ListMessageMoveTasks already reports it COMPLETED.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import boto3
from werkzeug.serving import make_server

from devstack.stack.moto_internals import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    ThreadedMotoServer,
    create_backend_app,
)

TARGET_PREFIX = "AmazonSQS."
BATCH = 10

Environ = dict[str, Any]
StartResponse = Callable[..., Any]
Wsgi = Callable[[Environ, StartResponse], Iterable[bytes]]


class MessageMoveTasks:
    """The WSGI layer: SQS move-task actions are answered here, every other request goes to moto."""

    def __init__(self, app: Wsgi, endpoint_url: Callable[[], str]) -> None:
        self.app = app
        self.endpoint_url = endpoint_url
        self.tasks: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        action = environ.get("HTTP_X_AMZ_TARGET", "")
        handler = {
            f"{TARGET_PREFIX}StartMessageMoveTask": self._start,
            f"{TARGET_PREFIX}ListMessageMoveTasks": self._list,
        }.get(action)
        if handler is None:
            return self.app(environ, start_response)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        request = json.loads(environ["wsgi.input"].read(length) or b"{}")
        status, body = handler(request)
        payload = json.dumps(body).encode()
        start_response(
            f"{status} {'OK' if status == 200 else 'Bad Request'}",
            [("Content-Type", "application/x-amz-json-1.0"), ("Content-Length", str(len(payload)))],
        )
        return [payload]

    # ------------------------------------------------------------------ actions
    def _start(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        source, destination = request.get("SourceArn", ""), request.get("DestinationArn")
        if not destination:
            return _error(
                "UnsupportedOperation", "the local stack needs DestinationArn (original-source redrive is not emulated)"
            )
        sqs = self._client()
        try:
            source_url, destination_url = (self._queue_url(sqs, arn) for arn in (source, destination))
        except LookupError as missing:
            return _error("ResourceNotFoundException", str(missing))
        if not self._is_dead_letter_queue(sqs, source):
            return _error("InvalidParameterValue", "the source queue is not a dead-letter queue of any queue")
        with self._lock:
            if any(task["SourceArn"] == source and task["Status"] == "RUNNING" for task in self.tasks):
                return _error("UnsupportedOperation", "the source queue already has an active message move task")
            task = {
                "TaskHandle": uuid.uuid4().hex,
                "Status": "RUNNING",
                "SourceArn": source,
                "DestinationArn": destination,
                "ApproximateNumberOfMessagesMoved": 0,
                "StartedTimestamp": int(time.time() * 1000),
            }
            self.tasks.append(task)
        task["ApproximateNumberOfMessagesToMove"] = int(
            sqs.get_queue_attributes(QueueUrl=source_url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
                "ApproximateNumberOfMessages"
            ]
        )
        task["ApproximateNumberOfMessagesMoved"] = _move(sqs, source_url, destination_url)
        task["Status"] = "COMPLETED"
        return 200, {"TaskHandle": task["TaskHandle"]}

    def _list(self, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        source = request.get("SourceArn", "")
        limit = int(request.get("MaxResults") or 1)
        with self._lock:
            mine = [dict(task) for task in reversed(self.tasks) if task["SourceArn"] == source][:limit]
        return 200, {"Results": mine}

    # ------------------------------------------------------------------ helpers
    def _client(self) -> Any:
        return boto3.client("sqs", endpoint_url=self.endpoint_url(), region_name="us-east-1")

    @staticmethod
    def _queue_url(sqs: Any, arn: str) -> str:
        parts = arn.split(":")
        if len(parts) != 6 or parts[2] != "sqs":
            raise LookupError(f"not an SQS queue ARN: {arn!r}")
        try:
            return str(sqs.get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"])
        except sqs.exceptions.QueueDoesNotExist:
            raise LookupError(f"no queue {arn}") from None

    @staticmethod
    def _is_dead_letter_queue(sqs: Any, arn: str) -> bool:
        for url in sqs.list_queues().get("QueueUrls", []):
            policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"]).get("Attributes", {})
            if json.loads(policy.get("RedrivePolicy", "{}")).get("deadLetterTargetArn") == arn:
                return True
        return False


def _move(sqs: Any, source_url: str, destination_url: str) -> int:
    moved = 0
    while True:
        messages = sqs.receive_message(
            QueueUrl=source_url, MaxNumberOfMessages=BATCH, VisibilityTimeout=60, MessageAttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return moved
        sqs.send_message_batch(
            QueueUrl=destination_url,
            Entries=[
                {
                    "Id": str(index),
                    "MessageBody": message["Body"],
                    **({"MessageAttributes": message["MessageAttributes"]} if message.get("MessageAttributes") else {}),
                }
                for index, message in enumerate(messages)
            ],
        )
        sqs.delete_message_batch(
            QueueUrl=source_url,
            Entries=[{"Id": str(index), "ReceiptHandle": m["ReceiptHandle"]} for index, m in enumerate(messages)],
        )
        moved += len(messages)


def _error(code: str, message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"__type": f"com.amazonaws.sqs#{code}", "message": message}


class MotoServerWithMoveTasks(ThreadedMotoServer):
    """moto's threaded server with the move-task layer in front of its application, answering on a socket
    already listening."""

    def __init__(self, listener: socket.socket) -> None:
        host, port = listener.getsockname()[:2]
        super().__init__(ip_address=host, port=port, verbose=False)
        self._listener = listener

    def _server_entry(self) -> None:
        app = MessageMoveTasks(DomainDispatcherApplication(create_backend_app), self._endpoint_url)
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler, fd=self._listener.fileno()
        )
        self._server_ready_event.set()
        self._server.serve_forever()

    def _endpoint_url(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"
