"""The AWS Batch monitoring trigger: follows one service job until it ends, and terminates it when killed.

On a job queue AWS Batch schedules, a task waits deferred here while AWS Batch admits, runs, preempts and
re-queues its service job. The trigger polls DescribeServiceJob and writes to the task log each status
change (with its statusReason), each new preemption (the preempted attempt's training job ARN, when it
started and stopped, and why) and each new attempt's training job. It fires one event when the job is
SUCCEEDED or FAILED, carrying the same facts for the operator's XCom. When the task is marked failed or
cleared, the triggerer cancels the trigger and calls ``on_kill``, which terminates the service job
(TerminateServiceJob).

An event is never fired sooner than ``not_before`` (``AwsJobTrigger``, ``triggers/aws_job.py``, says why).

Calls go through ``BatchServiceJobHook`` (``hooks/batch_service_job.py``, an ``AwsBaseHook``: the task's
connection, region, ``verify`` and ``botocore_config``) in a worker thread (``asyncio.to_thread``), so the
triggerer's event loop never blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Unpack

from airflow.triggers.base import TriggerEvent

from airflow_quota.aws_batch.service_jobs import FINAL_STATUSES, latest_training_job_arn, preemptions_of
from airflow_quota.hooks.batch_service_job import BatchServiceJobHook
from airflow_quota.triggers.aws_job import AwsJobSettings, AwsJobTrigger

#: Consecutive failed DescribeServiceJob calls after which the trigger gives up with an ``Error`` event.
MAX_DESCRIBE_ERRORS = 10
KILLED_REASON = "Its Airflow task was killed, marked failed or cleared"


class BatchServiceJobTrigger(AwsJobTrigger):
    """Waits for a service job to end.

    Event: ``{"status": "SUCCEEDED"|"FAILED"|"Error", "job_id", "job_arn", "status_reason",
    "training_job_arn" (the latest attempt's), "attempts", "preemptions": [{training_job_arn, started_at,
    stopped_at, status_reason}]}``.
    """

    job_key = "job_id"
    job_label = "Service job"

    def __init__(self, *, job_id: str, **settings: Unpack[AwsJobSettings]) -> None:
        super().__init__(**settings)
        self.job_id = job_id

    def _jobs(self) -> BatchServiceJobHook:
        return BatchServiceJobHook(
            aws_conn_id=self.aws_conn_id,
            region_name=self.region_name,
            verify=self.verify,
            config=self.botocore_config,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        jobs = self._jobs()
        seen = _Seen()
        errors = 0
        while True:
            try:
                description = await asyncio.to_thread(jobs.describe, self.job_id)
                errors = 0
            except Exception as error:  # network or throttling: keep polling, up to a limit
                errors += 1
                self.log.warning("DescribeServiceJob %s failed (%d in a row): %s", self.job_id, errors, error)
                if errors >= MAX_DESCRIBE_ERRORS:
                    await self._settle()
                    yield TriggerEvent(  # type: ignore[no-untyped-call]
                        {"status": "Error", "job_id": self.job_id, "status_reason": str(error)}
                    )
                    return
                await asyncio.sleep(self.poll_interval)
                continue
            for line in seen.news(description):
                self.log.info("Service job %s: %s", self.job_id, line)
            if description["status"] in FINAL_STATUSES:
                await self._settle()
                yield TriggerEvent(service_job_event(description))  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The task was marked failed or cleared: terminate the service job (no wait)."""
        self.log.info("Trigger killed: terminating service job %s", self.job_id)
        await asyncio.to_thread(self._jobs().terminate, self.job_id, KILLED_REASON)


def service_job_event(description: dict[str, Any]) -> dict[str, Any]:
    """What the operator hears of an ended service job (and keeps in XCom)."""
    return {
        "status": description["status"],
        "job_id": description["jobId"],
        "job_arn": description.get("jobArn"),
        "status_reason": description.get("statusReason"),
        "training_job_arn": latest_training_job_arn(description),
        "attempts": len(description.get("attempts") or []),
        "preemptions": preemptions_of(description),
    }


class _Seen:
    """What the log has said so far, so each status, preemption and attempt is written once."""

    def __init__(self) -> None:
        self.status: tuple[str, str] | None = None
        self.preempted = 0
        self.training_job: str | None = None

    def news(self, description: dict[str, Any]) -> list[str]:
        lines = []
        preemptions = preemptions_of(description)
        count = int((description.get("preemptionSummary") or {}).get("preemptedAttemptCount", 0))
        # recentPreemptedAttempts lists only the latest few: the new ones are its last (count - seen).
        for preemption in preemptions[max(0, len(preemptions) - (count - self.preempted)) :]:
            lines.append(
                f"attempt on training job {preemption['training_job_arn']} preempted "
                f"(started {preemption['started_at']}, stopped {preemption['stopped_at']}, ms since the "
                f"epoch): {preemption['status_reason']}"
            )
        self.preempted = count
        training_job = latest_training_job_arn(description)
        if training_job is not None and training_job != self.training_job:
            lines.append(f"attempt {len(description.get('attempts') or [])} runs training job {training_job}")
            self.training_job = training_job
        status = (str(description["status"]), str(description.get("statusReason") or ""))
        if status != self.status:
            lines.append(f"{status[0]}" + (f" ({status[1]})" if status[1] else ""))
            self.status = status
        return lines
