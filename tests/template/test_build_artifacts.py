"""What `sam build` produced (make test builds before it tests): the core, MCP and durable layers for python3.13
on arm64, none shipping boto3/botocore, the core one without the MCP stack or the durable execution SDK, and
one-file function artifacts."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from devstack.stack.template import load_template
from tests.bench.functions import TOOL_WORKER_LAYERS_TARGET_BYTES, layers_unzipped_bytes

BUILD = Path(__file__).resolve().parents[2] / ".aws-sam" / "build"

pytestmark = [
    pytest.mark.build,
    pytest.mark.skipif(not BUILD.exists(), reason="run `make build` (make test does) to check artifacts"),
]


LAYERS = ("SharedLayer", "McpLayer")


def layer_dir(layer: str = "SharedLayer") -> Path:
    return BUILD / layer / "python"


def test_layer_has_the_shared_package_and_pinned_dependencies():
    names = {p.name for p in layer_dir().iterdir()}
    assert {"mcp_backend", "aws_lambda_powertools", "pydantic", "pydantic_core", "httpx"} <= names


def test_the_mcp_stack_is_in_the_mcp_layer_only():
    core, mcp = ({p.name for p in layer_dir(layer).iterdir()} for layer in LAYERS)
    stack = {"mcp", "starlette", "uvicorn", "sse_starlette", "jwt", "cryptography"}
    assert stack <= mcp
    assert not (stack | {"aws_xray_sdk", "wrapt"}) & core


def test_the_durable_execution_sdk_is_in_the_durable_layer_only():
    # Given the built layers: the core one (every function, ToolWorker's 15 MiB among them) and DurableToolWorker's
    core, mcp, durable = ({p.name for p in layer_dir(layer).iterdir()} for layer in (*LAYERS, "DurableLayer"))
    # Then the durable execution SDK is in the durable layer, and in neither layer another function carries
    assert "aws_durable_execution_sdk_python" in durable
    assert not {"aws_durable_execution_sdk_python"} & (core | mcp)
    # And the durable layer repeats nothing the core layer ships
    assert not {name for name in durable & core if not name.endswith(".dist-info")}


@pytest.mark.parametrize("layer", [*LAYERS, "DurableLayer"])
def test_layer_ships_no_sdk_the_runtime_provides(layer):
    names = {p.name for p in layer_dir(layer).iterdir()}
    assert not {"boto3", "botocore", "s3transfer"} & names


@pytest.mark.parametrize("layer", LAYERS)
def test_compiled_wheels_target_cpython313_on_arm64(layer):
    extensions = list(layer_dir(layer).rglob("*.so"))
    assert extensions, "expected compiled extensions (pydantic_core, cryptography)"
    assert all("cpython-313-aarch64-linux-gnu" in p.name or "abi3" in p.name for p in extensions), extensions


def test_the_telemetry_extension_layer_is_its_launcher_only_and_the_core_layer_starts_no_extension():
    # Given the built layers
    extension_layer = BUILD / "TelemetryExtensionLayer"

    # Then the extension's layer holds one executable in extensions/ and nothing else, and the core layer, on
    # every function, has no extensions/ (a function without the extension's layer starts no second process)
    files = sorted(p.relative_to(extension_layer).as_posix() for p in extension_layer.rglob("*") if p.is_file())
    assert files == ["extensions/call-log-telemetry"]
    assert (extension_layer / files[0]).stat().st_mode & 0o111
    assert not (BUILD / "SharedLayer" / "extensions").exists()


@pytest.mark.parametrize("function_id", sorted(load_template().resources("AWS::Lambda::Function")))
def test_function_artifact_is_just_its_handler(function_id):
    if not (BUILD / function_id).exists():
        pytest.skip(f"{function_id} is not in this build; run `make build` (make test does)")
    handler = load_template().resource(function_id)["Properties"]["Handler"]
    # app.handler -> app.py; a web-adapter function's handler is its start script (run.sh).
    entry = handler if handler.endswith(".sh") else handler.rsplit(".", 1)[0] + ".py"
    assert sorted(p.name for p in (BUILD / function_id).iterdir()) == [entry]


def left_out_of_core_layer() -> list[str]:
    """The paths `CORE_LAYER_LEFT_OUT` in the layers' Makefile removes from the core layer."""
    makefile = (Path(__file__).resolve().parents[2] / "layers" / "shared" / "Makefile").read_text()
    declaration = makefile.split("CORE_LAYER_LEFT_OUT :=", 1)[1].split("\n\n", 1)[0].split("CORE_LAYER_SOURCES_ONLY")[0]
    return declaration.replace("\\", " ").split()


def module_name(path: str) -> str | None:
    """`pydantic/mypy.py` -> `pydantic.mypy`; a data file is no module."""
    if path.endswith(".py"):
        return path[: -len(".py")].replace("/", ".")
    return None if "." in Path(path).name else path.replace("/", ".")


def names_used(source: Path, root: Path) -> set[str]:
    """Every module a file imports (relative imports resolved) and every dotted string constant it holds."""
    tree = ast.parse(source.read_bytes(), filename=str(source))
    package = ".".join(source.relative_to(root).parent.parts)
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            used.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            used.add(base)
            used.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "." in node.value:
            used.add(node.value)
    return used


