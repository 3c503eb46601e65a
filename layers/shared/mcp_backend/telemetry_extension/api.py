"""The Extensions API (2020-01-01) and Telemetry API (2022-07-01) as an extension calls them.
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
https://docs.aws.amazon.com/lambda/latest/dg/telemetry-api.html

The calls go to one plain-HTTP loopback address, on Lambda's init path: loopback_http, not http.client or
urllib (see that module)."""

from __future__ import annotations

import json

from mcp_backend.telemetry_extension.loopback_http import request

TYPE_CHECKING = False  # typing itself is not imported at run time: it costs the cold start more than this module
if TYPE_CHECKING:
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
        identifier = headers.get("lambda-extension-identifier")
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
    ) -> tuple[Any, dict[str, str]]:
        """The answer's JSON body and its headers (names lower-cased)."""
        data = None if body is None else json.dumps(body).encode()
        answer = request(self.runtime_api, method, path, headers, data, timeout)
        if not 200 <= answer.status() < 300:
            raise ExtensionsApiError(f"{method} {path}: HTTP {answer.status()} {answer.body[:200]!r}")
        return (json.loads(answer.body) if answer.body else None), answer.headers
