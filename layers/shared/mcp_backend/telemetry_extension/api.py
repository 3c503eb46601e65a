"""The Extensions API (2020-01-01) and Telemetry API (2022-07-01) as an extension calls them.
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
https://docs.aws.amazon.com/lambda/latest/dg/telemetry-api.html

http.client rather than urllib.request: the calls go to one plain-HTTP address, and urllib's handlers
(proxies, cookies, auth, temporary files) would be loaded, and kept in memory, on the init path."""

from __future__ import annotations

import http.client
import json
from typing import Any

# Telemetry API buffering; the documented minimums are 1000 items, 262144 bytes and 25 ms. A short
# timeout keeps platform.report close to its invocation without a request per event.
BUFFERING = {"maxItems": 1000, "maxBytes": 262144, "timeoutMs": 100}
SCHEMA_VERSION = "2022-12-13"


class ExtensionsApiError(Exception):
    """The Extensions or Telemetry API refused a call (its status and the start of its answer)."""


class ExtensionsClient:
    def __init__(self, runtime_api: str, name: str) -> None:
        # $AWS_LAMBDA_RUNTIME_API, host:port of the Lambda-local API: never a caller-given address.
        self.runtime_api = runtime_api
        self.name = name
        self.identifier = ""

    def register(self, events: list[str]) -> dict[str, Any]:
        answer, headers = self._call(
            "POST", "/2020-01-01/extension/register", {"events": events}, {"Lambda-Extension-Name": self.name}
        )
        identifier = headers.get("Lambda-Extension-Identifier")
        if not identifier:
            raise ExtensionsApiError("register: the answer has no Lambda-Extension-Identifier")
        self.identifier = identifier
        return answer

    def subscribe(self, listener_uri: str, types: list[str]) -> None:
        body = {
            "schemaVersion": SCHEMA_VERSION,
            "types": types,
            "buffering": BUFFERING,
            "destination": {"protocol": "HTTP", "URI": listener_uri},
        }
        self._call("PUT", "/2022-07-01/telemetry", body, self._identified())

    def next_event(self) -> dict[str, Any]:
        """Blocks until Lambda sends the next INVOKE or SHUTDOWN (no timeout: the environment is frozen)."""
        answer, _ = self._call("GET", "/2020-01-01/extension/event/next", None, self._identified(), timeout=None)
        return answer

    def _identified(self) -> dict[str, str]:
        return {"Lambda-Extension-Identifier": self.identifier}

    def _call(
        self, method: str, path: str, body: Any, headers: dict[str, str], timeout: float | None = 10.0
    ) -> tuple[Any, http.client.HTTPMessage]:
        data = None if body is None else json.dumps(body).encode()
        connection = http.client.HTTPConnection(self.runtime_api, timeout=timeout)
        try:
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        if not 200 <= response.status < 300:
            raise ExtensionsApiError(f"{method} {path}: HTTP {response.status} {raw[:200]!r}")
        return (json.loads(raw) if raw else None), response.headers  # header names case-insensitive
