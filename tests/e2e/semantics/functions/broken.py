"""Fails at import on purpose: the local stack must name this function and keep running."""

import a_module_that_does_not_exist  # noqa: F401

handler = None
