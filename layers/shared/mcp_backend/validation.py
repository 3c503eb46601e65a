"""Describing rejected input without echoing it (inputs may carry secrets)."""

from __future__ import annotations

from pydantic import ValidationError


def describe_validation_error(error: ValidationError) -> str:
    """Field locations and messages only: pydantic's own text would echo the rejected input."""
    problems = [
        f"{'.'.join(str(part) for part in detail['loc']) or 'body'}: {detail['msg']}"
        for detail in error.errors(include_input=False, include_url=False)
    ]
    return "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else "")
