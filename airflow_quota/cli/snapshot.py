"""``airflow quota snapshot [--queue Q]``: like AWS Batch's GetJobQueueSnapshot, from the ledger (a job queue
AWS Batch schedules: GetJobQueueSnapshot itself, ``cli/aws_queues.py``).

Per job queue and share: usage per unit (own, borrowed, lent, idle, RUNNING and RUNNABLE counts), the
front of the share: its first RUNNABLE jobs in order (priority descending, then submission order) with
their position and statusReason, and the work the queue's preemptions lost in the last hour (as the GPU
Quotas page shows it by default), per share.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import RenderableType
from rich.markup import escape

from airflow_quota.aws_batch.queue_reports import aws_scheduled_queues
from airflow_quota.cli.aws_queues import aws_queue_snapshot, is_aws_document
from airflow_quota.cli.aws_tables import aws_snapshot_tables
from airflow_quota.cli.common import (
    JOB_LABEL_NOTE,
    add_column,
    console,
    job_label,
    job_names,
    longest_word,
    metadata_session,
    named_text,
    print_json,
    reasons_after,
    reasons_inline,
    table,
    wants_json,
    wants_wide,
)
from airflow_quota.cli.shares import queue_states, share_reports, usage_tables
from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.engine.planner import share_order_key
from airflow_quota.ledger.views import LostWork, lost_work

#: How many RUNNABLE jobs of each share the snapshot shows.
FRONT_LENGTH = 10
#: Over which window the snapshot sums the work preemptions lost (the GPU Quotas page's default window).
LOST_WORK_WINDOW = timedelta(hours=1)


def snapshot(args: argparse.Namespace) -> None:
    until = datetime.now(UTC)
    since = until - LOST_WORK_WINDOW
    with metadata_session() as session:
        states = queue_states(session, args.queue)
        aws_queues = set(aws_scheduled_queues(session, args.queue))
        lost = {
            state.queue.name: lost_work(session, state.queue.name, since, until)
            for state in states
            if state.queue.name not in aws_queues
        }
    document = {  # a queue AWS Batch schedules has nothing in the ledger: its snapshot is AWS Batch's
        "jobQueues": [
            aws_queue_snapshot(state.queue.name, [share.name for share in state.queue.shares])
            if state.queue.name in aws_queues
            else queue_snapshot(state) | {"lostWork": lost_work_report(lost[state.queue.name], since, until)}
            for state in states
        ]
    }
    if wants_json(args):
        print_json(document)
        return
    wide = wants_wide(args)
    out = console(wide=wide)
    if not states:
        out.print("No job queues are applied: apply a quota file with 'airflow quota apply -f FILE'.")
    for queue in document["jobQueues"]:
        for renderable in snapshot_tables(queue, width=out.width, wide=wide):
            out.print(renderable)


def snapshot_tables(queue: dict[str, Any], *, width: int, wide: bool = False) -> list[RenderableType]:
    """A job queue's snapshot (``queue_snapshot``) as tables: usage per unit and share, then each share's
    front (its status reasons after the table on a console narrower than ``REASONS_INLINE_WIDTH``)."""
    if is_aws_document(queue):
        return aws_snapshot_tables(queue, width=width, wide=wide)
    name = queue["jobQueueName"]
    usage: list[RenderableType] = [*usage_tables(name, queue["quotaShares"], wide=wide)]
    if "lostWork" in queue:
        usage.append(lost_work_line(queue["lostWork"]))
    inline = reasons_inline(width, wide=wide)
    front = table(f"Job queue {name}: front of each share", caption=JOB_LABEL_NOTE)
    headers = (
        "Quota share",
        "Position",
        "Job",
        "Priority",
        "Capacity",
        *(["Status reason"] if inline else []),
    )
    jobs = [job for share in queue["quotaShares"] for job in share["frontOfQueue"]]
    names = job_names([job["jobId"] for job in jobs], *(job["statusReason"] for job in jobs))
    labels = {job["jobId"]: job_label(job["jobId"], wide=wide, names=names) for job in jobs}
    reasons = {
        job["jobId"]: named_text(job["statusReason"], names, wide=wide, subject=job["jobId"]) for job in jobs
    }
    for header in headers:
        add_column(
            front,
            header,
            number=header in ("Position", "Priority"),
            wide=wide,
            min_width=longest_word(labels.values()) if header == "Job" else 0,
        )
    for share in queue["quotaShares"]:
        for job in share["frontOfQueue"]:
            cells = [
                share["quotaShareName"],
                str(job["position"]),
                labels[job["jobId"]],
                str(job["schedulingPriority"]),
                f"{job['capacityUnit']} x {job['instanceCount']}",
                *([reasons[job["jobId"]]] if inline else []),
            ]
            front.add_row(*map(escape, cells))
    if not jobs:
        return [*usage, "No RUNNABLE jobs."]
    if inline:
        return [*usage, front]
    return [*usage, front, *reasons_after([(labels[job["jobId"]], reasons[job["jobId"]]) for job in jobs])]


def queue_snapshot(state: QueueState) -> dict[str, Any]:
    shares = share_reports(state)
    for share in shares:
        waiting = sorted(
            (
                job
                for job in state.jobs.values()
                if job.share_name == share["quotaShareName"] and job.status is JobStatus.RUNNABLE
            ),
            key=share_order_key,
        )
        share["frontOfQueue"] = [
            {
                "position": position,
                "jobId": job.job_id,
                "schedulingPriority": job.priority,
                "capacityUnit": job.unit,
                "instanceCount": job.count,
                "statusReason": job.status_reason,
            }
            for position, job in enumerate(waiting[:FRONT_LENGTH], start=1)
        ]
    return {"jobQueueName": state.queue.name, "quotaShares": shares}


def lost_work_report(
    found: dict[tuple[str, str], LostWork], since: datetime, until: datetime
) -> dict[str, Any]:
    """The work the queue's preemptions decided in ``[since, until]`` lost (``ledger.views.lost_work``):
    in all, and per share of the preempted jobs (every unit together)."""
    by_share: dict[str, LostWork] = {}
    for (_, share_name), lost in sorted(found.items()):
        by_share[share_name] = by_share.get(share_name, LostWork()) + lost
    total = sum(by_share.values(), LostWork())
    return {
        "since": since.isoformat(),
        "until": until.isoformat(),
        **_lost_work_fields(total),
        "quotaShares": {name: _lost_work_fields(lost) for name, lost in by_share.items()},
    }


def _lost_work_fields(lost: LostWork) -> dict[str, float | int]:
    return {
        "lostUnitSeconds": lost.lost_unit_seconds,
        "preemptions": lost.preemptions,
        "unmeasured": lost.unmeasured,
    }


def lost_work_line(report: dict[str, Any]) -> str:
    """One line: the GPU-seconds the queue's preemptions of the last hour lost, and per share."""
    preemptions = report["preemptions"]
    if not preemptions:
        return "Work lost to preemption in the last hour: none (no preemption)."
    shares = ", ".join(
        f"{escape(name)} {each['lostUnitSeconds']:,.0f}" for name, each in report["quotaShares"].items()
    )
    unmeasured = report["unmeasured"]
    note = f"; {unmeasured} recorded before lost work was measured, not counted" if unmeasured else ""
    plural = "" if preemptions == 1 else "s"
    return (
        f"Work lost to preemption in the last hour: {report['lostUnitSeconds']:,.0f} GPU-seconds in "
        f"{preemptions} preemption{plural} (by share of the preempted jobs: {shares}){note}."
    )
