"""The load client of the endpoint benchmark, run in its own process (`python -m tests.bench.load`) so its work
never shares an interpreter (or, when pinned, a core) with the server it measures.

Reads one JSON job on stdin: url, headers, body, the phases, and optionally how many warm-up requests go first
(`warm_up`, default 50); writes one JSON result per phase on stdout. A phase is `requests` POSTs spread over
`connections` keep-alive connections, each connection sending its next request when the previous response has
been read in full. Every response must be a 200 whose body holds a JSON-RPC result, or the phase fails (a fast
error is not a fast server).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from typing import Any
from urllib.parse import urlsplit

import h11

WARM_UP_REQUESTS = 50


async def _connection(url: str, headers: dict[str, str], body: bytes, count: int, latencies: list[float]) -> None:
    """One keep-alive connection sending `count` POSTs one after another. HTTP/1.1 is h11's state machine over an
    asyncio stream: a client of a few hundred microseconds per request, so the server, not the client, is what
    saturates a core (httpx's client spent about 2 ms per request, more than the servers it measured)."""
    target = urlsplit(url)
    reader, writer = await asyncio.open_connection(target.hostname, target.port)
    fields = [("host", target.netloc), ("content-length", str(len(body))), *headers.items()]
    connection = h11.Connection(h11.CLIENT)
    try:
        for _ in range(count):
            started = time.perf_counter()
            request = h11.Request(method="POST", target=target.path or "/", headers=fields)
            writer.write(
                connection.send(request) + connection.send(h11.Data(data=body)) + connection.send(h11.EndOfMessage())
            )
            status, text = await _response(connection, reader)
            latencies.append(time.perf_counter() - started)
            if status != 200 or '"result"' not in text:
                raise RuntimeError(f"{url}: HTTP {status}: {text[:300]}")
            connection.start_next_cycle()
    finally:
        writer.close()


async def _response(connection: h11.Connection, reader: asyncio.StreamReader) -> tuple[int, str]:
    """The status and body of the response to the request just sent (an interim 1xx response is skipped)."""
    status, chunks = 0, []
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(65536))
        elif isinstance(event, h11.Response):
            status = event.status_code
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return status, b"".join(chunks).decode()
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            raise RuntimeError(f"the response did not end: {event!r}")


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
    warm_up = job.get("warm_up", WARM_UP_REQUESTS)
    if warm_up:
        await phase(job["url"], job["headers"], body, warm_up, 1)
    return [await phase(job["url"], job["headers"], body, p["requests"], p["connections"]) for p in job["phases"]]


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.load(sys.stdin)))))
