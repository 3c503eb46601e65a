"""Access tokens: JWTs (RFC 9068 shape) signed ES256 by an asymmetric KMS key, which never leaves KMS.

PyJWT builds and encodes the token; the one step it cannot do, the signature, is a PyJWT `Algorithm` whose
`sign` calls kms:Sign (ECDSA_SHA_256 over the signing input) and turns KMS's DER signature into the JWS
r||s form. The JWKS is the key's public half (kms:GetPublicKey, read once per process), its `kid` the
RFC 7638 thumbprint, so the endpoint verifies tokens with PyJWT as it does any issuer's.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import load_der_public_key
from jwt.algorithms import ECAlgorithm

from mcp_backend.aws import client_or_lazy

ALGORITHM = "ES256"


class _KmsEs256(ECAlgorithm):
    """ES256 whose private key is a KMS key id: signing is kms:Sign; verifying stays PyJWT's own."""

    def __init__(self, kms: Any) -> None:
        super().__init__(ECAlgorithm.SHA256)
        self.kms = kms

    def prepare_key(self, key: Any) -> Any:
        return key if isinstance(key, str) else super().prepare_key(key)

    def sign(self, msg: bytes, key: Any) -> bytes:
        answer = self.kms.sign(KeyId=key, Message=msg, MessageType="RAW", SigningAlgorithm="ECDSA_SHA_256")
        r, s = decode_dss_signature(answer["Signature"])
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")


class KmsSigner:
    def __init__(self, key_id: str, kms: Any = None) -> None:
        self.key_id = key_id
        self.kms = client_or_lazy(kms, "kms")
        self._jws = jwt.PyJWS(algorithms=[])
        self._jws.register_algorithm(ALGORITHM, _KmsEs256(self.kms))
        self._jwk: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def public_jwk(self) -> dict[str, Any]:
        with self._lock:
            if self._jwk is None:
                public = load_der_public_key(self.kms.get_public_key(KeyId=self.key_id)["PublicKey"])
                if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp256r1":
                    raise ValueError("the signing key must be an ECC_NIST_P256 KMS key")
                jwk: dict[str, Any] = ECAlgorithm.to_jwk(public, as_dict=True)
                # RFC 7638: the thumbprint over the required members in lexicographic order, no whitespace.
                required = {name: jwk[name] for name in ("crv", "kty", "x", "y")}
                thumbprint = hashlib.sha256(json.dumps(required, separators=(",", ":")).encode()).digest()
                kid = base64.urlsafe_b64encode(thumbprint).rstrip(b"=").decode()
                self._jwk = {**required, "kid": kid, "use": "sig", "alg": ALGORITHM}
            return self._jwk

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.public_jwk()]}

    def sign(self, claims: dict[str, Any]) -> str:
        headers = {"typ": "at+jwt", "kid": self.public_jwk()["kid"]}
        payload = json.dumps(claims, separators=(",", ":")).encode()
        return self._jws.encode(payload, self.key_id, algorithm=ALGORITHM, headers=headers)
