"""What McpServer's cold start pays for: importing the app module and building the app loads neither the AWS SDK
(clients are built on first use, botocore's exception classes with the first except clause that reads them) nor
pyjwt (OAuth token checks load it with the first token) under the default
AuthMode (nor our OAuth module: token verification), no tracing SDK, not the endpoints service's monitor and
probes packages (its tools' first call loads them), and none of the SDK's client, stdio transports or MCPServer,
which the SDK's package __init__s re-export (nor do the first requests load them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import boto3

from devstack.runtime.in_process import function_environment
from devstack.stack.resources import LocalStack
from devstack.stack.template import ROOT

PROBE = (
    "import json, sys\n"
    "import mcp_backend.mcp.server as server\n"
    "server.create_app()\n"
    # A module registered to load on first use (mcp_backend.lazy_imports) is in sys.modules unexecuted: not loaded.
    "loaded = {name.split('.')[0] for name, m in sys.modules.items() if type(m).__name__ != '_LazyModule'}\n"
    "loaded |= {'oauth'} if 'mcp_backend.mcp.oauth' in sys.modules else set()\n"
    "loaded |= {'monitor'} if 'mcp_backend.monitor' in sys.modules else set()\n"
    "loaded |= {'probe_registry'} if 'mcp_backend.probes.registry' in sys.modules else set()\n"
    "loaded |= {'botocore_exceptions'} if 'botocore.vendored' in sys.modules else set()  # what they import\n"
    "loaded |= {'sdk_client'} if 'mcp.client.client' in sys.modules else set()\n"
    "loaded |= {'sdk_mcpserver'} if 'mcp.server.mcpserver' in sys.modules else set()\n"
    "loaded |= {'sdk_stdio'} if 'mcp.server.stdio' in sys.modules else set()\n"
    "print(json.dumps(sorted(loaded)))\n"
)


def _mcp_server_environment() -> dict[str, str]:
    stack = LocalStack(boto3.client).create_all()
    spec = stack.function("McpServer")
    with function_environment(spec, stack.region):
        variables = {name: os.environ[name] for name in spec.environment}
    return {
        **variables,
        "PATH": os.environ["PATH"],
        "PYTHONPATH": str(ROOT / "layers" / "shared"),
        "AWS_REGION": stack.region,
    }


def test_building_the_app_loads_no_aws_sdk_no_jwt_no_tracing_sdk_no_monitor_and_no_mcp_client(aws):
    # Given a fresh interpreter with the layer's package and McpServer's template environment (default
    # AuthMode: API keys)
    environment = _mcp_server_environment()

    # When the app module is imported and the app built
    out = subprocess.run([sys.executable, "-c", PROBE], env=environment, capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))

    # Then the app is built without the AWS SDK (botocore's exceptions included), pyjwt, our OAuth token checks,
    # a tracing SDK, MonitorTable, the endpoint registry, the MCP SDK's client (httpx2), stdio transports and
    # MCPServer, or a command-line parser (the API key table's is an operator's) in the process
    assert "mcp_backend" in loaded and "starlette" in loaded and "mcp" in loaded
    unpaid = {"boto3", "botocore_exceptions", "jwt", "oauth", "aws_xray_sdk", "monitor", "probe_registry"}
    unpaid |= {"httpx2", "sdk_client", "sdk_mcpserver", "sdk_stdio", "argparse"}
    assert not unpaid & loaded, sorted(unpaid & loaded)


COLLECTIONS_PROBE = (
    "import gc, json\n"
    "collections = []\n"
    "gc.callbacks.append(lambda phase, info: phase == 'start' and collections.append(info['generation']))\n"
    "import mcp_backend.mcp.server as server\n"
    "paused_after_import = not gc.isenabled()\n"
    "server.create_app()\n"
    "print(json.dumps({'collections': len(collections), 'paused_after_import': paused_after_import,\n"
    "                  'enabled': gc.isenabled(), 'frozen': gc.get_freeze_count()}))\n"
)


def test_the_collector_is_paused_while_the_app_loads_and_resumed_over_a_frozen_startup_heap(aws):
    # Given a fresh interpreter with the layer's package and McpServer's template environment, which records
    # each run of the cyclic garbage collector
    environment = _mcp_server_environment()

    # When the app module is imported and the app built
    out = subprocess.run(
        [sys.executable, "-c", COLLECTIONS_PROBE], env=environment, capture_output=True, text=True, cwd="/"
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])

    # Then the collector never ran while the SDK and the app loaded, and once the app is built it runs again,
    # over a heap whose startup objects are frozen out of its reach
    assert figures["paused_after_import"] is True
    assert figures["collections"] == 0
    assert figures["enabled"] is True
    assert figures["frozen"] > 10_000


def test_the_first_requests_load_none_of_the_sdk_client_and_its_re_exports_still_resolve(aws):
    # Given a fresh interpreter with the layer's package and McpServer's template environment, which builds the
    # endpoint in-process over fake AWS clients
    environment = _mcp_server_environment()
    environment["PYTHONPATH"] += os.pathsep + str(ROOT)

    # When it answers the first requests (initialize or server/discover, tools/list, a tools/call of get_job) of
    # three protocol versions, both eras among them
    out = subprocess.run(
        [sys.executable, "-m", "tests.unit.endpoint_first_requests"],
        env=environment,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])

    # Then every request was answered, and no module of the SDK's client, stdio transports or MCPServer was loaded
    assert figures["statuses"] == [200] * 9
    assert "mcp.server.lowlevel.server" in figures["sdk_modules"]
    unpaid = [name for name in figures["sdk_modules"] if name.startswith(("mcp.client", "mcp.server.mcpserver"))]
    assert unpaid == [] and "mcp.server.stdio" not in figures["sdk_modules"]
    # And the names the SDK's packages re-export (MCPServer, Client) still resolve when read
    assert figures["re_exports_resolve"] is True
