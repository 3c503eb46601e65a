"""What a span attribute may hold: never a credential, a payload or a URL's query string."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# Attribute names that may hold a credential, whatever their value looks like.
_SECRET_NAME = re.compile(r"(token|secret|password|passwd|authorization|api[_.-]?key|credential|cookie)", re.I)
_URL_WITH_QUERY = re.compile(r"^([a-z][a-z0-9+.-]*://[^?#\s]*)[?#].*$", re.I | re.S)


def safe_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes a span may carry: none whose name suggests a credential, URLs without their query string or
    fragment, and only scalar values (a payload is never an attribute)."""
    kept: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None or _SECRET_NAME.search(key):
            continue
        if isinstance(value, str):
            kept[key] = _URL_WITH_QUERY.sub(r"\1", value)[:256]
        elif isinstance(value, bool | int | float):
            kept[key] = value
    return kept
