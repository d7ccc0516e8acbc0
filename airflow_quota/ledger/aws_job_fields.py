"""A ledger job's fields that AWS Batch's DescribeServiceJob names: ``scheduledAt``, ``startedAt``,
``stoppedAt``, ``capacityUsage`` and ``preemptionSummary``, built once for every JSON that shows a job (the
CLI's ``airflow quota jobs list|describe -o json``; the REST API's ``Job`` has the same fields, names and
meanings).

``startedAt`` is ``scheduledAt``: the ledger keeps when an attempt was granted (it became SCHEDULED), not
when it began RUNNING (``record_status_change`` writes no audit row and the row keeps no second time).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.views import AttemptTimes, PreemptionNote, attempt_times, latest_preemptions

#: A preempted attempt's fields, each present (null when unknown), in the REST ``PreemptedAttempt``'s
#: order: AWS Batch's (``serviceResourceId``: the attempt's training job ARN, ``startedAt``, ``stoppedAt``,
#: ``statusReason``) and ours (``attempt``, ``preemptedBy``, ``rule``, ``lostUnitSeconds``: the GPU-seconds
#: the preemption lost, since the attempt's last checkpoint or its start, as its PREEMPTED audit row says).
PREEMPTED_ATTEMPT_FIELDS = (
    "serviceResourceId",
    "attempt",
    "startedAt",
    "stoppedAt",
    "preemptedBy",
    "rule",
    "statusReason",
    "lostUnitSeconds",
)


def aws_job_fields(
    row: JobRow, times: AttemptTimes, preemption: PreemptionNote | None, *, iso_times: bool = False
) -> dict[str, Any]:
    """The job's AWS Batch fields: its attempt's times (``attempt_times``), what it holds now, and its
    preemption summary (with ``preemption``, the latest decision that preempted it, from the audit log).

    Times are datetimes, or ISO-8601 text in UTC with ``iso_times`` (for ``json.dumps``).
    """

    def at(moment: datetime | None) -> datetime | str | None:
        if moment is None or not iso_times:
            return moment
        return moment.astimezone(UTC).isoformat()

    return {
        "scheduledAt": at(times.started_at),
        "startedAt": at(times.started_at),  # the ledger keeps no separate RUNNING time (module docstring)
        "stoppedAt": at(times.stopped_at),
        "capacityUsage": [{"capacityUnit": row.held_capacity_unit, "quantity": row.held_instance_count}]
        if row.held_capacity_unit and row.held_instance_count
        else [],
        "preemptionSummary": {
            "preemptedAttemptCount": row.preempted_attempt_count,
            "recentPreemptedAttempts": [
                {**dict.fromkeys(PREEMPTED_ATTEMPT_FIELDS), **attempt}
                for attempt in row.recent_preempted_attempts
            ],
            "beingPreemptedBy": row.preempted_by if row.stop_cause == "PREEMPTED" else None,
            "lastPreemptedAt": None if preemption is None else at(preemption.at),
            "lastPreemptedBy": None if preemption is None else preemption.preempted_by,
            "lastPreemptionRule": None if preemption is None else preemption.rule,
        },
    }


def aws_job_fields_of(
    session: Session, rows: Sequence[JobRow], *, iso_times: bool = False
) -> dict[str, dict[str, Any]]:
    """``aws_job_fields`` of each job of ``rows``, by job id, in two queries whatever the number of jobs."""
    times = attempt_times(session, rows)
    preemptions = job_preemptions(session, rows)
    return {
        row.job_id: aws_job_fields(row, times[row.job_id], preemptions.get(row.job_id), iso_times=iso_times)
        for row in rows
    }


def job_preemptions(session: Session, rows: Sequence[JobRow]) -> dict[str, PreemptionNote]:
    """The latest preemption decision of each job of ``rows`` that was ever preempted (or is being now)."""
    return latest_preemptions(
        session, [row.job_id for row in rows if row.preempted_attempt_count or row.preempted_by is not None]
    )
