"""A local stack: the expanded template's resources created in moto with their declared properties.

Resources are created on demand in dependency order (a queue's RedrivePolicy needs its DLQ's ARN,
so resolving that GetAtt creates the DLQ first). Functions are not deployed anywhere: they become
FunctionSpecs that devstack.runtime.in_process runs in-process.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.stack import cognito
from devstack.stack.intrinsics import Scope, Unsupported
from devstack.stack.template import LOCAL_REGION, ROOT, Template, load_template

log = logging.getLogger("devstack")

LOCAL_ACCOUNT = "123456789012"
LOCAL_STACK_NAME = "mcp-backend-local"

# Resource types with no local behaviour: IAM is not enforced, logs go to stdout, dashboards are views.
_NO_LOCAL_EFFECT = {
    "AWS::IAM::Role",
    "AWS::IAM::Policy",
    "AWS::IAM::ManagedPolicy",
    "AWS::Logs::LogGroup",
    "AWS::Lambda::Permission",
    "AWS::SQS::QueuePolicy",
    "AWS::SNS::TopicPolicy",
    "AWS::Events::Archive",
    "AWS::CloudWatch::Dashboard",
    # Gradual deploys: every local invocation runs $LATEST, so there is no traffic to shift.
    "AWS::CodeDeploy::Application",
    "AWS::CodeDeploy::DeploymentGroup",
    "Custom::SelfProbeKey",
}
# Resources that act on others without being referenced by them: found by name (a key alias, a parameter),
# delivering messages (a subscription, a rule) or limiting access (a bucket policy). A stack created on demand
# creates these at once.
_CONNECTIONS = {
    "AWS::KMS::Alias",
    "AWS::SSM::Parameter",
    "AWS::SNS::Subscription",
    "AWS::Events::Rule",
    "AWS::S3::BucketPolicy",
}
# Custom resources run their function at deploy; locally nothing is deployed (the self-probe's key is issued by
# a deploy only), and nothing reads their properties, which may name what has no local value (a Function URL).
_DEPLOY_TIME_ONLY = {"Custom::SelfProbeKey"}


def unqualified(function_name: str) -> str:
    """A function name or ARN without its qualifier (version, alias or $LATEST): arn:aws:lambda:<region>:
    <account>:function:<name>[:<qualifier>], or <name>[:<qualifier>]."""
    parts = function_name.split(":")
    if function_name.startswith("arn:"):
        return ":".join(parts[:7])
    return parts[0]


@dataclass
class Created:
    ref: Any
    attributes: dict[str, Any] = field(default_factory=dict)
    properties: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FunctionSpec:
    logical_id: str
    name: str
    arn: str
    handler: str
    code_dir: Path
    layer_dirs: tuple[Path, ...]
    timeout: int
    memory_size: int
    environment: dict[str, str]
    layer_refs: tuple[str, ...] = ()  # as resolved: a local layer's source folder, or a published ARN
    reserved_concurrency: int | None = None
    ephemeral_storage_mb: int = 512
    snap_start: bool = False  # SnapStart ApplyOn PublishedVersions: environments are resumed from a snapshot
    durable: bool = False  # DurableConfig: invoked as durable executions (devstack.runtime.durable_functions)


class LocalStack:
    def __init__(
        self,
        client_factory: Callable[[str], Any],
        template: Template | None = None,
        parameters: dict[str, Any] | None = None,
        region: str = LOCAL_REGION,
        stack_name: str = LOCAL_STACK_NAME,
    ) -> None:
        self.template = template or load_template()
        # One client per service for the stack's life: building a boto3 client costs more than most calls.
        self.client = functools.cache(client_factory)
        self.region = region
        self.stack_name = stack_name
        values = {**self.template.parameter_defaults(), **(parameters or {})}
        self.scope = Scope(
            parameters=values,
            mappings=self.template.expanded.get("Mappings", {}),
            conditions=self.template.expanded.get("Conditions", {}),
            region=region,
            account_id=LOCAL_ACCOUNT,
            stack_name=stack_name,
            ref=lambda logical_id: self.ensure(logical_id).ref,
            get_att=self._get_att,
        )
        self.created: dict[str, Created] = {}
        self.notices: list[str] = []
        self._creating: set[str] = set()
        self._all_created = False

    # ------------------------------------------------------------------ public
    def create_all(self) -> LocalStack:
        for logical_id, resource in self.template.resources().items():
            if self._active(resource):
                try:
                    self.ensure(logical_id)
                except Unsupported as reason:
                    self._notice(logical_id, str(reason))
        self._all_created = True
        return self

    def create_connections(self) -> LocalStack:
        """The resources that act on others without being referenced by them, and what they reference; the rest
        are created when first touched."""
        for logical_id, resource in self.template.resources().items():
            if resource["Type"] in _CONNECTIONS and self._active(resource):
                try:
                    self.ensure(logical_id)
                except Unsupported as reason:
                    self._notice(logical_id, str(reason))
        return self

    def ensure(self, logical_id: str) -> Created:
        if logical_id in self.created:
            return self.created[logical_id]
        if logical_id in self._creating:
            raise Unsupported(f"{logical_id}: circular reference")
        resource = self.template.resource(logical_id)
        self._creating.add(logical_id)
        try:
            creator = _CREATORS.get(resource["Type"])
            unresolved = resource["Type"] in _DEPLOY_TIME_ONLY
            properties = {} if unresolved else self.scope.resolve(resource.get("Properties", {}))
            if creator is not None:
                created = creator(self, logical_id, properties)
            else:
                if resource["Type"] not in _NO_LOCAL_EFFECT:
                    self._notice(logical_id, f"type {resource['Type']} is not emulated locally")
                name = self.physical_name(logical_id)
                created = Created(ref=name, attributes={"Arn": self.arn("local", name)})
            created.properties = properties
            self.created[logical_id] = created
            return created
        finally:
            self._creating.discard(logical_id)

    def physical_name(self, logical_id: str) -> str:
        return f"{self.stack_name}-{logical_id}"

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{self.region}:{LOCAL_ACCOUNT}:{resource}"

    def output(self, name: str) -> Any:
        return self.scope.resolve(self.template.expanded["Outputs"][name]["Value"])

    def functions(self) -> dict[str, FunctionSpec]:
        return {
            logical_id: self.function(logical_id)
            for logical_id, resource in self.template.resources("AWS::Lambda::Function").items()
            if self._active(resource)
        }

    def function(self, logical_id: str) -> FunctionSpec:
        created = self.ensure(logical_id)
        spec = created.attributes.get("Spec")
        if spec is None:
            raise Unsupported(f"{logical_id} is not a function with local code")
        return spec

    def active(self, type_name: str) -> dict[str, dict[str, Any]]:
        """Resolved properties of every resource of a type whose Condition holds."""
        return {
            logical_id: self.ensure(logical_id).properties
            for logical_id, resource in self.template.resources(type_name).items()
            if self._active(resource)
        }

    def event_source_mappings(self) -> dict[str, dict[str, Any]]:
        """Resolved AWS::Lambda::EventSourceMapping properties, by logical id."""
        return {
            logical_id: self.ensure(logical_id).properties
            for logical_id, resource in self.template.resources("AWS::Lambda::EventSourceMapping").items()
            if self._active(resource)
        }

    def logical_id_for_name(self, name: str) -> str:
        """A function's logical id from the name a Ref gave (or its logical id)."""
        name = unqualified(name)
        return self._created_id(
            lambda logical_id, created: name in (created.ref, logical_id) and "Spec" in created.attributes, name
        )

    def logical_id_for_arn(self, arn: str) -> str:
        return self._created_id(lambda logical_id, created: created.attributes.get("Arn") == arn, arn)

    # ------------------------------------------------------------------ internals
    def _created_id(self, matches: Callable[[str, Created], bool], what: str) -> str:
        """The logical id of the created resource that matches. A physical name or ARN says nothing of its logical
        id until the resource exists: in a stack created on demand, a miss creates the rest and looks again."""
        for logical_id, created in self.created.items():
            if matches(logical_id, created):
                return logical_id
        if not self._all_created:
            self.create_all()
            return self._created_id(matches, what)
        raise KeyError(what)

    def _active(self, resource: dict[str, Any]) -> bool:
        condition = resource.get("Condition")
        return condition is None or self.scope.condition(condition)

    def _get_att(self, logical_id: str, attribute: str) -> Any:
        created = self.ensure(logical_id)
        if attribute not in created.attributes:
            raise Unsupported(f"Fn::GetAtt {logical_id}.{attribute} is not emulated locally")
        return created.attributes[attribute]

    def _notice(self, logical_id: str, message: str) -> None:
        line = f"{logical_id}: {message}"
        if line not in self.notices:
            self.notices.append(line)
            log.warning("not emulated: %s", line)


