"""The stack's own MCP endpoint, probed with a key of its own: issued once, at deploy, by the SelfProbeKey
custom resource (functions/self_probe_key), so no function keeps write access to the API key table.

- Create: a new internal key (user "self-probe", a reserved id only the stack issues) is added to the key table
  and the endpoint is registered as "self" with it, sealed with the endpoint-token key (probes/endpoint_tokens.py):
  only ProbeWorker can open it; the key table holds its hash.
  The physical id names the key's hash, so a later Delete knows what to revoke.
- Update: the endpoint follows a new URL; the key stays.
- Create first waits until the endpoint-token key may be used: the permissions boundary names it by its alias,
  and a new alias may take up to five minutes to count for authorization
  (https://docs.aws.amazon.com/kms/latest/developerguide/alias-authorization.html); nothing is issued before.
- Create and Update register only McpServer's own Function URL (its host, as Lambda's GetFunctionUrlConfig
  gives it for the alias): a request naming any other URL, whoever invokes the function, fails and writes nothing.
- Delete (stack deleted, or AuthMode oauth, which refuses API keys): the key is revoked and the endpoint
  deregistered, so a retained key table and monitor table hold no usable key.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from mcp_backend.api_keys import add_api_key, hash_api_key, revoke_api_key
from mcp_backend.aws import botocore_errors, client_or_lazy
from mcp_backend.config import SelfProbeKeySettings
from mcp_backend.custom_resource import CustomResourceFailed, CustomResourceRequest, CustomResourceResult
from mcp_backend.monitor.table import MonitorTable
from mcp_backend.probes.endpoint_tokens import EndpointTokenCipher
from mcp_backend.probes.registry import SELF_OWNER_ID, SELF_SERVER_ID, EndpointRegistry

SELF_PROBE_USER = "self-probe"
PHYSICAL_ID_PREFIX = "self-probe-key-"
NOT_ISSUED = "self-probe-key-not-issued"
# KMS's five minutes for a new alias to count, and a margin (the function's Timeout is above it).
KEY_ACCESS_WAIT_SECONDS = 330
KEY_ACCESS_RETRY_SECONDS = 10


class SelfProbeKeys:
    def __init__(
        self,
        settings: SelfProbeKeySettings,
        dynamodb_client: Any = None,
        secrets_client: Any = None,
        kms_client: Any = None,
        lambda_client: Any = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.settings = settings
        self._sleep = sleep
        cipher = (
            EndpointTokenCipher(settings.endpoint_token_key_id, kms_client) if settings.endpoint_token_key_id else None
        )
        self.registry = EndpointRegistry(MonitorTable.from_settings(settings, dynamodb_client), cipher)
        self._secrets = client_or_lazy(secrets_client, "secretsmanager")
        self._lambda = client_or_lazy(lambda_client, "lambda")

    def handle(self, request: CustomResourceRequest) -> CustomResourceResult:
        if request.request_type == "Delete":
            return self.revoke(request.physical_resource_id or NOT_ISSUED)
        url = self._endpoint(request)
        if request.request_type == "Update" and (request.physical_resource_id or "").startswith(PHYSICAL_ID_PREFIX):
            self.registry.move_self(url)
            return CustomResourceResult(physical_resource_id=request.physical_resource_id or NOT_ISSUED)
        return self.issue(url)

    def issue(self, url: str) -> CustomResourceResult:
        if not self.registry.seals_tokens:  # the key would be stored in plaintext: refuse, nothing issued
            raise CustomResourceFailed("ENDPOINT_TOKEN_KEY_ID is not set: the self-probe key cannot be sealed")
        self._await_key_access()
        key = add_api_key(
            self._secrets,
            self.settings.api_keys_secret_id,
            user_id=SELF_PROBE_USER,
            tier="internal",
            allow_reserved=True,
        )
        self.registry.register_self(url, auth_token=key)
        return CustomResourceResult(physical_resource_id=PHYSICAL_ID_PREFIX + hash_api_key(key))

    def _await_key_access(self) -> None:
        """Return once the endpoint-token key seals for `self`; fail (nothing issued) if it never does in time."""
        cipher = self.registry.cipher
        assert cipher is not None  # issue() checked seals_tokens
        waited = 0
        while True:
            try:
                cipher.seal(SELF_SERVER_ID, SELF_OWNER_ID, "access check")
                return
            except botocore_errors.ClientError as error:
                if error.response["Error"]["Code"] != "AccessDeniedException" or waited >= KEY_ACCESS_WAIT_SECONDS:
                    raise CustomResourceFailed(
                        f"ENDPOINT_TOKEN_KEY_ID {self.settings.endpoint_token_key_id} does not seal"
                        f" ({error.response['Error']['Code']}, after {waited} s)"
                    ) from None
            self._sleep(KEY_ACCESS_RETRY_SECONDS)
            waited += KEY_ACCESS_RETRY_SECONDS

    def revoke(self, physical_id: str) -> CustomResourceResult:
        if physical_id.startswith(PHYSICAL_ID_PREFIX) and physical_id != NOT_ISSUED:
            key_hash = physical_id.removeprefix(PHYSICAL_ID_PREFIX)
            revoke_api_key(self._secrets, self.settings.api_keys_secret_id, key_hash)
            self.registry.deregister_self()
        return CustomResourceResult(physical_resource_id=physical_id)

    def _endpoint(self, request: CustomResourceRequest) -> str:
        url = str(request.resource_properties.get("FunctionUrl", ""))
        if not url.startswith("https://"):
            raise CustomResourceFailed("FunctionUrl must be the stack's https Function URL")
        own = self._own_function_url()
        if urlsplit(url).netloc.lower() != urlsplit(own).netloc.lower():
            raise CustomResourceFailed(f"FunctionUrl must be this stack's own Function URL ({own})")
        return url.rstrip("/") + self.settings.mcp_path

    def _own_function_url(self) -> str:
        function, _, alias = self.settings.mcp_server_function.rpartition(":")  # <function ARN>:<alias>
        try:
            found = self._lambda.get_function_url_config(FunctionName=function, Qualifier=alias)
        except Exception as error:  # noqa: BLE001 - any failure refuses the request, naming the parameter
            raise CustomResourceFailed(f"FunctionUrl could not be checked ({type(error).__name__})") from None
        return str(found["FunctionUrl"])
