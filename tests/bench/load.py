"""The load client of the endpoint benchmark, run in its own process (`python -m tests.bench.load`) so
its work never shares an interpreter (or, when pinned, a core) with the server it measures.

Reads one JSON job on stdin: url, headers, body, and the phases; writes one JSON result per phase on
stdout. A phase is `requests` POSTs spread over `connections` keep-alive connections, each connection
sending its next request when the previous response has been read in full. Every response must be a
200 whose body holds a JSON-RPC result, or the phase fails (a fast error is not a fast server).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

WARM_UP_REQUESTS = 50


async def _connection(url: str, headers: dict[str, str], body: bytes, count: int, latencies: list[float]) -> None:
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        for _ in range(count):
            started = time.perf_counter()
            response = await client.post(url, content=body, headers=headers)
            text = response.text
            latencies.append(time.perf_counter() - started)
            if response.status_code != 200 or '"result"' not in text:
                raise RuntimeError(f"{url}: HTTP {response.status_code}: {text[:300]}")


async def phase(url: str, headers: dict[str, str], body: bytes, requests: int, connections: int) -> dict[str, Any]:
    latencies: list[float] = []
    per_connection = requests // connections
    started = time.perf_counter()
    await asyncio.gather(*(_connection(url, headers, body, per_connection, latencies) for _ in range(connections)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "connections": connections,
        "requests": len(latencies),
        "seconds": elapsed,
        "rps": len(latencies) / elapsed,
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


async def run(job: dict[str, Any]) -> list[dict[str, Any]]:
    body = json.dumps(job["body"]).encode()
    await phase(job["url"], job["headers"], body, WARM_UP_REQUESTS, 1)
    return [await phase(job["url"], job["headers"], body, p["requests"], p["connections"]) for p in job["phases"]]


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.load(sys.stdin)))))
