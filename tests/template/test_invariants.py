"""Rules the template must keep, checked on the aws-sam-translator expansion of template.yaml.

cfn-lint and `sam validate --lint` do not catch these (short visibility timeouts, bisect on SQS,
broad IAM, unencrypted stores), so each is a test here.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from devstack.sources.filters import RecordFilter
from devstack.stack.intrinsics import Scope
from devstack.stack.template import load_template
from mcp_backend.monitor.items import AUTH_CIPHERTEXT

TEMPLATE = load_template()
EXPANDED = TEMPLATE.expanded
RESOURCES = EXPANDED["Resources"]

# AWS-managed policies that grant their actions on Resource "*".
BROAD_MANAGED_POLICIES = {
    "AWSLambdaSQSQueueExecutionRole",
    "AWSLambdaKinesisExecutionRole",
    "AWSLambdaDynamoDBExecutionRole",
    "AmazonSQSFullAccess",
    "AmazonDynamoDBFullAccess",
    "AmazonKinesisFullAccess",
    "AmazonSNSFullAccess",
    "AdministratorAccess",
    "PowerUserAccess",
}
XRAY_ACTIONS = {"xray:PutTraceSegments", "xray:PutTelemetryRecords"}
# Actions without a resource type, which IAM authorizes on "*" only: a grant naming a resource never matches them
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html).
# xray:PutSpans (Tracing=xray: spans to X-Ray's OTLP endpoint) has none either
# (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsx-ray.html).
NO_RESOURCE_TYPE = XRAY_ACTIONS | {"dynamodb:ListStreams", "xray:PutSpans"}


def of_type(type_name: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in RESOURCES.items() if v["Type"] == type_name}


def parameter_combinations(*names: str) -> Iterator[dict[str, Any]]:
    """Every allowed value of each named parameter (its default when it lists none)."""
    specs = [EXPANDED["Parameters"][name] for name in names]
    choices = [spec.get("AllowedValues", [spec["Default"]]) for spec in specs]
    for values in itertools.product(*choices):
        yield dict(zip(names, values, strict=True))


# What `make deploy` passes for the stack "invariants" (deploy/deploy_parameters.py preflight).
DEPLOYED_BOUNDARY = "arn:aws:iam::123456789012:policy/boundaries/invariants-permissions-boundary"


def scope(region: str = "us-east-1", **parameters: Any) -> Scope:
    """What CloudFormation would evaluate against, for the given region and parameter values (and the boundary
    `make deploy` passes, unless given)."""
    return Scope(
        parameters={**TEMPLATE.parameter_defaults(), "PermissionsBoundaryArn": DEPLOYED_BOUNDARY, **parameters},
        mappings=EXPANDED.get("Mappings", {}),
        conditions=EXPANDED.get("Conditions", {}),
        region=region,
        account_id="123456789012",
        stack_name="invariants",
        ref=lambda logical_id: f"ref:{logical_id}",
        get_att=lambda logical_id, attribute: f"arn:{logical_id}.{attribute}",
    )


def resolve(value: Any, **parameters: Any) -> Any:
    """Evaluate an expression the way CloudFormation would (in us-east-1), for the given parameter values."""
    return scope(**parameters).resolve(value)


def referenced_resource(expression: Any) -> str:
    """The logical id behind a Ref or GetAtt, or behind the Fn::If that names it only while its part is on."""
    if "Fn::If" in expression:
        return referenced_resource(expression["Fn::If"][1])
    if "Ref" in expression:
        return expression["Ref"]
    target = expression["Fn::GetAtt"]
    return (target.split(".") if isinstance(target, str) else target)[0]


def invoked_function(expression: Any) -> str:
    """The function a trigger's FunctionName names, through an alias or version (AutoPublishAlias)."""
    target = referenced_resource(expression)
    if RESOURCES[target]["Type"] in ("AWS::Lambda::Alias", "AWS::Lambda::Version"):
        return referenced_resource(RESOURCES[target]["Properties"]["FunctionName"])
    return target


def statements(policy_document: Any) -> Iterator[dict[str, Any]]:
    """Every statement, both branches of any Fn::If included."""
    if isinstance(policy_document, dict) and "Fn::If" in policy_document:
        for branch in policy_document["Fn::If"][1:]:
            yield from statements(branch)
        return
    if not isinstance(policy_document, dict) or "PolicyDocument" not in policy_document:
        return
    found = policy_document["PolicyDocument"]["Statement"]
    yield from found if isinstance(found, list) else [found]


