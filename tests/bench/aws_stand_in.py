"""The AWS endpoint the endpoint benchmark's servers call: answers the calls a request makes every time from memory,
and hands every other call to moto.

Why: on AWS, DynamoDB and Kinesis run on other machines; here moto answers on the load client's core, and it spends
milliseconds per call (tens of milliseconds on a call-log PutRecords of a few hundred records). Its work on that
core, and the queue it forms there, then sets the req/s of the server making more calls, whatever that server's own
cost. This stand-in answers in constant time, the same for every server:
- DynamoDB `GetItem` on the tables named `--static-table` (items the bench writes before it measures, never after):
  moto's own answer to the first such request, kept and sent again byte for byte (status, body and its CRC32);
- Kinesis `PutRecords`: every record accepted, the response shaped as the API's
  (https://docs.aws.amazon.com/kinesis/latest/APIReference/API_PutRecords.html); nothing is kept;
- anything else (the rate limiter's leases, Secrets Manager, the bench's own set-up): forwarded to moto unchanged;
- `GET /stand-in/answered`: how many calls it answered each way, as JSON.

Run as `python -m tests.bench.aws_stand_in --port P --moto URL --static-table T`; it serves on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import h11
import httpx

GET_ITEM = "DynamoDB_20120810.GetItem"
PUT_RECORDS = "Kinesis_20131202.PutRecords"
# Headers of moto's answer that a client reads or checks (botocore checks DynamoDB's x-amz-crc32 against the body).
KEPT_HEADERS = ("content-type", "x-amz-crc32", "x-amzn-requestid")
# How many calls it answered from memory and how many it forwarded: the bench checks the servers called it.
ANSWERED = "/stand-in/answered"
HOP_BY_HOP = {"connection", "content-length", "transfer-encoding", "keep-alive", "host"}


class StandIn:
    def __init__(self, moto_url: str, static_tables: set[str]) -> None:
        self.moto_url = moto_url
        self.static_tables = static_tables
        self.kept: dict[bytes, tuple[int, list[tuple[str, str]], bytes]] = {}
        self.answered = {"kept": 0, "put_records": 0, "forwarded": 0}
        self._moto = httpx.AsyncClient(base_url=moto_url, timeout=30)
        self._sequence = 0

    async def answer(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if method == "GET" and target == ANSWERED:
            return 200, [("content-type", "application/json")], json.dumps(self.answered).encode()
        operation = next((value for name, value in headers if name == "x-amz-target"), "")
        if operation == GET_ITEM and json.loads(body).get("TableName") in self.static_tables:
            if body not in self.kept:
                answer = await self._forward(method, target, headers, body)
                if answer[0] != 200:
                    return answer
                self.kept[body] = answer
            self.answered["kept"] += 1
            return self.kept[body]
        if operation == PUT_RECORDS:
            self.answered["put_records"] += 1
            return 200, [("content-type", "application/x-amz-json-1.1")], self._put_records(json.loads(body))
        self.answered["forwarded"] += 1
        return await self._forward(method, target, headers, body)

    def _put_records(self, request: dict[str, Any]) -> bytes:
        records = []
        for _ in request.get("Records", []):
            self._sequence += 1
            records.append({"SequenceNumber": f"{self._sequence:056d}", "ShardId": "shardId-000000000000"})
        return json.dumps({"FailedRecordCount": 0, "Records": records}).encode()

    async def _forward(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        sent = [(name, value) for name, value in headers if name not in HOP_BY_HOP]
        response = await self._moto.request(method, target, headers=sent, content=body)
        kept = [(name, value) for name, value in response.headers.items() if name.lower() not in HOP_BY_HOP]
        return response.status_code, kept, response.content

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One keep-alive connection: each request read in full, answered, then the next."""
        connection = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await _request(connection, reader)
                if request is None:
                    return
                headers = [(name.decode().lower(), value.decode()) for name, value in request.headers]
                status, answer_headers, answer = await self.answer(
                    request.method.decode(), request.target.decode(), headers, body
                )
                fields = [*answer_headers, ("content-length", str(len(answer)))]
                writer.write(
                    connection.send(h11.Response(status_code=status, headers=fields))
                    + connection.send(h11.Data(data=answer))
                    + connection.send(h11.EndOfMessage())
                )
                await writer.drain()
                if connection.our_state is h11.MUST_CLOSE:
                    return
                connection.start_next_cycle()
        except (ConnectionError, h11.RemoteProtocolError):
            return
        finally:
            writer.close()


async def _request(connection: h11.Connection, reader: asyncio.StreamReader) -> tuple[h11.Request | None, bytes]:
    request, chunks = None, []
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(65536)
            connection.receive_data(data)
            if not data and request is None:
                return None, b""
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            return request, b"".join(chunks)
        elif isinstance(event, h11.ConnectionClosed):
            return None, b""


async def main(port: int, moto_url: str, static_tables: set[str]) -> None:
    stand_in = StandIn(moto_url, static_tables)
    server = await asyncio.start_server(stand_in.serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--moto", required=True)
    parser.add_argument("--static-table", action="append", default=[])
    options = parser.parse_args()
    asyncio.run(main(options.port, options.moto, set(options.static_table)))
