"""The durable worker (DurableWorker=Enabled, off by default): a Lambda durable function whose timeout and
history retention are parameters within the service's limits, published under the alias "live" and reached
through it only, refused without the job pipeline, and absent (nothing billed) while off."""

from __future__ import annotations

import math

from cfnlint.api import ManualArgs, lint

from devstack.stack.template import ROOT
from mcp_backend.tools.dataset_chunks import DURABLE_CHUNK_BYTES
from tests.cost.model import load_prices
from tests.cost.profiles import idle_shape
from tests.cost.report import durable_jobs
from tests.profiles import PROFILE_NAMES, created_resources, deploy_scope, profile_parameters
from tests.template.test_invariants import EXPANDED, RESOURCES, TEMPLATE, of_type, referenced_resource, resolve
from tests.template.test_profiles import Evaluation

ON = {"DurableWorker": "Enabled"}
WORKER = RESOURCES["DurableToolWorker"]
# Its resources: the function, its role, version and alias, its log group, its alarms.
OWN = {logical_id for logical_id, resource in RESOURCES.items() if resource.get("Condition") == "DurableWorkerOn"}
# DurableConfig's limits (https://docs.aws.amazon.com/lambda/latest/api/API_DurableConfig.html) and Lambda's
# longest invocation, the most WorkerTimeout allows.
EXECUTION_TIMEOUT_RANGE = (1, 31_622_400)
RETENTION_DAYS_RANGE = (1, 90)
LONGEST_INVOCATION_SECONDS = 900


def test_the_worker_is_a_durable_function_timed_and_kept_by_its_parameters():
    # Given the expanded function (SAM passes DurableConfig through to AWS::Lambda::Function)
    properties = WORKER["Properties"]
    # Then its execution timeout and history retention are the parameters, and it runs like ToolWorker
    # (and its data under the data key when one is given: tests/template/test_edge_iam_vpc.py)
    assert properties["DurableConfig"] == {
        "ExecutionTimeout": {"Ref": "DurableExecutionTimeoutSeconds"},
        "RetentionPeriodInDays": {"Ref": "DurableRetentionDays"},
        "KMSKeyArn": {"Fn::If": ["HasDataKey", {"Ref": "DataKmsKeyArn"}, {"Ref": "AWS::NoValue"}]},
    }
    tool_worker = RESOURCES["ToolWorker"]["Properties"]
    assert (properties["Runtime"], properties["Architectures"]) == (
        tool_worker["Runtime"],
        tool_worker["Architectures"],
    )
    assert properties["Handler"] == "app.handler"
    source = TEMPLATE.source["Resources"]["DurableToolWorker"]["Properties"]
    assert source["CodeUri"].rstrip("/") == "functions/durable_tool_worker"
    # And each invocation of an execution may use Lambda's longest timeout
    assert properties["Timeout"] == LONGEST_INVOCATION_SECONDS


def test_the_worker_knows_its_invocation_timeout_so_its_fetches_may_use_it():
    # Given the durable worker's environment (a whole-file https dataset is fetched within one invocation)
    properties = WORKER["Properties"]
    # Then it names the function's own timeout, which its outbound deadline is drawn from
    assert properties["Environment"]["Variables"]["FUNCTION_TIMEOUT_SECONDS"] == properties["Timeout"]


def test_the_parameters_default_and_are_bounded_within_the_service_limits():
    # Given the four parameters
    spec = EXPANDED["Parameters"]
    # Then it is off by default, a durable job may run a day and its history is kept a week, 256 MiB datasets go
    # durable
    assert TEMPLATE.parameter_defaults()["DurableWorker"] == "Disabled"
    assert spec["DurableWorker"]["AllowedValues"] == ["Enabled", "Disabled"]
    assert int(spec["DurableExecutionTimeoutSeconds"]["Default"]) == 86_400
    assert int(spec["DurableRetentionDays"]["Default"]) == 7
    assert int(spec["DurableJobMinBytes"]["Default"]) == 256 * 1024**2
    # And no value CloudFormation accepts is one Lambda refuses: bounds inside DurableConfig's ranges
    timeout, retention = spec["DurableExecutionTimeoutSeconds"], spec["DurableRetentionDays"]
    assert (
        EXECUTION_TIMEOUT_RANGE[0] <= int(timeout["MinValue"]) <= int(timeout["MaxValue"]) == EXECUTION_TIMEOUT_RANGE[1]
    )
    assert (int(retention["MinValue"]), int(retention["MaxValue"])) == RETENTION_DAYS_RANGE
    # And a durable job may always outlast the longest ToolWorker invocation (else it would go durable for nothing)
    assert int(timeout["MinValue"]) >= max(int(v) for v in spec["WorkerTimeout"]["AllowedValues"])
    assert int(spec["DurableJobMinBytes"]["MinValue"]) >= 1


