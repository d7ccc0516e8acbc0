"""``airflow quota snapshot`` and ``jobs list`` on job queues AWS Batch schedules: read from AWS, shown apart;
``jobs describe`` of one of their service jobs: read from AWS Batch (DescribeServiceJob); and ``jobs
update-priority`` on their service jobs: sent to AWS Batch (UpdateServiceJob).

The ledger holds nothing for such a queue, so both commands ask AWS Batch (``aws_batch/queue_reports.py``)
through the Airflow AWS connection ``aws_default``, and title each table "scheduled by AWS Batch". When AWS
Batch cannot be asked (no credentials, no network), the queue's document says why (``error``) and the
other queues are shown as usual.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from rich.console import RenderableType
from rich.markup import escape
from rich.table import Table
from sqlalchemy.orm import Session

from airflow_quota.aws_batch.queue_reports import (
    SCHEDULED_BY_AWS_BATCH,
    batch_client,
    queue_snapshot_from_aws,
    service_job_report,
    service_jobs_from_aws,
)
from airflow_quota.aws_batch.service_job_priority import (
    ServiceJobError,
    change_priority,
    find_service_job,
    queue_name_of,
)
from airflow_quota.cli.common import (
    add_column,
    console,
    fail,
    reasons_after,
    reasons_inline,
    table,
    table_time,
)

SCHEDULED_BY = "scheduled by AWS Batch"


@contextmanager
def _logs_to_stderr() -> Iterator[None]:
    """While AWS Batch is asked, what is written to stdout (the amazon provider logs its connection there)
    goes to stderr instead, so the command's stdout stays its tables or its one JSON document."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def aws_queue_snapshot(job_queue_name: str, share_names: list[str]) -> dict[str, Any]:
    """The queue's snapshot from AWS Batch (``share_names`` first), or a document saying why it could not
    be read."""
    try:
        with _logs_to_stderr():
            return queue_snapshot_from_aws(batch_client(), job_queue_name, share_names)
    except Exception as error:  # whatever AWS or the connection said: shown, the other queues go on
        return _unreadable(job_queue_name, error)


def aws_queue_jobs(
    job_queue_name: str, *, status: str | None, quota_share_name: str | None, limit: int
) -> Any:
    """The queue's service jobs from AWS Batch (a list), or a document saying why they could not be read."""
    try:
        with _logs_to_stderr():
            return service_jobs_from_aws(
                batch_client(), job_queue_name, status=status, quota_share_name=quota_share_name, limit=limit
            )
    except Exception as error:
        return _unreadable(job_queue_name, error)


def change_service_job_priority(session: Session, reference: str, priority: int, queues: list[str]) -> None:
    """``jobs update-priority`` on a job the ledger does not hold: a service job of one of ``queues`` (the
    job queues AWS Batch schedules), changed in AWS Batch (UpdateServiceJob) and audited; exits 1 saying
    why when there is no such job, it has finished, or AWS Batch refuses."""
    try:
        with _logs_to_stderr():
            client = batch_client()
            described = find_service_job(client, reference, queues)
            if described is None:
                fail(
                    f"no job {reference} is in the quota ledger, nor in the job queues AWS Batch schedules "
                    f"({', '.join(queues)})"
                )
            after = change_priority(session, client, described, priority, datetime.now(UTC))
    except ServiceJobError as error:
        fail(str(error))
    except (BotoCoreError, ClientError) as error:
        fail(f"AWS Batch refused or could not be asked ({type(error).__name__}: {error}): nothing changed")
    console().print(
        f"Service job {escape(str(after['jobId']))} ({escape(str(after.get('jobName')))}, job queue "
        f"{escape(queue_name_of(str(after['jobQueue'])))}, {SCHEDULED_BY}): schedulingPriority "
        f"{described.get('schedulingPriority')} -> {after.get('schedulingPriority')} (sent to AWS Batch with "
        "UpdateServiceJob; audited).",
        soft_wrap=True,
    )


def describe_service_job(reference: str, queues: list[str]) -> dict[str, Any]:
    """``jobs describe`` of a job the ledger does not hold: a service job of one of ``queues`` (the job queues
    AWS Batch schedules) by its id, ARN or job name, as DescribeServiceJob answers it
    (``service_job_report``); exits 1 saying why when AWS Batch has no such job or cannot be asked."""
    try:
        with _logs_to_stderr():
            described = find_service_job(batch_client(), reference, queues)
    except ServiceJobError as error:
        fail(str(error))
    except (BotoCoreError, ClientError) as error:
        fail(
            f"no job {reference} is in the quota ledger, and AWS Batch, which schedules job queues "
            f"{', '.join(queues)}, could not be asked ({type(error).__name__}: {error}); check the Airflow "
            "connection aws_default"
        )
    if described is None:
        fail(
            f"no job {reference} is in the quota ledger, nor in the job queues AWS Batch schedules "
            f"({', '.join(queues)})"
        )
    return service_job_report(described)


def _unreadable(job_queue_name: str, error: Exception) -> dict[str, Any]:
    return {
        "jobQueueName": job_queue_name,
        "scheduledBy": SCHEDULED_BY_AWS_BATCH,
        "error": f"AWS Batch could not be asked ({type(error).__name__}: {error}); check the Airflow "
        "connection aws_default",
    }


def is_aws_document(queue: dict[str, Any]) -> bool:
    return queue.get("scheduledBy") == SCHEDULED_BY_AWS_BATCH


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
