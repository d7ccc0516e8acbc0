"""The monitoring triggers' base: one AWS job followed by polling, an event no sooner than ``not_before``.

``SageMakerTrainingJobTrigger`` (a training job) and ``BatchServiceJobTrigger`` (an AWS Batch service job)
differ only in the job they follow and how: both hold an AWS connection, a region and a poll interval,
and both wait for ``not_before`` before their one event. The operator sets it a few seconds after it
defers: Airflow 3.3 fails a task resumed before the executor has reported the worker run that deferred it
(apache/airflow#71580, #72716; the allocator's grants wait the same ``settle_time`` for the same reason).
A job that ends within seconds, or one that is re-attached to after it ended, would hit it.

A subclass names the keyword argument its job goes by (``job_key``), which ``serialize`` writes beside the
others: a deferred task's row in the metadata DB holds these kwargs, so they never change (``verify`` and
``botocore_config``, the task's, reach the trigger's AWS client and are written only when given).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, ClassVar, TypedDict

from airflow.triggers.base import BaseTrigger


class AwsJobSettings(TypedDict, total=False):
    """The keyword arguments every monitoring trigger takes beside its job (``AwsJobTrigger``'s)."""

    aws_conn_id: str | None
    region_name: str | None
    verify: bool | str | None
    botocore_config: dict[str, Any] | None
    poll_interval: float
    not_before: str | None


class AwsJobTrigger(BaseTrigger):
    """Follows one AWS job; a subclass stores it under ``job_key``, polls it in ``run`` and awaits
    ``_settle`` before its event."""

    #: The keyword argument (and attribute) that names the job, as ``__init__`` and ``serialize`` spell it.
    job_key: ClassVar[str]
    #: How the task log names the job ("Training job", "Service job").
    job_label: ClassVar[str]

    def __init__(
        self,
        *,
        aws_conn_id: str | None = "aws_default",
        region_name: str | None = None,
        verify: bool | str | None = None,
        botocore_config: dict[str, Any] | None = None,
        poll_interval: float = 30.0,
        not_before: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__ is untyped
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self.poll_interval = poll_interval
        self.not_before = not_before

    @property
    def job(self) -> str:
        return str(getattr(self, self.job_key))

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs: dict[str, Any] = {
            self.job_key: self.job,
            "aws_conn_id": self.aws_conn_id,
            "region_name": self.region_name,
            "poll_interval": self.poll_interval,
            "not_before": self.not_before,
        }
        # Written only when given, so the kwargs of a trigger without them stay as rows in a live metadata
        # DB hold them (a row without them reads as None: the connection's own).
        if self.verify is not None:
            kwargs["verify"] = self.verify
        if self.botocore_config is not None:
            kwargs["botocore_config"] = self.botocore_config
        return f"{type(self).__module__}.{type(self).__qualname__}", kwargs

    async def _settle(self) -> None:
        """Wait until ``not_before`` (ISO 8601), if it is still ahead."""
        if self.not_before is None:
            return
        delay = (datetime.fromisoformat(self.not_before) - datetime.now(UTC)).total_seconds()
        if delay > 0:
            self.log.info("%s %s ended; firing in %.1f s (settle time)", self.job_label, self.job, delay)
            await asyncio.sleep(delay)
