"""Shared fixtures: every AWS resource comes from template.yaml through the local stack, on moto."""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
import botocore.loaders
import botocore.session
import pytest
from moto import mock_aws

from devstack.stack.atomic_items import make_item_operations_atomic
from devstack.stack.template import globals_environment
from tests.wall_clock import pytest_addoption, pytest_configure, pytest_report_header

# `--wall-clock` (make test-any-date) moves the session's clock: tests/wall_clock.py.
__all__ = ["pytest_addoption", "pytest_configure", "pytest_report_header"]

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ROOT / "events"


def _shared_module_environment() -> None:
    """The literal environment every function gets (template Globals), applied before any test imports.

    Shared modules build Logger/Metrics at import; one imported by a unit test outside a function's
    environment would otherwise keep an empty metrics namespace for every later handler test.
    """
    for name, value in globals_environment().items():
        os.environ.setdefault(name, value)


_shared_module_environment()
# Conditional writes race in tests as they do on AWS; DynamoDB decides each one atomically, moto must too.
make_item_operations_atomic()


@pytest.fixture(autouse=True)
def _offline_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "POWERTOOLS_DEV": "false",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)


# mock_aws() gives boto3 a new default session, which parses botocore's service models and endpoint rules again
# (about half the CPU time of a fresh stack): every test's session reads them through this one loader instead.
_BOTOCORE_LOADER = botocore.loaders.create_loader()


def _session_sharing_models() -> boto3.Session:
    session = botocore.session.get_session()
    session.register_component("data_loader", _BOTOCORE_LOADER)
    return boto3.Session(botocore_session=session)


@pytest.fixture
def aws():
    with mock_aws():
        boto3.DEFAULT_SESSION = _session_sharing_models()  # moto restores the previous one at its stop
        yield


@pytest.fixture
def local(aws):
    """The template's resources on moto (each created when the test first touches it), functions runnable
    in-process, sample datasets uploaded."""
    from devstack.wired_stack import LocalEnvironment

    environment = LocalEnvironment(boto3.client, on_demand=True)
    environment.seed_datasets()
    return environment


def load_event(relative: str) -> dict:
    return json.loads((EVENTS / relative).read_text())
