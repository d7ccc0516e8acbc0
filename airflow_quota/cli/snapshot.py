"""``airflow quota snapshot [--queue Q]``: like AWS Batch's GetJobQueueSnapshot, from the ledger.

Per job queue and share: usage per unit (own and borrowed, RUNNING and RUNNABLE counts) and the front of
the share: its first RUNNABLE jobs in order (priority descending, then submission order) with their
position and statusReason.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.markup import escape
from rich.table import Table

from airflow_quota.cli.common import console, metadata_session, print_json, wants_json
from airflow_quota.cli.shares import queue_states, share_reports, usage_table
from airflow_quota.engine.model import JobStatus, QueueState
from airflow_quota.engine.planner import share_order_key

#: How many RUNNABLE jobs of each share the snapshot shows.
FRONT_LENGTH = 10


def snapshot(args: argparse.Namespace) -> None:
    with metadata_session() as session:
        states = queue_states(session, args.queue)
    document = {"jobQueues": [queue_snapshot(state) for state in states]}
    if wants_json(args):
        print_json(document)
        return
    out = console()
    if not states:
        out.print("No job queues are applied: apply a quota file with 'airflow quota apply -f FILE'.")
    for queue in document["jobQueues"]:
        out.print(usage_table(f"Job queue {queue['jobQueueName']}: usage", queue["quotaShares"]))
        front = Table(title=escape(f"Job queue {queue['jobQueueName']}: front of each share"))
        for header in ("Quota share", "Position", "Job", "Priority", "Capacity", "Status reason"):
            front.add_column(header, no_wrap=header != "Status reason")
        for share in queue["quotaShares"]:
            for job in share["frontOfQueue"]:
                front.add_row(
                    escape(share["quotaShareName"]),
                    str(job["position"]),
                    escape(job["jobId"]),
                    str(job["schedulingPriority"]),
                    escape(f"{job['capacityUnit']} x {job['instanceCount']}"),
                    escape(job["statusReason"]),
                )
        out.print(front if front.row_count else "No RUNNABLE jobs.")


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
