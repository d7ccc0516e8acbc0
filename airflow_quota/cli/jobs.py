"""``airflow quota jobs list|describe|update-priority|terminate``: the ledger's jobs, and the two changes an
administrator makes to one (both audited, through the store's ``record_*`` helpers). ``list``, ``describe``
and ``update-priority`` also reach the service jobs of job queues AWS Batch schedules, in AWS Batch
(``cli/aws_queues.py``): a name the ledger does not hold is looked up there.

``list`` shows the newest ``--limit`` jobs (default 100, at most 1,000), read a page at a time like the REST
API's (``ledger.views.job_page``), however long the history.

A RUNNABLE job's position is its place in its share's order: schedulingPriority descending, then
submission order (1 is next). The allocator applies a change to a running task (it is being built).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from sqlalchemy import select
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import SERVICE_JOB_STATUSES, aws_scheduled_queues
from airflow_quota.cli.aws_queues import (
    aws_queue_jobs,
    change_service_job_priority,
    describe_service_job,
)
from airflow_quota.cli.aws_tables import aws_job_description, aws_jobs_tables
from airflow_quota.cli.common import (
    JOB_LABEL_NOTE,
    TIMES_NOTE,
    add_column,
    console,
    fail,
    fitted_widths,
    iso,
    job_label,
    job_names,
    metadata_session,
    named_text,
    parse_whole_number,
    print_json,
    reasons_after,
    reasons_inline,
    table,
    table_time,
    wants_json,
    wants_wide,
)
from airflow_quota.engine.config import JobRequestError, scheduling_priority_from_text
from airflow_quota.engine.model import JobStatus
from airflow_quota.job_names import name_fields
from airflow_quota.ledger.aws_job_fields import aws_job_fields_of
from airflow_quota.ledger.job_rows import FINAL_STATUSES
from airflow_quota.ledger.lifecycle import (
    TERMINATION_REASON_LENGTH,
    record_priority_change,
    record_termination,
)
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.queue_state import load_queue_state
from airflow_quota.ledger.views import (
    DEFAULT_JOBS,
    MAX_PAGE,
    job_page,
    runnable_positions,
)

STATUSES = [status.value for status in JobStatus]
#: Columns shown whole at any width (others wrap first).
WHOLE = ("Preempted by",)
NUMBERS = ("Priority", "Preempted", "Attempt")
#: The least width of the Status reason column, from 120 columns (where it is one), before others grow.
_REASON_WIDTH = 30
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
        aws_fields = aws_job_fields_of(session, page.rows, iso_times=True)
        reports = [job_report(row, positions, aws_fields[row.job_id], detailed=False) for row in page.rows]
        aws_queues = aws_scheduled_queues(session, args.queue)
    aws_status = status if status in SERVICE_JOB_STATUSES else None
    service_jobs = {  # queues AWS Batch schedules: their jobs are AWS Batch's, read from it
        name: aws_queue_jobs(name, status=aws_status, quota_share_name=args.share, limit=limit)
        for name in aws_queues
    }
    if wants_json(args):
        print_json(
            {"jobs": reports, "total": page.total, **({"serviceJobs": service_jobs} if aws_queues else {})}
        )
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    if not reports and not aws_queues:
        out.print("No jobs match.")
    for renderable in jobs_tables(reports, page.total, width=out.width, wide=wide) if reports else []:
        out.print(renderable)
    for name, jobs in service_jobs.items():
        for renderable in aws_jobs_tables(name, jobs, width=out.width, wide=wide):
            out.print(renderable)


def jobs_tables(
    reports: list[dict[str, Any]], total: int | None, *, width: int, wide: bool = False
) -> list[RenderableType]:
    """A page of jobs (``job_report``s), and how many match in all (None: over 10,000).

    The job queue is a column when the jobs are in several, else the title names it; a RUNNABLE job's
    status says its position. On a console narrower than ``REASONS_INLINE_WIDTH`` the status reasons
    follow the table (``reasons_after``).
    """
    counted = "over 10,000" if total is None else total
    shown = "" if total == len(reports) else f"The newest {len(reports)} of {counted} (--limit for more). "
    queues = list(dict.fromkeys(report["jobQueue"] for report in reports))
    inline = reasons_inline(width, wide=wide)
    out = table(
        "Jobs" if len(queues) > 1 else f"Jobs of job queue {queues[0]}",
        caption=f"{shown}Position: a RUNNABLE job's place in its share's order (1 is next). {JOB_LABEL_NOTE}",
    )
    headers = [
        header
        for header in ("Job", "Job queue", "Quota share", "Status", "Priority", "Capacity", "Preempted")
        if header != "Job queue" or len(queues) > 1
    ]
    if inline:
        headers.append("Status reason")
    names = job_names([report["jobId"] for report in reports], *(r["statusReason"] for r in reports))
    labels = {report["jobId"]: job_label(report["jobId"], wide=wide, names=names) for report in reports}
    reasons = {
        report["jobId"]: named_text(report["statusReason"], names, wide=wide, subject=report["jobId"])
        for report in reports
    }
    cells = [
        {
            "Job": labels[report["jobId"]],
            "Job queue": report["jobQueue"],
            "Quota share": report["quotaShareName"],
            "Status": report["status"]
            + ("" if report["position"] is None else f" (position {report['position']})"),
            "Priority": str(report["schedulingPriority"]),
            "Capacity": f"{report['capacityUnit']} x {report['instanceCount']}",
            "Preempted": str(report["preemptionSummary"]["preemptedAttemptCount"]),
            "Status reason": reasons[report["jobId"]],
        }
        for report in reports
    ]
    widths = (
        {}
        if wide
        else fitted_widths(
            {header: [row[header] for row in cells] for header in headers},
            width,
            grow=[h for h in ("Capacity", "Quota share", "Job queue", "Status", "Job") if h in headers],
            rest="Status reason" if inline else None,
            rest_min=_REASON_WIDTH,
        )
    )
    for header in headers:
        add_column(out, header, number=header in NUMBERS, wide=wide, width=widths.get(header))
    for row in cells:
        out.add_row(*(escape(row[header]) for header in headers))
    if inline:
        return [out]
    return [out, *reasons_after([(labels[r["jobId"]], reasons[r["jobId"]]) for r in reports])]


def jobs_describe(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        aws_queues = aws_scheduled_queues(session)
        from_aws = bool(aws_queues) and not in_ledger(session, args.name)
    if from_aws:  # a service job of a queue AWS Batch schedules: AWS Batch's (DescribeServiceJob)
        service_job = describe_service_job(args.name, aws_queues)
        if wants_json(args):
            print_json(service_job)
            return
        wide = wants_wide(args)
        out = console(wide=wide)
        for renderable in aws_job_description(service_job, width=out.width, wide=wide):
            out.print(renderable)
        return
    with metadata_session() as session:
        row = find_job(session, args.name)
        report = job_report(
            row,
            runnable_positions(session, [row.job_queue_name]),
            aws_job_fields_of(session, [row], iso_times=True)[row.job_id],
            detailed=True,
        )
    if wants_json(args):
        print_json(report)
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    for renderable in job_description(report, wide=wide):
        out.print(renderable)


def job_description(report: dict[str, Any], *, wide: bool = False) -> list[RenderableType]:
    """One job (a detailed ``job_report``): its fields, then its recent preempted attempts."""
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    summary = report["preemptionSummary"]
    for label, key in (
        ("Job", "displayName"),
        ("Job id", "jobId"),
        ("Job name", "jobName"),
        ("Job queue", "jobQueue"),
        ("Quota share", "quotaShareName"),
        ("Status", "status"),
        ("Status reason", "statusReason"),
        ("Scheduling priority", "schedulingPriority"),
        ("Position in share", "position"),
        ("Submitted at", "submittedAt"),
        ("Started at", "startedAt"),
        ("Stopped at", "stoppedAt"),
        ("Attempt", "attempt"),
        ("Preempted attempts", "preemptedAttemptCount"),
        ("Task instance", "taskInstance"),
    ):
        value = summary[key] if key == "preemptedAttemptCount" else report[key]
        if key == "displayName":
            value = f"{value} (run {report['runLabel']})"
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
    attempts = summary["recentPreemptedAttempts"]
    if not attempts:
        return [fields]
    preempted = table("Recent preempted attempts", caption=f"{JOB_LABEL_NOTE} {TIMES_NOTE}")
    names = job_names(
        [attempt.get("preemptedBy") for attempt in attempts], *(a.get("statusReason") for a in attempts)
    )
    for header in ("Attempt", "Started at", "Stopped at", "Preempted by", "Rule", "Status reason"):
        add_column(preempted, header, number=header in NUMBERS, whole=header in WHOLE, wide=wide)
    for attempt in attempts:
        preempted.add_row(
            *(
                escape(str(value or "-"))
                for value in (
                    attempt.get("attempt"),
                    table_time(attempt.get("startedAt"), wide=wide),
                    table_time(attempt.get("stoppedAt"), wide=wide),
                    job_label(attempt.get("preemptedBy"), wide=wide, names=names)
                    if attempt.get("preemptedBy")
                    else None,
                    attempt.get("rule"),
                    named_text(attempt.get("statusReason"), names, wide=wide),
                )
            )
        )
    return [fields, preempted]


def jobs_update_priority(args: argparse.Namespace) -> None:
    try:
        priority = scheduling_priority_from_text(args.priority)
    except JobRequestError as error:
        fail("; ".join(issue.message for issue in error.issues))
    with metadata_session() as session:
        aws_queues = aws_scheduled_queues(session)
        if aws_queues and not in_ledger(session, args.name):  # a service job of a queue AWS Batch schedules
            change_service_job_priority(session, args.name, priority, aws_queues)
            return
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


def in_ledger(session: Session, name: str) -> bool:
    """Whether a job of the ledger has this id or job name."""
    if session.get(JobRow, name) is not None:
        return True
    return session.scalar(select(JobRow.job_id).where(JobRow.job_name == name).limit(1)) is not None


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


def job_report(
    row: JobRow, positions: dict[str, int], aws_fields: dict[str, Any], *, detailed: bool
) -> dict[str, Any]:
    """A job as ``--output json`` prints it, with ``aws_fields``: AWS Batch's fields, as the REST API's
    ``Job`` names them (``scheduledAt``, ``startedAt``, ``stoppedAt``, ``capacityUsage``,
    ``preemptionSummary``; ``ledger.aws_job_fields``, with ISO times). ``detailed`` (describe) adds its
    attempt, the capacity it holds (with how much is borrowed) and its task instance."""
    report: dict[str, Any] = {
        "jobId": row.job_id,
        **name_fields(row.dag_id, row.run_id, row.task_id, row.map_index, row.try_number),
        "jobName": row.job_name,
        "jobQueue": row.job_queue_name,
        "quotaShareName": row.quota_share_name,
        "status": row.status,
        "statusReason": row.status_reason,
        "schedulingPriority": row.scheduling_priority,
        "capacityUnit": row.capacity_unit,
        "instanceCount": row.instance_count,
        "position": positions.get(row.job_id),
        "submittedAt": iso(row.submitted_at),
        **aws_fields,
    }
    if detailed:
        report |= {
            "attempt": row.attempt,
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
