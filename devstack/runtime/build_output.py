"""The build the Lambda runtime runs (`make build-local`): refused before anything starts when it is missing,
for another architecture or older than the source; a function's layers as the folders merged into its /opt.
"""

from __future__ import annotations

import os
from pathlib import Path

from devstack.runtime.layer_cache_key import DIGEST_NAME
from devstack.runtime.runtime_image import LambdaRuntimeUnavailable
from devstack.stack.template import ROOT

DEFAULT_BUILD_DIR = ROOT / ".aws-sam" / "build"
# Stand-in for the Lambda Web Adapter layer's /opt/bootstrap (exec the function's start script); the
# adapter's extension half is devstack.front_doors.web_adapter.
WEB_ADAPTER_LAYER = Path(__file__).parents[1] / "front_doors" / "layers" / "lambda-web-adapter"
WEB_ADAPTER_LAYER_NAME = ":layer:LambdaAdapterLayer"
# Files that drive the build rather than being copied into it (the digest is McpLayer's cache key).
_BUILD_INPUTS = {"Makefile", "requirements.txt", DIGEST_NAME}


def check_build(build_dir: Path, architecture: str, code_paths: dict[str, Path]) -> None:
    """Refuse a missing build, one for another architecture, or one older than the source."""
    make = "make build" if architecture == "arm64" else f"make build ARCH={architecture}"
    if build_dir.resolve() != DEFAULT_BUILD_DIR:
        make += f" BUILD_DIR={build_dir}"
    if not (build_dir / "template.yaml").exists():
        raise LambdaRuntimeUnavailable(f"no build in {build_dir}: run `{make}` first")
    machine = "aarch64" if architecture == "arm64" else architecture
    foreign = [so for so in build_dir.glob("*/python/**/*.cpython-*-linux-gnu.so") if f"-{machine}-" not in so.name]
    if foreign:
        raise LambdaRuntimeUnavailable(
            f"{build_dir} was built for another architecture ({foreign[0].name}): "
            f"run `{make}` for this {architecture} host"
        )
    for logical_id, source in code_paths.items():
        changed = _first_unbuilt_file(source, build_dir / logical_id)
        if changed is not None:
            raise LambdaRuntimeUnavailable(f"{build_dir} is older than {changed}: run `{make}`")


def _first_unbuilt_file(source: Path, built: Path) -> Path | None:
    """A source file whose built copy (at its path, or under python/ for a layer) is missing or differs. A layer's
    module may ship in another layer's python/ (layers/shared/Makefile, MCP_LAYER_PARTS): Lambda merges them."""
    for path in sorted(source.rglob("*")):
        if not path.is_file() or path.name in _BUILD_INPUTS or "__pycache__" in path.parts:
            continue
        relative = path.relative_to(source)
        copies = [built / relative, *built.parent.glob(f"*/python/{relative}")]
        if not any(copy.is_file() and copy.read_bytes() == path.read_bytes() for copy in copies):
            return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return None


def external_extensions(layer_dirs: tuple[Path, ...]) -> list[Path]:
    """The executables Lambda starts as external extensions: /opt/extensions/* of the merged layers."""
    return sorted(
        path
        for layer in layer_dirs
        if (layer / "extensions").is_dir()
        for path in (layer / "extensions").iterdir()
        if path.is_file() and os.access(path, os.X_OK)
    )


def layer_dirs_for(layer_refs: list[str], build_dir: Path, code_paths: dict[str, Path]) -> tuple[Path, ...]:
    """Each of the function's layers as a folder to merge into /opt: local layers from the build
    output, the Web Adapter layer from its local stand-in. Other published layers are not emulated."""
    by_source = {str(path): logical_id for logical_id, path in code_paths.items()}
    dirs = []
    for ref in layer_refs:
        if ref in by_source:
            dirs.append(build_dir / by_source[ref])
        elif WEB_ADAPTER_LAYER_NAME in ref:
            dirs.append(WEB_ADAPTER_LAYER)
    return tuple(dirs)
