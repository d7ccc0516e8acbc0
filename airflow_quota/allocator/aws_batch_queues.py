"""Job queues AWS Batch schedules: their waiting tasks are handed to AWS Batch instead of being planned.

A job queue whose applied configuration says ``scheduler: AWS_BATCH`` gets no leases from our allocator:
AWS Batch admits, preempts and re-queues its jobs. Each task deferred for admission on it is resumed with
``protocol.SchedulerHandover`` (``{"scheduler": "AWS_BATCH", "job_id": ...}``), and the task then submits
(or re-attaches to) its AWS Batch service job and follows it (``operators/batch_backend.py``). Nothing is
recorded in the ledger for it: the job lives in AWS Batch.

Only requests the ledger has never seen are handed over. A job the ledger already knows (submitted while
the queue was ours: waiting, holding capacity, being stopped, or its stop report) goes on through our
allocator until it ends, so moving a queue to AWS Batch drops no job and never runs one twice. A task that
deferred from a worker run is handed over once it has settled, as a grant would be (its executor's stale
event, ``CycleSettings.settle_time``); until then it waits deferred, neither recorded nor resumed.
"""

from __future__ import annotations

import logging

from sqlalchemy import select

from airflow_quota.allocator.queue_part import QueuePart, Waiting
from airflow_quota.allocator.tasks import resume
from airflow_quota.ledger.models import JobQueueRow, JobRow
from airflow_quota.protocol import AWS_BATCH, SCHEDULER_EVENT_KEY, SchedulerHandover

log = logging.getLogger(__name__)


def hand_over_to_aws_batch(part: QueuePart, queue_name: str, waiting: list[Waiting]) -> list[Waiting]:
    """On a job queue AWS Batch schedules, resume each new request's task with the handover event.

    Returns the waiting tasks our allocator still takes this cycle: all of them on a queue it schedules,
    and on an AWS Batch queue only those the ledger knows.
    """
    if not waiting:
        return waiting
    queue_row = part.session.get(JobQueueRow, queue_name)
    if queue_row is None or queue_row.scheduler != AWS_BATCH:
        return waiting
    known = set(
        part.session.scalars(
            select(JobRow.job_id).where(JobRow.job_id.in_([each.job_id for each in waiting]))
        )
    )
    ready = [each for each in waiting if each.job_id not in known and each.settled]
    part.claim(ready)
    for each in ready:
        if not part.claims[each.job_id]:  # cleared, resumed or locked elsewhere since it was read
            continue
        event: SchedulerHandover = {SCHEDULER_EVENT_KEY: AWS_BATCH, "job_id": each.job_id}
        resume(part.session, part.task_instance(each), dict(event))
        log.info("Job queue %s is scheduled by AWS Batch: job %s handed to it", queue_name, each.job_id)
    return [each for each in waiting if each.job_id in known]
