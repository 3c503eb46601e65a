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
    assert check_endpoint_url("https://mcp.example.com/mcp", allow_private_hosts=False) == "https://mcp.example.com/mcp"


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
        check_endpoint_url(url, allow_private_hosts=False)
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
        check_endpoint_url("https://localhost/mcp", allow_private_hosts=False)
    assert check_endpoint_url("http://127.0.0.1:8080/mcp", allow_private_hosts=True)
