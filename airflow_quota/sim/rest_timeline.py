"""A simulated run as the REST API's job queue timeline (``GET /quota/api/jobQueues/{q}/timeline``).

The HTML report draws a run with the GPU Quotas page's own timeline code, which reads that route's JSON
(``airflow_quota.api.schemas.JobQueueTimeline``), so the run is written in the same shape: a bar per unit
of capacity and phase (RUNNING from the grant, STOPPING from a preemption until the units are free again),
each job's waits (from its submission, and from each requeue, to its next grant). Rows are laid out by
``lanes.assign_lanes``. The simulator's clock has no date: second ``t`` of the run is written as
``SIMULATED_DAY`` + ``t`` without a time zone, so a browser shows it as the clock time ``00:00:t``.

Plain dicts, not the pydantic models: the simulator does not import the API (and with it Airflow); the
report's tests validate this output against the models.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from airflow_quota.engine.model import JobStatus
from airflow_quota.sim.holds import Hold, HoldEnd
from airflow_quota.sim.lanes import assign_lanes, lane_count
from airflow_quota.sim.result import ChangeKind, SimulationResult

#: Second 0 of a simulated run, as the timeline writes it (no time zone: the reader's clock shows 00:00:00).
SIMULATED_DAY = datetime(2000, 1, 1)
#: A simulated run has no Airflow DAG run; its jobs are named as task instances of this run id.
SIMULATED_RUN_ID = "simulation"


def simulated_time(seconds: float) -> str:
    """Second ``seconds`` of the run as the timeline's ISO time (millisecond precision, no time zone)."""
    return (SIMULATED_DAY + timedelta(seconds=seconds)).isoformat(timespec="milliseconds")


def job_queue_timeline(result: SimulationResult, *, until: float | None = None) -> dict[str, Any]:
    """The run as a ``JobQueueTimeline``: the window is the whole run, from 0 to ``until`` (default: its
    end; a later ``until`` lines up runs of different lengths)."""
    end = result.end
    bars = assign_lanes(result.holds, result.queue.capacity, end)
    by_unit: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for bar in bars:
        by_unit[bar.hold.unit] += _phases(bar.hold, bar.lane, bar.borrowed)
    units = [
        {
            "capacityUnit": unit,
            "capacity": int(result.queue.capacity.get(unit, 0)),
            "rows": rows,
            "devices": False,  # the simulator lays its rows out: it picks no device indices
            "bars": by_unit.get(unit, []),
        }
        for unit, rows in lane_count(bars, result.queue.capacity).items()
    ]
    return {
        "jobQueueName": result.queue.name,
        "since": simulated_time(0),
        "until": simulated_time(max(end, until or end)),
        "firstSubmittedAt": (
            simulated_time(min(job.submitted_at for job in result.jobs.values())) if result.jobs else None
        ),
        "quotaShareNames": list(result.queue.share_names()),
        "units": units,
        "jobs": _jobs(result),
        "truncated": False,
    }


def _phases(hold: Hold, row: int, borrowed: bool) -> list[dict[str, Any]]:
    """The bars of one hold on one row: RUNNING, then STOPPING when it was told to stop."""
    common = {
        "jobId": hold.job_name,
        "quotaShareName": hold.share,
        "schedulingPriority": hold.priority,
        "capacityUnit": hold.unit,
        "row": row,
        "device": None,
        "borrowed": borrowed,
        "attempt": hold.attempt,
    }
    released = None if hold.released_at is None else simulated_time(hold.released_at)
    ended_by = None if hold.end is HoldEnd.HELD_AT_END else str(hold.end)
    granted_reason = f"Granted {hold.count} {hold.unit}" + (
        f", {hold.borrowed} of them borrowed" if hold.borrowed else ""
    )
    if hold.stop_started_at is None:
        running_end, running_ended_by = released, ended_by
    else:
        running_end = simulated_time(hold.stop_started_at)
        running_ended_by = "PREEMPTED" if hold.preempted_by else "TERMINATED"
    phases = [
        {
            **common,
            "phase": "RUNNING",
            "startedAt": simulated_time(hold.granted_at),
            "endedAt": running_end,
            "endedBy": running_ended_by,
            "preemptedBy": None,
            "rule": None,
            "reason": granted_reason,
        }
    ]
    if hold.stop_started_at is not None:
        why = f"Preempted by {hold.preempted_by} ({hold.rule})" if hold.preempted_by else "Terminated"
        phases.append(
            {
                **common,
                "phase": "STOPPING",
                "startedAt": running_end,
                "endedAt": released,
                "endedBy": ended_by,
                "preemptedBy": hold.preempted_by,
                "rule": hold.rule,
                "reason": f"{why}; it holds its units until it has stopped",
            }
        )
    return phases


def _jobs(result: SimulationResult) -> list[dict[str, Any]]:
    """Every job, by submission, with its waits: from its submission to its first grant, and from each
    requeue to its next grant (or on at the end of the run)."""
    holds: dict[str, list[Hold]] = defaultdict(list)
    for hold in result.holds:
        holds[hold.job_name].append(hold)
    reasons = _wait_reasons(result)
    jobs = []
    for outcome in sorted(result.jobs.values(), key=lambda job: (job.submitted_at, job.name)):
        waits: list[tuple[float, float | None]] = []
        waiting_since: float | None = outcome.submitted_at
        for hold in holds.get(outcome.name, []):
            if waiting_since is not None:
                waits.append((waiting_since, hold.granted_at))
            waiting_since = hold.released_at if hold.end is HoldEnd.REQUEUED else None
        if waiting_since is not None and outcome.status in (JobStatus.SUBMITTED, JobStatus.RUNNABLE):
            waits.append((waiting_since, None))
        jobs.append(
            {
                "jobId": outcome.name,
                "jobName": outcome.name,
                "quotaShareName": outcome.quota_share_name,
                "schedulingPriority": outcome.scheduling_priority,
                "capacityUnit": outcome.capacity_unit,
                "instanceCount": outcome.instance_count,
                "status": outcome.status.name,
                "statusReason": outcome.status_reason,
                "taskInstance": {
                    "dagId": result.queue.name,
                    "runId": SIMULATED_RUN_ID,
                    "taskId": outcome.name,
                    "mapIndex": -1,
                    "tryNumber": 1,
                    "path": "",
                },
                "waits": [
                    {
                        "startedAt": simulated_time(start),
                        "endedAt": None if stop is None else simulated_time(stop),
                        "reason": outcome.status_reason
                        if stop is None
                        else reasons.get((outcome.name, start), "Waited for capacity"),
                    }
                    for start, stop in waits
                    if stop is None or stop > start
                ],
            }
        )
    return jobs


def _wait_reasons(result: SimulationResult) -> dict[tuple[str, float], str]:
    """Per (job, start of a wait) the engine's last reason for it (scenario mode records them; trace mode
    keeps no steps, and its ended waits say only that they waited)."""
    reasons: dict[tuple[str, float], str] = {}
    since: dict[str, float] = {}
    for step in result.steps:
        for change in step.changes:
            if change.kind in (ChangeKind.SUBMITTED, ChangeKind.REQUEUED):
                since[change.subject] = step.at
            elif change.kind is ChangeKind.WAITING and change.subject in since:
                reasons[(change.subject, since[change.subject])] = change.reason
    return reasons
