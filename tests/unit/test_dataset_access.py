"""s3:// datasets are readable only under the caller's own prefix of the dataset bucket or a prefix the operator
shares; anything else is refused before any S3 call, with the rule in the error."""

from __future__ import annotations

import pytest

from devstack.wired_stack import local_dataset_url
from mcp_backend.tools import analyze_dataset, fetch
from mcp_backend.tools.analyze_dataset import AnalyzeInput
from mcp_backend.tools.context import ToolContext
from mcp_backend.tools.dataset_access import dataset_key_prefix
from mcp_backend.tools.dataset_stream import FetchPolicy
from mcp_backend.tools.errors import DatasetAccessDenied

POLICY = FetchPolicy(dataset_bucket="tenant-data", shared_prefixes=("samples/",))


class RecordingS3:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def get_object(self, *, Bucket: str, Key: str) -> dict:
        self.calls.append((Bucket, Key))
        raise AssertionError("stop after recording the call")


@pytest.fixture
def s3(monkeypatch) -> RecordingS3:
    recorder = RecordingS3()
    monkeypatch.setattr(fetch, "_default_s3_client", lambda policy: recorder)
    return recorder


def analyse(url: str, user_id: str, policy: FetchPolicy = POLICY) -> None:
    ctx = ToolContext(tool_name="analyze_dataset", user_id=user_id, fetch_policy=policy)
    analyze_dataset.run(AnalyzeInput(dataset_url=url), ctx)


@pytest.mark.parametrize(
    "url",
    [
        "s3://tenant-data/user-bob/sales.csv",  # another tenant's prefix
        "s3://tenant-data/user-alice-evil/sales.csv",  # a prefix that merely starts with the caller's id
        "s3://tenant-data/sales.csv",  # the bucket's root
        "s3://tenant-data/user-alice/../user-bob/sales.csv",  # a dot segment
        "s3://other-bucket/user-alice/sales.csv",  # another bucket, own prefix
        "s3://tenant-data/samples-private/x.csv",  # next to a shared prefix, not under it
    ],
)
def test_a_dataset_outside_the_callers_prefix_is_refused_before_any_s3_call(url, s3):
    # Given alice, a dataset bucket and one shared prefix
    # When she asks for a dataset that is not hers and not shared
    with pytest.raises(DatasetAccessDenied) as refused:
        analyse(url, "user-alice")

    # Then it is refused with the rule (her own prefix and the shared one), and S3 was never called
    assert "s3://tenant-data/user-alice/" in refused.value.message
    assert "s3://tenant-data/samples/" in refused.value.message
    assert s3.calls == []


@pytest.mark.parametrize("url", ["s3://tenant-data/user-alice/sales.csv", "s3://tenant-data/samples/x/sales.csv"])
def test_the_callers_own_prefix_and_a_shared_prefix_reach_s3(url, s3):
    # Given alice; When she asks for her own dataset or a shared one
    with pytest.raises(AssertionError, match="stop after"):
        analyse(url, "user-alice")

    # Then the fetcher called S3 for exactly that object
    assert s3.calls == [("tenant-data", url.removeprefix("s3://tenant-data/"))]


def test_without_a_dataset_bucket_no_s3_dataset_is_readable(s3):
    with pytest.raises(DatasetAccessDenied, match="no dataset bucket"):
        analyse("s3://tenant-data/user-alice/sales.csv", "user-alice", FetchPolicy())
    assert s3.calls == []


@pytest.mark.parametrize(
    ("user_id", "prefix"),
    [
        ("user-alice", "user-alice/"),
        ("apikey:alice", "apikey%3Aalice/"),
        ("oauth:https://issuer.example/:a/b", "oauth%3Ahttps%3A%2F%2Fissuer.example%2F%3Aa%2Fb/"),
        ("..", "../"),  # one segment: no id names a folder above or beside another's
    ],
)
def test_a_user_id_becomes_one_key_segment(user_id, prefix):
    assert dataset_key_prefix(user_id) == prefix
    # and the local stack seeds its sample datasets under the same prefix
    assert local_dataset_url(user_id, "sales.csv") == f"s3://local-datasets/{prefix}sales.csv"
