"""``airflow quota jobs list|describe|update-priority|terminate``: the ledger's jobs, and the two changes an
administrator makes to one (both audited, through the store's ``record_*`` helpers).

``list`` shows the newest ``--limit`` jobs (default 100, at most 1,000), read a page at a time like the REST
API's (``ledger.views.job_page``), however long the history.

A RUNNABLE job's position is its place in its share's order: schedulingPriority descending, then
submission order (1 is next). The allocator applies a change to a running task (it is being built).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from rich.markup import escape
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.cli.common import (
    console,
    fail,
    iso,
    metadata_session,
    parse_whole_number,
    print_json,
    wants_json,
)
from airflow_quota.engine.config import JobRequestError, scheduling_priority_from_text
from airflow_quota.engine.model import JobStatus
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import (
    TERMINATION_REASON_LENGTH,
    record_priority_change,
    record_termination,
)
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.ledger.views import DEFAULT_JOBS, MAX_PAGE, job_page, runnable_positions

STATUSES = [status.value for status in JobStatus]
#: How many jobs an error names when a job name is not unique.
_NAMED = 5


def jobs_list(args: argparse.Namespace) -> None:
    status = args.status.upper() if args.status else None
    if status is not None and status not in STATUSES:
        fail(f"--status {args.status} is not a job status (one of {', '.join(STATUSES)})")
    limit = DEFAULT_JOBS if args.limit is None else parse_whole_number(args.limit, "--limit", 1, MAX_PAGE)
    with metadata_session() as session:
        page = job_page(
            session,
            job_queue_name=args.queue,
            quota_share_name=args.share,
            statuses=None if status is None else [status],
            limit=limit,
        )
        positions = runnable_positions(session, {row.job_queue_name for row in page.rows})
        reports = [job_report(row, positions, detailed=False) for row in page.rows]
    if wants_json(args):
        print_json({"jobs": reports, "total": page.total})
        return
    total = "over 10,000" if page.total is None else page.total
    shown = "" if page.total == len(reports) else f"The newest {len(reports)} of {total} (--limit for more). "
    table = Table(
        title="Jobs",
        caption=f"{shown}Position: a RUNNABLE job's place in its share's order (1 is next).",
    )
    for header in ("Job", "Job queue", "Quota share", "Status", "Priority", "Capacity", "Position"):
        table.add_column(header, no_wrap=header != "Job")
    table.add_column("Preempted", justify="right")
    table.add_column("Status reason")
    for report in reports:
        table.add_row(
            *map(
                escape,
                (
                    report["jobId"],
                    report["jobQueue"],
                    report["quotaShareName"],
                    report["status"],
                    str(report["schedulingPriority"]),
                    f"{report['capacityUnit']} x {report['instanceCount']}",
                    str(report["position"] or "-"),
                    str(report["preemptedAttemptCount"]),
                    report["statusReason"],
                ),
            )
        )
    out = console()
    out.print(table if reports else "No jobs match.")


def jobs_describe(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        row = find_job(session, args.name)
        report = job_report(row, runnable_positions(session, [row.job_queue_name]), detailed=True)
    if wants_json(args):
        print_json(report)
        return
    out = console()
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold")
    fields.add_column()
    for label, key in (
        ("Job", "jobId"),
        ("Job name", "jobName"),
        ("Job queue", "jobQueue"),
        ("Quota share", "quotaShareName"),
        ("Status", "status"),
        ("Status reason", "statusReason"),
        ("Scheduling priority", "schedulingPriority"),
        ("Position in share", "position"),
        ("Submitted at", "submittedAt"),
        ("Started at", "startedAt"),
        ("Attempt", "attempt"),
        ("Preempted attempts", "preemptedAttemptCount"),
        ("Task instance", "taskInstance"),
    ):
        value = report[key]
        if key == "taskInstance":
            value = f"{value['dagId']} / {value['runId']} / {value['taskId']} (try {value['tryNumber']})"
        fields.add_row(label, escape("-" if value is None or value == "" else str(value)))
    fields.add_row("Capacity", escape(f"{report['capacityUnit']} x {report['instanceCount']}"))
    held = report["held"]
    if held["instanceCount"]:
        fields.add_row(
            "Holding",
            escape(f"{held['capacityUnit']} x {held['instanceCount']} ({held['borrowed']} borrowed)"),
        )
    out.print(fields)
    attempts = report["recentPreemptedAttempts"]
    if attempts:
        table = Table(title="Recent preempted attempts")
        for header in ("Attempt", "Started at", "Stopped at", "Preempted by", "Rule", "Status reason"):
            table.add_column(header)
        for attempt in attempts:
            table.add_row(
                *(
                    escape(str(attempt.get(key) or "-"))
                    for key in ("attempt", "startedAt", "stoppedAt", "preemptedBy", "rule", "statusReason")
                )
            )
        out.print(table)


def jobs_update_priority(args: argparse.Namespace) -> None:
    try:
        priority = scheduling_priority_from_text(args.priority)
    except JobRequestError as error:
        fail("; ".join(issue.message for issue in error.issues))
    with metadata_session() as session:
        row = unfinished_job(session, args.name, "change its priority")
        job_id, old = row.job_id, row.scheduling_priority
        state = load_queue_state(session, row.job_queue_name)
        record_priority_change(session, state, job_id, priority, datetime.now(UTC))
    console().print(
        f"{escape(job_id)}: schedulingPriority {old} -> {priority} (audited). "
        "The allocator applies it from its next cycle.",
        soft_wrap=True,
    )


def jobs_terminate(args: argparse.Namespace) -> None:
    reason = args.reason.strip()
    if not reason:
        fail("--reason must say why the job is terminated")
    if len(reason) > TERMINATION_REASON_LENGTH:
        fail(f"--reason is {len(reason)} characters: say why in at most {TERMINATION_REASON_LENGTH}")
    with metadata_session() as session:
        row = unfinished_job(session, args.name, "terminate it")
        job_id = row.job_id
        state = load_queue_state(session, row.job_queue_name)
        record_termination(session, state, job_id, datetime.now(UTC), reason)
        status, status_reason = row.status, row.status_reason
    what = (
        "FAILED now"
        if status == JobStatus.FAILED.value
        else "being stopped: the allocator stops its task, and it is FAILED once stopped"
    )
    console().print(f"{escape(job_id)} terminated (audited): {what}. {escape(status_reason)}", soft_wrap=True)


def find_job(session: Session, name: str) -> JobRow:
    """A job by its id, or by its job name when exactly one job has it."""
    row = session.get(JobRow, name)
    if row is not None:
        return row
    named = list(session.scalars(select(JobRow).where(JobRow.job_name == name).limit(_NAMED + 1)))
    if len(named) == 1:
        return named[0]
    if named:
        ids = ", ".join(row.job_id for row in named[:_NAMED])
        more = ", ..." if len(named) > _NAMED else ""
        fail(f"several jobs are named {name} ({ids}{more}): give the job id")
    fail(f"no job {name} is in the quota ledger")


def unfinished_job(session: Session, name: str, action: str) -> JobRow:
    row = find_job(session, name)
    if row.status in FINAL_STATUSES:
        fail(f"job {row.job_id} has already finished ({row.status}): cannot {action}")
    return row


def job_report(row: JobRow, positions: dict[str, int], *, detailed: bool) -> dict[str, Any]:
    report: dict[str, Any] = {
        "jobId": row.job_id,
        "jobName": row.job_name,
        "jobQueue": row.job_queue_name,
        "quotaShareName": row.quota_share_name,
        "status": row.status,
        "statusReason": row.status_reason,
        "schedulingPriority": row.scheduling_priority,
        "capacityUnit": row.capacity_unit,
        "instanceCount": row.instance_count,
        "position": positions.get(row.job_id),
        "preemptedAttemptCount": row.preempted_attempt_count,
        "submittedAt": iso(row.submitted_at),
    }
    if detailed:
        report |= {
            "startedAt": iso(row.started_at),
            "attempt": row.attempt,
            "recentPreemptedAttempts": list(row.recent_preempted_attempts),
            "held": {
                "capacityUnit": row.held_capacity_unit,
                "instanceCount": row.held_instance_count,
                "borrowed": row.borrowed_instance_count,
            },
            "taskInstance": {
                "dagId": row.dag_id,
                "runId": row.run_id,
                "taskId": row.task_id,
                "mapIndex": row.map_index,
                "tryNumber": row.try_number,
            },
        }
    return report
