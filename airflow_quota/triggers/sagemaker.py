"""The monitoring trigger: follows one SageMaker training job until it ends, and stops it when killed.

A granted task defers on ``SageMakerTrainingJobTrigger`` while its training job runs. The trigger polls
DescribeTrainingJob and fires one event when the job ends, whatever the end: ``Completed``, ``Failed``,
``Stopped`` (secondary status ``MaxRuntimeExceeded`` when it ran past its limit) or ``Missing``. Which
ends are failures is the operator's decision, not the trigger's (the provider's stock waiter counts
``Stopped`` as a failure on one path and a success on another).

The allocator preempts a task deferred here by resuming it with a ``Preempt`` event itself; the triggerer
then cancels this trigger and calls ``on_kill``, as it does when a user marks the task failed or clears
it. ``on_kill`` asks SageMaker to stop the job in all those cases (the operator waits for ``Stopped``).

An event is never fired sooner than ``not_before`` (``AwsJobTrigger``, ``triggers/aws_job.py``, says why).

The calls go through the amazon provider's sync ``SageMakerHook``, each in a worker thread
(``asyncio.to_thread``), so the triggerer's event loop never blocks and the provider's optional
``aiobotocore`` extra is not needed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Unpack

from airflow.triggers.base import TriggerEvent

from airflow_quota.backends.sagemaker import TERMINAL_STATUSES, SageMakerTrainingJobs
from airflow_quota.triggers.aws_job import AwsJobSettings, AwsJobTrigger

#: Consecutive failed DescribeTrainingJob calls after which the trigger gives up with an ``Error`` event.
MAX_DESCRIBE_ERRORS = 10


class SageMakerTrainingJobTrigger(AwsJobTrigger):
    """Waits for a training job to end; the event's ``status`` is its final ``TrainingJobStatus``.

    Event: ``{"status": "Completed"|"Failed"|"Stopped"|"Missing"|"Error", "training_job_name",
    "training_job_arn", "secondary_status", "failure_reason", "model_artifacts"}``.
    """

    job_key = "training_job_name"
    job_label = "Training job"

    def __init__(self, *, training_job_name: str, **settings: Unpack[AwsJobSettings]) -> None:
        super().__init__(**settings)
        self.training_job_name = training_job_name

    def _jobs(self) -> SageMakerTrainingJobs:
        return SageMakerTrainingJobs(
            self.aws_conn_id, self.region_name, verify=self.verify, botocore_config=self.botocore_config
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        jobs = self._jobs()
        name = self.training_job_name
        last_status: tuple[str, str] | None = None
        errors = 0
        while True:
            try:
                description = await asyncio.to_thread(jobs.describe, name)
                errors = 0
            except Exception as error:  # network or throttling: keep polling, up to a limit
                errors += 1
                self.log.warning("DescribeTrainingJob %s failed (%d in a row): %s", name, errors, error)
                if errors >= MAX_DESCRIBE_ERRORS:
                    await self._settle()
                    yield TriggerEvent(_event(name, None, status="Error", message=str(error)))  # type: ignore[no-untyped-call]
                    return
                await asyncio.sleep(self.poll_interval)
                continue
            if description is None:
                await self._settle()
                yield TriggerEvent(_event(name, None, status="Missing"))  # type: ignore[no-untyped-call]
                return
            status = (str(description["TrainingJobStatus"]), str(description.get("SecondaryStatus", "")))
            if status != last_status:
                self.log.info("Training job %s: %s (%s)", name, *status)
                last_status = status
            if status[0] in TERMINAL_STATUSES:
                await self._settle()
                yield TriggerEvent(_event(name, description, status=status[0]))  # type: ignore[no-untyped-call]
                return
            await asyncio.sleep(self.poll_interval)

    async def on_kill(self) -> None:
        """The task was preempted, marked or cleared: ask SageMaker to stop the job (no wait)."""
        self.log.info("Trigger killed: stopping training job %s", self.training_job_name)
        await asyncio.to_thread(self._jobs().request_stop, self.training_job_name)


def _event(
    name: str, description: dict[str, Any] | None, *, status: str, message: str | None = None
) -> dict[str, Any]:
    description = description or {}
    return {
        "status": status,
        "training_job_name": name,
        "training_job_arn": description.get("TrainingJobArn"),
        "secondary_status": description.get("SecondaryStatus"),
        "failure_reason": description.get("FailureReason") or message,
        "model_artifacts": (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts"),
    }
