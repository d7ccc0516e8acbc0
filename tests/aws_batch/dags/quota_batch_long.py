"""End-to-end DAGs for a job queue AWS Batch schedules: a 10-minute training job in team-a's quota share.

``quota_batch_kill``'s task is marked failed while it waits on its service job (its trigger terminates the
job); ``quota_batch_retry``'s try fails while its service job still runs, and its retry (``retries=1``)
follows that same job. Neither names the scheduler: the quota file says the queue is AWS Batch's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

REQUEST: dict[str, Any] = {
    "AlgorithmSpecification": {
        "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
        "TrainingInputMode": "File",
    },
    "RoleArn": "arn:aws:iam::123456789012:role/training",
    "OutputDataConfig": {"S3OutputPath": "s3://models/e2e"},
    "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "HyperParameters": {"emulator.duration_s": "600", "emulator.stop_delay_s": "1"},
}
COMMON: dict[str, Any] = {
    "job_queue": "gpu-training",
    "quota_share_name": "team-a",
    "training_job_config": REQUEST,
    "poll_interval": 1.0,
}

with DAG(dag_id="quota_batch_kill", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(task_id="train", **COMMON)

with DAG(dag_id="quota_batch_retry", schedule=None, start_date=datetime(2026, 1, 1)):
    # Each try's trigger gives up after 10 failed calls a poll_interval apart: 2 s, not 10.
    QuotaTrainingOperator(
        task_id="train", retries=1, retry_delay=timedelta(seconds=0), **{**COMMON, "poll_interval": 0.2}
    )
