"""botocore's exception classes as the shared code names them (`mcp_backend.aws.botocore_errors`): loaded with
the first except clause that reads them, and then the very classes boto3 raises, in a fresh interpreter where
nothing loaded botocore before."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from devstack.stack.template import ROOT

PROBE = (
    "import json, logging, sys\n"
    "from mcp_backend.aws import botocore_errors\n"
    "before = 'botocore.vendored' in sys.modules\n"  # what botocore.exceptions itself imports
    "package_before = 'botocore' in logging.root.manager.loggerDict\n"  # botocore's __init__ makes its logger
    "import boto3\n"  # its own `import botocore.exceptions` reads the classes through the package
    "client = boto3.client('kinesis', endpoint_url=sys.argv[1])\n"
    "try:\n"
    "    client.put_records(StreamName='calls', Records=[{'Data': b'1', 'PartitionKey': 'p'}])\n"
    "    caught = None\n"
    "except (botocore_errors.ClientError, botocore_errors.BotoCoreError) as error:\n"
    "    caught = type(error).__name__\n"
    "import botocore.exceptions\n"
    "same = botocore.exceptions.ClientError is botocore_errors.ClientError\n"
    "print(json.dumps({'loaded_before': before, 'package_loaded_before': package_before, 'caught': caught,\n"
    "                  'same': same}))\n"
)


def refused_loopback_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_botocore_errors_load_on_first_use_and_catch_what_boto3_raises():
    # Given a fresh interpreter with the layer's package and a Kinesis endpoint on loopback that refuses
    environment = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT / "layers" / "shared"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_MAX_ATTEMPTS": "1",
    }

    # When the shared module is imported, boto3 loads, and a call fails inside an except clause naming them
    out = subprocess.run(
        [sys.executable, "-c", PROBE, refused_loopback_url()],
        env=environment,
        capture_output=True,
        text=True,
        cwd="/",
        timeout=60,
        check=False,
    )

    # Then importing them ran none of botocore (neither its exceptions module nor its package), the clause caught
    # the connection error, and the classes are botocore's own
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {
        "loaded_before": False,
        "package_loaded_before": False,
        "caught": "EndpointConnectionError",
        "same": True,
    }
