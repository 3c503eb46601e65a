"""The local Lambda runtime's /opt: a function's layers merged in the order it lists them, as Lambda does."""

from __future__ import annotations

import os

from devstack.runtime.sandbox import opt_dir


def test_layers_merge_folder_by_folder_and_a_later_layer_wins_a_file_both_ship(tmp_path):
    # Given two layers that both ship python/ (and the same module), the first with an extension
    first, second = tmp_path / "core", tmp_path / "mcp"
    (first / "python" / "pkg").mkdir(parents=True)
    (first / "python" / "pkg" / "core.py").write_text("core = 1\n")
    (first / "python" / "shared.py").write_text("origin = 'core'\n")
    (first / "extensions").mkdir()
    (first / "extensions" / "ext").write_text("#!/bin/sh\n")
    (first / "extensions" / "ext").chmod(0o755)
    (second / "python" / "pkg").mkdir(parents=True)
    (second / "python" / "pkg" / "mcp.py").write_text("mcp = 1\n")
    (second / "python" / "shared.py").write_text("origin = 'mcp'\n")

    # When /opt is made for a function that lists them in this order
    opt = opt_dir((first, second))

    # Then every file of both is there, the later layer's copy of the shared one, the extension still executable
    assert opt is not None
    assert (opt / "python" / "pkg" / "core.py").read_text() == "core = 1\n"
    assert (opt / "python" / "pkg" / "mcp.py").read_text() == "mcp = 1\n"
    assert (opt / "python" / "shared.py").read_text() == "origin = 'mcp'\n"
    assert os.access(opt / "extensions" / "ext", os.X_OK)
    # and the layers themselves are untouched
    assert (first / "python" / "shared.py").read_text() == "origin = 'core'\n"


def test_one_layer_is_opt_itself_and_none_is_no_opt(tmp_path):
    assert opt_dir((tmp_path,)) == tmp_path
    assert opt_dir(()) is None
