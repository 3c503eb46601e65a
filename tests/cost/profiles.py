"""The idle month of each profile samconfig.toml names, and of each documented option on top of the full one:
the template's resources as each would create them (conditions applied), priced like the measured stack's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from devstack.sources.sqs import LONG_POLL_SECONDS
from tests.cost.figures import Measurement
from tests.cost.model import IdleShape, LineItem, Price, idle_line_items, total
from tests.profiles import OPTIONS, PROFILE_NAMES, created_resources, deploy_scope, profile_parameters

# Resources with a monthly charge of their own (tests.cost.units counts the same on the local stack).
MONTHLY_TYPES = (
    "AWS::Kinesis::Stream",
    "AWS::SecretsManager::Secret",
    "AWS::KMS::Key",
    "AWS::CloudWatch::Alarm",
    "AWS::CloudWatch::Dashboard",
    "AWS::WAFv2::WebACL",
)
# Counted from the created resources' properties rather than by type: a web ACL's rules, and each interface VPC
# endpoint once per AZ (one subnet of VpcSubnetIds per AZ assumed); gateway endpoints have no hourly charge.
WAF_RULES = "WAF rules"
INTERFACE_ENDPOINT_AZS = "interface VPC endpoint AZs"


def idle_shape(parameters: dict[str, Any], firings_per_hour_when_scheduled: float) -> IdleShape:
    """What the stack deployed with these parameters is billed for while idle: its resources of MONTHLY_TYPES, one
    empty long poll per SQS mapping every LONG_POLL_SECONDS (as the local stack polls), and the schedule's firings
    when it has the schedule."""
    scope = deploy_scope(parameters)
    created = created_resources(scope)
    types = [resource["Type"] for resource in created.values()]
    queues = {logical_id for logical_id, resource in created.items() if resource["Type"] == "AWS::SQS::Queue"}
    sqs_mappings = [
        resource
        for resource in created.values()
        if resource["Type"] == "AWS::Lambda::EventSourceMapping"
        and resource["Properties"]["EventSourceArn"].get("Fn::GetAtt", [""])[0] in queues
    ]
    scheduled = "AWS::Events::Rule" in types
    web_acls = [scope.resolve(r["Properties"]) for r in created.values() if r["Type"] == "AWS::WAFv2::WebACL"]
    endpoints = [scope.resolve(r["Properties"]) for r in created.values() if r["Type"] == "AWS::EC2::VPCEndpoint"]
    return IdleShape(
        resources={
            **{kind: types.count(kind) for kind in MONTHLY_TYPES},
            WAF_RULES: sum(len(acl["Rules"]) for acl in web_acls),
            INTERFACE_ENDPOINT_AZS: sum(len(e["SubnetIds"]) for e in endpoints if e["VpcEndpointType"] == "Interface"),
        },
        parameters=dict(scope.parameters),
        schedule_firings_per_hour=firings_per_hour_when_scheduled if scheduled else 0.0,
        long_polls_per_hour=len(sqs_mappings) * 3600 / LONG_POLL_SECONDS,
    )


def named_setups() -> Iterator[tuple[str, dict[str, str], str]]:
    """(name, parameters, what it adds) of each profile, then of each option on top of the full profile."""
    for profile in PROFILE_NAMES:
        yield profile, profile_parameters(profile), ""
    for name, option in OPTIONS.items():
        yield f"full + {name}", {**profile_parameters("full"), **option.parameters}, option.adds


def profile_idle(
    measurement: Measurement, prices: dict[str, Price]
) -> list[tuple[str, str, float, list[LineItem], list[LineItem]]]:
    """Per named setup: its name, what it adds, its priced idle total, its line items and the unpriced ones."""
    firings = measurement.units["idle schedule"].per_hour
    rows = []
    for name, parameters, adds in named_setups():
        items = idle_line_items(measurement, prices, idle_shape(parameters, firings))
        priced, missing = total(items)
        rows.append((name, adds, priced, items, missing))
    return rows
