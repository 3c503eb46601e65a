"""The operator's command for the stack's authorization server (docs/authorization-server.md):

    python -m mcp_backend.authorization --table <AuthorizationTableName> grants list --subject <sub>
    python -m mcp_backend.authorization --table <AuthorizationTableName> grants revoke --subject <sub>
    python -m mcp_backend.authorization --table <AuthorizationTableName> clients add --name <name> \
        --redirect-uri <uri> [--redirect-uri <uri> ...] [--public | --auth-method client_secret_post]
    python -m mcp_backend.authorization --table <AuthorizationTableName> clients list
    python -m mcp_backend.authorization --table <AuthorizationTableName> clients remove --client-id <id>

A revoked grant's refresh tokens stop at once; its access tokens run out within their 10 minutes. A
confidential client's secret is printed once: the table keeps its sha256 only.
"""

from __future__ import annotations

import argparse
import datetime
import sys

from mcp_backend.authorization.clients import RejectedClient, operator_client
from mcp_backend.authorization.store import AuthorizationStore
from mcp_backend.aws import new_client

REVOKED_BY_OPERATOR = "revoked by the operator"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m mcp_backend.authorization")
    top.add_argument("--table", required=True, help="the stack's AuthorizationTableName output")
    kinds = top.add_subparsers(dest="kind", required=True)
    grants = kinds.add_parser("grants").add_subparsers(dest="action", required=True)
    for action in ("list", "revoke"):
        grants.add_parser(action).add_argument("--subject", required=True, help="the user's upstream subject")
    clients = kinds.add_parser("clients").add_subparsers(dest="action", required=True)
    add = clients.add_parser("add")
    add.add_argument("--name", required=True)
    add.add_argument("--redirect-uri", action="append", required=True, dest="redirect_uris")
    method = add.add_mutually_exclusive_group()
    method.add_argument("--public", action="store_const", const="none", dest="auth_method")
    method.add_argument("--auth-method", choices=["client_secret_basic", "client_secret_post"])
    clients.add_parser("list")
    clients.add_parser("remove").add_argument("--client-id", required=True)
    return top


def main(argv: list[str] | None = None) -> int:
    top = parser()
    args = top.parse_args(argv)
    store = AuthorizationStore(args.table, new_client("dynamodb"))
    if args.kind == "grants":
        if args.action == "revoke":
            revoked = store.revoke_subject(args.subject, REVOKED_BY_OPERATOR)
            print(f"revoked {len(revoked)} grant(s)")
            return 0
        for family, grant in store.grants_of(args.subject).items():
            state = f"revoked ({grant['revoked']})" if "revoked" in grant else "active"
            print(
                f"{family}  {grant['client_id']}  started {when(grant['started'])}  ends {when(grant['ends'])}  {state}"
            )
        return 0
    if args.action == "add":
        try:
            client, secret = operator_client(args.name, args.redirect_uris, args.auth_method or "client_secret_basic")
        except RejectedClient as refused:
            top.error(str(refused))
        store.add_operator_client(client.client_id, client.model_dump(mode="json", exclude_none=True))
        print(f"client_id: {client.client_id}")
        if secret:
            print(f"client_secret: {secret}  (shown once; only its hash is kept)")
        return 0
    if args.action == "remove":
        if store.remove_operator_client(args.client_id):
            return 0
        print(f"no operator client {args.client_id}", file=sys.stderr)
        return 1
    for client_id, record in store.operator_clients().items():
        uris = " ".join(record.get("redirect_uris", []))
        print(f"{client_id}  {record.get('token_endpoint_auth_method')}  {record.get('client_name', '')}  {uris}")
    return 0


def when(epoch: int) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%MZ")


if __name__ == "__main__":
    sys.exit(main())
