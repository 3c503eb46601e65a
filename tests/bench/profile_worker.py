"""Where a ToolWorker record's CPU goes: `python -m tests.bench.profile_worker [BATCHES]`.

Runs the built handler (`import app` from the build output) in the deploy's runtime (python3.13 with its
boto3), its DynamoDB and Kinesis calls answered by the worker bench's AWS-like stand-in and its datasets by
the bench's loopback dataset server (no injected latency), both in this process. Prints the CPU a record
costs in batches of 10 (no profiler), then BATCHES batches under cProfile, their records one after another on
the handler's thread (cProfile sees one thread).
Not part of `make bench`: cProfile slows the code it measures; read the shares, not the times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import boto3
from moto import mock_aws

from tests.bench.measure import DeployedPython
from tests.bench.worker import _AwsLikeBackend, _jobs, _record, _serve, _SlowDataset

WARM_BATCHES = 5
TIMED_BATCHES = 30

# Runs in the deploy's runtime: argv = events file, batches to profile.
_CHILD = """
import concurrent.futures, cProfile, io, json, pstats, sys, time, uuid
import app

events = json.load(open(sys.argv[1]))
warm, timed, profiled = events[:WARM], events[WARM:WARM + TIMED], events[WARM + TIMED:]

class Context:
    function_name = "ToolWorker"
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:ToolWorker"
    memory_limit_in_mb = 512
    function_version = "$LATEST"
    log_group_name = "/aws/lambda/ToolWorker"
    log_stream_name = "bench"
    def __init__(self):
        self.aws_request_id = str(uuid.uuid4())
    def get_remaining_time_in_millis(self):
        return 60000

def run(batch):
    response = app.handler(batch, Context())
    assert not response["batchItemFailures"], response

for batch in warm:
    run(batch)
records = sum(len(batch["Records"]) for batch in timed)
started = time.process_time()
for batch in timed:
    run(batch)
cpu = (time.process_time() - started) / records

# cProfile sees one thread (3.12+: at most one profiler at a time): the profiled batches run their records
# one after another on the handler's thread, through the same handler path.
class InlineExecutor(concurrent.futures.Executor):
    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:
            future.set_exception(error)
        return future
app.record_threads._pool = InlineExecutor()
profile = cProfile.Profile(time.process_time)  # CPU time: waits on sockets count for nothing
profile.enable()
for batch in profiled:
    run(batch)
profile.disable()
out = io.StringIO()
stats = pstats.Stats(profile, stream=out)
stats.sort_stats("tottime").print_stats(30)
ours = "mcp_backend|aws_lambda_powertools|botocore/(client|endpoint)|logging/__init__"
stats.sort_stats("cumtime").print_stats(ours, 70)
print(out.getvalue(), file=sys.stderr)
print(json.dumps({"cpu_ms_per_record": cpu * 1000}))
"""


def main(batches: str = "10") -> None:
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")
    with mock_aws():
        from devstack.wired_stack import LocalEnvironment

        stack = LocalEnvironment(boto3.client).stack
        spec = stack.function("ToolWorker")
        deployed = DeployedPython.prepare(stack.template)
    backend, datasets = _serve(_AwsLikeBackend), _serve(_SlowDataset)
    _SlowDataset.latency = 0.0
    endpoint = f"http://127.0.0.1:{backend.server_address[1]}"
    url = f"http://127.0.0.1:{datasets.server_address[1]}/sales.csv"
    environment = deployed.environment(
        deployed.build_dir / spec.logical_id,
        deployed.layer_ids(spec.layer_refs),
        **spec.environment,
        AWS_ENDPOINT_URL=endpoint,  # every other service too: nothing leaves loopback
        AWS_ENDPOINT_URL_DYNAMODB=endpoint,
        AWS_ENDPOINT_URL_KINESIS=endpoint,
        DATASET_ALLOW_LOOPBACK_HOSTS="true",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_LAMBDA_FUNCTION_NAME=spec.name,
    )
    total = WARM_BATCHES + TIMED_BATCHES + int(batches)
    events = [
        {"Records": [_record({**job, "input": {"dataset_url": url}}) for job in _jobs()[:10]]} for _ in range(total)
    ]
    child = _CHILD.replace("WARM", str(WARM_BATCHES)).replace("TIMED", str(TIMED_BATCHES))
    try:
        with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
            json.dump(events, file)
            file.flush()
            result = subprocess.run(
                [str(deployed.python), "-c", child, file.name],
                env=environment,
                capture_output=True,
                text=True,
                check=False,
            )
    finally:
        backend.shutdown()
        datasets.shutdown()
    print(result.stderr[-25000:])
    if result.returncode != 0:
        print(result.stdout)
        raise SystemExit(result.returncode)
    print(result.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main(*sys.argv[1:])
