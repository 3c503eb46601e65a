"""Endpoint bearer tokens at rest: sealed with KMS before MonitorTable sees them, opened only by ProbeWorker.

A token is at most 4,096 bytes (RegisterEndpointInput allows ASCII only), which is what one KMS `Encrypt`
call takes, so the token is encrypted directly under the customer-managed EndpointTokenKey rather than with
a data key (https://docs.aws.amazon.com/kms/latest/APIReference/API_Encrypt.html: "Encrypts plaintext of up
to 4,096 bytes"). The encryption context {serverId, ownerId} is bound to the ciphertext: a ciphertext copied
onto another endpoint's item, or another owner's, does not decrypt
(https://docs.aws.amazon.com/kms/latest/developerguide/encrypt_context.html). The key policy in
template.yaml lets McpServer (users' endpoints) and ProbeDispatcher (the stack's own, serverId "self")
encrypt and only ProbeWorker decrypt, each with that context.
"""

from __future__ import annotations

from typing import Any

from mcp_backend.aws import client_or_lazy
from mcp_backend.probes.errors import ProbeFailed

# KMS Encrypt's plaintext limit (API_Encrypt.html above).
MAX_TOKEN_BYTES = 4096


class EndpointTokenUnreadable(ProbeFailed):
    """The stored ciphertext does not open for this endpoint (wrong context, key disabled, not ours)."""


class EndpointTokenCipher:
    def __init__(self, key_id: str, client: Any = None) -> None:
        self.key_id = key_id
        self._kms = client_or_lazy(client, "kms")

    @staticmethod
    def context(server_id: str, owner_id: str) -> dict[str, str]:
        return {"serverId": server_id, "ownerId": owner_id}

    def seal(self, server_id: str, owner_id: str, token: str) -> bytes:
        plaintext = token.encode()
        if len(plaintext) > MAX_TOKEN_BYTES:
            raise ValueError(f"an endpoint token is at most {MAX_TOKEN_BYTES} bytes")
        ciphertext: bytes = self._kms.encrypt(
            KeyId=self.key_id, Plaintext=plaintext, EncryptionContext=self.context(server_id, owner_id)
        )["CiphertextBlob"]
        return ciphertext

    def open(self, server_id: str, owner_id: str, ciphertext: bytes) -> str:
        try:
            plaintext: bytes = self._kms.decrypt(
                KeyId=self.key_id, CiphertextBlob=ciphertext, EncryptionContext=self.context(server_id, owner_id)
            )["Plaintext"]
        except Exception as error:  # noqa: BLE001 - any refusal: the probe fails rather than go without
            raise EndpointTokenUnreadable(
                f"endpoint {server_id}: its token does not decrypt ({type(error).__name__})"
            ) from None
        return plaintext.decode()
