"""The tests' local stack creates each template resource when it is first touched: a test pays for the few it
uses, and what it touches behaves as on a stack created whole."""

from __future__ import annotations

import boto3
import pytest

ALARM = "ToolWorkerDeploymentErrorsAlarm"


def alarm_names() -> list[str]:
    return [alarm["AlarmName"] for alarm in boto3.client("cloudwatch").describe_alarms()["MetricAlarms"]]


def test_a_resource_no_test_touched_is_not_created(local):
    # Given the tests' stack, nothing touched yet
    # Then the alarm on the worker's alias was never created in moto
    assert ALARM not in local.stack.created
    assert alarm_names() == []


def test_a_queue_first_touched_is_created_with_what_it_references(local):
    # When a test asks for the job queue's URL
    url = local.queue_url("JobQueue")

    # Then the queue exists with its redrive policy, and the dead-letter queue it names was created first
    attributes = boto3.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
    assert local.stack.ensure("JobDeadLetterQueue").attributes["Arn"] in attributes["Attributes"]["RedrivePolicy"]


def test_a_key_alias_a_function_names_as_text_is_there_before_anything_refers_to_it(local):
    # Given an alias a function's code addresses by its name, which no template reference creates
    alias = local.stack.template.resource("EndpointTokenKeyAlias")["Properties"]["AliasName"]["Fn::Sub"]
    name = alias.replace("${AWS::StackName}", local.stack.stack_name)

    # When a test encrypts with it
    sealed = boto3.client("kms").encrypt(KeyId=name, Plaintext=b"token")

    # Then it names the template's key
    assert sealed["KeyId"] == local.stack.ensure("EndpointTokenKey").attributes["Arn"]


def test_a_lookup_by_physical_arn_creates_the_rest_and_finds_it(local):
    # Given the ARN a created-whole stack gives the worker's alarm, not created yet
    arn = f"arn:aws:cloudwatch:{local.stack.region}:123456789012:alarm:{local.stack.physical_name(ALARM)}"

    # When something looks its logical id up by that ARN
    logical_id = local.stack.logical_id_for_arn(arn)

    # Then the stack is completed and the alarm found
    assert logical_id == ALARM
    assert local.stack.physical_name(ALARM) in alarm_names()
    with pytest.raises(KeyError):
        local.stack.logical_id_for_arn("arn:aws:sqs:us-east-1:123456789012:no-such-queue")
