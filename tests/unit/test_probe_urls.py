"""Which endpoint URLs may be registered for probing."""

from __future__ import annotations

import socket

import pytest

from mcp_backend.netsafety import UnsafeEndpointUrl, check_endpoint_url


@pytest.fixture(autouse=True)
def public_dns(monkeypatch):
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", 443))]
    )


def test_a_public_https_url_is_accepted():
    # Given / When / Then
    assert (
        check_endpoint_url("https://mcp.example.com/mcp", allow_loopback_hosts=False) == "https://mcp.example.com/mcp"
    )


@pytest.mark.parametrize(
    "url, reason",
    [
        ("https://mcp.example.com/mcp?api_key=s3cr3t", "query string"),
        ("https://mcp.example.com/mcp#token=s3cr3t", "fragment"),
        ("https://user:s3cr3t@mcp.example.com/mcp", "user info"),
        ("http://mcp.example.com/mcp", "https"),
        ("ftp://mcp.example.com/mcp", "https"),
    ],
)
def test_urls_that_would_carry_secrets_or_skip_tls_are_refused_without_echoing_them(url, reason):
    # Given a URL a probe must not call (its text travels into results, envelopes and alert e-mails)
    # When it is checked
    with pytest.raises(UnsafeEndpointUrl) as refused:
        check_endpoint_url(url, allow_loopback_hosts=False)
    # Then the refusal says why and never repeats the secret
    assert reason in str(refused.value)
    assert "s3cr3t" not in str(refused.value)


def test_loopback_is_refused_unless_the_local_stack_allows_it(monkeypatch):
    # Given a host that resolves to loopback
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 443))]
    )
    # When / Then: refused on AWS, accepted (with plain http) on the local stack
    with pytest.raises(UnsafeEndpointUrl):
        check_endpoint_url("https://localhost/mcp", allow_loopback_hosts=False)
    assert check_endpoint_url("http://127.0.0.1:8080/mcp", allow_loopback_hosts=True)


@pytest.mark.parametrize("allow_loopback", [False, True])
@pytest.mark.parametrize(
    "url, fault",
    [
        ("https://[::1/mcp", "IPv6"),
        ("https://[zz]/mcp", "IPv6"),
        ("https://mcp.example.com:99999/mcp", "port"),
        ("https://mcp.example.com:abc/mcp", "port"),
        ("https://mcp.example.com:0/mcp", "port"),
        ("https://" + "a" * 64 + ".example.com/mcp", "63"),
        ("https://" + "a." * 127 + "com/mcp", "253"),
        ("https://a..example.com/mcp", "empty label"),
    ],
)
def test_malformed_urls_are_refused_naming_the_fault_under_either_policy(url, fault, allow_loopback):
    # Given a URL whose host or port cannot be connected to, carrying credentials in its user info
    url = url.replace("https://", "https://alice:s3cr3t@", 1)

    # When it is checked, on AWS or under the local stack's policy
    with pytest.raises(UnsafeEndpointUrl) as refused:
        check_endpoint_url(url, allow_loopback_hosts=allow_loopback)

    # Then the refusal names what is wrong and never repeats the credentials
    assert fault in str(refused.value)
    assert "s3cr3t" not in str(refused.value)
    assert "alice" not in str(refused.value)


@pytest.mark.parametrize(
    "address", ["10.0.0.5", "192.168.1.10", "172.16.0.1", "169.254.169.254", "fd00::1", "100.64.0.1"]
)
def test_the_local_stack_policy_allows_loopback_but_no_other_private_address(monkeypatch, address):
    # Given a host on the company network (or the metadata endpoint)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(family, socket.SOCK_STREAM, 6, "", (address, 80))])

    # When / Then: even the local stack's policy, which allows loopback, refuses it
    with pytest.raises(UnsafeEndpointUrl):
        check_endpoint_url("http://internal.corp.example:8080/mcp", allow_loopback_hosts=True)


def test_the_local_stack_policy_accepts_loopback_names_and_literals(monkeypatch):
    # Given a name that resolves to loopback
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))]
    )
    # When / Then: accepted under the local stack's policy, as name or literal, over plain http
    assert check_endpoint_url("http://localhost:8080/mcp", allow_loopback_hosts=True)
    assert check_endpoint_url("http://[::1]:8080/mcp", allow_loopback_hosts=True)


@pytest.mark.parametrize(
    "settings_model, field",
    [("ProbeWorkerSettings", "probe_allow_loopback_hosts"), ("McpSettings", "dataset_allow_loopback_hosts")],
)
def test_the_local_stack_gives_its_functions_the_loopback_only_policy(monkeypatch, settings_model, field):
    # Given the environment overrides make dev gives every function, read by a function's settings model
    from devstack.server import DevStackOptions
    from mcp_backend import config

    overrides = DevStackOptions().function_overrides
    required = {
        "MONITOR_TABLE_NAME": "t", "FUNCTION_TIMEOUT_SECONDS": "30", "JOB_TABLE_NAME": "j", "JOB_QUEUE_URL": "q",
        "JOB_DEAD_LETTER_QUEUE_URL": "d", "CALL_LOG_STREAM_NAME": "s", "API_KEYS_SECRET_ID": "k",
            "RATE_LIMIT_TABLE_NAME": "r",
    }  # fmt: skip
    settings = getattr(config, settings_model).model_validate({**required, **overrides})
    monkeypatch.setattr(
        socket, "getaddrinfo", lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.20.30.40", 80))]
    )

    # When a URL on the company network is checked with the policy those settings carry
    allow_loopback = getattr(settings, field)

    # Then loopback is allowed, and the private address refused
    assert allow_loopback is True
    assert not any("PRIVATE" in name for name in overrides)
    with pytest.raises(UnsafeEndpointUrl):
        check_endpoint_url("http://intranet.corp.example/mcp", allow_loopback_hosts=allow_loopback)
