"""Profiles and part switches: the template expanded with each profile samconfig.toml names (and each option
docs/deploy.md lists on top of it) evaluates whole, names no resource that is not created, and a part that is
off has no resources at all."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devstack.stack.template import ROOT
from tests.profiles import (
    OPTIONS,
    PART_SWITCHES,
    PROFILE_NAMES,
    created_resources,
    deploy_scope,
    profile_parameters,
)
from tests.template.test_invariants import EXPANDED, RESOURCES, TEMPLATE

# What each part is made of, by its defining resources: none of them may exist while the part is off.
PART_RESOURCES = {
    "JobPipeline": {"JobQueue", "JobDeadLetterQueue", "JobTable", "JobResultBucket", "ToolWorker", "ToolWorkerRole"},
    "CallLog": {"CallLogStream", "CallLogAnalyzer", "CallLogFailureQueue", "AlertWindowTable", "AlertTopic"},
    "Probes": {
        "MonitorTable",
        "EndpointTokenKey",
        "ProbeDispatcher",
        "ProbeSchedule",
        "ProbeWorker",
        "DriftDetector",
        "ExpiryRollup",
        "SelfProbeKeyIssuer",
    },
}


class Evaluation:
    """The template as CloudFormation would create it for one set of parameters: which resources exist, and which
    logical ids their properties and the outputs name."""

    def __init__(self, **parameters: str) -> None:
        self.named: set[str] = set()
        self.scope = deploy_scope(parameters, ref=self._ref, get_att=self._get_att)
        self.created = set(created_resources(self.scope))

    def _ref(self, logical_id: str) -> str:
        self.named.add(logical_id)
        return f"ref:{logical_id}"

    def _get_att(self, logical_id: str, attribute: str) -> str:
        self.named.add(logical_id)
        if attribute == "FunctionUrl":  # split by the template into its host
            return f"https://{logical_id.lower()}.lambda-url.us-east-1.on.aws/"
        return f"arn:{logical_id}.{attribute}"

    def resolve_everything(self) -> None:
        """Resolves every created resource (properties, DependsOn) and every output whose condition holds."""
        for logical_id in self.created:
            resource = RESOURCES[logical_id]
            self.scope.resolve(resource.get("Properties", {}))
            depends = resource.get("DependsOn", [])
            self.named.update([depends] if isinstance(depends, str) else depends)
        for output in EXPANDED.get("Outputs", {}).values():
            if "Condition" not in output or self.scope.condition(output["Condition"]):
                self.scope.resolve(output["Value"])

    def rule_failures(self) -> list[str]:
        return self.scope.rule_failures(EXPANDED.get("Rules", {}))


def combinations() -> list[Any]:
    return [
        pytest.param({**profile_parameters(profile), **extra}, id=f"{profile}+{option}")
        for profile in PROFILE_NAMES
        for option, extra in {"defaults": {}, **{name: option.parameters for name, option in OPTIONS.items()}}.items()
    ]


def test_samconfig_names_the_minimal_and_the_full_profile():
    # Given samconfig.toml's environments
    minimal, full = profile_parameters("minimal"), profile_parameters("full")
    # Then minimal is the endpoint and the job pipeline, and full turns every part on
    assert {name: minimal[name] for name in PART_SWITCHES} == {
        "JobPipeline": "Enabled",
        "CallLog": "Disabled",
        "Probes": "Disabled",
    }
    assert all(full[name] == "Enabled" for name in PART_SWITCHES)
    # And every part switch is a parameter of the template, on by default
    for name in PART_SWITCHES:
        assert TEMPLATE.source["Parameters"][name]["AllowedValues"] == ["Enabled", "Disabled"]
        assert TEMPLATE.parameter_defaults()[name] == "Enabled"


@pytest.mark.parametrize("parameters", combinations())
def test_each_profile_expands_whole_and_its_off_parts_have_no_resources(parameters):
    # Given the template evaluated with a profile's parameters (and one documented option on top)
    evaluation = Evaluation(**parameters)
    # When every created resource and every output is resolved
    evaluation.resolve_everything()
    # Then no rule refuses the profile
    assert evaluation.rule_failures() == []
    # And nothing names a resource that is not created (no dangling Ref, GetAtt, Sub or DependsOn)
    assert evaluation.named - evaluation.created == set()
    # And a part that is off has none of its resources, a part that is on has all of them
    for part, members in PART_RESOURCES.items():
        if parameters.get(part, "Enabled") == "Disabled":
            assert members & evaluation.created == set(), part
        else:
            assert members <= evaluation.created, part
    # And the call-log-telemetry extension's layer (SAM names its versions) exists only with the call log on
    layers = {logical_id for logical_id in evaluation.created if logical_id.startswith("TelemetryExtensionLayer")}
    telemetry = parameters.get("CallLog") == "Enabled" and parameters.get("CallLogTelemetry", "enabled") == "enabled"
    assert bool(layers) is telemetry
    # And the dashboard is one JSON document, its widgets those of the parts that are on
    body = json.loads(evaluation.scope.resolve(RESOURCES["OperationsDashboard"]["Properties"]["DashboardBody"]))
    titles = " ".join(widget["properties"]["title"] for widget in body["widgets"])
    assert ("Job queues" in titles) is (parameters.get("JobPipeline") == "Enabled")
    assert ("Call log" in titles) is (parameters.get("CallLog") == "Enabled")
    assert ("Probe uptime" in titles) is (parameters.get("Probes") == "Enabled")
    # And the MCP endpoint is always there
    assert {"McpServer", "McpServerUrl", "ApiKeysSecret", "RateLimitTable"} <= evaluation.created


def test_the_minimal_profile_keeps_no_alarm_stream_or_key_of_the_parts_it_leaves_out():
    # Given the minimal profile
    created = Evaluation(**profile_parameters("minimal")).created
    # Then it has no Kinesis stream and no KMS key, and only the endpoint's and the jobs' alarms
    types = [RESOURCES[logical_id]["Type"] for logical_id in created]
    assert "AWS::Kinesis::Stream" not in types and "AWS::KMS::Key" not in types
    alarms = sorted(logical_id for logical_id in created if RESOURCES[logical_id]["Type"] == "AWS::CloudWatch::Alarm")
    assert all(alarm.startswith(("McpServer", "ToolWorker", "JobDeadLetterQueue")) for alarm in alarms), alarms
    # And the full profile has every alarm the template declares but the optional authorization server's and
    # durable worker's
    full = Evaluation(**profile_parameters("full")).created
    declared = {k for k, v in RESOURCES.items() if v["Type"] == "AWS::CloudWatch::Alarm"}
    assert declared - full == {
        "AuthorizationServerErrorsAlarm",
        "AuthorizationServerThrottlesAlarm",
        "DurableToolWorkerErrorsAlarm",
        "DurableToolWorkerFailedExecutionsAlarm",
        "DurableToolWorkerTimedOutExecutionsAlarm",
    }


@pytest.mark.parametrize(
    ("mode", "stream_mode", "shards"), [("ON_DEMAND", "ON_DEMAND", None), ("PROVISIONED", "PROVISIONED", 1)]
)
def test_the_call_log_stream_is_on_demand_or_provisioned_with_one_shard(mode, stream_mode, shards):
    # Given CallLogStreamMode (and the default CallLogShardCount)
    evaluation = Evaluation(CallLogStreamMode=mode)
    # When the stream's properties are resolved
    stream = evaluation.scope.resolve(RESOURCES["CallLogStream"]["Properties"])
    # Then it has that mode, and a shard count only when provisioned (1 by default)
    assert stream["StreamModeDetails"]["StreamMode"] == stream_mode
    assert stream.get("ShardCount") == shards


def test_probes_without_the_call_log_are_refused_at_deploy_naming_the_parameters():
    # Given Probes on and the call log off
    failures = Evaluation(Probes="Enabled", CallLog="Disabled").rule_failures()
    # Then a rule refuses the deploy, naming both parameters
    assert len(failures) == 1
    assert failures[0].startswith("ProbesNeedCallLog") and "Probes=Enabled" in failures[0] and "CallLog" in failures[0]


def test_the_endpoint_is_told_which_parts_are_absent_by_their_variables_missing():
    # Given the minimal profile's McpServer environment
    evaluation = Evaluation(**profile_parameters("minimal"))
    variables = evaluation.scope.resolve(RESOURCES["McpServer"]["Properties"]["Environment"]["Variables"])
    # Then it names the job pipeline, and neither the call log nor the probes' table and key
    assert {"JOB_TABLE_NAME", "JOB_QUEUE_URL", "JOB_DEAD_LETTER_QUEUE_URL"} <= set(variables)
    assert not {"CALL_LOG_STREAM_NAME", "MONITOR_TABLE_NAME", "ENDPOINT_TOKEN_KEY_ID"} & set(variables)


def test_the_deploy_guide_lists_every_profile_and_option_with_the_idle_cost_make_cost_wrote():
    # Given docs/deploy.md's profile table and docs/cost.md's idle month per profile (written by `make cost`)
    deploy = (ROOT / "docs" / "deploy.md").read_text()
    cost = (ROOT / "docs" / "cost.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in deploy.splitlines() if line.startswith("| ")}
    totals = {
        line.split("|")[1].strip(): line.split("**")[1]
        for line in cost.split("## Idle, per profile")[1].split("\n## ")[0].splitlines()
        if line.startswith("| ") and "**$" in line
    }
    # Then every profile and every option has its row, naming its parameters and the idle total make cost found
    for name in [*PROFILE_NAMES, *(f"full + {option}" for option in OPTIONS)]:
        row = rows.get(f"**{name}**") or rows.get(name)
        assert row is not None, name
        assert row.rstrip(" |").endswith(totals[name]), (name, totals[name])
    for name, option in OPTIONS.items():
        assert all(f"{parameter}=" in rows[f"full + {name}"] for parameter in option.parameters), name