def all_statements() -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, role in of_type("AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in statements(policy):
                yield logical_id, statement
    for logical_id, policy in of_type("AWS::IAM::Policy").items():
        for statement in statements(policy["Properties"]):
            yield logical_id, statement


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


SQS_MAPPINGS = {
    logical_id: mapping
    for logical_id, mapping in of_type("AWS::Lambda::EventSourceMapping").items()
    if referenced_resource(mapping["Properties"]["EventSourceArn"]) in of_type("AWS::SQS::Queue")
}


def test_the_template_has_sqs_consumers_to_check():
    assert SQS_MAPPINGS, "no SQS event source mappings found: the invariants below would be vacuous"


@pytest.mark.parametrize("mapping_id", sorted(SQS_MAPPINGS))
def test_every_sqs_event_source_reports_batch_item_failures(mapping_id):
    assert "ReportBatchItemFailures" in SQS_MAPPINGS[mapping_id]["Properties"].get("FunctionResponseTypes", [])


@pytest.mark.parametrize("mapping_id", sorted(SQS_MAPPINGS))
def test_sqs_event_sources_do_not_use_stream_only_settings(mapping_id):
    properties = SQS_MAPPINGS[mapping_id]["Properties"]
    stream_only = {
        "BisectBatchOnFunctionError",
        "MaximumRetryAttempts",
        "MaximumRecordAgeInSeconds",
        "StartingPosition",
    }
    assert not stream_only & set(properties)


@pytest.mark.parametrize("mapping_id", sorted(SQS_MAPPINGS))
def test_every_consumed_queue_has_a_dlq_and_a_visibility_timeout_of_six_times_its_consumer(mapping_id):
    mapping = SQS_MAPPINGS[mapping_id]["Properties"]
    queue = RESOURCES[referenced_resource(mapping["EventSourceArn"])]["Properties"]
    function = RESOURCES[invoked_function(mapping["FunctionName"])]["Properties"]
    redrive = queue["RedrivePolicy"]
    assert referenced_resource(redrive["deadLetterTargetArn"]) in of_type("AWS::SQS::Queue")
    depends_on = sorted(_refs(queue["VisibilityTimeout"]) | _refs(function["Timeout"]))
    for values in parameter_combinations(*depends_on):
        visibility = int(resolve(queue["VisibilityTimeout"], **values))
        timeout = int(resolve(function["Timeout"], **values))
        assert visibility >= 6 * timeout, (values, visibility, timeout)
        # Nothing extends a running job's visibility: the receive, the batching window and a whole invocation
        # fit in it, so a message cannot reappear while its consumer still runs.
        window = int(mapping.get("MaximumBatchingWindowInSeconds", 0))
        assert visibility > window + timeout, (values, visibility, window, timeout)
        assert int(resolve(redrive["maxReceiveCount"], **values)) >= 1


def _refs(expression: Any) -> set[str]:
    """Template parameters an expression depends on."""
    found: set[str] = set()
    if isinstance(expression, dict):
        for key, value in expression.items():
            if key == "Ref" and value in EXPANDED.get("Parameters", {}):
                found.add(value)
            else:
                found |= _refs(value)
    elif isinstance(expression, list):
        for item in expression:
            found |= _refs(item)
    return found


STREAM_MAPPINGS = {
    logical_id: mapping
    for logical_id, mapping in of_type("AWS::Lambda::EventSourceMapping").items()
    if referenced_resource(mapping["Properties"]["EventSourceArn"])
    in {**of_type("AWS::Kinesis::Stream"), **of_type("AWS::DynamoDB::Table")}
}
# What each stream view type carries, for filters on dynamodb.NewImage / dynamodb.OldImage.
IMAGES_BY_VIEW_TYPE = {
    "KEYS_ONLY": set(),
    "NEW_IMAGE": {"NewImage"},
    "OLD_IMAGE": {"OldImage"},
    "NEW_AND_OLD_IMAGES": {"NewImage", "OldImage"},
}


def role_of(function_id: str) -> str:
    return referenced_resource(RESOURCES[function_id]["Properties"]["Role"])


def role_grants(role_id: str, action: str, resource_arn: dict) -> bool:
    for _, statement in (pair for pair in all_statements() if pair[0] == role_id):
        if action in as_list(statement["Action"]) and resource_arn in as_list(statement["Resource"]):
            return True
    return False


def test_the_template_has_stream_consumers_to_check():
    sources = {referenced_resource(m["Properties"]["EventSourceArn"]) for m in STREAM_MAPPINGS.values()}
    assert set(of_type("AWS::Kinesis::Stream")) <= sources
    assert any(RESOURCES[s]["Type"] == "AWS::DynamoDB::Table" for s in sources)


@pytest.mark.parametrize("mapping_id", sorted(STREAM_MAPPINGS))
def test_every_stream_mapping_bisects_retries_finitely_ages_out_and_has_an_on_failure_queue(mapping_id):
    properties = STREAM_MAPPINGS[mapping_id]["Properties"]
    assert properties["BisectBatchOnFunctionError"] is True
    # -1 (the default) means forever: a poison record would block its shard until it expires.
    assert 0 <= int(resolve(properties["MaximumRetryAttempts"])) <= 10
    assert 60 <= int(resolve(properties["MaximumRecordAgeInSeconds"])) <= 86400
    assert "ReportBatchItemFailures" in properties["FunctionResponseTypes"]
    assert properties["StartingPosition"] in {"TRIM_HORIZON", "LATEST"}
    destination = properties["DestinationConfig"]["OnFailure"]["Destination"]
    assert referenced_resource(destination) in of_type("AWS::SQS::Queue")


@pytest.mark.parametrize("mapping_id", sorted(STREAM_MAPPINGS))
def test_every_on_failure_queue_is_writable_by_its_functions_role(mapping_id):
    properties = STREAM_MAPPINGS[mapping_id]["Properties"]
    queue = referenced_resource(properties["DestinationConfig"]["OnFailure"]["Destination"])
    role = role_of(invoked_function(properties["FunctionName"]))
    assert role_grants(role, "sqs:SendMessage", {"Fn::GetAtt": [queue, "Arn"]}), (role, queue)


@pytest.mark.parametrize("mapping_id", sorted(STREAM_MAPPINGS))
def test_every_stream_mapping_can_read_its_stream_with_a_scoped_statement(mapping_id):
    properties = STREAM_MAPPINGS[mapping_id]["Properties"]
    role = role_of(invoked_function(properties["FunctionName"]))
    service = (
        "kinesis"
        if RESOURCES[referenced_resource(properties["EventSourceArn"])]["Type"].startswith("AWS::Kinesis")
        else "dynamodb"
    )
    for action in ("GetRecords", "GetShardIterator", "DescribeStream"):
        assert role_grants(role, f"{service}:{action}", properties["EventSourceArn"]), (role, action)


def _filter_images(pattern: dict) -> set[str]:
    return set(pattern.get("dynamodb", {})) & {"NewImage", "OldImage"}


@pytest.mark.parametrize("mapping_id", sorted(STREAM_MAPPINGS))
def test_every_dynamodb_filter_on_an_image_sits_on_a_stream_that_carries_it(mapping_id):
    properties = STREAM_MAPPINGS[mapping_id]["Properties"]
    source = RESOURCES[referenced_resource(properties["EventSourceArn"])]
    patterns = [json.loads(f["Pattern"]) for f in properties.get("FilterCriteria", {}).get("Filters", [])]
    if source["Type"] != "AWS::DynamoDB::Table":
        assert not any("dynamodb" in p for p in patterns), mapping_id
        return
    view_type = source["Properties"]["StreamSpecification"]["StreamViewType"]
    for pattern in patterns:
        assert _filter_images(pattern) <= IMAGES_BY_VIEW_TYPE[view_type], (mapping_id, view_type, pattern)


def test_the_image_check_rejects_a_filter_the_view_type_cannot_serve():
    # The rule above, shown able to fail: a NewImage filter on an OLD_IMAGE stream.
    pattern = {"dynamodb": {"NewImage": {"itemType": {"S": ["probe_result"]}}}}
    assert not _filter_images(pattern) <= IMAGES_BY_VIEW_TYPE["OLD_IMAGE"]
    assert not _filter_images(pattern) <= IMAGES_BY_VIEW_TYPE["KEYS_ONLY"]


# Its run-once record is the job item in JobTable (mcp_backend/jobs/run_records.py), not IdempotencyTable.
JOB_TABLE_IDEMPOTENT = {"ToolWorker"}


def idempotent_functions() -> dict[str, dict]:
    """Functions whose role may write the idempotency table, and those keeping their records elsewhere."""
    writers = {
        role
        for role, statement in all_statements()
        if "dynamodb:PutItem" in as_list(statement["Action"])
        and statement["Resource"] == {"Fn::GetAtt": ["IdempotencyTable", "Arn"]}
    }
    return {
        logical_id: function["Properties"]
        for logical_id, function in of_type("AWS::Lambda::Function").items()
        if referenced_resource(function["Properties"]["Role"]) in writers or logical_id in JOB_TABLE_IDEMPOTENT
    }


def test_every_in_progress_window_follows_its_functions_timeout():
    # Every function that writes idempotency records: its INPROGRESS window is its Timeout + 5 s.
    functions = idempotent_functions()
    assert {"ToolWorker", "CallLogAnalyzer"} <= set(functions)
    for logical_id, properties in functions.items():
        # Never a copied literal: the same expression sets both sides.
        assert properties["Environment"]["Variables"]["FUNCTION_TIMEOUT_SECONDS"] == properties["Timeout"], logical_id


def test_worker_settings_come_from_the_same_parameters_as_the_resources_they_mirror():
    worker = RESOURCES["ToolWorker"]["Properties"]
    queue = RESOURCES["JobQueue"]["Properties"]
    variables = worker["Environment"]["Variables"]
    # Never a copied literal: the same expression sets both sides.
    assert variables["FUNCTION_TIMEOUT_SECONDS"] == worker["Timeout"] == {"Ref": "WorkerTimeout"}
    assert variables["JOB_MAX_RECEIVE_COUNT"] == queue["RedrivePolicy"]["maxReceiveCount"]


def test_no_iam_statement_is_broader_than_its_resources():
    checked = 0
    for role, statement in all_statements():
        checked += 1
        actions = set(as_list(statement.get("Action", [])))
        assert not {a for a in actions if a == "*" or a.endswith(":*")}, (role, actions)
        if "*" in as_list(statement.get("Resource", [])):
            assert actions <= NO_RESOURCE_TYPE, (role, actions)
    assert checked, "no IAM statements found"


def test_no_role_uses_a_broad_managed_policy():
    for logical_id, role in of_type("AWS::IAM::Role").items():
        names = {str(arn).rsplit("/", 1)[-1] for arn in role["Properties"].get("ManagedPolicyArns", [])}
        assert not names & BROAD_MANAGED_POLICIES, (logical_id, names & BROAD_MANAGED_POLICIES)


def test_every_queue_table_stream_and_topic_is_encrypted():
    stores = 0
    for logical_id, queue in of_type("AWS::SQS::Queue").items():
        properties = queue["Properties"]
        assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties, logical_id
        stores += 1
    for logical_id, table in of_type("AWS::DynamoDB::Table").items():
        assert table["Properties"].get("SSESpecification", {}).get("SSEEnabled") is True, logical_id
        stores += 1
    for logical_id, stream in of_type("AWS::Kinesis::Stream").items():
        assert stream["Properties"].get("StreamEncryption", {}).get("EncryptionType") == "KMS", logical_id
    for logical_id, topic in of_type("AWS::SNS::Topic").items():
        assert "KmsMasterKeyId" in topic["Properties"], logical_id
    assert stores >= 4


def test_every_table_has_point_in_time_recovery():
    for logical_id, table in of_type("AWS::DynamoDB::Table").items():
        assert table["Properties"]["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"], logical_id


def test_idempotency_table_matches_what_powertools_expects():
    properties = RESOURCES["IdempotencyTable"]["Properties"]
    assert properties["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert properties["TimeToLiveSpecification"] == {"AttributeName": "expiration", "Enabled": True}
    assert properties["BillingMode"] == "PAY_PER_REQUEST"


def test_every_filter_criteria_pattern_is_valid_json_for_the_matcher():
    for logical_id, mapping in of_type("AWS::Lambda::EventSourceMapping").items():
        criteria = mapping["Properties"].get("FilterCriteria")
        if criteria:
            RecordFilter(criteria)  # raises on invalid JSON or an invalid pattern
            for entry in criteria["Filters"]:
                assert isinstance(json.loads(entry["Pattern"]), dict), logical_id


def test_every_function_runs_python313_on_arm64_traced_with_the_shared_layer():
    layers = of_type("AWS::Lambda::LayerVersion")
    for logical_id, function in of_type("AWS::Lambda::Function").items():
        properties = function["Properties"]
        assert properties["Runtime"] == "python3.13", logical_id
        assert resolve(properties["Architectures"]) == ["arm64"], logical_id
        assert properties["TracingConfig"] == {"Mode": "Active"}, logical_id
        # Layers published elsewhere (the web adapter, the secrets extension) are ARNs from mappings.
        own = {referenced_resource(layer) for layer in properties["Layers"] if "Ref" in layer or "Fn::GetAtt" in layer}
        assert own & set(layers), logical_id
        variables = properties["Environment"]["Variables"]
        assert variables["LOG_LEVEL"] == {"Ref": "LogLevel"}, logical_id
        assert variables["POWERTOOLS_LOGGER_SAMPLE_RATE"] == {"Ref": "LogSampleRate"}, logical_id


def test_outputs_name_every_queue_url_table_and_function_arn():
    outputs = [output["Value"] for output in EXPANDED["Outputs"].values()]
    for type_name in ("AWS::SQS::Queue", "AWS::DynamoDB::Table"):
        for logical_id in of_type(type_name):
            assert {"Ref": logical_id} in outputs, logical_id
    for logical_id in of_type("AWS::Lambda::Function"):
        assert {"Fn::GetAtt": [logical_id, "Arn"]} in outputs, logical_id


def test_outputs_name_every_stream_and_every_unconditional_topic():
    outputs = [output["Value"] for output in EXPANDED["Outputs"].values()]
    for logical_id in of_type("AWS::Kinesis::Stream"):
        assert {"Ref": logical_id} in outputs, logical_id
    for logical_id, topic in of_type("AWS::SNS::Topic").items():
        if "Condition" not in topic:
            assert {"Ref": logical_id} in outputs, logical_id


def test_mcp_server_streams_through_the_web_adapter_on_a_function_url():
    function = RESOURCES["McpServer"]["Properties"]
    variables = function["Environment"]["Variables"]
    assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/bootstrap"
    assert variables["AWS_LWA_INVOKE_MODE"] == "response_stream"
    assert variables["AWS_LWA_READINESS_CHECK_PATH"]
    assert variables["PORT"]
    urls = {logical_id: u["Properties"] for logical_id, u in of_type("AWS::Lambda::Url").items()}
    assert (urls["McpServerUrl"]["AuthType"], urls["McpServerUrl"]["InvokeMode"]) == ("NONE", "RESPONSE_STREAM")
    # IamCallers=Enabled: the same endpoint on its AWS_IAM URL, streaming as well.
    iam_url = urls["McpServerIamUrl"]
    assert (iam_url["AuthType"], iam_url["InvokeMode"]) == ("AWS_IAM", "RESPONSE_STREAM")
    # The other (the optional authorization server's) answers small pages and JSON: buffered.
    endpoint_urls = {"McpServerUrl", "McpServerIamUrl"}
    assert {u["InvokeMode"] for name, u in urls.items() if name not in endpoint_urls} <= {"BUFFERED"}


def test_one_architecture_parameter_sets_every_function_the_layer_and_the_published_layers():
    # Given the Architecture parameter set to x86_64 (a local build on an x86_64 host)
    # When the functions, the shared layer and McpServer's published layers are resolved
    # Then all of them follow it, and the default stays arm64 for deploys
    assert TEMPLATE.parameter_defaults()["Architecture"] == "arm64"
    for logical_id, function in of_type("AWS::Lambda::Function").items():
        assert resolve(function["Properties"]["Architectures"], Architecture="x86_64") == ["x86_64"], logical_id
    for logical_id, layer in of_type("AWS::Lambda::LayerVersion").items():
        assert resolve(layer["Properties"]["CompatibleArchitectures"], Architecture="x86_64") == ["x86_64"], logical_id
    published = resolve(RESOURCES["McpServer"]["Properties"]["Layers"], Architecture="x86_64")
    assert [arn for arn in published if isinstance(arn, str) and "Arm64" in arn] == []


def test_provisioned_concurrency_is_optional_and_off_by_default():
    alias = RESOURCES["McpServerAliaslive"]["Properties"]
    condition = alias["ProvisionedConcurrencyConfig"]["Fn::If"][0]
    assert resolve({"Fn::If": [condition, "on", "off"]}) == "off"
    assert resolve({"Fn::If": [condition, "on", "off"]}, McpProvisionedConcurrency=2) == "on"


def test_the_api_key_secret_is_read_by_the_mcp_server_and_written_only_by_the_deploy_time_key_issuer():
    readers = [
        (role, statement)
        for role, statement in all_statements()
        if "secretsmanager:GetSecretValue" in as_list(statement["Action"])
        # the authorization server reads only the upstream client's secret, named by its own parameter
        and statement["Resource"] != {"Ref": "UpstreamClientSecretArn"}
        # Edge=CloudFront: the endpoint reads the origin header's value (mcp_backend.edge_origin)
        and statement["Resource"] != {"Ref": "EdgeOriginSecret"}
        and statement["Resource"] != {"Ref": "RequestStateSecret"}
    ]
    assert sorted(role for role, _ in readers) == ["McpServerRole", "SelfProbeKeyIssuerRole"]
    assert all(statement["Resource"] == {"Ref": "ApiKeysSecret"} for _, statement in readers)
    for write in ("secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage"):
        writers = [role for role, s in all_statements() if write in as_list(s["Action"])]
        assert writers == ["SelfProbeKeyIssuerRole"], write
    # The issuer runs only when CloudFormation creates or deletes SelfProbeKey; the dispatcher has no access
    assert resolve(RESOURCES["SelfProbeKey"]["Properties"]["ServiceToken"]) == "arn:SelfProbeKeyIssuer.Arn"
    assert not any(role == "ProbeDispatcherRole" and "secretsmanager" in json.dumps(s) for role, s in all_statements())
    assert "ApiKeysSecretArn" in EXPANDED["Outputs"] and "McpServerUrl" in EXPANDED["Outputs"]


def test_the_request_state_key_is_generated_at_deploy_and_read_by_the_mcp_server_only():
    # Given the secret every McpServer environment seals requestState with, and every grant naming it
    secret = RESOURCES["RequestStateSecret"]["Properties"]
    grants = [
        (role, statement) for role, statement in all_statements() if "RequestStateSecret" in json.dumps(statement)
    ]
    # Then CloudFormation generates it (no value in the template), long enough for the SDK's codec (>= 32 bytes)
    assert "SecretString" not in secret and secret["GenerateSecretString"]["PasswordLength"] >= 32
    # And only McpServer may read it, and nothing may write it
    assert [(role, as_list(statement["Action"])) for role, statement in grants] == [
        ("McpServerRole", ["secretsmanager:GetSecretValue"])
    ]
    # And McpServer is told its id
    variables = RESOURCES["McpServer"]["Properties"]["Environment"]["Variables"]
    assert variables["REQUEST_STATE_SECRET_ID"] == {"Ref": "RequestStateSecret"}


def test_the_mcp_server_only_sends_jobs_and_never_reads_the_shared_dlq():
    # Given the McpServer role's SQS actions
    actions = {
        action
        for role, statement in all_statements()
        if role == "McpServerRole"
        for action in as_list(statement["Action"])
        if action.startswith("sqs:")
    }
    # Then it only sends jobs: no receive, no delete (the DLQ stays untouched for redrive), and not even the DLQ's
    # depth, which counts every tenant's failures
    assert actions == {"sqs:SendMessage"}


def test_alarm_topics_use_a_key_cloudwatch_may_use():
    # CloudWatch cannot publish to a topic encrypted with the AWS-managed aws/sns key.
    topics = set()
    for alarm in of_type("AWS::CloudWatch::Alarm").values():
        actions = alarm["Properties"].get("AlarmActions", [])
        for branch in actions["Fn::If"][1:] if isinstance(actions, dict) else [actions]:
            topics |= {referenced_resource(action) for action in as_list(branch) if isinstance(action, dict)}
    topics.discard("AWS::NoValue")
    assert topics, "no alarm publishes to a topic"
    for topic in topics:
        key = RESOURCES[topic]["Properties"]["KmsMasterKeyId"]
        assert key != "alias/aws/sns", topic
        policy = RESOURCES[referenced_resource(key)]["Properties"]["KeyPolicy"]["Statement"]
        assert any(s.get("Principal", {}).get("Service") == "cloudwatch.amazonaws.com" for s in policy), topic


ASYNC_CONFIGS = of_type("AWS::Lambda::EventInvokeConfig")
WRITE_ACTION_BY_DESTINATION_TYPE = {
    "AWS::SQS::Queue": "sqs:sendmessage",
    "AWS::SNS::Topic": "sns:publish",
    "AWS::Events::EventBus": "events:putevents",
    "AWS::Lambda::Function": "lambda:invokefunction",
}


def role_may(role_id: str, action: str, resource: Any) -> bool:
    """IAM action names are case-insensitive (SAM writes `sns:publish`)."""
    return any(
        action in {a.lower() for a in as_list(statement["Action"])} and resource in as_list(statement["Resource"])
        for role, statement in all_statements()
        if role == role_id
    )


def test_the_template_has_async_invoked_functions_to_check():
    assert ASYNC_CONFIGS


@pytest.mark.parametrize("config_id", sorted(ASYNC_CONFIGS))
def test_every_async_invoked_function_has_both_destinations_and_may_write_to_them(config_id):
    properties = ASYNC_CONFIGS[config_id]["Properties"]
    role = role_of(invoked_function(properties["FunctionName"]))
    for outcome in ("OnSuccess", "OnFailure"):
        destination = properties["DestinationConfig"][outcome]["Destination"]
        target = referenced_resource(destination)
        action = WRITE_ACTION_BY_DESTINATION_TYPE[RESOURCES[target]["Type"]]
        # Lambda drops a destination record silently when the role may not deliver it.
        assert role_may(role, action, destination), (config_id, outcome, role, action)


@pytest.mark.parametrize("config_id", sorted(ASYNC_CONFIGS))
def test_probe_like_async_functions_do_not_retry_and_drop_stale_events(config_id):
    properties = ASYNC_CONFIGS[config_id]["Properties"]
    assert 0 <= int(resolve(properties["MaximumRetryAttempts"])) <= 2
    assert 60 <= int(resolve(properties["MaximumEventAgeInSeconds"])) <= 21600


def test_the_destination_check_fails_for_a_role_without_the_grant():
    # The rule above, shown able to fail: ToolWorker's role may not publish to the probe topic.
    assert not role_may("ToolWorkerRole", "sns:publish", {"Ref": "ProbeResultTopic"})
    assert role_may("ProbeWorkerRole", "sns:publish", {"Ref": "ProbeResultTopic"})


def test_probe_fan_out_precedes_the_filter_one_consumer_per_queue():
    # A filter deletes what it rejects, so the filtered queue must have exactly one consumer and the
    # recorder must read its own copy from the topic.
    consumers: dict[str, list[str]] = {}
    for logical_id, mapping in SQS_MAPPINGS.items():
        consumers.setdefault(referenced_resource(mapping["Properties"]["EventSourceArn"]), []).append(logical_id)
    assert all(len(mappings) == 1 for mappings in consumers.values()), consumers
    subscriptions = {
        referenced_resource(s["Properties"]["Endpoint"]): s["Properties"]
        for s in of_type("AWS::SNS::Subscription").values()
        if s["Properties"]["TopicArn"] == {"Ref": "ProbeResultTopic"}
    }
    assert set(subscriptions) == {"ProbeResultQueue", "ProbeAlertQueue"}
    assert all(s["RawMessageDelivery"] is True for s in subscriptions.values())
    assert ASYNC_CONFIGS["ProbeWorkerEventInvokeConfig"]["Properties"]["DestinationConfig"]["OnSuccess"][
        "Destination"
    ] == {"Ref": "ProbeResultTopic"}


def test_no_probe_endpoint_index_projects_the_auth_token():
    indexes = RESOURCES["MonitorTable"]["Properties"]["GlobalSecondaryIndexes"]
    assert {index["IndexName"] for index in indexes} == {"EndpointsByOwner", "RegisteredEndpoints"}
    for index in indexes:
        assert index["Projection"]["ProjectionType"] == "INCLUDE"
        assert AUTH_CIPHERTEXT not in index["Projection"]["NonKeyAttributes"]


# Stores whose loss would lose users' data; everything else can be rebuilt by a deploy.
# AuthorizationTable is kept too: it holds the clients an operator registered and users' grants (losing it
# signs every user out and drops those clients).
DISPOSABLE_STORES = {
    "IdempotencyTable",
    "RateLimitTable",
    "AlertWindowTable",
    "EdgeOriginSecret",
    # The request-state key: a new stack generates a new one, and only questions open for minutes are lost.
    "RequestStateSecret",
}  # dedup records, counters, alert windows: TTL; the origin header's value, made anew with the edge


def test_every_data_store_survives_deleting_or_replacing_the_stack():
    stores = {**of_type("AWS::DynamoDB::Table"), **of_type("AWS::SecretsManager::Secret")}
    kept = set(stores) - DISPOSABLE_STORES
    assert {"JobTable", "MonitorTable", "ApiKeysSecret", "AuthorizationTable"} <= kept
    for logical_id in kept:
        assert stores[logical_id].get("DeletionPolicy") == "Retain", logical_id
        assert stores[logical_id].get("UpdateReplacePolicy") == "Retain", logical_id
    for logical_id in DISPOSABLE_STORES:
        assert stores[logical_id].get("DeletionPolicy") == "Delete", logical_id


def test_every_parameter_is_in_exactly_one_group_and_the_groups_follow_the_template():
    # Given the console's parameter groups
    groups = TEMPLATE.source["Metadata"]["AWS::CloudFormation::Interface"]["ParameterGroups"]
    grouped = [name for group in groups for name in group["Parameters"]]

    # Then every parameter appears once, and the groups follow the order of the template's parts
    assert sorted(grouped) == sorted(TEMPLATE.source["Parameters"])
    assert len(grouped) == len(set(grouped))
    labels = [group["Label"]["default"] for group in groups]
    assert labels == [
        "Deployment and shared layer",
        "Tool-job pipeline",
        "Call log and event streams",
        "Probes",
        "MCP endpoint",
        "Edge, IAM callers, VPC and keys",
        "Alarms and alerts",
    ]


# The functions whose platform reports the dashboard and alerts are for: the endpoint's latency and the jobs'.
TELEMETRY_FUNCTIONS = {"McpServer", "ToolWorker"}


def layer_name(logical_id: str) -> str:
    """A layer version's template name: SAM suffixes the expanded logical id with a content hash."""
    [name] = [
        n for n in ("SharedLayer", "McpLayer", "DurableLayer", "TelemetryExtensionLayer") if logical_id.startswith(n)
    ]
    return name


def own_layers(function_id: str, **parameters: Any) -> list[str]:
    """The stack's own layers a function lists, for the given parameter values (published ARNs left out)."""
    layers = resolve(RESOURCES[function_id]["Properties"]["Layers"], **parameters)
    return [layer_name(layer.removeprefix("ref:")) for layer in layers if str(layer).startswith("ref:")]


@pytest.mark.parametrize("telemetry", ["enabled", "disabled"])
def test_the_telemetry_extension_layer_is_on_the_reported_functions_only_and_follows_the_parameter(telemetry):
    # Given the CallLogTelemetry parameter (enabled by default)
    assert TEMPLATE.parameter_defaults()["CallLogTelemetry"] == "enabled"
    evaluated = scope(CallLogTelemetry=telemetry)

    # When every function's layers are resolved
    carrying = {
        logical_id
        for logical_id in of_type("AWS::Lambda::Function")
        if "TelemetryExtensionLayer" in own_layers(logical_id, CallLogTelemetry=telemetry)
    }

    # Then the extension's layer exists and is attached exactly to McpServer and ToolWorker when enabled, and
    # to none (nor created) when disabled; every function keeps the core layer first
    enabled = telemetry == "enabled"
    [layer] = [
        layer
        for layer_id, layer in of_type("AWS::Lambda::LayerVersion").items()
        if layer_id.startswith("TelemetryExtensionLayer")
    ]
    assert evaluated.condition(layer["Condition"]) is enabled
    assert carrying == (TELEMETRY_FUNCTIONS if enabled else set())
    for logical_id in of_type("AWS::Lambda::Function"):
        assert own_layers(logical_id, CallLogTelemetry=telemetry)[0] == "SharedLayer", logical_id


def test_every_function_running_the_telemetry_extension_may_put_its_reports_on_the_call_log_only():
    # Given the call-log-telemetry extension's policy
    policy = RESOURCES["CallLogTelemetryWriter"]
    statements = policy["Properties"]["PolicyDocument"]["Statement"]

    # Then it allows PutRecords on CallLogStream and nothing else, exists only when the extension is enabled,
    # is inline in exactly the roles of the functions that carry the extension (never CallLogAnalyzer, whose
    # reports would feed the stream it reads), and is no managed policy (whose versions could widen a role)
    assert policy["Type"] == "AWS::IAM::Policy"
    assert [(s["Action"], s["Resource"]) for s in statements] == [
        ("kinesis:PutRecords", {"Fn::GetAtt": ["CallLogStream", "Arn"]})
    ]
    assert policy["Condition"] == TEMPLATE.source["Resources"]["TelemetryExtensionLayer"]["Condition"]
    holders = {referenced_resource(role) for role in policy["Properties"]["Roles"]}
    for logical_id, function in of_type("AWS::Lambda::Function").items():
        role = referenced_resource(function["Properties"]["Role"])
        assert (role in holders) is (logical_id in TELEMETRY_FUNCTIONS), logical_id
    assert "CallLogAnalyzer" not in TELEMETRY_FUNCTIONS
    assert not of_type("AWS::IAM::ManagedPolicy")


COGNITO_RESOURCES = ("McpUserPool", "McpUserPoolDomain", "McpResourceServer", "McpMachineClient")


@pytest.mark.parametrize(
    ("parameters", "creates_pool"),
    [
        ({}, False),  # apikey, the default
        ({"AuthMode": "oauth"}, True),
        ({"AuthMode": "both"}, True),
        ({"AuthMode": "oauth", "OAuthIssuer": "https://tenant.auth0.com/"}, False),
    ],
)
def test_the_cognito_pool_exists_only_for_oauth_without_an_external_issuer(parameters, creates_pool):
    # Given the template evaluated for an auth configuration
    evaluated = scope(**parameters)
    environment = RESOURCES["McpServer"]["Properties"]["Environment"]["Variables"]

    # Then the pool, its domain, resource server and client exist exactly when no external issuer is set
    assert {evaluated.condition(RESOURCES[r]["Condition"]) for r in COGNITO_RESOURCES} == {creates_pool}
    # And the endpoint's issuer and client allow-list follow the same choice
    issuer = resolve(environment["OAUTH_ISSUER"], **parameters)
    expected = "https://cognito-idp.us-east-1.amazonaws.com/ref:McpUserPool" if creates_pool else ""
    assert issuer == (expected or parameters.get("OAuthIssuer", ""))
    assert resolve(environment["OAUTH_CLIENT_IDS"], **parameters) == ("ref:McpMachineClient" if creates_pool else "")


def test_the_machine_client_is_client_credentials_only_with_this_resource_servers_scopes():
    client = RESOURCES["McpMachineClient"]["Properties"]
    server = RESOURCES["McpResourceServer"]["Properties"]
    scopes = [f"{server['Identifier']}/{s['ScopeName']}" for s in server["Scopes"]]
    assert client["AllowedOAuthFlows"] == ["client_credentials"] and client["GenerateSecret"] is True
    assert client["AllowedOAuthScopes"] == scopes
    assert (
        resolve(
            RESOURCES["McpServer"]["Properties"]["Environment"]["Variables"]["OAUTH_SCOPE_PREFIX"], AuthMode="oauth"
        )
        == f"{server['Identifier']}/"
    )


def test_oauth_only_mode_does_not_register_the_api_key_self_probe():
    condition = RESOURCES["SelfProbeKey"]["Condition"]
    assert scope(AuthMode="oauth").condition(condition) is False
    assert scope(AuthMode="both").condition(condition) is True
    assert scope().condition(condition) is True


def runs_behind_the_web_adapter(function: dict[str, Any]) -> bool:
    return function["Properties"]["Environment"]["Variables"].get("AWS_LAMBDA_EXEC_WRAPPER") == "/opt/bootstrap"


def invoked_through_a_published_version() -> set[str]:
    """The functions SAM publishes a version and an alias for (AutoPublishAlias): SnapStart snapshots published
    versions only, never $LATEST."""
    return {
        logical_id
        for logical_id, function in TEMPLATE.source["Resources"].items()
        if function["Type"] == "AWS::Serverless::Function" and "AutoPublishAlias" in function["Properties"]
    }


@pytest.mark.parametrize("snapstart", ["None", "PublishedVersions"])
def test_snapstart_is_off_by_default_and_only_on_plain_handlers_invoked_through_a_published_version(snapstart):
    # Given the SnapStart parameter (None by default)
    assert TEMPLATE.parameter_defaults()["SnapStart"] == "None"

    # When every function's SnapStart setting is resolved (a property resolved to AWS::NoValue is dropped)
    applied = {
        logical_id: resolve(function["Properties"], SnapStart=snapstart).get("SnapStart")
        for logical_id, function in of_type("AWS::Lambda::Function").items()
    }
    snapshotted = {logical_id for logical_id, setting in applied.items() if setting}

    # Then, turned on, it snapshots exactly the plain-handler functions that run published versions (ToolWorker),
    # never a function behind the Web Adapter (McpServer has its own switch: McpServerSnapStart), and off it sets
    # nothing anywhere
    plain = {
        logical_id for logical_id, f in of_type("AWS::Lambda::Function").items() if not runs_behind_the_web_adapter(f)
    }
    # (not a durable function: its executions replay from their checkpoints, not from a snapshot)
    durable = {
        logical_id for logical_id, f in of_type("AWS::Lambda::Function").items() if "DurableConfig" in f["Properties"]
    }
    published = plain & invoked_through_a_published_version() - durable
    expected = published if snapstart == "PublishedVersions" else set()
    assert snapshotted == expected
    assert "McpServer" not in snapshotted and (snapstart == "None" or "ToolWorker" in snapshotted)
    assert all(setting == {"ApplyOn": "PublishedVersions"} for setting in applied.values() if setting)


@pytest.mark.parametrize("snapstart", ["None", "PublishedVersions"])
def test_mcp_server_snapstart_is_off_by_default_and_on_comes_with_the_adapters_after_restore_hook(snapstart):
    # Given the McpServerSnapStart parameter (None by default)
    assert TEMPLATE.parameter_defaults()["McpServerSnapStart"] == "None"

    # When McpServer's SnapStart setting, hook variable and Web Adapter layer are resolved
    properties = resolve(RESOURCES["McpServer"]["Properties"], McpServerSnapStart=snapstart)
    variables = properties["Environment"]["Variables"]
    adapter = next(layer for layer in properties["Layers"] if ":layer:LambdaAdapterLayer" in str(layer))
    others = {
        logical_id
        for logical_id, function in of_type("AWS::Lambda::Function").items()
        if resolve(function["Properties"], McpServerSnapStart=snapstart).get("SnapStart")
    }

    # Then on, McpServer's published versions are snapshotted and the adapter (a version with the SnapStart hooks,
    # v1.1.0: layer 30 or later) is told where the app's after-restore hook is; off, neither; no other function
    # follows this switch
    on = snapstart == "PublishedVersions"
    assert properties.get("SnapStart") == ({"ApplyOn": "PublishedVersions"} if on else None)
    assert variables.get("AWS_LWA_SNAPSTART_AFTER_RESTORE_PATH") == ("/_lwa/after-restore" if on else None)
    assert int(str(adapter).rsplit(":", 1)[1]) >= 30
    assert others == ({"McpServer"} if on else set())


def test_mcp_server_snapstart_is_refused_with_provisioned_concurrency():
    # Given McpServer SnapStart on, with and without provisioned concurrency
    rules = EXPANDED["Rules"]
    with_provisioned = scope(McpServerSnapStart="PublishedVersions", McpProvisionedConcurrency=2)
    without = scope(McpServerSnapStart="PublishedVersions", McpProvisionedConcurrency=0)

    # When the template's rules are evaluated
    # Then only the combination Lambda does not support is refused
    assert any("McpProvisionedConcurrency 0" in failure for failure in with_provisioned.rule_failures(rules))
    assert without.rule_failures(rules) == []
