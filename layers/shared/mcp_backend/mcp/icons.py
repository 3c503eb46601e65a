"""The icons (SEP-973) the endpoint publishes: on serverInfo, every tool, resource, resource template and prompt.

Each is a small SVG served inline as a `data:` URI, so a client fetches nothing (and no host of ours is needed
to serve images). The SVGs are plain shapes: no script, no external reference (the spec warns clients that SVGs
can carry script). Sizes "any": an SVG scales.
"""

from __future__ import annotations

import base64

from mcp_types import Icon

_FRAME = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24" fill="none" stroke="#2f6fde" '
    'stroke-width="2" stroke-linecap="round" stroke-linejoin="round">{}</svg>'
)
_SHAPES = {
    # Bars of a chart: the analytics server itself.
    "server": '<path d="M4 20V10M10 20V4M16 20v-7M22 20H2"/>',
    # A wrench: a tool.
    "tool": '<path d="M14.7 6.3a4 4 0 0 0-5.4 5.4L3 18l3 3 6.3-6.3a4 4 0 0 0 5.4-5.4l-2.5 2.5-2.4-.6-.6-2.4z"/>',
    # A document: a job or its result.
    "resource": '<path d="M6 2h9l5 5v15H6z"/><path d="M14 2v6h6M9 13h8M9 17h8"/>',
    # A speech bubble: a prompt.
    "prompt": '<path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z"/>',
}
SVG_MIME = "image/svg+xml"


def _icon(shape: str) -> Icon:
    svg = _FRAME.format(_SHAPES[shape]).encode()
    return Icon(src=f"data:{SVG_MIME};base64,{base64.b64encode(svg).decode()}", mime_type=SVG_MIME, sizes=["any"])


SERVER_ICONS = [_icon("server")]
TOOL_ICONS = [_icon("tool")]
RESOURCE_ICONS = [_icon("resource")]
PROMPT_ICONS = [_icon("prompt")]
