"""McpServer's published layers (Web Adapter, Parameters and Secrets extension) in any region.

A layer ARN is checked by nothing before CreateFunction, so a wrong account or an unmapped region would
fail the deploy halfway. These tests evaluate the expansion the way CloudFormation would, per region.
"""

from __future__ import annotations

import re

import pytest

from tests.template.test_invariants import EXPANDED, RESOURCES, scope

LAYERS = RESOURCES["McpServer"]["Properties"]["Layers"]
EXTENSION_MAPPING = EXPANDED["Mappings"]["ParametersSecretsExtensionLayers"]
RULES = EXPANDED["Rules"]
WEB_ADAPTER_ACCOUNT = "753240598075"
# Publishing accounts, from AWS's extension ARN tables (Systems Manager user guide, ps-integration-lambda-extensions).
EXTENSION_ACCOUNTS = {"eu-west-1": "015030872274", "us-east-1": "177933569100", "us-east-2": "590474943231"}
LAYER_ARN = re.compile(r"^arn:aws:lambda:(?P<region>[a-z0-9-]+):(?P<account>\d{12}):layer:(?P<name>[A-Za-z0-9-]+):\d+$")
UNMAPPED = "us-gov-west-1"  # published by AWS, in another partition: not in the commercial mapping


def published_layers(region: str, **parameters: str) -> list[str]:
    """McpServer's layers other than the stack's own (a Ref to SharedLayer)."""
    return [arn for arn in scope(region, **parameters).resolve(LAYERS) if not arn.startswith("ref:")]


def test_the_extension_mapping_covers_the_commercial_regions_with_both_architectures():
    assert len(EXTENSION_MAPPING) >= 30
    for region, arns in EXTENSION_MAPPING.items():
        assert set(arns) == {"arm64", "x86"}, region
        arm64, x86 = (LAYER_ARN.match(arns[key]) for key in ("arm64", "x86"))
        assert arm64 and x86, region
        assert arm64["region"] == x86["region"] == region
        assert arm64["account"] == x86["account"], region  # one publisher per region, both architectures
        assert arm64["name"] == "AWS-Parameters-and-Secrets-Lambda-Extension-Arm64", region
        assert x86["name"] == "AWS-Parameters-and-Secrets-Lambda-Extension", region


@pytest.mark.parametrize("region", sorted(EXTENSION_ACCOUNTS))
def test_a_mapped_region_gets_the_documented_publishers_for_its_architecture(region):
    # Given a deploy in a mapped region with no overrides
    for architecture, suffix in (("arm64", "Arm64"), ("x86_64", "X86")):
        # When McpServer's layers are resolved
        web_adapter, extension = published_layers(region, Architecture=architecture)

        # Then both come from their publishers in that region, for that architecture, and no rule refuses it
        adapter = f"arn:aws:lambda:{region}:{WEB_ADAPTER_ACCOUNT}:layer:LambdaAdapterLayer{suffix}:"
        assert web_adapter.startswith(adapter)
        assert extension.startswith(f"arn:aws:lambda:{region}:{EXTENSION_ACCOUNTS[region]}:layer:")
        assert ("Arm64" in extension) == (architecture == "arm64")
        assert scope(region, Architecture=architecture).rule_failures(RULES) == []


def test_an_unmapped_region_deploys_with_both_overrides():
    # Given a region outside the mapping and both layer ARNs set explicitly
    overrides = {
        "WebAdapterLayerArn": f"arn:aws-us-gov:lambda:{UNMAPPED}:123456789012:layer:LambdaAdapterLayerArm64:25",
        "ParametersSecretsExtensionLayerArn": (
            f"arn:aws-us-gov:lambda:{UNMAPPED}:127562683043:layer:AWS-Parameters-and-Secrets-Lambda-Extension-Arm64:87"
        ),
    }
    assert UNMAPPED not in EXTENSION_MAPPING

    # When the template is evaluated there (the mapping lookup in the unused branch included)
    layers = published_layers(UNMAPPED, **overrides)

    # Then the overrides are the layers and no rule refuses the deploy
    assert layers == [overrides["WebAdapterLayerArn"], overrides["ParametersSecretsExtensionLayerArn"]]
    assert scope(UNMAPPED, **overrides).rule_failures(RULES) == []


def test_an_unmapped_region_without_the_extension_override_is_refused_before_any_resource():
    # Given a region outside the mapping and no extension override
    # When CloudFormation checks the template's rules
    failures = scope(UNMAPPED).rule_failures(RULES)

    # Then the deploy is refused with a message naming the parameter to set
    assert len(failures) == 1
    assert "ParametersSecretsExtensionLayerArn" in failures[0]


def test_the_region_rule_lists_exactly_the_mapped_regions():
    # A region added to the mapping but not the rule would be refused; one only in the rule would deploy "".
    [assertion] = RULES["ParametersSecretsExtensionPublished"]["Assertions"]
    regions, region_ref = assertion["Assert"]["Fn::Contains"]
    assert region_ref == {"Ref": "AWS::Region"}
    assert sorted(regions) == sorted(EXTENSION_MAPPING)


def test_the_override_parameters_accept_only_layer_arns():
    for name in ("WebAdapterLayerArn", "ParametersSecretsExtensionLayerArn"):
        pattern = re.compile(EXPANDED["Parameters"][name]["AllowedPattern"])
        layer = "AWS-Parameters-and-Secrets-Lambda-Extension"
        assert pattern.fullmatch("")
        assert pattern.fullmatch(f"arn:aws-cn:lambda:cn-north-1:287114880934:layer:{layer}:4")
        assert not pattern.fullmatch(f"arn:aws:lambda:us-east-1:177933569100:layer:{layer}")  # no version