def test_the_core_layer_leaves_out_what_no_function_uses():
    """Given the built core layer, then none of the parts the Makefile leaves out is in it, and the event
    handler Powertools keeps for one lazy import ships as sources (no bytecode)."""
    left_out = left_out_of_core_layer()
    assert left_out, "CORE_LAYER_LEFT_OUT not found in layers/shared/Makefile"
    assert [path for path in left_out if (layer_dir() / path).exists()] == []
    assert not list((layer_dir() / "aws_lambda_powertools" / "event_handler").rglob("*.pyc"))


# pydantic names its legacy v1 API in two places, reached only by v1-style code: its table of names moved to
# pydantic.v1, and the warning for a type that validates with `__get_validators__` (checked below: none does).
REACHED_ONLY_BY_V1_STYLE_CODE = {"pydantic/_migration.py", "pydantic/_internal/_generate_schema.py"}


def test_nothing_left_in_either_layer_imports_what_the_core_layer_leaves_out():
    """Given both built layers, when every module in them is read, then none imports, or names as a dotted
    string, a module the core layer leaves out (a removal that something still needs fails here, not on Lambda)."""
    removed = [name for name in map(module_name, left_out_of_core_layer()) if name]
    offenders = []
    for layer in LAYERS:
        root = layer_dir(layer)
        for source in root.rglob("*.py"):
            if str(source.relative_to(root)) in REACHED_ONLY_BY_V1_STYLE_CODE:
                continue
            hits = {
                name
                for name in names_used(source, root)
                if any(name == gone or name.startswith(gone + ".") for gone in removed)
            }
            if hits:
                offenders.append(f"{source.relative_to(root)}: {sorted(hits)}")
    assert offenders == []


def test_no_module_in_either_layer_is_a_v1_style_pydantic_type():
    """Given both built layers, then no module outside pydantic defines `__get_validators__`: pydantic would
    reach for its left-out v1 API to warn about such a type."""
    offenders = [
        str(source.relative_to(layer_dir(layer)))
        for layer in LAYERS
        for source in layer_dir(layer).rglob("*.py")
        if "__get_validators__" in source.read_text(errors="replace")
        and source.relative_to(layer_dir(layer)).parts[0] != "pydantic"
    ]
    assert offenders == []


def mcp_layer_parts() -> list[str]:
    """The parts of mcp_backend `MCP_LAYER_PARTS` in the layers' Makefile ships in McpLayer instead of the core one."""
    makefile = (Path(__file__).resolve().parents[2] / "layers" / "shared" / "Makefile").read_text()
    return makefile.split("MCP_LAYER_PARTS :=", 1)[1].split("\n", 1)[0].split()


def test_the_endpoint_only_parts_ship_in_the_mcp_layer_and_nothing_in_the_core_layer_imports_them():
    """Given both built layers, then mcp_backend's endpoint and authorization-server parts are in McpLayer and not
    in the core layer, and no module left in the core layer imports them (a function without McpLayer would
    fail at its first import on Lambda)."""
    parts = [f"mcp_backend.{name.removesuffix('.py')}" for name in mcp_layer_parts()]
    assert parts == ["mcp_backend.mcp", "mcp_backend.authorization", "mcp_backend.edge_origin"]
    for name in mcp_layer_parts():
        assert (layer_dir("McpLayer") / "mcp_backend" / name).exists()
        assert not (layer_dir() / "mcp_backend" / name).exists()
    # McpLayer adds folders to the core layer's package: its own __init__ would replace the core layer's on /opt.
    assert not (layer_dir("McpLayer") / "mcp_backend" / "__init__.py").exists()
    core = layer_dir()
    offenders = [
        f"{source.relative_to(core)}: {sorted(hits)}"
        for source in (core / "mcp_backend").rglob("*.py")
        if (
            hits := {
                used
                for used in names_used(source, core)
                if any(used == part or used.startswith(part + ".") for part in parts)
            }
        )
    ]
    assert offenders == []


def test_tool_workers_layers_are_at_most_15_mb_unzipped():
    """Given ToolWorker's layers in the arm64 build (the core layer and, with call-log telemetry on, its
    extension's), when their files are summed as the bench sums them, then they hold at most 15,000,000 bytes
    unzipped."""
    # SAM names each layer version after its layer with a 10-character hash; the build folder is the layer's.
    layer_ids = [version[: -len("0123456789")] for version in tool_worker_layer_versions()]
    assert {"SharedLayer", "TelemetryExtensionLayer"} <= set(layer_ids)
    assert all((BUILD / layer_id).is_dir() for layer_id in layer_ids), layer_ids

    assert layers_unzipped_bytes(BUILD, layer_ids) <= TOOL_WORKER_LAYERS_TARGET_BYTES


def tool_worker_layer_versions() -> list[str]:
    """The layer versions ToolWorker lists, both branches of a condition taken (its largest set); the stack's own
    only (the OpenTelemetry SDK's layer, with tracing on, is published by AWS: TracingSdkLayerArn)."""
    template = load_template()
    layers = template.resource("ToolWorker")["Properties"]["Layers"]
    branches = [branch for layer in layers for branch in (layer["Fn::If"][1:] if "Fn::If" in layer else [layer])]
    resources = template.expanded["Resources"]
    return [branch["Ref"] for branch in branches if branch.get("Ref") in resources]
