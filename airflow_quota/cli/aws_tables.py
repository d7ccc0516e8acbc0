"""The tables of job queues AWS Batch schedules, as ``snapshot``, ``jobs list`` and ``jobs describe`` print
them from the documents ``aws_batch/queue_reports.py`` reads: the ledger's tables' rules (headers whole,
short labels, reasons after the table below 120 columns, ``--wide`` for everything), with columns that give
way in a set order so that no line runs past the console.
"""

from __future__ import annotations

from typing import Any

from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import (
    add_column,
    reasons_after,
    reasons_inline,
    table,
    table_time,
)

SCHEDULED_BY = "scheduled by AWS Batch"

#: A service job as a table shows it: the first characters of its id (an AWS Batch job id is a UUID).
SERVICE_JOB_LABEL_LENGTH = 8
#: What a table's caption says about its service job labels.
SERVICE_JOB_LABEL_NOTE = (
    f"Job: the service job id's first {SERVICE_JOB_LABEL_LENGTH} characters (--wide for whole ids). "
    "Times in UTC."
)
#: The most a column's values hold it open so that their words stay whole (longer words fold).
_WORD_ROOM = 20
#: A time's date (``table_time``): a time column is never narrower, so it wraps between date and time.
_DATE_LENGTH = len("2026-12-01")


def service_job_label(job_id: str, *, wide: bool = False) -> str:
    """A service job as a table shows it: its id's first characters, the whole id with ``wide``."""
    return job_id if wide else job_id[:SERVICE_JOB_LABEL_LENGTH]


def _column(
    out: Table,
    header: str,
    values: list[str],
    *,
    number: bool = False,
    whole: bool = False,
    wide: bool = False,
    room: int = _WORD_ROOM,
    least: int = 0,
) -> None:
    """``add_column`` (headers whole, values wrapped or ``whole``), and a column at least as wide as its
    values' longest word up to ``room`` characters (and ``least``), so that a share name, a capacity unit or
    a date is not broken mid-word while other columns can give way."""
    add_column(out, header, number=number, whole=whole, wide=wide)
    column = out.columns[-1]
    longest = max((len(word) for value in values for word in value.split()), default=0)
    column.min_width = max(column.min_width or 0, min(longest, room), least)


#: Between two columns of ``table()`` (collapsed padding).
_GAP = 2
#: Which columns of the service jobs' table narrow first (``_fit``): a reason, then a name, keep some room
#: until the capacity and the time have wrapped; then they narrow to their longest word.
_JOBS_GIVE_WAY = [
    ("Status reason", 24),
    ("Name", 16),
    ("Capacity", 0),
    ("Created", 0),
    ("Name", 0),
    ("Status reason", 0),
    ("Quota share", 0),
]


def _fit(out: Table, rows: list[list[str]], width: int, give_way: list[tuple[str, int]]) -> None:
    """Cap the widths of ``give_way``'s columns so that the table fits ``width``: each ``(header, floor)``
    in turn gives up to what the table is too wide, down to ``floor`` (never below its ``min_width``); a
    header may come again with a lower floor. Rich's own collapse shrinks the widest columns alike, below
    other columns' minimums, and a line then runs past the console."""
    columns = out.columns
    headers = [str(column.header) for column in columns]
    widths = [max([len(header), *(len(row[index]) for row in rows)]) for index, header in enumerate(headers)]
    excess = sum(widths) + _GAP * (len(columns) - 1) - width
    for header, floor in give_way:
        if excess <= 0:
            return
        if header not in headers:
            continue
        index = headers.index(header)
        cut = min(excess, widths[index] - max(floor, columns[index].min_width or 1))
        if cut > 0:
            widths[index] -= cut
            columns[index].max_width = widths[index]
            excess -= cut


