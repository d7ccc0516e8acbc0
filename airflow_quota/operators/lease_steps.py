"""QuotaTrainingOperator under a lease: launch on a grant, watch the job, stop and requeue on a preemption.

``on_grant`` (the allocator resumed the task with a ``Grant``) launches ``<base>-a<attempt>`` (or
re-attaches to the training job the task's record says still runs), follows it from the worker for
``follow_seconds``, then defers on the backend's monitoring trigger; a local job is watched by the worker
itself instead. ``on_monitor`` ends the task when the job ends or, on a ``Preempt`` of its lease, stops the
job, waits until it has stopped and waits for quota again (``AdmissionSteps``: the next attempt, the same
first submission, no Airflow retry used). The task's ``task_state_store`` keeps the training job record
(``operators/task_store.py``) that makes every step safe to run again after a crash.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, cast

from airflow.sdk.exceptions import AirflowException

from airflow_quota.backends.sagemaker import CapacityRefused, quota_tags
from airflow_quota.operators import local_backend
from airflow_quota.operators.admission_steps import AdmissionSteps
from airflow_quota.operators.backend import (
    MAX_ENDED_AS_LENGTH,
    JobState,
    PreparedRequest,
    RecordState,
    TrainingBackend,
    task_identity,
)
from airflow_quota.operators.links import TRAINING_JOB_XCOM_KEY, SageMakerTrainingJobLink
from airflow_quota.operators.local_backend import LocalBackend
from airflow_quota.operators.task_store import (
    CAPACITY_RETRY_KEY,
    keep_training_job_record,
    preempt_signal,
    read_document,
    training_job_record_in,
)
from airflow_quota.protocol import PREEMPT_KEY, TrainingJobRecord

if TYPE_CHECKING:
    from airflow.sdk import Context

#: AWS Batch's statusReason for a job that waits for instance capacity (its own words, kept).
INSUFFICIENT_CAPACITY_REASON = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
#: The longest part of AWS's message a capacity requeue's statusReason quotes.
MAX_DETAIL_LENGTH = 200


def capacity_backoff(count: int, delay: float, max_delay: float) -> float:
    """Seconds to wait after the ``count``-th capacity error of a try: ``delay`` doubled each time,
    at most ``max_delay``."""
    return float(min(delay * 2 ** min(count - 1, 62), max_delay))


def _utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class LeaseSteps(AdmissionSteps):
    """The steps of a job the quota allocator schedules, from its grant to its end or its preemption."""

    def _run_granted(
        self,
        context: Context,
        event: Mapping[str, Any],
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
    ) -> Any:
        """Granted: launch or re-attach, then watch the training job."""
        prepared = self._prepare(context)
        ti_id = str(context["ti"].id)
        if event.get("ti_id") != ti_id:
            self.log.warning(
                "Ignoring lease %s of task instance %s (this one is %s): waiting for quota again",
                event.get("lease_id"),
                event.get("ti_id"),
                ti_id,
            )
            self._wait_for_quota(
                context, prepared, submitted_at=submitted_at, admission=admission, preemptions=preemptions
            )
        lease_id = str(event["lease_id"])
        attempt = int(event["attempt"])
        if (event.get("capacityUnit"), event.get("instanceCount")) != (
            prepared.capacity_unit,
            prepared.instance_count,
        ):
            raise AirflowException(
                f"Lease {lease_id} grants {event.get('capacityUnit')} x {event.get('instanceCount')} but the "
                f"request now asks {prepared.capacity_unit} x {prepared.instance_count}"
            )
        self.log.info("Granted lease %s (attempt %d, %s borrowed)", lease_id, attempt, event.get("borrowed"))
        backend = self._backend()
        store = context["task_state_store"]
        monitor_kwargs: dict[str, Any] = {
            "submitted_at": submitted_at,
            "admission": admission,
            "preemptions": preemptions,
            "lease_id": lease_id,
        }

        signal = preempt_signal(store, lease_id)
        if signal is not None:  # preempted before this run launched anything for the lease
            record = training_job_record_in(store) or {}
            launched = record.get("state") == "launched" and record.get("lease_id") == lease_id
            name = str(record["name"]) if launched else None
            return self._stop_and_requeue(context, backend, prepared, name, signal, **monitor_kwargs)

        job = self._reattachable_job(context, backend, lease_id)
        if job is None:
            name = backend.job_name(task_identity(context), attempt)
            self._write_record(context, backend, name, attempt, lease_id, "launched")
            self._current_job = name
            tags = quota_tags(
                task_identity(context),
                job_queue=self.job_queue,
                quota_share_name=self.quota_share_name,
                attempt=attempt,
                lease_id=lease_id,
            )
            try:
                job = backend.launch(prepared, name, task_identity(context), tags, event)
            except CapacityRefused as refusal:
                ended_as = f"CreateTrainingJob: {refusal}"[:MAX_ENDED_AS_LENGTH]
                self._write_record(context, backend, name, attempt, lease_id, "ended", ended_as)
                return self._requeue_for_capacity(
                    context,
                    prepared,
                    f"CreateTrainingJob answered {refusal.code}",
                    refusal.message,
                    insufficient=refusal.code == "InsufficientCapacityError",
                    **monitor_kwargs,
                )
            # The record names its ARN too (the API's serviceResourceId of the attempt) and its checkpoint
            # prefix (listed by the allocator), or the local training's process group and this task
            # process (``backends.local_evidence``).
            if job.arn or isinstance(backend, LocalBackend):
                self._write_record(
                    context,
                    backend,
                    name,
                    attempt,
                    lease_id,
                    "launched",
                    arn=job.arn,
                    checkpoint_uri=job.checkpoint_uri,
                )
        link = SageMakerTrainingJobLink.xcom_value(backend.console_link(job.name))
        context["ti"].xcom_push(key=TRAINING_JOB_XCOM_KEY, value=link)

        if isinstance(backend, LocalBackend):  # the worker watches its own process: no monitoring trigger
            return self._watch_local_job(context, backend, prepared, job.name, **monitor_kwargs)

        job, signal = self._follow_launched_job(store, backend, job, lease_id)
        if signal is not None:  # arrived while this worker ran: nobody resumes the monitor for it
            return self._stop_and_requeue(context, backend, prepared, job.name, signal, **monitor_kwargs)
        if not job.running:  # it ended within the settle time: no monitoring trigger needed
            if job.capacity_failure:
                return self._requeue_failed_for_capacity(context, backend, prepared, job, **monitor_kwargs)
            return self._finish(context, backend, job, lease_id, preemptions)
        self.defer(
            trigger=backend.monitor(job.name),
            method_name="on_monitor",
            kwargs={**monitor_kwargs, "training_job_name": job.name},
            timeout=None,
        )

    def on_monitor(
        self,
        context: Context,
        event: Mapping[str, Any] | None = None,
        *,
        submitted_at: str,
        lease_id: str,
        training_job_name: str,
        admission: int = 0,
        preemptions: int = 0,
    ) -> Any:
        """The training job ended, or the allocator preempts it."""
        event = event or {}
        backend = self._backend()
        store = context["task_state_store"]
        self._current_job = training_job_name
        monitor_kwargs: dict[str, Any] = {
            "submitted_at": submitted_at,
            "admission": admission,
            "preemptions": preemptions,
            "lease_id": lease_id,
        }
        if event.get("preempt"):
            if event.get("lease_id") != lease_id:
                self.log.warning(
                    "Ignoring a preemption of lease %s (this task holds %s)", event.get("lease_id"), lease_id
                )
                self.defer(
                    trigger=backend.monitor(training_job_name),
                    method_name="on_monitor",
                    kwargs={**monitor_kwargs, "training_job_name": training_job_name},
                    timeout=None,
                )
            prepared = self._prepare(context)
            return self._stop_and_requeue(
                context, backend, prepared, training_job_name, event, **monitor_kwargs
            )

        job = JobState.from_event(event)
        if job.status == "Stopped" and (signal := preempt_signal(store, lease_id)) is not None:
            # Preempted through the store while the trigger saw the stop first.
            prepared = self._prepare(context)
            return self._stop_and_requeue(
                context, backend, prepared, training_job_name, signal, **monitor_kwargs
            )
        if job.capacity_failure:
            prepared = self._prepare(context)
            return self._requeue_failed_for_capacity(context, backend, prepared, job, **monitor_kwargs)
        return self._finish(context, backend, job, lease_id, preemptions)

    def _follow_launched_job(
        self, store: Any, backend: TrainingBackend, job: JobState, lease_id: str
    ) -> tuple[JobState, dict[str, Any] | None]:
        """Follow a just-launched job from this worker run for ``follow_seconds``; stop early when it
        ends or a ``Preempt`` of this lease arrives. Returns the job's last state and the signal, if any.

        A deferral's monitoring trigger may not fire within ``settle_seconds`` (the #71580 guard), so a
        short job ends sooner here than through the trigger, with no extra worker run. Not botocore's
        training-job waiter: between two polls this loop must read the task's store for a preemption,
        and a waiter cannot be interrupted before its own end.
        """
        deadline = time.monotonic() + self.follow_seconds
        while True:
            signal = preempt_signal(store, lease_id)
            remaining = deadline - time.monotonic()
            if signal is not None or not job.running or remaining <= 0:
                return job, signal
            time.sleep(min(self.poll_interval, 1.0, remaining))
            job = backend.state(job.name)

    def _watch_local_job(
        self,
        context: Context,
        backend: LocalBackend,
        prepared: PreparedRequest,
        name: str,
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> Any:
        """Run the local job to its end, polling the store for a ``Preempt`` of this lease every second."""
        store = context["task_state_store"]
        signals: list[dict[str, Any]] = []
        checkpoints = _CheckpointReports(store, backend, lease_id)

        def preempt_requested() -> bool:
            checkpoints.poll()
            signal = preempt_signal(store, lease_id)
            if signal is not None:
                signals.append(signal)
            return signal is not None

        job = backend.watch(name, preempt_requested)
        self.log.info("Local training job %s ended: %s", name, job.status)
        if signals:
            return self._stop_and_requeue(
                context,
                backend,
                prepared,
                name,
                signals[0],
                submitted_at=submitted_at,
                admission=admission,
                preemptions=preemptions,
                lease_id=lease_id,
            )
        return self._finish(context, backend, job, lease_id, preemptions)

    def _reattachable_job(self, context: Context, backend: TrainingBackend, lease_id: str) -> JobState | None:
        """The training job an earlier run left running (or completed), now under this lease; else None."""
        record = training_job_record_in(context["task_state_store"])
        if not record or record.get("state") != "launched" or record.get("backend") != backend.kind:
            return None
        name = str(record["name"])
        job = backend.state(name)
        if job.status == "Stopping":
            job = backend.stop_and_wait(name)
        if job.status in ("InProgress", "Completed"):
            self.log.info(
                "Re-attaching to training job %s (%s), launched for lease %s",
                name,
                job.status,
                record.get("lease_id"),
            )
            attempt = int(record.get("attempt", 0))
            self._write_record(
                context,
                backend,
                name,
                attempt,
                lease_id,
                "launched",
                arn=job.arn,
                checkpoint_uri=job.checkpoint_uri,
            )
            self._current_job = name
            return job
        self.log.info("Training job %s of an earlier run is %s: launching a new one", name, job.status)
        self._write_record(
            context, backend, name, int(record.get("attempt", 0)), str(record.get("lease_id")), "ended"
        )
        return None

    def _write_record(
        self,
        context: Context,
        backend: TrainingBackend,
        name: str,
        attempt: int,
        lease_id: str,
        state: RecordState,
        ended_as: str | None = None,
        arn: str | None = None,
        checkpoint_uri: str | None = None,
    ) -> None:
        record = backend.record(name, attempt, lease_id, state)
        if ended_as is not None:
            record["ended_as"] = ended_as
        if arn:
            record["arn"] = arn
        if checkpoint_uri:
            record["checkpoint_uri"] = checkpoint_uri
        keep_training_job_record(context["task_state_store"], record)

    def _stop_and_requeue(
        self,
        context: Context,
        backend: TrainingBackend,
        prepared: PreparedRequest,
        name: str | None,
        signal: Mapping[str, Any],
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> dict[str, Any]:
        """Preempted: stop the training job, wait until it has stopped, and wait for quota again.

        Returns only when the job completed before it could be stopped (the task's result then).
        """
        self.log.warning(
            "Preempted (lease %s) by %s, rule %s: %s",
            lease_id,
            signal.get("preempted_by"),
            signal.get("rule"),
            signal.get("reason"),
        )
        if name is not None:
            self._current_job = name
            job = backend.stop_and_wait(name)
            self.log.info("Training job %s is %s (%s)", name, job.status, job.secondary_status)
            if job.status == "Completed":  # it finished before the stop reached it: the work is done
                context["task_state_store"].delete(PREEMPT_KEY)
                return self._finish(context, backend, job, lease_id, preemptions)
            record = training_job_record_in(context["task_state_store"]) or {}
            attempt = int(record.get("attempt", 0))
            self._write_record(context, backend, name, attempt, lease_id, "ended", arn=job.arn)
        context["task_state_store"].delete(PREEMPT_KEY)
        context["task_state_store"].delete(CAPACITY_RETRY_KEY)  # it had its capacity: backoff starts again
        self._current_job = None
        self.log.info("Capacity of lease %s released: waiting for quota again", lease_id)
        self._wait_for_quota(
            context,
            prepared,
            submitted_at=submitted_at,
            admission=admission + 1,
            preemptions=preemptions + 1,
            released_lease_id=lease_id,
        )

    def _requeue_failed_for_capacity(
        self,
        context: Context,
        backend: TrainingBackend,
        prepared: PreparedRequest,
        job: JobState,
        *,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> NoReturn:
        """The training job failed for want of instance capacity (``CapacityError``): it holds nothing
        now; record it ended and requeue as after a refused launch."""
        record = training_job_record_in(context["task_state_store"]) or {}
        attempt = int(record.get("attempt", 0))
        self._write_record(context, backend, job.name, attempt, lease_id, "ended", job.ended_as, job.arn)
        self._current_job = None
        self._requeue_for_capacity(
            context,
            prepared,
            f"Training job {job.name} failed with CapacityError",
            job.failure_reason or "",
            insufficient=True,
            submitted_at=submitted_at,
            admission=admission,
            preemptions=preemptions,
            lease_id=lease_id,
        )

    def _requeue_for_capacity(
        self,
        context: Context,
        prepared: PreparedRequest,
        answered: str,
        message: str,
        *,
        insufficient: bool,
        submitted_at: str,
        admission: int,
        preemptions: int,
        lease_id: str,
    ) -> NoReturn:
        """AWS had no capacity for the job now: give the lease back and wait for quota again, at the job's
        original place (the same ``submitted_at``), not granted before the backoff ends.

        No Airflow retry and no preempted attempt is used: the deferral names the lease as released
        and says why (``requeue_reason``, which the allocator keeps as the job's statusReason) and when
        it may run again (``not_before``). The backoff doubles with each capacity error of the try, from
        ``capacity_retry_delay`` up to ``capacity_retry_max_delay``; a preemption starts it again.
        """
        store = context["task_state_store"]
        try_number = int(context["ti"].try_number)
        kept = read_document(store.get(CAPACITY_RETRY_KEY)) or {}
        count = int(kept.get("count", 0)) + 1 if kept.get("try_number") == try_number else 1
        store.set(CAPACITY_RETRY_KEY, {"try_number": try_number, "count": count})
        delay = capacity_backoff(count, self.capacity_retry_delay, self.capacity_retry_max_delay)
        now = datetime.now(UTC)
        not_before = now + timedelta(seconds=delay)
        detail = message.strip().splitlines()[0][:MAX_DETAIL_LENGTH] if message.strip() else "no details"
        reason = (
            f"{INSUFFICIENT_CAPACITY_REASON + ' - ' if insufficient else ''}{answered} at {_utc(now)} "
            f"({detail}); requeued at its original position, trying again after {_utc(not_before)} "
            f"(capacity error {count} of this try, backoff {delay:g} s, at most "
            f"{self.capacity_retry_max_delay:g} s)"
        )
        self.log.warning("%s", reason)
        if preempt_signal(store, lease_id) is not None:  # preempted meanwhile: this deferral reports that too
            store.delete(PREEMPT_KEY)
            preemptions += 1
        self._current_job = None
        self._wait_for_quota(
            context,
            prepared,
            submitted_at=submitted_at,
            admission=admission + 1,
            preemptions=preemptions,
            released_lease_id=lease_id,
            not_before=not_before.isoformat(),
            requeue_reason=reason,
        )

    def _finish(
        self, context: Context, backend: TrainingBackend, job: JobState, lease_id: str, preemptions: int
    ) -> dict[str, Any]:
        store = context["task_state_store"]
        record = training_job_record_in(store) or {}
        attempts = int(record.get("attempt", 0))
        self._write_record(context, backend, job.name, attempts, lease_id, "ended", job.ended_as, job.arn)
        if preempt_signal(store, lease_id) is not None:  # the job ended before the preemption reached it
            store.delete(PREEMPT_KEY)
        self._current_job = None
        if job.status == "Completed":
            self.log.info("Training job %s completed: %s", job.name, job.model_artifacts)
            return {
                "training_job_name": job.name,
                **backend.outputs(job),
                "attempts": attempts,
                "preemptions": preemptions,
            }
        if job.status == "Stopped" and job.secondary_status == "MaxRuntimeExceeded":
            raise AirflowException(
                f"Training job {job.name} ran past its runtime limit (StoppingCondition.MaxRuntimeInSeconds)"
            )
        if job.status == "Stopped" and job.secondary_status == "MaxWaitTimeExceeded":
            raise AirflowException(
                f"Training job {job.name} waited for spot capacity past "
                "StoppingCondition.MaxWaitTimeInSeconds"
            )
        if job.status == "Stopped":
            raise AirflowException(f"Training job {job.name} was stopped outside the quota allocator")
        if job.status == "Failed":
            raise AirflowException(f"Training job {job.name} failed: {job.failure_reason}")
        raise AirflowException(
            f"Training job {job.name} is {job.status}: {job.failure_reason or 'no details'}"
        )


class _CheckpointReports:
    """While a local job runs: every ``CHECKPOINT_POLL_SECONDS``, its newest checkpoint, recorded in the
    task's ``TrainingJobRecord`` (``last_checkpoint``) when it is newer than the one recorded, for the
    allocator to copy to the ledger (a preemption's lost work counts from it)."""

    def __init__(self, store: Any, backend: LocalBackend, lease_id: str) -> None:
        self.store, self.backend, self.lease_id = store, backend, lease_id
        self.reported: float | None = None
        self.next_poll = 0.0

    def poll(self) -> None:
        now = time.monotonic()
        if now < self.next_poll:
            return
        self.next_poll = now + local_backend.CHECKPOINT_POLL_SECONDS
        newest = self.backend.newest_checkpoint()
        if newest is None or (self.reported is not None and newest <= self.reported):
            return
        record = training_job_record_in(self.store)
        if not record or record.get("lease_id") != self.lease_id or record.get("state") != "launched":
            return
        record["last_checkpoint"] = datetime.fromtimestamp(newest, UTC).isoformat()
        keep_training_job_record(self.store, cast("TrainingJobRecord", record))
        self.reported = newest
