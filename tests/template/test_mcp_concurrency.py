"""McpServer's concurrency, and every other public function's: capped by default so a flood is throttled, and
combinations Lambda would reject mid-deploy are refused by the template's rules first."""

from __future__ import annotations

from tests.template.test_invariants import (
    EXPANDED,
    RESOURCES,
    _refs,
    invoked_function,
    of_type,
    parameter_combinations,
    resolve,
    scope,
)

MCP_SERVER = RESOURCES["McpServer"]["Properties"]
RULES = EXPANDED["Rules"]


def test_mcp_server_is_capped_by_default_and_unreserved_only_when_asked():
    # Given the default parameters, then McpReservedConcurrency=0
    # When McpServer's reserved concurrency is resolved
    # Then it is 20 by default (past it the Function URL answers 429) and absent for 0
    assert int(resolve(MCP_SERVER)["ReservedConcurrentExecutions"]) == 20
    assert "ReservedConcurrentExecutions" not in resolve(MCP_SERVER, McpReservedConcurrency=0)


def public_functions() -> set[str]:
    """Functions anyone may invoke: a Function URL's target, or named by a permission for the principal "*"."""
    found = {invoked_function(url["Properties"]["TargetFunctionArn"]) for url in of_type("AWS::Lambda::Url").values()}
    for permission in of_type("AWS::Lambda::Permission").values():
        if permission["Properties"].get("Principal") == "*":
            found.add(invoked_function(permission["Properties"]["FunctionName"]))
    return found


def test_every_public_function_has_reserved_concurrency_from_a_parameter():
    # Given every function with a Function URL or a public invoke permission, in a stack that creates them all
    functions = public_functions()
    assert {"McpServer", "AuthorizationServer"} <= functions
    everything = {"AuthMode": "oauth", "AuthorizationServerMode": "builtin"}
    for function in sorted(functions):
        expression = RESOURCES[function]["Properties"].get("ReservedConcurrentExecutions")
        # When its reserved concurrency is resolved with the default parameters
        reserved = resolve({"value": expression}, **everything).get("value")
        # Then it is capped by default, by a parameter an operator can change
        assert reserved is not None and int(reserved) > 0, function
        assert _refs(expression), function


def test_provisioned_concurrency_above_reserved_is_refused_by_a_rule_and_every_other_combination_passes():
    # Given every allowed combination of reserved and provisioned concurrency
    checked = 0
    for values in parameter_combinations("McpReservedConcurrency", "McpProvisionedConcurrency"):
        reserved, provisioned = int(values["McpReservedConcurrency"]), int(values["McpProvisionedConcurrency"])

        # When CloudFormation checks the rules before creating anything
        failures = scope(**values).rule_failures(RULES)

        # Then exactly the combinations Lambda would reject mid-deploy are refused, with a message naming both
        if reserved and provisioned > reserved:
            assert failures == [
                "McpProvisionedConcurrencyWithinReserved: McpProvisionedConcurrency must not exceed "
                f"McpReservedConcurrency ({reserved})."
            ], values
        else:
            assert failures == [], values
        checked += 1
    assert checked == 8 * 8


def test_an_external_issuer_without_oauth_resource_is_refused_by_a_rule():
    # Given oauth/both with an external issuer, with and without OAuthResource, and the stack's own pool
    external = {"OAuthIssuer": "https://issuer.example.com/"}
    for mode in ("oauth", "both"):
        # When CloudFormation checks the rules
        missing = scope(AuthMode=mode, **external).rule_failures(RULES)
        pinned = scope(AuthMode=mode, OAuthResource="https://mcp.example.com/mcp", **external).rule_failures(RULES)
        own_pool = scope(AuthMode=mode).rule_failures(RULES)

        # Then only the external issuer without a resource is refused, naming the parameter
        assert (
            len(missing) == 1
            and missing[0].startswith("OAuthResourceForExternalIssuer: ")
            and "OAuthResource" in missing[0]
        )
        assert pinned == [] and own_pool == []


def test_the_built_in_authorization_server_without_oauth_or_with_an_external_issuer_is_refused_by_a_rule():
    # Given AuthorizationServerMode builtin with API keys only, with an external issuer, and as intended
    builtin = {"AuthorizationServerMode": "builtin"}
    with_keys = scope(AuthMode="apikey", **builtin).rule_failures(RULES)
    external = scope(AuthMode="oauth", OAuthIssuer="https://issuer.example.com/", **builtin).rule_failures(RULES)
    intended = [scope(AuthMode=mode, **builtin).rule_failures(RULES) for mode in ("oauth", "both")]

    # Then the first two are refused before anything is created, naming the rule; the intended ones pass
    for failures in (with_keys, external):
        assert [failure.split(":")[0] for failure in failures if "Builtin" in failure] == [
            "BuiltinAuthorizationServerNeedsOAuth"
        ]
    assert intended == [[], []]