def aws_snapshot_tables(queue: dict[str, Any], *, width: int, wide: bool = False) -> list[RenderableType]:
    """A snapshot from AWS Batch (``queue_snapshot_from_aws``): the capacity in use per quota share, then
    the front of each share (its jobs by ``service_job_label``)."""
    name = queue["jobQueueName"]
    if "error" in queue:
        return [f"Job queue {escape(name)} ({SCHEDULED_BY}): {escape(queue['error'])}"]
    usage = table(f"Job queue {name} ({SCHEDULED_BY}): capacity in use", caption="Read from AWS Batch.")
    rows = [
        *(
            (share["quotaShareName"], each["capacityUnit"], str(each["quantity"]))
            for share in queue["quotaShares"]
            for each in share["capacityUsage"]
        ),
        *(("(all)", each["capacityUnit"], str(each["quantity"])) for each in queue["capacityUsage"]),
    ]
    for index, header in enumerate(("Quota share", "Capacity unit", "In use")):
        _column(usage, header, [row[index] for row in rows], number=header == "In use", wide=wide)
    for row in rows:
        usage.add_row(*map(escape, row))
    waiting = [
        (share["quotaShareName"], job) for share in queue["quotaShares"] for job in share["frontOfQueue"]
    ]
    if not waiting:
        return [usage, "No RUNNABLE jobs."]
    front = table(f"Job queue {name} ({SCHEDULED_BY}): front of each share", caption=SERVICE_JOB_LABEL_NOTE)
    cells = [
        [
            share_name,
            str(job["position"]),
            service_job_label(job["jobId"], wide=wide),
            table_time(job["earliestTimeAtPosition"], wide=wide),
        ]
        for share_name, job in waiting
    ]
    for index, header in enumerate(("Quota share", "Position", "Job", "At this position since")):
        _column(
            front,
            header,
            [row[index] for row in cells],
            number=header == "Position",
            whole=header == "Job",
            wide=wide,
            least=_DATE_LENGTH if header == "At this position since" else 0,
        )
    if not wide:
        _fit(front, cells, width, [("At this position since", 0), ("Quota share", 0)])
    for cell_row in cells:
        front.add_row(*map(escape, cell_row))
    return [usage, front]


def aws_jobs_tables(
    job_queue_name: str, jobs: Any, *, width: int, wide: bool = False
) -> list[RenderableType]:
    """A queue's service jobs from AWS Batch (``service_jobs_from_aws``), newest first, each by its
    ``service_job_label``. On a console narrower than ``REASONS_INLINE_WIDTH`` the status reasons follow
    the table (``reasons_after``), as in the ledger's tables."""
    if isinstance(jobs, dict):
        return [f"Job queue {escape(job_queue_name)} ({SCHEDULED_BY}): {escape(jobs['error'])}"]
    if not jobs:
        return [f"Job queue {escape(job_queue_name)} ({SCHEDULED_BY}): no service jobs match."]
    inline = reasons_inline(width, wide=wide)
    out = table(
        f"Service jobs of job queue {job_queue_name} ({SCHEDULED_BY})",
        caption=f"Read from AWS Batch, newest first. {SERVICE_JOB_LABEL_NOTE}",
    )
    cells = [
        {
            "Job": service_job_label(job["jobId"], wide=wide),
            "Name": job["jobName"] or "-",
            "Quota share": job["quotaShareName"] or "-",
            "Status": job["status"],
            "Capacity": ", ".join(
                f"{each['capacityUnit']} x {each['quantity']}" for each in job["capacityUsage"]
            )
            or "-",
            "Created": table_time(job["createdAt"], wide=wide),
            "Status reason": job["statusReason"] or "-",
        }
        for job in jobs
    ]
    headers = ["Job", "Name", "Quota share", "Status", "Capacity", "Created"]
    if inline:
        headers.append("Status reason")
    for header in headers:
        _column(
            out,
            header,
            [row[header] for row in cells],
            whole=header in ("Job", "Status"),
            wide=wide,
            # a name or a reason folds where it must: only the other columns keep their words whole
            room=0 if header in ("Name", "Status reason") else _WORD_ROOM,
            least=_DATE_LENGTH if header == "Created" else 0,
        )
    rows = [[row[header] for header in headers] for row in cells]
    if not wide:
        _fit(out, rows, width, _JOBS_GIVE_WAY)
    for row in rows:
        out.add_row(*map(escape, row))
    if inline:
        return [out]
    return [out, *reasons_after([(row["Job"], row["Status reason"]) for row in cells])]


