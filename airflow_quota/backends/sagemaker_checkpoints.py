"""A SageMaker training's checkpoint reports: the newest object under its checkpoint prefix, read from S3.

SageMaker copies what a training saves under ``CheckpointConfig.LocalPath`` (``/opt/ml/checkpoints``) to
its ``CheckpointConfig.S3Uri`` as it is written, so the newest object's ``LastModified`` under that prefix
is when the training last saved a checkpoint: the SageMaker side of the contract the local backend keeps
with a file's modification time (``backends.local.newest_checkpoint``). The same names do not count:
an object whose last path part starts with a dot or ends in ``.tmp`` is a checkpoint being written.

The allocator's host reads it (``allocator.checkpoints``) for the SageMaker jobs that hold capacity: a
SageMaker task waits deferred on its monitoring trigger while it trains, runs no code then, and a trigger
can neither touch the database nor write the task's ``task_state_store``. Calls go through the amazon
provider's ``S3Hook`` (connection, credentials, region, ``endpoint_url``), one client per connection and
region, kept like the allocator's SageMaker clients (``backends.sagemaker.allocator_training_jobs``), and
give up within seconds (``ALLOCATOR_BOTOCORE_CONFIG``).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any, Final

from botocore.exceptions import ClientError

from airflow_quota.backends.sagemaker import (
    ALLOCATOR_BOTOCORE_CONFIG,
    ALLOCATOR_CLIENT_MAX_AGE_SECONDS,
    CREDENTIAL_ERROR_CODES,
)

#: Objects per ListObjectsV2 page (S3's own maximum).
PAGE_SIZE: Final = 1000
_NOT_A_CHECKPOINT_PREFIX: Final = "."
_NOT_A_CHECKPOINT_SUFFIX: Final = ".tmp"

_clients: dict[tuple[str | None, str | None], tuple[float, Any]] = {}
_clients_lock = threading.Lock()


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` as (bucket, key prefix), the prefix ending in ``/`` unless it is empty
    (SageMaker copies ``LocalPath/<file>`` to ``<S3Uri>/<file>``: a prefix ``ckpt`` must not match
    ``ckpt-other/``)."""
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    bucket, key = S3Hook.parse_s3_url(uri)
    key = key.lstrip("/")
    if key and not key.endswith("/"):
        key += "/"
    return bucket, key


def newest_checkpoint_object(client: Any, uri: str, *, page_size: int = PAGE_SIZE) -> datetime | None:
    """The newest ``LastModified`` (UTC) of an object under the S3 prefix ``uri`` that counts as a
    checkpoint, or None when there is none; every page of ListObjectsV2 (``page_size`` objects each) is
    read. Raises what S3 answers (``NoSuchBucket``, ``AccessDenied``, ...) or botocore's connection errors."""
    bucket, prefix = split_s3_uri(uri)
    newest: datetime | None = None
    pages = client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix, PaginationConfig={"PageSize": page_size}
    )
    for page in pages:
        for item in page.get("Contents") or ():
            name = str(item["Key"]).rsplit("/", 1)[-1]
            if (
                not name
                or name.startswith(_NOT_A_CHECKPOINT_PREFIX)
                or name.endswith(_NOT_A_CHECKPOINT_SUFFIX)
            ):
                continue
            modified = item["LastModified"]
            if modified.tzinfo is None:
                modified = modified.replace(tzinfo=UTC)
            if newest is None or modified > newest:
                newest = modified
    return newest


def allocator_s3_client(aws_conn_id: str | None, region_name: str | None) -> Any:
    """The allocator's S3 client for one connection and region (the amazon provider's ``S3Hook``'s),
    built once per process and reused for ``ALLOCATOR_CLIENT_MAX_AGE_SECONDS``."""
    key = (aws_conn_id, region_name)
    now = time.monotonic()
    with _clients_lock:
        cached = _clients.get(key)
        if cached is not None and now - cached[0] < ALLOCATOR_CLIENT_MAX_AGE_SECONDS:
            return cached[1]
    from airflow.providers.amazon.aws.hooks.s3 import S3Hook

    client = S3Hook(aws_conn_id=aws_conn_id, region_name=region_name, config=ALLOCATOR_BOTOCORE_CONFIG).conn
    with _clients_lock:
        _clients[key] = (now, client)
    return client


def forget_allocator_s3_clients() -> None:
    """Drop the cached clients: the next call builds new ones (the connection read again)."""
    with _clients_lock:
        _clients.clear()


def newest_checkpoint_through_s3(
    aws_conn_id: str | None, region_name: str | None, uri: str
) -> datetime | None:
    """For the allocator: ``newest_checkpoint_object`` through the process's cached client of the
    connection and region. A client whose credentials S3 refuses as expired is dropped (the next call
    reads them again) and the error raised."""
    client = allocator_s3_client(aws_conn_id, region_name)
    try:
        return newest_checkpoint_object(client, uri)
    except ClientError as error:
        if str(error.response.get("Error", {}).get("Code", "")) in CREDENTIAL_ERROR_CODES:
            with _clients_lock:
                cached = _clients.get((aws_conn_id, region_name))
                if cached is not None and cached[1] is client:
                    del _clients[(aws_conn_id, region_name)]
        raise
