"""Every line a function prints, prefixed with its logical id, like `sam logs` would group them."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

_current = threading.local()


@contextmanager
def function_scope(name: str) -> Iterator[None]:
    previous = getattr(_current, "name", None)
    _current.name = name
    try:
        yield
    finally:
        _current.name = previous


class PrefixedStream(io.TextIOBase):
    """Wraps stdout: lines written while a function runs start with `[LogicalId] `."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self._at_line_start = threading.local()

    def write(self, text: str) -> int:
        name = getattr(_current, "name", None)
        if not name:
            return self.target.write(text)
        out = []
        for piece in text.splitlines(keepends=True):
            if getattr(self._at_line_start, "value", True):
                out.append(f"[{name}] ")
            out.append(piece)
            self._at_line_start.value = piece.endswith("\n")
        self.target.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def isatty(self) -> bool:
        return self.target.isatty()
