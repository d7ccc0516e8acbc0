"""DAGs for the distributed tests: QuotaTrainingOperator jobs on SageMaker (moto's server, our emulator).

``quota_celery_borrower`` (team-b) trains on 2 instances, one borrowed from team-a; its first attempt
would run a minute, later ones 3 s. ``quota_celery_owner`` (team-a) then asks for its instance back.
``quota_celery_crash`` launches a job whose CreateTrainingJob answers only after 20 s (the emulator's
``emulator.create_delay_s``): the test kills the Celery worker in that window; the retry re-attaches.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator


def request(instance_count: int, durations: str, **hyper_parameters: str) -> dict[str, Any]:
    return {
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
            "TrainingInputMode": "File",
        },
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {"S3OutputPath": "s3://models/celery"},
        "ResourceConfig": {
            "InstanceType": "ml.g5.xlarge",
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 10,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {
            "emulator.duration_s": durations,
            "emulator.stop_delay_s": "1",
            **hyper_parameters,
        },
    }


COMMON: dict[str, Any] = {"job_queue": "celery-training", "poll_interval": 1.0, "stop_poll_interval": 0.5}

with DAG(dag_id="quota_celery_borrower", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train", quota_share_name="team-b", training_job_config=request(2, "60,3"), **COMMON
    )

with DAG(dag_id="quota_celery_owner", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train", quota_share_name="team-a", training_job_config=request(1, "4"), **COMMON
    )

with DAG(dag_id="quota_celery_crash", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train",
        quota_share_name="team-a",
        training_job_config=request(1, "25", **{"emulator.create_delay_s": "20"}),
        retries=1,
        retry_delay=timedelta(seconds=1),
        **COMMON,
    )
