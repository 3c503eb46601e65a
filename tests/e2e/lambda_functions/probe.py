"""Handlers that report what a function sees inside its execution environment."""

import importlib
import os
import pkgutil
import sys
import time


def environment(event, context):
    return {"variables": dict(os.environ), "sys_path": sys.path, "cwd": os.getcwd()}


def identity(event, context):
    time.sleep(event.get("seconds", 0))
    return {"environment": os.environ["AWS_LAMBDA_LOG_STREAM_NAME"], "pid": os.getpid()}


def write(event, context):
    outcomes: dict[str, str | None] = {}
    for path in event["paths"]:
        try:
            with open(path, "w") as handle:
                handle.write("written by the function")
            outcomes[path] = "written"
        except OSError as error:
            outcomes[path] = error.strerror
    return outcomes


def read(event, context):
    return {path: os.path.exists(path) for path in event["paths"]}


def import_all(event, context):
    """Import every module of a package from the layer; the ones that fail, with why."""
    package = importlib.import_module(event["package"])
    failures = {}
    for module in pkgutil.walk_packages(package.__path__, prefix=f"{event['package']}."):
        try:
            importlib.import_module(module.name)
        except Exception as error:
            failures[module.name] = f"{type(error).__name__}: {error}"
    return failures
