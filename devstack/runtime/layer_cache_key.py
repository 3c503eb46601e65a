"""McpLayer's cache key for `sam build --cached`.

sam keys a cached layer build on the checksum of its ContentUri folder. McpLayer's folder (layers/mcp) holds its
requirements and a link to the layers' Makefile, but the layer also ships mcp_backend's endpoint parts
(MCP_LAYER_PARTS in layers/shared/Makefile), copied from the core layer's sources. Without more, a change to those
parts would leave the cached layer in place, and a build would ship the old endpoint. `make build` first writes
their digest into layers/mcp (`python -m devstack.runtime.layer_cache_key`), so the folder's checksum moves
with them.
"""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path

from devstack.stack.template import ROOT

DIGEST_NAME = "shared-parts.sha256"
SHARED = ROOT / "layers" / "shared"
MCP_LAYER = ROOT / "layers" / "mcp"


def mcp_layer_parts(shared: Path) -> tuple[str, ...]:
    """The parts of mcp_backend McpLayer ships, as the layers' Makefile names them (its one list)."""
    found = re.search(r"^MCP_LAYER_PARTS := (.+)$", (shared / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"{shared / 'Makefile'} names no MCP_LAYER_PARTS")
    return tuple(found.group(1).split())


def parts_digest(shared: Path) -> str:
    """sha256 over each part's source files (path and content), bytecode left out: what the layer ships from them
    is built from these."""
    digest = hashlib.sha256()
    package = shared / "mcp_backend"
    for part in mcp_layer_parts(shared):
        root = package / part
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts or path.suffix == ".pyc":
                continue
            digest.update(path.relative_to(package).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def write_digest(shared: Path = SHARED, layer_folder: Path = MCP_LAYER) -> bool:
    """Write the digest into the layer's folder; True when it changed (False leaves the file untouched)."""
    target = layer_folder / DIGEST_NAME
    text = parts_digest(shared) + "\n"
    if target.exists() and target.read_text() == text:
        return False
    target.write_text(text)
    return True


if __name__ == "__main__":
    write_digest()
    sys.exit(0)
