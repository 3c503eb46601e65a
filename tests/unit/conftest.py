from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest


@pytest.fixture
def s3(aws) -> Iterator[Any]:
    """A moto S3 client with an empty `datasets` bucket."""
    client = boto3.client("s3")
    client.create_bucket(Bucket="datasets")
    yield client
