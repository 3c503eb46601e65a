"""Add, list and revoke API keys in the ApiKeysSecret (operators, `make dev`, tests).

    python -m mcp_backend.mcp.keys add --secret-id <ApiKeysSecretArn> --user-id alice [--tier pro]
    python -m mcp_backend.mcp.keys revoke --secret-id <ApiKeysSecretArn> --key-hash <sha256 hex>
    python -m mcp_backend.mcp.keys list --secret-id <ApiKeysSecretArn>

`add` prints the new key once; only its hash is stored. Rotation = add a new key for the same user,
switch the client, revoke the old hash. The endpoint sees a change within API_KEYS_CACHE_SECONDS.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from mcp_backend.aws import new_client
from mcp_backend.mcp.auth import ApiKeyTable, new_api_key


def add_api_key(secrets_client: Any, secret_id: str, user_id: str, tier: str = "free") -> str:
    """Store a new key's hash in the secret and return the plaintext key (the only copy)."""
    current = secrets_client.get_secret_value(SecretId=secret_id)["SecretString"] or "{}"
    key, updated = new_api_key(user_id, tier, existing_secret=current)
    secrets_client.put_secret_value(SecretId=secret_id, SecretString=updated)
    return key


def revoke_api_key(secrets_client: Any, secret_id: str, key_hash: str) -> bool:
    table = ApiKeyTable.model_validate_json(secrets_client.get_secret_value(SecretId=secret_id)["SecretString"] or "{}")
    if key_hash not in table.root:
        return False
    remaining = {digest: principal for digest, principal in table.root.items() if digest != key_hash}
    secrets_client.put_secret_value(
        SecretId=secret_id, SecretString=ApiKeyTable(remaining).model_dump_json(by_alias=True)
    )
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mcp_backend.mcp.keys")
    parser.add_argument("action", choices=["add", "revoke", "list"])
    parser.add_argument("--secret-id", required=True)
    parser.add_argument("--user-id")
    parser.add_argument("--tier", default="free", choices=["free", "pro", "internal"])
    parser.add_argument("--key-hash")
    args = parser.parse_args(argv)
    client = new_client("secretsmanager")
    if args.action == "add":
        if not args.user_id:
            parser.error("add needs --user-id")
        print(add_api_key(client, args.secret_id, args.user_id, args.tier))
        return 0
    if args.action == "revoke":
        if not args.key_hash:
            parser.error("revoke needs --key-hash")
        return 0 if revoke_api_key(client, args.secret_id, args.key_hash) else 1
    table = ApiKeyTable.model_validate_json(client.get_secret_value(SecretId=args.secret_id)["SecretString"] or "{}")
    for digest, principal in table.root.items():
        print(f"{digest}  {principal.user_id}  {principal.tier}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
