"""The query parameters the reading endpoints share."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import AfterValidator

from airflow_quota.api.schemas import Name
from airflow_quota.ledger.views import MAX_OFFSET, utc_time

QueueFilter = Annotated[Name | None, Query(description="Only this job queue")]
ShareFilter = Annotated[Name | None, Query(description="Only this quota share")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Skip the newest N first (the next page)")]
Since = Annotated[
    datetime | None,
    Query(description="Only events at or after this ISO-8601 time (UTC when no zone)"),
    AfterValidator(lambda at: at if at is None else utc_time(at)),
]
