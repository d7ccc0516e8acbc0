"""Orphans: training jobs that may still run after their task try ended, and when their capacity is free.

A try that ended while its training job runs either keeps the capacity for its coming retry
(``held_for_retry``), or holds it until the training job is known gone (``orphan_stopped``): a local
process group by ``local_devices_free_at`` (or as soon as an allocator on its host sees it and its task
process gone: ``local_training_gone``), a SageMaker job once the host found it no longer running, or
after ``orphan_timeout``.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from airflow_quota.allocator.queue_part import QueuePart
from airflow_quota.allocator.reconcile import TaskView
from airflow_quota.allocator.stops import StopRequest
from airflow_quota.backends.local_evidence import training_certainly_gone
from airflow_quota.ledger.models import JobRow
from airflow_quota.protocol import TrainingJobRecord

log = logging.getLogger(__name__)

#: Task-instance states of a later try that is on its way (its retry may re-attach to the training job).
_RETRY_ON_ITS_WAY = frozenset({"scheduled", "queued", "running", "deferred"})
#: Seconds past a local job's grace period, counted from the cycle that first saw its task try over,
#: before its orphaned process group is taken as gone. Its watchdog starts the stop (SIGTERM, SIGKILL
#: after the grace period) when the task process dies, which can come after that cycle: a task runner
#: that still lives learns at its next heartbeat (``[workers] min_heartbeat_interval``, 5 s) that its try
#: ended, then SIGTERMs its task process and SIGKILLs it 5 s later. The rest covers the watchdog's poll and
#: the SIGKILLed processes' exit.
LOCAL_KILL_MARGIN_SECONDS = 30.0


def local_devices_free_at(seen_over: datetime, grace_period: float) -> datetime:
    """When the devices of a local job whose try was first seen over at ``seen_over``, with a training
    that may still run, are free: ``grace_period`` + ``LOCAL_KILL_MARGIN_SECONDS`` later.

    Its process group is stopped by its watchdog once the task process is dead (SIGTERM, SIGKILL after
    the grace period). That process is dead when its try is seen over, or dies seconds later (a live task
    runner kills it once told its try ended); never counted from a preemption decision.
    """
    return seen_over + timedelta(seconds=grace_period + LOCAL_KILL_MARGIN_SECONDS)


def local_training_gone(record: TrainingJobRecord | None) -> bool:
    """Whether a local training and the task process that started it are certainly gone, as this host
    sees them (``backends.local_evidence``): only an allocator on the task's own host (same boot, same
    PID namespace) can tell, from the evidence the task recorded once the training started."""
    return (
        record is not None
        and record.get("backend") == "local"
        and training_certainly_gone(record.get("process"))
    )


def held_for_retry(part: QueuePart, row: JobRow, view: TaskView | None) -> bool:
    """A try that ended with its training job running keeps its capacity while a retry is coming.

    The retry re-attaches to the training job instead of launching a second one (its request
    then takes the capacity over, ``record_handover``); the job is not stopped meanwhile. A job
    already told to stop keeps nothing for a retry: its training job is being stopped (an orphan
    whose retry asked for other capacity, ``admission._submit_retry``, or a victim), and is released once
    stopped.
    """
    if view is None or row.stop_signalled_at is not None or part.launched(row) is None:
        return False
    retry_coming = view.try_number > row.try_number and view.state in _RETRY_ON_ITS_WAY
    return view.state == "up_for_retry" or retry_coming


def orphan_stopped(part: QueuePart, row: JobRow, reason: str) -> bool:
    """Whether the ended job's capacity is free: no training job of its lease can still run.

    An orphaned SageMaker training job not known to be stopped yet is listed in ``stop_requests``
    (every cycle until it is); the host asks it to stop once this cycle has committed.
    """
    record = part.launched(row)
    if record is None:  # none launched, or its task recorded it ended: nothing runs on the capacity
        return True
    if row.task_ended_seen_at is None:  # a local group's stop counts from now (``_orphan_gone``)
        row.task_ended_seen_at = part.now
    if row.stop_signalled_at is None:  # not a victim: the orphan_timeout counts from now
        row.stop_signalled_at = part.now
        row.status_reason = (
            f"Stopping: {reason}; its training job {record.get('name')} may still run and is being "
            "stopped before its capacity is released"
        )
    if _orphan_gone(part, record, row.task_ended_seen_at, row.stop_signalled_at):
        return True
    if record.get("backend") == "local":  # its bound is known: no orphan_timeout
        part.report.orphans.append(row.job_id)
        return False
    part.list_stop(StopRequest(row.job_id, record, victim=False))  # asked after the commit
    if part.now - row.stop_signalled_at < part.settings.orphan_timeout:
        part.report.orphans.append(row.job_id)
        return False
    log.warning(
        "Training job %s of job %s not confirmed stopped after %s; releasing its capacity",
        record.get("name"),
        row.job_id,
        part.settings.orphan_timeout,
    )
    return True


def _orphan_gone(
    part: QueuePart, record: TrainingJobRecord, seen_over: datetime, told_to_stop: datetime
) -> bool:
    """Whether the training job of a job whose try was first seen over at ``seen_over`` (and told to
    stop at ``told_to_stop``: its preemption decision, or the same moment) is known to no longer run.

    A local process group is gone by ``local_devices_free_at``, or sooner when this host sees it gone
    with its task process (``local_training_gone``). A SageMaker job is gone once the
    host, asking it to stop after a cycle since ``told_to_stop``, found it no longer running.
    """
    if record.get("backend") == "local":
        free_at = local_devices_free_at(seen_over, float(record.get("grace_period", 120.0)))
        return part.now >= free_at or local_training_gone(record)
    stopped = part.settings.stopped_training_jobs
    return stopped is not None and stopped.confirmed_since(record.get("name", ""), told_to_stop)