#: What the caption of a service job's attempts says about its training jobs.
TRAINING_JOB_NOTE = "Training job: the name in its ARN (--wide for whole ARNs). Times in UTC."


def training_job_label(arn: str | None, *, wide: bool = False) -> str:
    """A training job as a table shows it: the name in its ARN (``...:training-job/<name>``), the whole ARN
    with ``wide``."""
    if not arn:
        return "-"
    return arn if wide else arn.rsplit("/", 1)[-1]


def aws_job_description(report: dict[str, Any], *, width: int, wide: bool = False) -> list[RenderableType]:
    """One service job (``service_job_report``): its fields, its attempts (each one's training job), then its
    recent preempted attempts as ``preemptionSummary`` has them (when each stopped, and AWS Batch's reason:
    who preempted it)."""
    fields = Table.grid(padding=(0, 2))
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    summary = report["preemptionSummary"]
    capacity = (
        f"{report['capacityUnit']} x {report['instanceCount']}"
        if report.get("capacityUnit") is not None
        else None
    )
    in_use = ", ".join(f"{each['capacityUnit']} x {each['quantity']}" for each in report["capacityUsage"])
    for label, value in (
        ("Job", report["jobId"]),
        ("Job name", report.get("jobName")),
        ("Job queue", f"{report['jobQueue']} ({SCHEDULED_BY})"),
        ("Quota share", report.get("quotaShareName")),
        ("Status", report.get("status")),
        ("Status reason", report.get("statusReason")),
        ("Scheduling priority", report.get("schedulingPriority")),
        ("Submitted at", report.get("submittedAt")),
        ("Scheduled at", report.get("scheduledAt")),
        ("Started at", report.get("startedAt")),
        ("Stopped at", report.get("stoppedAt")),
        ("Attempts", len(report["attempts"])),
        ("Preempted attempts", summary["preemptedAttemptCount"]),
        ("Capacity", capacity),
        ("Capacity in use", in_use),
        ("Training job", report.get("trainingJobArn")),
    ):
        fields.add_row(label, escape("-" if value is None or value == "" else str(value)))
    renderables: list[RenderableType] = [fields]
    inline = reasons_inline(width, wide=wide)
    headers = ["Attempt", "Training job", "Started at", "Stopped at", *(["Status reason"] if inline else [])]
    for title, attempts in (
        ("Attempts", report["attempts"]),
        ("Recent preempted attempts", summary["recentPreemptedAttempts"]),
    ):
        if not attempts:
            continue
        out = table(
            f"{title} of service job {service_job_label(report['jobId'], wide=wide)}",
            caption=TRAINING_JOB_NOTE,
        )
        cells = [
            {
                "Attempt": str(attempt.get("attempt") or "-"),
                "Training job": training_job_label(_arn(attempt), wide=wide),
                "Started at": table_time(attempt.get("startedAt"), wide=wide),
                "Stopped at": table_time(attempt.get("stoppedAt"), wide=wide),
                "Status reason": attempt.get("statusReason") or "-",
            }
            for attempt in attempts
        ]
        rows = [[cell[header] for header in headers] for cell in cells]
        for index, header in enumerate(headers):
            _column(
                out,
                header,
                [row[index] for row in rows],
                number=header == "Attempt",
                wide=wide,
                room=0 if header == "Status reason" else _WORD_ROOM,
                least=_DATE_LENGTH if header.endswith(" at") else 0,
            )
        if not wide:
            _fit(out, rows, width, [("Status reason", 24), ("Training job", 0), ("Status reason", 0)])
        for row in rows:
            out.add_row(*map(escape, row))
        renderables.append(out)
        if not inline:  # below 120 columns, as the other tables: the reasons follow, each whole
            renderables += reasons_after(
                [(f"Attempt {cell['Attempt']}", cell["Status reason"]) for cell in cells]
            )
    return renderables


def _arn(attempt: dict[str, Any]) -> str | None:
    value = (attempt.get("serviceResourceId") or {}).get("value")
    return None if value is None else str(value)
