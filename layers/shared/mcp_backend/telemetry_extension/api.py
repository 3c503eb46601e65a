"""The Extensions API (2020-01-01) and Telemetry API (2022-07-01) as an extension calls them.
https://docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html
https://docs.aws.amazon.com/lambda/latest/dg/telemetry-api.html"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

# Telemetry API buffering; the documented minimums are 1000 items, 262144 bytes and 25 ms. A short
# timeout keeps platform.report close to its invocation without a request per event.
BUFFERING = {"maxItems": 1000, "maxBytes": 262144, "timeoutMs": 100}
SCHEMA_VERSION = "2022-12-13"


class ExtensionsClient:
    def __init__(self, runtime_api: str, name: str) -> None:
        self.base = f"http://{runtime_api}"
        self.name = name
        self.identifier = ""

    def register(self, events: list[str]) -> dict[str, Any]:
        answer, headers = self._call(
            "POST", "/2020-01-01/extension/register", {"events": events}, {"Lambda-Extension-Name": self.name}
        )
        self.identifier = headers["Lambda-Extension-Identifier"]
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
        data = None if body is None else json.dumps(body).encode()
        # The base is http://$AWS_LAMBDA_RUNTIME_API: the Lambda-local API, never a caller-given URL.
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)  # noqa: S310
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            raw = response.read()
            return (json.loads(raw) if raw else None), dict(response.headers)
