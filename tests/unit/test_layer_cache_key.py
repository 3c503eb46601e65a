"""McpLayer's cache key: sam keys a cached layer build on its ContentUri folder (layers/mcp), while McpLayer also
ships mcp_backend's endpoint parts from the core layer's sources. The digest `make build` writes into layers/mcp
must move with those parts, so a changed part rebuilds the layer instead of shipping the cached one."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

from devstack.runtime.layer_cache_key import DIGEST_NAME, mcp_layer_parts, parts_digest, write_digest
from devstack.stack.template import ROOT

SHARED = ROOT / "layers" / "shared"


def copy_of_shared_sources(tmp_path: Path) -> Path:
    copy = tmp_path / "shared"
    shutil.copytree(SHARED / "mcp_backend", copy / "mcp_backend", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(SHARED / "Makefile", copy / "Makefile")
    return copy


def test_the_parts_are_the_ones_the_layer_build_copies():
    # Given the layers' Makefile
    makefile = (SHARED / "Makefile").read_text()
    # Then the parts named are the ones build-McpLayer copies and build-SharedLayer leaves out, and each exists
    parts = mcp_layer_parts(SHARED)
    assert parts == ("mcp", "authorization", "edge_origin.py")
    assert "$(addprefix $(SHARED_SOURCES)mcp_backend/,$(MCP_LAYER_PARTS))" in makefile
    assert "$(addprefix mcp_backend/,$(MCP_LAYER_PARTS))" in makefile
    assert all((SHARED / "mcp_backend" / part).exists() for part in parts)


def test_a_changed_part_changes_the_digest_and_nothing_else_does(tmp_path):
    # Given a copy of the core layer's sources and its digest
    shared = copy_of_shared_sources(tmp_path)
    before = parts_digest(shared)

    # When a file outside the parts changes, and bytecode appears beside a part
    (shared / "mcp_backend" / "jobs" / "service.py").write_text("# changed\n")
    cache = shared / "mcp_backend" / "authorization" / "__pycache__"
    cache.mkdir()
    (cache / "app.cpython-313.pyc").write_bytes(b"\x00")
    unchanged = parts_digest(shared)

    # And then a part's file changes, and then a part gains a file
    (shared / "mcp_backend" / "authorization" / "app.py").write_text("# changed\n")
    changed = parts_digest(shared)
    (shared / "mcp_backend" / "mcp" / "new_module.py").write_text("")
    added = parts_digest(shared)

    # Then only the parts' own sources move it
    assert unchanged == before
    assert len({before, changed, added}) == 3


def test_the_digest_lands_in_the_layers_own_folder_and_is_rewritten_only_when_it_moves(tmp_path):
    # Given the layer's folder, written once
    shared = copy_of_shared_sources(tmp_path)
    folder = tmp_path / "mcp"
    folder.mkdir()
    assert write_digest(shared, folder) is True
    written = (folder / DIGEST_NAME).read_text()

    # When it is written again with nothing changed, then after a part changed
    again = write_digest(shared, folder)
    (shared / "mcp_backend" / "edge_origin.py").write_text("# changed\n")
    moved = write_digest(shared, folder)

    # Then the file (what sam hashes) changes only in the second case
    assert again is False and moved is True
    assert (folder / DIGEST_NAME).read_text() != written


def test_make_build_writes_the_digest_before_sam_builds():
    # Given the build recipe
    recipe = (ROOT / "Makefile").read_text().split("\nbuild:", 1)[1].split("\n\n", 1)[0]
    # Then the digest is written before `sam build` reads the layer folders
    assert recipe.index("devstack.runtime.layer_cache_key") < recipe.index("build --template template.yaml")


def test_only_make_build_builds_cached_so_a_plain_sam_build_is_never_stale():
    # Given the build recipe and samconfig.toml's build sections (what a plain `sam build` reads)
    recipe = (ROOT / "Makefile").read_text().split("\nbuild:", 1)[1].split("\n\n", 1)[0]
    samconfig = tomllib.loads((ROOT / "samconfig.toml").read_text())
    build_sections = {
        name: env["build"]["parameters"] for name, env in samconfig.items() if isinstance(env, dict) and "build" in env
    }
    # Then `make build` asks for the cache, after the digest, and no environment turns it on for `sam build` alone
    assert "--cached" in recipe and recipe.index("devstack.runtime.layer_cache_key") < recipe.index("--cached")
    assert build_sections and not any(section.get("cached") for section in build_sections.values())
