"""``airflow quota snapshot [--queue Q]``: like AWS Batch's GetJobQueueSnapshot, from the ledger (a job queue
AWS Batch schedules: GetJobQueueSnapshot itself, ``cli/aws_queues.py``).

Per job queue and share: usage per unit (own, borrowed, lent, idle, RUNNING and RUNNABLE counts) and the
front of the share: its first RUNNABLE jobs in order (priority descending, then submission order) with
their position and statusReason.
"""

from __future__ import annotations

import argparse
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

#: How many RUNNABLE jobs of each share the snapshot shows.
FRONT_LENGTH = 10


def snapshot(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        states = queue_states(session, args.queue)
        aws_queues = set(aws_scheduled_queues(session, args.queue))
    document = {  # a queue AWS Batch schedules has nothing in the ledger: its snapshot is AWS Batch's
        "jobQueues": [
            aws_queue_snapshot(state.queue.name, [share.name for share in state.queue.shares])
            if state.queue.name in aws_queues
            else queue_snapshot(state)
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
    usage = usage_tables(name, queue["quotaShares"], wide=wide)
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
