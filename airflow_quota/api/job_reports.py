"""The job responses: a job's row with its place in line, its last preemption, its task instance and its
training job (with the SageMaker console link).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from airflow_quota.api import schemas
from airflow_quota.engine.model import JobStatus
from airflow_quota.job_names import display_name, run_label
from airflow_quota.ledger.aws_job_fields import aws_job_fields_of
from airflow_quota.ledger.models import JobRow
from airflow_quota.ledger.views import runnable_positions
from airflow_quota.operators.links import SageMakerTrainingJobLink
from airflow_quota.protocol import TRAINING_JOB_KEY


def job_reports(session: Session, rows: list[JobRow]) -> list[schemas.Job]:
    """The jobs of ``rows`` as the API shows them: with their place in line, preemption and training job."""
    waiting_queues = {row.job_queue_name for row in rows if row.status == JobStatus.RUNNABLE.value}
    positions = runnable_positions(session, waiting_queues)
    aws_fields = aws_job_fields_of(session, rows)
    training_jobs = _training_jobs(session, rows)
    return [
        _job_report(row, aws_fields[row.job_id], positions.get(row.job_id), training_jobs.get(row.job_id))
        for row in rows
    ]


def _job_report(
    row: JobRow,
    aws_fields: dict[str, Any],
    position: int | None,
    training_job: schemas.TrainingJob | None,
) -> schemas.Job:
    """``aws_fields``: the job's AWS Batch fields (``scheduledAt``, ``startedAt``, ``stoppedAt``,
    ``capacityUsage``, ``preemptionSummary``) as the CLI's job JSON has them (``ledger.aws_job_fields``)."""
    return schemas.Job(
        jobId=row.job_id,
        displayName=display_name(row.dag_id, row.task_id, row.map_index, row.try_number),
        runLabel=run_label(row.run_id),
        jobName=row.job_name,
        jobQueueName=row.job_queue_name,
        quotaShareName=row.quota_share_name,
        status=row.status,
        statusReason=row.status_reason,
        schedulingPriority=row.scheduling_priority,
        capacityUnit=row.capacity_unit,
        instanceCount=row.instance_count,
        position=position,
        submittedAt=row.submitted_at,
        attempt=row.attempt,
        preemptionRetriesBeforeTermination=row.preemption_retries_before_termination,
        lease=schemas.Lease(
            capacityUnit=row.held_capacity_unit,
            instanceCount=row.held_instance_count,
            borrowed=row.borrowed_instance_count,
            devices=row.held_devices,
        ),
        taskInstance=schemas.TaskInstanceLink(
            dagId=row.dag_id,
            runId=row.run_id,
            taskId=row.task_id,
            mapIndex=row.map_index,
            tryNumber=row.try_number,
            path=task_instance_path(row.dag_id, row.run_id, row.task_id, row.map_index),
        ),
        trainingJob=training_job,
        **aws_fields,
    )


def task_instance_path(dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
    """The task instance's page in the Airflow 3 UI, relative to the UI's base URL."""
    path = f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/tasks/{quote(task_id, safe='')}"
    return path if map_index < 0 else f"{path}/mapped/{map_index}"


def sagemaker_console_url(name: str, region: str | None) -> str:
    """The SageMaker training job's page in the AWS console: the operator's extra link
    (``SageMakerTrainingJobLink``, the amazon provider's console links) where the task recorded its region,
    else the console's region-less address. The task's record keeps no partition: the commercial one."""
    if region:
        link = SageMakerTrainingJobLink()
        aws_domain = link.get_aws_domain("aws")
        return link.format_link(region_name=region, aws_domain=aws_domain, training_job_name=quote(name))
    return f"https://console.aws.amazon.com/sagemaker/home#/jobs/{quote(name)}"


def _training_jobs(session: Session, rows: list[JobRow]) -> dict[str, schemas.TrainingJob]:
    """Each job's training job: what the ledger has for its current attempt (the allocator copies it from the
    task's report), else the task's own record in its ``task_state_store`` (``protocol.TRAINING_JOB_KEY``)
    when that record is of this job; the record also gives the AWS region of the console link.
    """
    records = _task_records(session, rows)
    found: dict[str, schemas.TrainingJob] = {}
    for row in rows:
        record = records.get(row.job_id)
        known = row.training_job or record
        if not known or not known.get("name"):
            continue
        backend, name = str(known.get("backend") or ""), str(known["name"])
        own_record = record if record and record.get("name") == name else {}
        region = own_record.get("region_name")
        arn = known.get("arn") or own_record.get("arn")
        found[row.job_id] = schemas.TrainingJob(
            backend=backend,
            name=name,
            state=str(known.get("state") or ""),
            consoleUrl=sagemaker_console_url(name, region) if backend == "sagemaker" else None,
            arn=str(arn) if arn else None,
        )
    return found


def _task_records(session: Session, rows: list[JobRow]) -> dict[str, dict[str, Any]]:
    """The ``TrainingJobRecord`` each job's task keeps in its ``task_state_store``, when it is of that job."""
    from airflow.models.task_state_store import TaskStateStoreModel

    if not rows:
        return {}
    by_task = {(row.dag_id, row.run_id, row.task_id, row.map_index): row.job_id for row in rows}
    task = (
        TaskStateStoreModel.dag_id,
        TaskStateStoreModel.run_id,
        TaskStateStoreModel.task_id,
        TaskStateStoreModel.map_index,
    )
    found: dict[str, dict[str, Any]] = {}
    for dag_id, run_id, task_id, map_index, value in session.execute(
        select(*task, TaskStateStoreModel.value).where(
            TaskStateStoreModel.key == TRAINING_JOB_KEY, tuple_(*task).in_(list(by_task))
        )
    ):
        job_id = by_task.get((dag_id, run_id, task_id, map_index))
        try:
            record = json.loads(value)
            if isinstance(record, str):  # the task stored the JSON document as a string
                record = json.loads(record)
        except ValueError:
            continue
        # Retries share the store: the record is this job's only when its lease is one of this job's.
        if job_id and isinstance(record, dict) and str(record.get("lease_id", "")).startswith(f"{job_id}#"):
            found[job_id] = record
    return found
