"""IAM callers (IamCallers=Enabled): agents that call the AWS_IAM Function URL with SigV4 and their own role.

Lambda checks the signature and the function's resource-based policy before the function runs, then puts the
caller in the request context, `requestContext.authorizer.iam` (accessKey, accountId, callerId, userArn, userId:
https://docs.aws.amazon.com/lambda/latest/dg/urls-invocation.html#urls-payloads). The Lambda Web Adapter passes
that context as JSON in `x-amzn-request-context`, replacing any header a client sent; locally the front door
(devstack/front_doors/function_urls.py) does the same. On the AuthType NONE URL the context has no authorizer,
so a client cannot name itself an IAM caller there.

The principal is the role (or user), not the session: `iam:<account>:<callerId before ":">`, so every session
of one role owns the same jobs. Its tier comes from IAM_CALLER_TIERS (`arn-pattern=tier`, comma-separated,
fnmatch patterns over userArn, first match wins); no match gives the lowest tier, free.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ValidationError

from mcp_backend.api_keys import Principal
from mcp_backend.tiers import LOWEST_TIER, TIERS, Tier

REQUEST_CONTEXT_HEADER = b"x-amzn-request-context"


class IamIdentity(BaseModel):
    accountId: str
    callerId: str
    userArn: str


class _Authorizer(BaseModel):
    iam: IamIdentity


class _RequestContext(BaseModel):
    authorizer: _Authorizer


def iam_identity(headers: Iterable[tuple[bytes, bytes]]) -> IamIdentity | None:
    """The IAM caller Lambda put in the request context, or None (no context, no IAM authorizer, malformed)."""
    raw = next((value for name, value in headers if name.lower() == REQUEST_CONTEXT_HEADER), None)
    if raw is None:
        return None
    try:
        return _RequestContext.model_validate_json(raw).authorizer.iam
    except ValidationError:
        return None


def signed_by_iam_caller(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """The edge check's exemption: the request came through the AWS_IAM Function URL, never through the edge."""
    return iam_identity(headers) is not None


class TierMapError(ValueError):
    """IAM_CALLER_TIERS is malformed; the message names the entry's position, never its value."""


def parse_tier_map(text: str) -> tuple[tuple[str, Tier], ...]:
    """`pattern=tier,pattern=tier` to ordered pairs; TierMapError for an entry without `=` or an unknown tier."""
    pairs: list[tuple[str, Tier]] = []
    for position, entry in enumerate((part.strip() for part in text.split(",")), start=1):
        if not entry:
            continue
        pattern, separator, tier = entry.rpartition("=")
        if not separator or not pattern or tier not in TIERS:
            raise TierMapError(f"IAM_CALLER_TIERS entry {position} is not arn-pattern={'|'.join(TIERS)}")
        pairs.append((pattern, tier))
    return tuple(pairs)


class IamCallerAuthenticator:
    """Authenticator-shaped: the principal of a SigV4-signed request, from the request context alone."""

    def __init__(self, tier_map: tuple[tuple[str, Tier], ...]) -> None:
        self._tier_map = tier_map

    @classmethod
    def from_setting(cls, tier_map: str) -> IamCallerAuthenticator:
        return cls(parse_tier_map(tier_map))

    def authenticate_request(self, headers: Iterable[tuple[bytes, bytes]]) -> Principal | None:
        """The caller's principal, or None when the request was not signed by an IAM identity."""
        identity = iam_identity(headers)
        if identity is None:
            return None
        role_id = identity.callerId.split(":", 1)[0]
        tier = next(
            (tier for pattern, tier in self._tier_map if fnmatch.fnmatchcase(identity.userArn, pattern)), LOWEST_TIER
        )
        try:
            return Principal(user_id=f"iam:{identity.accountId}:{role_id}", tier=tier)
        except ValidationError:
            return None

    async def authenticate(self, bearer_token: str, resource: str) -> Principal | None:
        """IAM callers bring no bearer token: a token is never an IAM identity."""
        return None

    def challenge(self, resource: str, token_presented: bool) -> str:
        return 'AWS4-HMAC-SHA256 realm="lambda"'

    def metadata(self, resource: str) -> dict[str, Any] | None:
        return None

    def insufficient_scope(self, resource: str, scope: str) -> str:
        return self.challenge(resource, token_presented=True)
