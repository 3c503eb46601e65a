"""First-party import graphs: in the shared package and in the local stack, no cycles between modules, and
no first-party import hidden inside a function (where it could hide a cycle) unless it is there for cold
start; in both, no cycles between their top-level parts either, and no part importing from a layer above its
own."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Imported in a function so a cold start that never fetches over https skips httpx.
_EXTENSION = "mcp_backend.telemetry_extension.__main__"
LAZY_FOR_COLD_START = {
    ("mcp_backend.tools.fetch", "mcp_backend.tools.http_source"),
    ("mcp_backend.probes.client", "mcp_backend.probes.pinning"),  # httpx2 loads with the MCP client
    # The extension's start is the standard library only (Lambda's init waits for it); its pipeline thread loads
    # the call-log code (pydantic, Powertools, boto3) with the first records to ship.
    (_EXTENSION, "mcp_backend.aws"),
    (_EXTENSION, "mcp_backend.calllog.writer"),
    (_EXTENSION, "mcp_backend.telemetry_extension.reports"),
    (_EXTENSION, "mcp_backend.calllog.shipper"),
    # OAuth token verification loads only when AuthMode turns it on: the default (API keys) never pays for it.
    ("mcp_backend.mcp.server", "mcp_backend.mcp.oauth"),
    # The endpoints service (MonitorTable, the token cipher, the registry) loads on its tools' first call: an
    # endpoint whose callers never register an endpoint does not load the monitor and probes packages.
    ("mcp_backend.tools.services", "mcp_backend.monitor.table"),
    ("mcp_backend.tools.services", "mcp_backend.probes.endpoint_tokens"),
    ("mcp_backend.tools.services", "mcp_backend.probes.registry"),
}


@dataclass
class Package:
    """A first-party package's modules and the imports between them."""

    directory: Path
    modules: dict[str, Path] = field(init=False)

    def __post_init__(self) -> None:
        self.modules = {self.module_name(path): path for path in self.directory.rglob("*.py")}

    def module_name(self, path: Path) -> str:
        parts = path.relative_to(self.directory.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def imports_of(self, module: str) -> list[tuple[str, bool]]:
        """(imported first-party module, imported inside a function) for every import statement."""
        found: list[tuple[str, bool]] = []

        def visit(node: ast.AST, in_function: bool) -> None:
            for child in ast.iter_child_nodes(node):
                nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                if isinstance(child, ast.Import):
                    found.extend((alias.name, nested) for alias in child.names)
                elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                    for alias in child.names:
                        candidate = f"{child.module}.{alias.name}"
                        found.append((candidate if candidate in self.modules else child.module, nested))
                visit(child, nested)

        visit(ast.parse(self.modules[module].read_text()), False)
        return [(name, nested) for name, nested in found if name in self.modules and name != module]

    def graph(self) -> dict[str, set[str]]:
        return {module: {name for name, _ in self.imports_of(module)} for module in self.modules}


SHARED = Package(ROOT / "layers" / "shared" / "mcp_backend")
LOCAL_STACK = Package(ROOT / "devstack")
PACKAGES = pytest.mark.parametrize("package", [SHARED, LOCAL_STACK], ids=["mcp_backend", "devstack"])


# The shared package's layers, top (entry points) to bottom (foundations): a part imports only parts of its own
# layer or below (docs/architecture.md, "Layering"). A new part goes into one of them.
LAYERS: list[set[str]] = [
    # entry points: the MCP endpoint, the call-log telemetry extension, the authorization server
    {"mcp", "telemetry_extension", "authorization", "doors"},
    {"tools"},  # the tool table, the tools, the job worker generated from it
    {"jobs", "probes"},  # the job pipeline's service and JobTable; probes and the endpoint registry
    {
        "monitor",
        "api_keys",
        "edge_origin",
        "request_rate",
        "call_slots",
        "elicitation_answers",
    },  # MonitorTable, API keys, RateLimitTable
    {"calllog"},  # call-log records, the writer and shipper, the analyzer
    {"streams", "batch", "idempotency", "custom_resource"},  # handler plumbing: records, CloudFormation requests
    {
        "config",
        "quotas",
        "aws",
        "stack_urls",
        "lazy_imports",
        "observability",
        "netsafety",
        "validation",
        "snapstart",
        "tracing",
        "tiers",
        "refusals",
        "block_leases",
        "jwks",
        "hosts",
        "pinned_transport",
    },
]


def part(module: str) -> str:
    """The top-level part a module belongs to: mcp_backend.jobs.store -> mcp_backend.jobs."""
    return ".".join(module.split(".")[:2])


# Complexity exception: Tarjan's algorithm, kept in its textbook shape so it can be checked against the reference.
def cycles(graph: dict[str, set[str]]) -> list[list[str]]:  # noqa: C901
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


@PACKAGES
def test_no_module_imports_itself_through_others(package: Package):
    # Given every first-party import, at module level or inside a function
    # When the module graph is searched for cycles
    # Then there are none
    assert cycles(package.graph()) == []


def test_no_two_parts_of_the_shared_package_import_each_other():
    # Given the graph between the package's top-level parts (jobs, tools, mcp, probes, monitor, ...)
    parts: dict[str, set[str]] = {}
    for module, targets in SHARED.graph().items():
        parts.setdefault(part(module), set()).update(part(t) for t in targets if part(t) != part(module))

    # Then no part depends on itself through another
    assert cycles(parts) == []


@PACKAGES
def test_first_party_imports_are_at_module_level(package: Package):
    # Given the imports made inside functions
    hidden = {
        (module, name) for module in package.modules for name, nested in package.imports_of(module) if nested
    } - LAZY_FOR_COLD_START

    # Then none is first-party, except the ones a cold start must not pay for
    assert hidden == set()


# The local stack's layers, top to bottom (docs/architecture.md, "The local stack's modules"): the developer's
# commands (devstack's top-level modules) wire the front doors and event sources to the runtimes, which run
# functions against the stack's resources. A new subpackage goes into one of them.
LOCAL_STACK_LAYERS: list[set[str]] = [
    {"commands"},  # make dev, make invoke, make redrive ...: the whole stack, or the stack wired without servers
    {"front_doors", "sources"},  # the Invoke API, async invocation, Function URLs; SQS and stream pollers
    {"runtime", "sqs_extras"},  # the functions in this process or in sandboxes; SQS behaviour moto lacks
    {"stack"},  # the template, its resources on moto, moto's internals
]


def local_stack_part(module: str) -> str:
    """The subpackage a local stack module is in (devstack.runtime.sandbox -> runtime); top-level modules are
    the developer's commands."""
    folders = LOCAL_STACK.modules[module].relative_to(LOCAL_STACK.directory).parts[:-1]
    return folders[0] if folders else "commands"


def layer_of(part_name: str, layers: list[set[str]] = LAYERS) -> int:
    short = part_name.removeprefix("mcp_backend").lstrip(".")
    for depth, members in enumerate(layers):
        if short in members:
            return depth
    raise AssertionError(f"{part_name} is in no layer: add it to its package's layers (and docs/architecture.md)")


def test_every_part_imports_only_its_own_layer_or_below():
    # Given every import between two parts of the shared package
    upward = sorted(
        f"{part(module)} -> {part(target)}"
        for module, targets in SHARED.graph().items()
        if part(module) != "mcp_backend"
        for target in targets
        if part(target) not in (part(module), "mcp_backend") and layer_of(part(target)) < layer_of(part(module))
    )

    # Then none reaches up to a layer above its own
    assert upward == []


def local_stack_part_graph() -> dict[str, set[str]]:
    parts: dict[str, set[str]] = {}
    for module, targets in LOCAL_STACK.graph().items():
        source = local_stack_part(module)
        parts.setdefault(source, set()).update(
            local_stack_part(target) for target in targets if local_stack_part(target) != source
        )
    return parts


def test_no_two_parts_of_the_local_stack_import_each_other():
    # Given the graph between the local stack's subpackages (and its commands)
    parts = local_stack_part_graph()

    # Then no part depends on itself through another
    assert cycles(parts) == []


def test_every_part_of_the_local_stack_imports_only_its_own_layer_or_below():
    # Given every import between two parts of the local stack
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in local_stack_part_graph().items()
        for target in targets
        if layer_of(target, LOCAL_STACK_LAYERS) < layer_of(source, LOCAL_STACK_LAYERS)
    )

    # Then none reaches up to a layer above its own (the runtimes never reach for a front door, the stack for
    # anything)
    assert upward == []


