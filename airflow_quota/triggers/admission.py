"""The admission trigger: the deferred task's job request, waiting in the trigger table for a grant.

A job that waits for quota is a task deferred on ``QuotaAdmissionTrigger``. The trigger's kwargs are the
job request (AWS Batch's field values), so the allocator finds every waiting request with one query over
``task_instance`` joined to ``trigger``; the grant resumes the task from the scheduler side.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent


class QuotaAdmissionTrigger(BaseTrigger):
    """A passive trigger holding one job request until the allocator grants it.

    It is passive on purpose: ``run()`` never yields. Trigger code cannot read the metadata DB in
    Airflow 3 (the triggerer's child process blocks the ORM), and the decision needs the whole ledger
    under one lock, so the allocator decides in the scheduler and resumes the task itself with
    ``handle_event_submit`` (the path a fired trigger event takes). A trigger that fired on its own
    would race that write: ``Trigger.submit_event`` takes no lock, and the last writer wins.

    ``submitted_at`` is the job's first submission (ISO 8601, UTC), kept across re-deferrals so a
    requeued job keeps its place; ``attempt`` counts this try's admissions (0 for the first wait).
    ``released_lease_id`` is set on the wait that follows a preemption: the lease the task held, whose
    training job has now really stopped (this deferral is the task's stop report).

    After a capacity error (AWS answered CreateTrainingJob with InsufficientCapacityError,
    ResourceLimitExceeded or throttling, or the training job failed with ``CapacityError``) the task gives
    its lease back the same way, and says so: ``requeue_reason`` (the statusReason the job waits with:
    what AWS answered and when it tries again) and ``not_before`` (ISO 8601, UTC), before which the
    allocator neither grants the request nor lets it preempt.
    """

    def __init__(
        self,
        *,
        job_queue: str,
        job_name: str,
        quota_share_name: str,
        capacity_unit: str,
        instance_count: int,
        scheduling_priority: int = 0,
        preemption_retries_before_termination: int | None = None,
        submitted_at: str | None = None,
        attempt: int = 0,
        released_lease_id: str | None = None,
        not_before: str | None = None,
        requeue_reason: str | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # BaseTrigger.__init__ is untyped
        self.job_queue = job_queue
        self.job_name = job_name
        self.quota_share_name = quota_share_name
        self.capacity_unit = capacity_unit
        self.instance_count = instance_count
        self.scheduling_priority = scheduling_priority
        self.preemption_retries_before_termination = preemption_retries_before_termination
        self.submitted_at = submitted_at
        self.attempt = attempt
        self.released_lease_id = released_lease_id
        self.not_before = not_before
        self.requeue_reason = requeue_reason

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_queue": self.job_queue,
                "job_name": self.job_name,
                "quota_share_name": self.quota_share_name,
                "capacity_unit": self.capacity_unit,
                "instance_count": self.instance_count,
                "scheduling_priority": self.scheduling_priority,
                "preemption_retries_before_termination": self.preemption_retries_before_termination,
                "submitted_at": self.submitted_at,
                "attempt": self.attempt,
                "released_lease_id": self.released_lease_id,
                # Only after a capacity error: the kwargs of every other wait stay as they were.
                **({"not_before": self.not_before} if self.not_before else {}),
                **({"requeue_reason": self.requeue_reason} if self.requeue_reason else {}),
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Wait forever: only the allocator ends the wait (or a timeout, a clear, a kill)."""
        await asyncio.Event().wait()
        yield TriggerEvent(None)  # type: ignore[no-untyped-call]  # pragma: no cover - never reached


#: The ``trigger.classpath`` of admission requests, as ``serialize()`` writes it.
ADMISSION_CLASSPATH = f"{QuotaAdmissionTrigger.__module__}.{QuotaAdmissionTrigger.__qualname__}"


def request_document(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The job request in AWS's field names (what ``validate_job_request`` reads) from trigger kwargs."""
    document = {
        "jobName": kwargs.get("job_name"),
        "quotaShareName": kwargs.get("quota_share_name"),
        "capacityUnit": kwargs.get("capacity_unit"),
        "instanceCount": kwargs.get("instance_count"),
        "schedulingPriority": kwargs.get("scheduling_priority", 0),
        "preemptionRetriesBeforeTermination": kwargs.get("preemption_retries_before_termination"),
    }
    return {key: value for key, value in document.items() if value is not None}
