"""The shared layer (`mcp_backend`) on this process's path, for the local stack's own uses of it: the traces it
records and the operator's redrive. Functions get their layers from their specs (devstack.runtime)."""

from __future__ import annotations

import sys

from devstack.stack.template import ROOT

SHARED_LAYER = ROOT / "layers" / "shared"


def put_on_path() -> None:
    if str(SHARED_LAYER) not in sys.path:
        sys.path.insert(0, str(SHARED_LAYER))
