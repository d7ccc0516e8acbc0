"""The query parameters the reading endpoints share."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Query
from pydantic import AfterValidator

from airflow_quota.api.schemas import Name, without_nul
from airflow_quota.ledger.models import ID_LENGTH
from airflow_quota.ledger.views import MAX_OFFSET, utc_time

QueueFilter = Annotated[Name | None, Query(description="Only this job queue")]
ShareFilter = Annotated[Name | None, Query(description="Only this quota share")]
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET, description="Skip the newest N first (the next page)")]
Since = Annotated[
    datetime | None,
    Query(description="Only events at or after this ISO-8601 time (UTC when no zone)"),
    AfterValidator(lambda at: at if at is None else utc_time(at)),
]
#: A DAG, run or task id, as the ledger's job columns hold it (no NUL: PostgreSQL refuses the query).
TaskIdPart = Annotated[str, Query(max_length=ID_LENGTH), AfterValidator(without_nul)]