def test_every_part_of_the_local_stack_is_in_a_layer():
    # Given the local stack's subpackages, and its commands
    parts = {local_stack_part(module) for module in LOCAL_STACK.modules}

    # Then each has its place in the layering
    assert {name for name in parts if not any(name in members for members in LOCAL_STACK_LAYERS)} == set()


def test_the_job_store_only_reads_and_writes():
    # Given JobTable's owner and what it imports
    store = SHARED.modules["mcp_backend.jobs.store"]
    imported = {name for name, _ in SHARED.imports_of("mcp_backend.jobs.store")}

    # Then job admission (the quota's leases, its refusals) is decided above it, not in it
    assert "mcp_backend.jobs.quota_leases" not in imported
    assert "concurrent_refused" not in store.read_text() and "daily_refused" not in store.read_text()


def test_the_block_lease_algorithm_is_written_once():
    # Given the modules that keep a shared count in blocks (the request rate, the daily job quota)
    users = [SHARED.modules["mcp_backend.request_rate"], SHARED.modules["mcp_backend.jobs.store"]]

    # Then each leases through mcp_backend.block_leases, and none writes the conditional lease itself
    for path in users:
        text = path.read_text()
        assert "lease_block(" in text and ":room" not in text, path.name


def test_the_authorization_server_imports_nothing_of_the_endpoint():
    # Given every import of the authorization server's modules
    imported = {
        name
        for module in SHARED.modules
        if module.startswith("mcp_backend.authorization.")
        for name, _ in SHARED.imports_of(module)
    }

    # Then none is of the MCP endpoint or the probes: what they share (the JWKS cache, the host rule, the pinned
    # transport) lives in the foundations
    assert {name for name in imported if part(name) in ("mcp_backend.mcp", "mcp_backend.probes")} == set()
