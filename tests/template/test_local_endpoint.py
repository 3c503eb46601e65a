"""`sam local invoke` can point every function at the local stack (LocalEndpointUrl, given as AWS_ENDPOINT_URL),
and no deploy can: the variable is absent by default and a rule refuses the parameter in CloudFormation."""

from __future__ import annotations

from tests.template.test_invariants import EXPANDED, RESOURCES, resolve, scope

FUNCTIONS = {logical_id: r for logical_id, r in RESOURCES.items() if r["Type"] == "AWS::Lambda::Function"}
LOCAL = "http://host.docker.internal:4566"


def endpoint_of(function: dict, **parameters: str) -> str | None:
    variables = resolve(function["Properties"].get("Environment", {}), **parameters).get("Variables", {})
    return variables.get("AWS_ENDPOINT_URL")


def test_no_function_has_an_aws_endpoint_by_default():
    # Given the template's default parameters, then no function's AWS endpoint is set
    assert {name for name, function in FUNCTIONS.items() if endpoint_of(function) is not None} == set()


def test_sam_local_invoke_points_every_function_at_the_local_stack():
    # When sam local invoke passes LocalEndpointUrl (it evaluates no Rules)
    # Then every function calls AWS through it
    assert {name: endpoint_of(function, LocalEndpointUrl=LOCAL) for name, function in FUNCTIONS.items()} == {
        name: LOCAL for name in FUNCTIONS
    }


def test_a_deploy_with_a_local_endpoint_is_refused_before_anything_is_created():
    # When CloudFormation evaluates the template's rules with the parameter set
    failures = scope(LocalEndpointUrl=LOCAL).rule_failures(EXPANDED["Rules"])

    # Then it refuses the stack, naming the parameter
    assert [failure for failure in failures if "LocalEndpointUrl" in failure]
    assert not [f for f in scope().rule_failures(EXPANDED["Rules"]) if "LocalEndpointUrl" in f]
