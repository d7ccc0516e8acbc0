"""A SageMaker training's last checkpoint read from S3 (``backends.sagemaker_checkpoints``) and the host's
listings after a cycle (``allocator.checkpoints.list_checkpoints``), against moto's S3 on 127.0.0.1
through the amazon provider's ``S3Hook``; an unreachable S3 is a real closed port."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from airflow_quota.allocator.checkpoints import (
    MAX_LISTINGS_PER_ROUND,
    CheckpointListing,
    SageMakerCheckpoints,
    list_checkpoints,
    newest_through_s3,
)
from airflow_quota.allocator.report import CycleReport
from airflow_quota.allocator.settings import CycleSettings
from airflow_quota.backends.sagemaker_checkpoints import (
    allocator_s3_client,
    forget_allocator_s3_clients,
    newest_checkpoint_object,
    newest_checkpoint_through_s3,
    split_s3_uri,
)
from tests.sagemaker.moto_fixture import MotoServer
from tests.sagemaker.moto_process import REGION

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
INTERVAL = timedelta(seconds=60)


@pytest.fixture
def bucket(moto_server: MotoServer, unique: str) -> Iterator[str]:
    name = f"checkpoints-{unique}"
    moto_server.client("s3").create_bucket(Bucket=name)
    forget_allocator_s3_clients()
    yield name


def put(moto_server: MotoServer, bucket: str, key: str) -> datetime:
    s3 = moto_server.client("s3")
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    modified: datetime = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    return modified.astimezone(UTC)


def test_split_s3_uri_ends_a_prefix_with_a_slash() -> None:
    assert split_s3_uri("s3://b/run") == ("b", "run/")
    assert split_s3_uri("s3://b/run/") == ("b", "run/")
    assert split_s3_uri("s3://b") == ("b", "")


def test_the_newest_checkpoint_is_the_newest_object_under_the_prefix_on_any_page(
    moto_server: MotoServer, bucket: str
) -> None:
    for key in ("run/a.pt", "run/b.pt", "run/c/d.pt", "run/"):  # a folder marker: no name, not counted
        put(moto_server, bucket, key)
    time.sleep(1.1)  # S3 stamps LastModified to the second
    newest = put(moto_server, bucket, "run/e.pt")  # last in key order: on the last page
    time.sleep(1.1)
    for key in ("run/.f.partial", "run/g.tmp", "run-other/h.pt"):  # being written, or another prefix
        put(moto_server, bucket, key)
    client = allocator_s3_client("aws_default", REGION)
    pages: list[str] = []
    client.meta.events.register("after-call.s3.ListObjectsV2", lambda **_: pages.append("page"))

    assert newest_checkpoint_object(client, f"s3://{bucket}/run", page_size=2) == newest
    assert len(pages) == 4  # 7 objects under run/, 2 a page

    assert newest_checkpoint_object(client, f"s3://{bucket}/nothing-yet/") is None


def test_a_missing_bucket_is_s3s_error(moto_server: MotoServer, unique: str) -> None:
    with pytest.raises(ClientError) as raised:
        newest_checkpoint_through_s3("aws_default", REGION, f"s3://gone-{unique}/run/")
    assert raised.value.response["Error"]["Code"] == "NoSuchBucket"


class CountingLister:
    """The default lister (S3 through the provider's hook), counting the prefixes it was asked about."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, aws_conn_id: str | None, region_name: str | None, uri: str) -> datetime | None:
        self.asked.append(uri)
        return newest_through_s3(aws_conn_id, region_name, uri)


def round_of(listings: list[CheckpointListing], at: datetime) -> CycleReport:
    return CycleReport(ran_at=at, checkpoint_listings=listings)


def listing(bucket: str, n: int, conn: str = "aws_default") -> CheckpointListing:
    return CheckpointListing(f"job-{n}", f"train-{n}-a1", f"s3://{bucket}/job-{n}/", conn, REGION)


def test_each_prefix_is_listed_once_per_interval_and_at_most_ten_a_round(
    moto_server: MotoServer, bucket: str
) -> None:
    listings = [listing(bucket, n) for n in range(MAX_LISTINGS_PER_ROUND + 2)]
    saved = put(moto_server, bucket, "job-11/model.pt")
    lister = CountingLister()
    kept = SageMakerCheckpoints()
    settings = CycleSettings(
        sagemaker_checkpoints=kept, checkpoint_listing_interval=INTERVAL, checkpoint_lister=lister
    )

    list_checkpoints(round_of(listings, NOW), settings)
    # None listed yet: the first ten, in order.
    assert lister.asked == [each.uri for each in listings[:MAX_LISTINGS_PER_ROUND]]
    list_checkpoints(round_of(listings, NOW + timedelta(seconds=1)), settings)  # the two left
    assert lister.asked[MAX_LISTINGS_PER_ROUND:] == [each.uri for each in listings[MAX_LISTINGS_PER_ROUND:]]
    assert kept.newest("train-11-a1") == saved and kept.newest("train-0-a1") is None

    list_checkpoints(round_of(listings, NOW + INTERVAL - timedelta(seconds=1)), settings)
    assert len(lister.asked) == len(listings)  # none due yet
    list_checkpoints(round_of(listings[:3], NOW + INTERVAL), settings)  # the others no longer run
    assert len(lister.asked) == len(listings) + 3
    assert kept.newest("train-11-a1") is None  # forgotten with its job


def test_an_unreachable_s3_is_asked_once_per_connection_and_round(
    moto_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = {
        "conn_type": "aws",
        "login": "testing",
        "password": "testing",
        "extra": {"region_name": REGION, "endpoint_url": "http://127.0.0.1:1"},  # a closed port
    }
    monkeypatch.setenv("AIRFLOW_CONN_NOWHERE", json.dumps(nowhere))
    saved = put(moto_server, bucket, "job-0/model.pt")
    listings = [listing(bucket, 0), listing(bucket, 1, "nowhere"), listing(bucket, 2, "nowhere")]
    lister = CountingLister()
    kept = SageMakerCheckpoints()
    settings = CycleSettings(
        sagemaker_checkpoints=kept, checkpoint_listing_interval=INTERVAL, checkpoint_lister=lister
    )
    caplog.set_level(logging.WARNING, logger="airflow_quota.allocator.checkpoints")

    list_checkpoints(round_of(listings, NOW), settings)  # never raises

    assert lister.asked == [listings[0].uri, listings[1].uri]  # job-2's connection did not answer job-1
    assert kept.newest("train-0-a1") == saved
    assert sorted(record.getMessage().split()[1] for record in caplog.records) == ["job-1:", "job-2:"]
    list_checkpoints(round_of(listings, NOW + timedelta(seconds=1)), settings)
    assert len(lister.asked) == 2  # each waits its interval


def test_no_memory_or_an_interval_of_0_lists_nothing(bucket: str) -> None:
    asked: list[Any] = []

    def lister(*args: Any) -> datetime | None:
        asked.append(args)
        return None

    report = round_of([listing(bucket, 0)], NOW)
    list_checkpoints(report, CycleSettings(checkpoint_lister=lister))
    off = CycleSettings(
        sagemaker_checkpoints=SageMakerCheckpoints(),
        checkpoint_listing_interval=timedelta(0),
        checkpoint_lister=lister,
    )
    list_checkpoints(report, off)
    assert asked == []
