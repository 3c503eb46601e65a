"""The edge, IAM callers, the VPC and a customer-managed key: each option, evaluated as CloudFormation would
create the stack with it, has what it promises and nothing when off; combinations that cannot work are refused
by a rule that names the parameters."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.template.test_invariants import RESOURCES
from tests.template.test_profiles import Evaluation

EDGE = {"Edge": "CloudFront"}
DOMAIN = {
    **EDGE,
    "CustomDomainName": "mcp.example.com",
    "CertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/abc-123",
    "HostedZoneId": "Z0123456789ABC",
}
IAM = {
    "IamCallers": "Enabled",
    "IamCallerPrincipal": "arn:aws:iam::123456789012:role/ReportingAgent",
    "IamCallerTiers": "arn:aws:sts::123456789012:assumed-role/ReportingAgent/*=pro",
}
VPC = {"VpcSubnetIds": "subnet-0a,subnet-0b", "VpcSecurityGroupIds": "sg-01"}
ENDPOINTS = {**VPC, "CreateVpcEndpoints": "Enabled", "VpcId": "vpc-01", "VpcRouteTableIds": "rtb-01,rtb-02"}
KEY = {"DataKmsKeyArn": "arn:aws:kms:us-east-1:123456789012:key/1111-2222"}
MANAGED_CACHING_DISABLED = "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
MANAGED_ALL_VIEWER_EXCEPT_HOST = "b689b0a8-53d0-40ab-baf2-68738e2966ac"


def resolved(evaluation: Evaluation, logical_id: str) -> Any:
    return evaluation.scope.resolve(RESOURCES[logical_id]["Properties"])


def mcp_variables(evaluation: Evaluation) -> dict[str, Any]:
    return dict(resolved(evaluation, "McpServer")["Environment"]["Variables"])


BUILTIN = {"AuthMode": "oauth", "AuthorizationServerMode": "builtin"}
AUTHORIZATION_URL_HOST = "authorizationserverurl.lambda-url.us-east-1.on.aws"


@pytest.mark.parametrize(
    "parameters",
    [{}, EDGE, DOMAIN, IAM, VPC, ENDPOINTS, KEY, {**DOMAIN, **BUILTIN}, {**DOMAIN, **IAM, **ENDPOINTS, **KEY}],
)
def test_each_option_expands_whole_and_no_rule_refuses_it(parameters):
    # Given the template with the option (and all of them together)
    evaluation = Evaluation(**parameters)
    # When every created resource and output is resolved
    evaluation.resolve_everything()
    # Then no rule refuses it and nothing names a resource that is not created
    assert evaluation.rule_failures() == []
    assert evaluation.named - evaluation.created == set()


def test_without_the_options_none_of_their_resources_exist():
    # Given the defaults
    created = Evaluation().created
    # Then there is no distribution, web ACL, origin secret, IAM URL, VPC endpoint or key policy
    types = {RESOURCES[logical_id]["Type"] for logical_id in created}
    assert types.isdisjoint({"AWS::CloudFront::Distribution", "AWS::WAFv2::WebACL", "AWS::EC2::VPCEndpoint"})
    assert {"EdgeOriginSecret", "McpServerIamUrl", "DataKeyUse", "EdgeDnsRecord"}.isdisjoint(created)
    # And the endpoint checks no origin header and knows no IAM callers
    variables = mcp_variables(Evaluation())
    assert {"EDGE_ORIGIN_SECRET_ID", "IAM_CALLERS", "IAM_CALLER_TIERS"}.isdisjoint(variables)


def test_the_edge_streams_uncached_through_the_web_acl_with_the_secret_origin_header():
    # Given Edge=CloudFront
    evaluation = Evaluation(**EDGE)
    config = resolved(evaluation, "EdgeDistribution")["DistributionConfig"]
    behaviour = config["DefaultCacheBehavior"]
    # Then nothing is cached, every viewer header but Host reaches the Function URL, and POST is allowed
    assert behaviour["CachePolicyId"] == MANAGED_CACHING_DISABLED
    assert behaviour["OriginRequestPolicyId"] == MANAGED_ALL_VIEWER_EXCEPT_HOST
    assert "POST" in behaviour["AllowedMethods"] and behaviour["Compress"] is False
    # And the origin is the Function URL's host, over HTTPS, with the secret origin header from the secret
    [origin] = config["Origins"]
    assert origin["DomainName"] == "mcpserverurl.lambda-url.us-east-1.on.aws"
    assert origin["CustomOriginConfig"]["OriginProtocolPolicy"] == "https-only"
    [header] = origin["OriginCustomHeaders"]
    assert header["HeaderName"] == "x-origin-verify"
    assert header["HeaderValue"] == "{{resolve:secretsmanager:ref:EdgeOriginSecret:SecretString:current}}"
    assert config["WebACLId"] == "arn:EdgeWebAcl.Arn"
    # And the endpoint is told which secret to check, and may read it
    assert mcp_variables(evaluation)["EDGE_ORIGIN_SECRET_ID"] == "ref:EdgeOriginSecret"
    role = json.dumps(resolved(evaluation, "McpServerRole")["Policies"])
    assert '"Sid": "ReadEdgeOriginSecret", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue"' in role
    assert '"Resource": "ref:EdgeOriginSecret"' in role
    assert "ReadEdgeOriginSecret" not in json.dumps(resolved(Evaluation(), "McpServerRole")["Policies"])


def test_the_web_acl_limits_each_source_before_authentication_and_lets_large_mcp_bodies_through():
    # Given the web ACL
    acl = resolved(Evaluation(**EDGE), "EdgeWebAcl")
    assert acl["Scope"] == "CLOUDFRONT" and acl["DefaultAction"] == {"Allow": {}}
    rules = {rule["Name"]: rule for rule in acl["Rules"]}
    # Then the first rule blocks a source IP over its five-minute rate, whatever it authenticates with
    rate = rules["RatePerSourceIp"]
    assert rate["Priority"] == 0 and "Block" in rate["Action"]
    assert rate["Statement"]["RateBasedStatement"] == {
        "Limit": 600,
        "EvaluationWindowSec": 300,
        "AggregateKeyType": "IP",
    }
    # And the AWS managed groups follow, the Common set's 8 KB body rule only counting
    common = rules["AWSManagedRulesCommonRuleSet"]["Statement"]["ManagedRuleGroupStatement"]
    assert common["RuleActionOverrides"] == [{"Name": "SizeRestrictions_BODY", "ActionToUse": {"Count": {}}}]
    assert "AWSManagedRulesKnownBadInputsRuleSet" in rules


def test_a_custom_domain_is_the_distributions_alias_and_the_oauth_resource():
    # Given a custom domain with its certificate and hosted zone
    evaluation = Evaluation(**DOMAIN, AuthMode="oauth", AuthorizationServerMode="builtin")
    config = resolved(evaluation, "EdgeDistribution")["DistributionConfig"]
    # Then the distribution answers it with that certificate
    assert config["Aliases"] == ["mcp.example.com"]
    assert config["ViewerCertificate"]["AcmCertificateArn"] == DOMAIN["CertificateArn"]
    # And the alias records point at the distribution
    records = resolved(evaluation, "EdgeDnsRecord")["RecordSets"]
    assert {record["Type"] for record in records} == {"A", "AAAA"}
    # And the OAuth resource (the tokens' audience) is the domain's, for the endpoint and the authorization server
    assert mcp_variables(evaluation)["OAUTH_RESOURCE"] == "https://mcp.example.com/mcp"
    assert resolved(evaluation, "AuthorizationEndpointResource")["Value"] == "https://mcp.example.com/mcp"
    # And a resource set explicitly wins
    explicit = Evaluation(**DOMAIN, OAuthResource="https://other.example.com/mcp")
    assert mcp_variables(explicit)["OAUTH_RESOURCE"] == "https://other.example.com/mcp"


def oauth_urls(evaluation: Evaluation) -> dict[str, Any]:
    """Every place the template names the built-in authorization server's or the endpoint's public URL."""
    variables = mcp_variables(evaluation)
    return {
        "issuer parameter": resolved(evaluation, "AuthorizationIssuer")["Value"],
        "resource parameter": resolved(evaluation, "AuthorizationEndpointResource")["Value"],
        "login callback": resolved(evaluation, "AuthorizationLoginClient")["CallbackURLs"],
        "endpoint's issuer": variables["OAUTH_ISSUER"],
        "endpoint's keys": variables["OAUTH_JWKS_URL"],
    }


@pytest.mark.parametrize("edge", [{}, EDGE], ids=["edge-off", "edge-without-domain"])
def test_without_a_custom_domain_the_oauth_urls_are_the_function_urls(edge):
    # Given the built-in authorization server, with the edge off or on without a domain
    evaluation = Evaluation(**edge, **BUILTIN)
    # Then the issuer, the login callback and the keys are the authorization server's Function URL, the resource
    # the endpoint's
    assert oauth_urls(evaluation) == {
        "issuer parameter": f"https://{AUTHORIZATION_URL_HOST}",
        "resource parameter": "https://mcpserverurl.lambda-url.us-east-1.on.aws/mcp",
        "login callback": [f"https://{AUTHORIZATION_URL_HOST}/callback"],
        "endpoint's issuer": f"https://{AUTHORIZATION_URL_HOST}",
        "endpoint's keys": f"https://{AUTHORIZATION_URL_HOST}/jwks",
    }
    # And the authorization server checks no origin header
    assert "EDGE_ORIGIN_SECRET_ID" not in resolved(evaluation, "AuthorizationServer")["Environment"]["Variables"]
    if edge:  # nor does the distribution route anything to it
        config = resolved(evaluation, "EdgeDistribution")["DistributionConfig"]
        assert "CacheBehaviors" not in config and [o["Id"] for o in config["Origins"]] == ["McpServer"]


def test_with_a_custom_domain_the_oauth_issuer_and_resource_are_the_domains():
    # Given the edge with a custom domain and the built-in authorization server
    evaluation = Evaluation(**DOMAIN, **BUILTIN)
    # Then every OAuth URL the template names is on the domain
    assert oauth_urls(evaluation) == {
        "issuer parameter": "https://mcp.example.com",
        "resource parameter": "https://mcp.example.com/mcp",
        "login callback": ["https://mcp.example.com/callback"],
        "endpoint's issuer": "https://mcp.example.com",
        "endpoint's keys": "https://mcp.example.com/jwks",
    }
    assert mcp_variables(evaluation)["OAUTH_RESOURCE"] == "https://mcp.example.com/mcp"


def test_with_a_custom_domain_the_authorization_servers_paths_go_to_it_with_the_origin_header():
    # Given the edge with a custom domain and the built-in authorization server
    evaluation = Evaluation(**DOMAIN, **BUILTIN)
    config = resolved(evaluation, "EdgeDistribution")["DistributionConfig"]
    origins = {origin["Id"]: origin for origin in config["Origins"]}
    # Then its Function URL is a second origin, over HTTPS, with the same secret origin header as the endpoint's
    authorization = origins["AuthorizationServer"]
    assert authorization["DomainName"] == AUTHORIZATION_URL_HOST
    assert authorization["CustomOriginConfig"]["OriginProtocolPolicy"] == "https-only"
    assert authorization["OriginCustomHeaders"] == origins["McpServer"]["OriginCustomHeaders"]
    # And each of its routes goes there uncached, every viewer header but Host passed on; the rest (the MCP endpoint
    # and its protected-resource metadata) stays on McpServer
    behaviours = {behaviour["PathPattern"]: behaviour for behaviour in config["CacheBehaviors"]}
    assert set(behaviours) == {
        "/.well-known/oauth-authorization-server*",
        "/authorize",
        "/token",
        "/register",
        "/revoke",
        "/jwks",
        "/callback",
        "/consent",
    }
    for behaviour in behaviours.values():
        assert behaviour["TargetOriginId"] == "AuthorizationServer"
        assert behaviour["CachePolicyId"] == MANAGED_CACHING_DISABLED
        assert behaviour["OriginRequestPolicyId"] == MANAGED_ALL_VIEWER_EXCEPT_HOST
    assert "POST" in behaviours["/token"]["AllowedMethods"] and "POST" in behaviours["/consent"]["AllowedMethods"]
    assert config["DefaultCacheBehavior"]["TargetOriginId"] == "McpServer"
    # And the authorization server refuses what did not come through the edge, and may read the secret to check
    variables = resolved(evaluation, "AuthorizationServer")["Environment"]["Variables"]
    assert variables["EDGE_ORIGIN_SECRET_ID"] == "ref:EdgeOriginSecret"
    role = json.dumps(resolved(evaluation, "AuthorizationServerRole")["Policies"])
    assert '"Sid": "ReadEdgeOriginSecret", "Effect": "Allow", "Action": "secretsmanager:GetSecretValue"' in role
    assert '"Resource": "ref:EdgeOriginSecret"' in role


def test_iam_callers_get_an_aws_iam_url_on_its_own_alias_open_to_the_named_principal_only():
    # Given IamCallers=Enabled
    evaluation = Evaluation(**IAM)
    # Then a streaming AWS_IAM URL targets the "iam" alias
    url = resolved(evaluation, "McpServerIamUrl")
    assert (url["AuthType"], url["InvokeMode"], url["TargetFunctionArn"]) == (
        "AWS_IAM",
        "RESPONSE_STREAM",
        "ref:McpServerIamAlias",
    )
    # And both actions a Function URL call needs are granted to the named principal only
    grants = [resolved(evaluation, name) for name in ("McpServerIamUrlInvokeUrl", "McpServerIamUrlInvokeFunction")]
    assert {(g["Action"], g["Principal"]) for g in grants} == {
        ("lambda:InvokeFunctionUrl", IAM["IamCallerPrincipal"]),
        ("lambda:InvokeFunction", IAM["IamCallerPrincipal"]),
    }
    assert grants[0]["FunctionUrlAuthType"] == "AWS_IAM" and grants[1]["InvokedViaFunctionUrl"] is True
    # And the endpoint gets the tier map
    assert mcp_variables(evaluation)["IAM_CALLER_TIERS"] == IAM["IamCallerTiers"]
    assert mcp_variables(evaluation)["IAM_CALLERS"] == "true"


def test_every_function_runs_in_the_given_subnets_and_security_groups():
    # Given VpcSubnetIds and VpcSecurityGroupIds
    evaluation = Evaluation(**VPC)
    functions = [k for k in evaluation.created if RESOURCES[k]["Type"] == "AWS::Lambda::Function"]
    # Then every function has that VPC configuration, and none has one without them
    for logical_id in functions:
        assert resolved(evaluation, logical_id)["VpcConfig"] == {
            "SubnetIds": ["subnet-0a", "subnet-0b"],
            "SecurityGroupIds": ["sg-01"],
        }, logical_id
        assert "VpcConfig" not in resolved(Evaluation(), logical_id), logical_id
    # And no endpoint is created unless asked for
    assert not any(RESOURCES[k]["Type"] == "AWS::EC2::VPCEndpoint" for k in evaluation.created)


def test_the_vpc_endpoints_cover_every_service_the_functions_call():
    # Given CreateVpcEndpoints=Enabled
    evaluation = Evaluation(**ENDPOINTS)
    endpoints = [resolved(evaluation, k) for k in evaluation.created if RESOURCES[k]["Type"] == "AWS::EC2::VPCEndpoint"]
    by_service = {e["ServiceName"].rsplit(".", 1)[1]: e for e in endpoints}
    # Then DynamoDB and S3 are gateways on the route tables, the rest interfaces in the subnets with private DNS
    assert {s for s, e in by_service.items() if e["VpcEndpointType"] == "Gateway"} == {"dynamodb", "s3"}
    interfaces = {s for s, e in by_service.items() if e["VpcEndpointType"] == "Interface"}
    assert interfaces == {"sqs", "kinesis-streams", "kms", "secretsmanager", "ssm", "logs", "xray"}
    for service, endpoint in by_service.items():
        assert endpoint["VpcId"] == "vpc-01", service
        if endpoint["VpcEndpointType"] == "Gateway":
            assert endpoint["RouteTableIds"] == ["rtb-01", "rtb-02"]
        else:
            assert endpoint["SubnetIds"] == ["subnet-0a", "subnet-0b"] and endpoint["PrivateDnsEnabled"] is True


def test_a_data_key_encrypts_every_table_queue_stream_bucket_and_log_group_and_only_it_is_granted():
    # Given DataKmsKeyArn (the full profile: every part on)
    key = KEY["DataKmsKeyArn"]
    evaluation = Evaluation(**KEY)
    kinds = {
        "AWS::DynamoDB::Table",
        "AWS::SQS::Queue",
        "AWS::Kinesis::Stream",
        "AWS::S3::Bucket",
        "AWS::Logs::LogGroup",
    }
    stores = [k for k in evaluation.created if RESOURCES[k]["Type"] in kinds]
    assert {RESOURCES[k]["Type"] for k in stores} == kinds
    for logical_id in stores:
        properties = resolved(evaluation, logical_id)
        kind = RESOURCES[logical_id]["Type"]
        found = {
            "AWS::DynamoDB::Table": lambda p: p["SSESpecification"].get("KMSMasterKeyId"),
            "AWS::SQS::Queue": lambda p: p.get("KmsMasterKeyId"),
            "AWS::Kinesis::Stream": lambda p: p["StreamEncryption"]["KeyId"],
            "AWS::S3::Bucket": lambda p: p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
                "ServerSideEncryptionByDefault"
            ].get("KMSMasterKeyID"),
            "AWS::Logs::LogGroup": lambda p: p.get("KmsKeyId"),
        }[kind](properties)
        # Then each is encrypted with that key
        assert found == key, logical_id
        # And with no key given, none names one of ours (AWS owned or managed keys)
        assert key not in json.dumps(resolved(Evaluation(), logical_id)), logical_id
    # And the functions may use that key, only it, only to decrypt and make data keys
    policy = resolved(evaluation, "DataKeyUse")
    [statement] = policy["PolicyDocument"]["Statement"]
    assert (sorted(statement["Action"]), statement["Resource"]) == (["kms:Decrypt", "kms:GenerateDataKey"], key)
    roles = {RESOURCES[k]["Properties"]["Role"]["Fn::GetAtt"][0] for k in evaluation.created
             if RESOURCES[k]["Type"] == "AWS::Lambda::Function"}  # fmt: skip
    assert {role.removeprefix("ref:") for role in policy["Roles"]} == roles


def test_a_data_key_also_encrypts_the_durable_workers_execution_data():
    # Given DataKmsKeyArn with the durable worker on: its executions keep each job's message, checkpoints (partial
    # aggregates, cursors) and result in Lambda, apart from the stores above
    key = KEY["DataKmsKeyArn"]
    on = {"DurableWorker": "Enabled"}
    # When the template is evaluated with and without the key
    with_key = resolved(Evaluation(**on, **KEY), "DurableToolWorker")["DurableConfig"]
    without = resolved(Evaluation(**on), "DurableToolWorker")["DurableConfig"]
    # Then the execution data is under that key (DurableConfig.KMSKeyArn), and without one under Lambda's own
    assert with_key["KMSKeyArn"] == key
    assert "KMSKeyArn" not in without
    # And the timeout and retention stay the parameters either way
    assert with_key["ExecutionTimeout"] == without["ExecutionTimeout"]
    assert with_key["RetentionPeriodInDays"] == without["RetentionPeriodInDays"]


@pytest.mark.parametrize(
    ("parameters", "region", "named"),
    [
        (EDGE, "eu-west-1", "EdgeNeedsUsEast1"),
        ({"CustomDomainName": "mcp.example.com", "Edge": "CloudFront"}, "us-east-1", "CertificateArn"),
        ({"CustomDomainName": "mcp.example.com"}, "us-east-1", "Edge=CloudFront"),
        ({"CertificateArn": DOMAIN["CertificateArn"]}, "us-east-1", "CustomDomainName"),
        ({"IamCallers": "Enabled"}, "us-east-1", "IamCallerPrincipal"),
        (
            {"IamCallers": "Enabled", "AuthMode": "oauth", "AuthorizationServerMode": "builtin"},
            "us-east-1",
            "IamCallerPrincipal",
        ),
        ({"IamCallerTiers": IAM["IamCallerTiers"]}, "us-east-1", "IamCallers=Enabled"),
        ({"VpcSubnetIds": "subnet-0a"}, "us-east-1", "without VpcSecurityGroupIds"),
        ({"VpcSecurityGroupIds": "sg-01"}, "us-east-1", "without VpcSubnetIds"),
        ({**VPC, "CreateVpcEndpoints": "Enabled"}, "us-east-1", "VpcId and VpcRouteTableIds"),
    ],
    ids=[
        "edge-outside-us-east-1",
        "domain-without-certificate",
        "domain-without-edge",
        "certificate-alone",
        "iam-without-principal",
        "iam-with-browser-sign-in-only",
        "tiers-without-iam",
        "subnets-alone",
        "security-groups-alone",
        "endpoints-without-vpc",
    ],
)
def test_a_combination_that_cannot_work_is_refused_naming_its_parameters(parameters, region, named):
    # Given parameters that cannot work together
    evaluation = Evaluation(**parameters)
    evaluation.scope.region = region
    # When CloudFormation evaluates the rules
    failures = evaluation.rule_failures()
    # Then the deploy is refused with a message naming what to set
    assert failures and any(named in failure for failure in failures), failures
