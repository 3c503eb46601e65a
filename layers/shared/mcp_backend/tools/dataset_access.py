"""Whose s3:// datasets a caller may read: its own prefix of the dataset bucket, or a prefix the operator shares.

A tenant uploads to `s3://<DatasetBucketName>/<its user id, percent-encoded>/...` (docs/security.md); the
operator may share read-only prefixes of the same bucket with every tenant (DatasetSharedPrefixes). Anything
else is refused before any S3 call, with the rule in the error. The function roles may only s3:GetObject in
that bucket, so this check is what keeps one tenant out of another's prefix.
"""

from __future__ import annotations

from urllib.parse import quote

from mcp_backend.netsafety import redact_url
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import DatasetAccessDenied
from mcp_backend.tools.fetch import split_s3_url


def dataset_key_prefix(user_id: str) -> str:
    """The caller's key prefix: the user id percent-encoded (only letters, digits and `_.-~` stay), so no id
    can name another's prefix, a `/` or a `..` segment."""
    return quote(user_id, safe="") + "/"


def check_s3_dataset_access(url: str, user_id: str, policy: FetchPolicy) -> None:
    """Raises DatasetAccessDenied unless `url` (s3://) is under the caller's prefix or a shared one."""
    parts = split_s3_url(url)
    if parts is None:
        return  # not s3:// (or malformed: the fetcher refuses it with its own error)
    bucket, key = parts
    own = dataset_key_prefix(user_id)
    # S3 keys are literal, but a `.`/`..` segment may be normalised by something on the way: never let one through.
    literal = all(segment not in (".", "..") for segment in key.split("/"))
    if literal and policy.dataset_bucket and bucket == policy.dataset_bucket:
        if key.startswith(own) or any(key.startswith(prefix) for prefix in policy.shared_prefixes):
            return
    if not policy.dataset_bucket:
        rule = "this deployment has no dataset bucket (DatasetBucketName), so no s3:// dataset is readable"
    else:
        rule = f"s3:// datasets are readable only under your own prefix s3://{policy.dataset_bucket}/{own}"
        if policy.shared_prefixes:
            shared = ", ".join(f"s3://{policy.dataset_bucket}/{prefix}" for prefix in policy.shared_prefixes)
            rule += f" or a shared prefix ({shared})"
    raise DatasetAccessDenied(f"Dataset {redact_url(url)} refused: {rule}")