def test_it_is_published_as_the_alias_live_and_invoked_through_it_only():
    # Given the alias SAM publishes (AutoPublishAlias), and everything in the template that names the worker
    [alias_id] = [
        a
        for a, alias in of_type("AWS::Lambda::Alias").items()
        if alias["Properties"]["FunctionName"] == {"Ref": "DurableToolWorker"}
    ]
    assert RESOURCES[alias_id]["Properties"]["Name"] == "live"
    # When ToolWorker's and McpServer's DURABLE_WORKER_ARN are resolved with the worker on and off
    for function_id in ("ToolWorker", "McpServer"):
        variable = RESOURCES[function_id]["Properties"]["Environment"]["Variables"]["DURABLE_WORKER_ARN"]
        # Then it is the alias (a qualified ARN: durable functions are invoked by version or alias only), or ""
        assert resolve(variable, **ON) == f"ref:{alias_id}", function_id
        assert resolve(variable) == "", function_id
    # And ToolWorker's role may invoke the alias only, nothing invokes the function unqualified
    policies = [p for p in resolve(RESOURCES["ToolWorkerRole"]["Properties"]["Policies"], **ON) if isinstance(p, dict)]
    invokes = [
        statement
        for policy in policies
        for statement in policy["PolicyDocument"]["Statement"]
        if isinstance(statement, dict) and "lambda:InvokeFunction" in statement["Action"]
    ]
    assert [s["Resource"] for s in invokes] == [f"ref:{alias_id}"]
    triggers = [
        r
        for r in RESOURCES.values()
        if r["Type"] in ("AWS::Lambda::EventSourceMapping", "AWS::Lambda::Permission", "AWS::Lambda::Url")
    ]
    assert not [
        t
        for t in triggers
        if referenced_resource(
            t["Properties"]["FunctionName" if "FunctionName" in t["Properties"] else "TargetFunctionArn"]
        )
        == "DurableToolWorker"
    ]
    # And its alias is moved at once, not by CodeDeploy: an execution stays on the version it started on
    assert "UpdatePolicy" not in RESOURCES[alias_id]


def test_the_durable_worker_without_the_job_pipeline_is_refused_naming_both_parameters():
    # Given the durable worker on and the job pipeline off
    failures = Evaluation(DurableWorker="Enabled", JobPipeline="Disabled").rule_failures()
    # Then a rule refuses the deploy, naming both parameters, and nothing refuses it with the pipeline on
    assert len(failures) == 1
    assert failures[0].startswith("DurableWorkerNeedsJobPipeline")
    assert "DurableWorker=Enabled" in failures[0] and "JobPipeline" in failures[0]
    assert Evaluation(**ON).rule_failures() == []


def test_off_it_has_no_resource_and_adds_nothing_to_the_idle_month():
    # Given each profile as samconfig.toml names it (DurableWorker off, its default), and with the worker on
    assert {"DurableToolWorker", "DurableToolWorkerRole", "DurableToolWorkerLogGroup"} <= OWN
    for profile in PROFILE_NAMES:
        off = created_resources(deploy_scope(profile_parameters(profile)))
        on = created_resources(deploy_scope({**profile_parameters(profile), **ON}))
        # Then off, none of its resources exists; on, exactly they are added
        assert not OWN & set(off), profile
        assert set(on) - set(off) == OWN, profile
        # And the idle month is the profile's own off; on, it adds only the alarms (an idle function, its
        # executions' history and its log group bill nothing: docs/cost.md)
        before, after = (
            idle_shape(profile_parameters(profile), 60.0),
            idle_shape({**profile_parameters(profile), **ON}, 60.0),
        )
        added = {
            k: after.resources[k] - before.resources[k]
            for k in after.resources
            if after.resources[k] != before.resources[k]
        }
        assert added == {"AWS::CloudWatch::Alarm": 3}, profile
        assert (after.long_polls_per_hour, after.schedule_firings_per_hour) == (
            before.long_polls_per_hour,
            before.schedule_firings_per_hour,
        )


def test_the_template_lints_clean_with_cfn_lint_and_the_serverless_rules():
    # Given the template with the durable worker (cfn-lint checks every combination of its conditions at once:
    # the worker on and off, with each part on or off)
    matches = lint((ROOT / "template.yaml").read_text(), config=ManualArgs(append_rules=["cfn_lint_serverless.rules"]))
    # Then neither cfn-lint's rules nor the serverless rules find anything
    assert [str(match) for match in matches] == []


def test_a_durable_job_is_priced_per_operation_with_each_price_naming_its_page():
    # Given the price table and the durable jobs section `make cost` writes into docs/cost.md
    prices = load_prices()
    rows = [prices[key] for key in ("lambda_durable_operation", "lambda_durable_data_written_gb")]
    rows.append(prices["lambda_durable_data_retained_gb_month"])
    section = "\n".join(durable_jobs(prices, {"DurableRetentionDays": 7}))
    # Then each durable price names the page it was read on, and the operations are priced
    assert all(row.source.startswith("https://") and row.read for row in rows)
    assert rows[0].usd is not None and rows[0].per == 1_000_000
    # And a 1 GiB job pays for the execution, its start, plan and result steps and one step per chunk
    operations = math.ceil(1024**3 / DURABLE_CHUNK_BYTES) + 4
    assert f"| 1 GiB | {operations - 4:,} | {operations:,} | ${rows[0].usd * operations / 1_000_000:.6f} |" in section
    # And docs/cost.md holds the section as this table renders it
    assert section.split("\n| dataset")[1] in (ROOT / "docs" / "cost.md").read_text()
