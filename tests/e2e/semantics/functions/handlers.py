"""Small handlers whose only job is to show, in SeenTable, what the local stack delivered."""

import base64
import json
import os

import boto3


def _seen(item_id: str, **attributes) -> None:
    """Count one delivery of item_id (and keep the latest attributes seen with it)."""
    expression = "ADD deliveries :one"
    values = {":one": {"N": "1"}}
    if attributes:
        expression += " SET " + ", ".join(f"{name} = :{name}" for name in attributes)
        values.update({f":{name}": {"S": str(value)} for name, value in attributes.items()})
    boto3.client("dynamodb").update_item(
        TableName=os.environ["SEEN_TABLE"],
        Key={"id": {"S": item_id}},
        UpdateExpression=expression,
        ExpressionAttributeValues=values,
    )


def queue_consumer(event, context):
    failures = []
    for record in event["Records"]:
        body = json.loads(record["body"])
        _seen(f"sqs:{body['id']}", receiveCount=record["attributes"]["ApproximateReceiveCount"])
        if body.get("fail"):
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


def stream_consumer(event, context):
    """Reports the first poison record it meets; errors when a batch starts with one."""
    for index, record in enumerate(event["Records"]):
        data = json.loads(base64.b64decode(record["kinesis"]["data"]))
        if data.get("poison"):
            if index == 0:
                raise RuntimeError(f"poison record {data['id']}")
            return {"batchItemFailures": [{"itemIdentifier": record["kinesis"]["sequenceNumber"]}]}
        _seen(f"kinesis:{data['id']}")
    return {"batchItemFailures": []}


def expiry_consumer(event, context):
    for record in event["Records"]:
        _seen(f"expired:{record['dynamodb']['Keys']['id']['S']}")


def async_worker(event, context):
    if event.get("fail"):
        raise ValueError(f"asked to fail: {event.get('id')}")
    _seen(f"async:{event.get('id', event.get('source'))}")
    return {"handled": event.get("id", event.get("source"))}


def dispatcher(event, context):
    """Invokes the worker asynchronously through the Lambda API, as ProbeDispatcher will."""
    response = boto3.client("lambda").invoke(
        FunctionName=os.environ["WORKER_NAME"], InvocationType="Event", Payload=json.dumps(event["forward"])
    )
    return {"status": response["StatusCode"]}


def notice_consumer(event, context):
    for record in event["Records"]:
        _seen(f"sns:{record['Sns']['Message']}")


def audit_consumer(event, context):
    _seen(f"events:{event['detail']['id']}")
