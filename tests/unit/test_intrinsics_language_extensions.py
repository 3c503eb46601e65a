"""The local scope evaluates what AWS::LanguageExtensions and the Rules section add to a template."""

from __future__ import annotations

import pytest

from devstack.stack.intrinsics import Scope, Unsupported

MAPPINGS = {"Layers": {"us-east-1": {"arm64": "arn:mapped"}}}
RULES = {
    "RegionKnown": {
        "RuleCondition": {"Fn::Equals": [{"Ref": "Override"}, ""]},
        "Assertions": [
            {"Assert": {"Fn::Contains": [["us-east-1"], {"Ref": "AWS::Region"}]}, "AssertDescription": "set Override"}
        ],
    }
}


def scope(region: str, override: str = "") -> Scope:
    return Scope(parameters={"Override": override}, mappings=MAPPINGS, conditions={}, region=region,
                 account_id="123456789012", stack_name="t")  # fmt: skip


def lookup(default: dict | None = None) -> dict:
    return {"Fn::FindInMap": ["Layers", {"Ref": "AWS::Region"}, "arm64", *([default] if default else [])]}


def test_find_in_map_answers_a_missing_key_with_its_default_value_and_only_then():
    # Given a lookup with DefaultValue and one without
    # When they are resolved in a mapped and in an unmapped region
    # Then the mapped value wins where it exists, the default answers elsewhere, and no default is an error
    assert scope("us-east-1").resolve(lookup({"DefaultValue": "fallback"})) == "arn:mapped"
    assert scope("eu-west-9").resolve(lookup({"DefaultValue": {"Ref": "Override"}})) == ""
    with pytest.raises(Unsupported, match="has no entry"):
        scope("eu-west-9").resolve(lookup())


def test_rules_refuse_only_when_their_condition_holds_and_an_assertion_fails():
    assert scope("us-east-1").rule_failures(RULES) == []
    assert scope("eu-west-9", override="arn:given").rule_failures(RULES) == []  # condition false: not checked
    assert scope("eu-west-9").rule_failures(RULES) == ["RegionKnown: set Override"]