# ---------------------------------------------------------------------- creators
_SQS_ATTRIBUTES = (
    "DelaySeconds",
    "MaximumMessageSize",
    "MessageRetentionPeriod",
    "ReceiveMessageWaitTimeSeconds",
    "VisibilityTimeout",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
    "SqsManagedSseEnabled",
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
)


def _sqs_queue(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("QueueName") or stack.physical_name(logical_id) + (".fifo" if props.get("FifoQueue") else "")
    attributes = {key: _attribute_text(props[key]) for key in _SQS_ATTRIBUTES if key in props}
    for policy in ("RedrivePolicy", "RedriveAllowPolicy"):
        if policy in props:
            attributes[policy] = json.dumps(props[policy])
    url = stack.client("sqs").create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = stack.arn("sqs", name)
    return Created(ref=url, attributes={"Arn": arn, "QueueName": name, "QueueUrl": url})


def _dynamodb_table(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("TableName") or stack.physical_name(logical_id)
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": props["AttributeDefinitions"],
        "BillingMode": props.get("BillingMode", "PROVISIONED"),
    }
    for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes", "ProvisionedThroughput"):
        if key in props:
            request[key] = props[key]
    if "StreamSpecification" in props:
        request["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
    if "SSESpecification" in props:
        request["SSESpecification"] = {
            "Enabled": bool(props["SSESpecification"].get("SSEEnabled")),
            **{k: v for k, v in props["SSESpecification"].items() if k in ("SSEType", "KMSMasterKeyId")},
        }
    dynamodb = stack.client("dynamodb")
    table = dynamodb.create_table(**request)["TableDescription"]
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        dynamodb.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    pitr = props.get("PointInTimeRecoverySpecification", {})
    if pitr.get("PointInTimeRecoveryEnabled"):
        dynamodb.update_continuous_backups(
            TableName=name,
            PointInTimeRecoverySpecification={"PointInTimeRecoveryEnabled": True},
        )
    attributes = {"Arn": table["TableArn"]}
    if table.get("LatestStreamArn"):
        attributes["StreamArn"] = table["LatestStreamArn"]
    return Created(ref=name, attributes=attributes)


def _sns_topic(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("TopicName") or stack.physical_name(logical_id)
    attributes = {k: _attribute_text(props[k]) for k in ("KmsMasterKeyId", "FifoTopic") if k in props}
    sns = stack.client("sns")
    arn = sns.create_topic(Name=name, Attributes=attributes)["TopicArn"]
    for subscription in props.get("Subscription", []):
        sns.subscribe(TopicArn=arn, Protocol=subscription["Protocol"], Endpoint=subscription["Endpoint"])
    return Created(ref=arn, attributes={"TopicArn": arn, "TopicName": name})


def _kinesis_stream(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("Name") or stack.physical_name(logical_id)
    mode = props.get("StreamModeDetails", {"StreamMode": "PROVISIONED"})
    request: dict[str, Any] = {"StreamName": name, "StreamModeDetails": mode}
    if mode.get("StreamMode") != "ON_DEMAND":
        request["ShardCount"] = int(props.get("ShardCount", 1))
    kinesis = stack.client("kinesis")
    kinesis.create_stream(**request)  # moto gives an ON_DEMAND stream 4 shards
    hours = int(props.get("RetentionPeriodHours", 24))
    if hours > 24:
        kinesis.increase_stream_retention_period(StreamName=name, RetentionPeriodHours=hours)
    encryption = props.get("StreamEncryption")
    if encryption:
        kinesis.start_stream_encryption(
            StreamName=name, EncryptionType=encryption["EncryptionType"], KeyId=encryption["KeyId"]
        )
    arn = kinesis.describe_stream_summary(StreamName=name)["StreamDescriptionSummary"]["StreamARN"]
    return Created(ref=name, attributes={"Arn": arn})


def _cloudwatch_alarm(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("AlarmName") or stack.physical_name(logical_id)
    keys = (
        "AlarmDescription", "Namespace", "MetricName", "Dimensions", "Statistic", "Period",
        "EvaluationPeriods", "Threshold", "ComparisonOperator", "TreatMissingData", "AlarmActions",
        "ExtendedStatistic", "Metrics", "DatapointsToAlarm",
    )  # fmt: skip
    request = {key: props[key] for key in keys if key in props}
    stack.client("cloudwatch").put_metric_alarm(AlarmName=name, **request)
    return Created(ref=name, attributes={"Arn": stack.arn("cloudwatch", f"alarm:{name}")})


def _lambda_function(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("FunctionName") or stack.physical_name(logical_id)
    arn = stack.arn("lambda", f"function:{name}")
    code = props.get("Code", {})
    if code.get("S3Bucket") != "local-artifacts":
        raise Unsupported(f"{logical_id}.Code is not a local folder")
    layers = tuple(Path(layer) for layer in props.get("Layers", []))
    spec = FunctionSpec(
        logical_id=logical_id,
        name=name,
        arn=arn,
        handler=props["Handler"],
        code_dir=ROOT / code["S3Key"],
        layer_dirs=layers,
        timeout=int(props.get("Timeout", 3)),
        memory_size=int(props.get("MemorySize", 128)),
        environment={k: _attribute_text(v) for k, v in props.get("Environment", {}).get("Variables", {}).items()},
        layer_refs=tuple(str(layer) for layer in props.get("Layers", [])),
        reserved_concurrency=(
            int(props["ReservedConcurrentExecutions"]) if "ReservedConcurrentExecutions" in props else None
        ),
        ephemeral_storage_mb=int(props.get("EphemeralStorage", {}).get("Size", 512)),
        snap_start=(props.get("SnapStart") or {}).get("ApplyOn") == "PublishedVersions",
        durable=bool(props.get("DurableConfig")),
    )
    return Created(ref=name, attributes={"Arn": arn, "Spec": spec})


def _layer_version(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    content = props.get("Content", {})
    if content.get("S3Bucket") != "local-artifacts":
        raise Unsupported(f"{logical_id}.Content is not a local folder")
    # Ref of a layer version is its ARN; locally the layer is its source folder on sys.path.
    return Created(ref=str(ROOT / content["S3Key"]))


def _configuration_only(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    """Mappings, async-invoke configs, schedules: the local stack acts on their properties."""
    return Created(ref=logical_id, attributes={"Arn": stack.arn("local", logical_id)})


def _function_url(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    """A Function URL: named like AWS's until the local stack serves it on loopback and sets the loopback URL (a
    function whose environment names another function's URL gets that in its overrides)."""
    created = _configuration_only(stack, logical_id, props)
    created.attributes["FunctionUrl"] = f"https://{logical_id.lower()}.lambda-url.{stack.region}.on.aws/"
    return created


def _sns_subscription(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    if props["Protocol"] == "lambda":
        # Lambda endpoints are served by the dev stack (a tap queue), not by moto.
        return _configuration_only(stack, logical_id, props)
    attributes = {
        key: json.dumps(props[key]) if isinstance(props[key], dict) else _attribute_text(props[key])
        for key in ("FilterPolicy", "FilterPolicyScope", "RawMessageDelivery", "RedrivePolicy")
        if key in props
    }
    arn = stack.client("sns").subscribe(
        TopicArn=props["TopicArn"], Protocol=props["Protocol"], Endpoint=props["Endpoint"], Attributes=attributes
    )["SubscriptionArn"]
    return Created(ref=arn, attributes={"Arn": arn})


def _event_bus(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props["Name"]
    arn = stack.client("events").create_event_bus(Name=name)["EventBusArn"]
    return Created(ref=name, attributes={"Arn": arn, "Name": name})


def _events_rule(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("Name") or stack.physical_name(logical_id)
    request: dict[str, Any] = {"Name": name, "State": props.get("State", "ENABLED")}
    for key in ("ScheduleExpression", "Description", "EventBusName"):
        if key in props:
            request[key] = props[key]
    if "EventPattern" in props:
        request["EventPattern"] = json.dumps(props["EventPattern"])
    events = stack.client("events")
    arn = events.put_rule(**request)["RuleArn"]
    # Queues and topics are delivered by moto; Lambda targets by the dev stack (a tap queue).
    native = [t for t in props.get("Targets", []) if t["Arn"].split(":")[2] in ("sqs", "sns")]
    if native and "EventPattern" in props:
        events.put_targets(
            Rule=name,
            EventBusName=props.get("EventBusName", "default"),
            Targets=[{k: v for k, v in t.items() if k in ("Id", "Arn", "Input", "InputPath")} for t in native],
        )
    return Created(ref=name, attributes={"Arn": arn})


def _s3_bucket(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    """The bucket with the template's encryption, public access block and lifecycle (moto keeps them)."""
    name = props.get("BucketName") or stack.physical_name(logical_id).lower()
    s3 = stack.client("s3")
    if stack.region == "us-east-1":
        s3.create_bucket(Bucket=name)
    else:
        s3.create_bucket(Bucket=name, CreateBucketConfiguration={"LocationConstraint": stack.region})
    if "BucketEncryption" in props:
        # CloudFormation's ServerSideEncryptionByDefault is the API's ApplyServerSideEncryptionByDefault.
        encryption = [
            {"ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"]}
            for rule in props["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        ]
        s3.put_bucket_encryption(Bucket=name, ServerSideEncryptionConfiguration={"Rules": encryption})
    if "PublicAccessBlockConfiguration" in props:
        s3.put_public_access_block(Bucket=name, PublicAccessBlockConfiguration=props["PublicAccessBlockConfiguration"])
    rules = props.get("LifecycleConfiguration", {}).get("Rules", [])
    if rules:
        s3.put_bucket_lifecycle_configuration(
            Bucket=name,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": rule.get("Id", f"rule-{index}"),
                        "Status": rule["Status"],
                        "Filter": {"Prefix": rule.get("Prefix", "")},
                        "Expiration": {"Days": int(rule["ExpirationInDays"])},
                    }
                    for index, rule in enumerate(rules)
                    if "ExpirationInDays" in rule
                ]
            },
        )
    return Created(ref=name, attributes={"Arn": f"arn:aws:s3:::{name}", "DomainName": f"{name}.s3.amazonaws.com"})


def _s3_bucket_policy(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    """The policy without its TLS-only denials: the local stack speaks plain http on loopback, and moto would
    refuse every request under them."""
    document = dict(props["PolicyDocument"])
    statements = [
        statement
        for statement in document.get("Statement", [])
        if statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport") not in ("false", False)
    ]
    if statements:
        document["Statement"] = statements
        stack.client("s3").put_bucket_policy(Bucket=props["Bucket"], Policy=json.dumps(document))
    return Created(ref=f"{props['Bucket']}-policy")


def _secret(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    name = props.get("Name") or stack.physical_name(logical_id)
    request: dict[str, Any] = {"Name": name}
    if "SecretString" in props:
        request["SecretString"] = props["SecretString"]
    elif "GenerateSecretString" in props:
        generator = props["GenerateSecretString"]
        password = stack.client("secretsmanager").get_random_password(
            PasswordLength=int(generator.get("PasswordLength", 32)),
            ExcludePunctuation=bool(generator.get("ExcludePunctuation", False)),
        )["RandomPassword"]
        template = generator.get("SecretStringTemplate")
        if template and "GenerateStringKey" in generator:
            request["SecretString"] = json.dumps({**json.loads(template), generator["GenerateStringKey"]: password})
        else:
            request["SecretString"] = password
    for key in ("KmsKeyId", "Description"):
        if key in props:
            request[key] = props[key]
    arn = stack.client("secretsmanager").create_secret(**request)["ARN"]
    # Ref of a secret is its ARN.
    return Created(ref=arn, attributes={"Id": arn})


def _kms_key(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    request: dict[str, Any] = {"KeyUsage": props.get("KeyUsage", "ENCRYPT_DECRYPT")}
    for key in ("Description", "KeySpec"):
        if key in props:
            request[key] = props[key]
    if "KeyPolicy" in props:  # stored, not enforced: moto does not evaluate key policies
        request["Policy"] = json.dumps(props["KeyPolicy"])
    kms = stack.client("kms")
    metadata = kms.create_key(**request)["KeyMetadata"]
    if props.get("EnableKeyRotation"):
        kms.enable_key_rotation(KeyId=metadata["KeyId"])
    # Ref of a key is its id.
    return Created(ref=metadata["KeyId"], attributes={"Arn": metadata["Arn"], "KeyId": metadata["KeyId"]})


def _kms_alias(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    stack.client("kms").create_alias(AliasName=props["AliasName"], TargetKeyId=props["TargetKeyId"])
    return Created(ref=props["AliasName"])


def _ssm_parameter(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    stack.client("ssm").put_parameter(Name=props["Name"], Value=str(props["Value"]), Type=props["Type"])
    return Created(ref=props["Name"])


def _user_pool(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    pool_id, attributes = cognito.create_user_pool(stack.client("cognito-idp"), stack.physical_name(logical_id), props)
    return Created(ref=pool_id, attributes=attributes)


def _user_pool_domain(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    return Created(ref=cognito.create_user_pool_domain(stack.client("cognito-idp"), props))


def _user_pool_resource_server(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    return Created(ref=cognito.create_resource_server(stack.client("cognito-idp"), props))


def _user_pool_client(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    client_id, attributes = cognito.create_user_pool_client(stack.client("cognito-idp"), props)
    return Created(ref=client_id, attributes=attributes)


def _function_version(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    """Every local invocation runs $LATEST; versions and aliases only need to resolve."""
    function = stack.logical_id_for_name(str(props["FunctionName"]))
    arn = f"{stack.ensure(function).attributes['Arn']}:1"
    return Created(ref=arn, attributes={"Version": "1", "FunctionArn": arn})


def _function_alias(stack: LocalStack, logical_id: str, props: dict[str, Any]) -> Created:
    function = stack.logical_id_for_name(str(props["FunctionName"]))
    arn = f"{stack.ensure(function).attributes['Arn']}:{props['Name']}"
    return Created(ref=arn, attributes={"Arn": arn})


def _attribute_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_CREATORS: dict[str, Callable[[LocalStack, str, dict[str, Any]], Created]] = {
    "AWS::SQS::Queue": _sqs_queue,
    "AWS::DynamoDB::Table": _dynamodb_table,
    "AWS::SNS::Topic": _sns_topic,
    "AWS::Kinesis::Stream": _kinesis_stream,
    "AWS::CloudWatch::Alarm": _cloudwatch_alarm,
    "AWS::Lambda::Function": _lambda_function,
    "AWS::Lambda::LayerVersion": _layer_version,
    "AWS::Lambda::EventSourceMapping": _configuration_only,
    "AWS::Lambda::EventInvokeConfig": _configuration_only,
    "AWS::Scheduler::Schedule": _configuration_only,
    "AWS::Lambda::Url": _function_url,
    "AWS::Lambda::Version": _function_version,
    "AWS::Lambda::Alias": _function_alias,  # served by the dev stack when its function is a web app
    "AWS::SNS::Subscription": _sns_subscription,
    "AWS::Events::EventBus": _event_bus,
    "AWS::Events::Rule": _events_rule,
    "AWS::SecretsManager::Secret": _secret,
    "AWS::S3::Bucket": _s3_bucket,
    "AWS::S3::BucketPolicy": _s3_bucket_policy,
    "AWS::KMS::Key": _kms_key,
    "AWS::KMS::Alias": _kms_alias,
    "AWS::SSM::Parameter": _ssm_parameter,
    "AWS::Cognito::UserPool": _user_pool,
    "AWS::Cognito::UserPoolDomain": _user_pool_domain,
    "AWS::Cognito::UserPoolResourceServer": _user_pool_resource_server,
    "AWS::Cognito::UserPoolClient": _user_pool_client,
}
