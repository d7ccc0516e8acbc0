"""End-to-end DAGs: QuotaTrainingOperator on real Airflow processes, SageMaker being moto's server.

``quota_sm_borrower`` (team-b) trains on 2 instances, one borrowed from team-a; its first attempt would
run a minute, later ones 2 s (the emulator's ``emulator.duration_s``). ``quota_sm_owner`` (team-a) then
asks for its own instance back: the borrower is preempted while deferred on its monitoring trigger. The
borrower's request has a template (it waits from an ``execute`` run); the owner's does not, so it waits
from the triggerer (``start_from_trigger``) and its 3 s job ends within the launching run's follow time.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator


def request(instance_count: int, durations: str, *, templated: bool = True) -> dict[str, Any]:
    document: dict[str, Any] = {
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/t:1",
            "TrainingInputMode": "File",
        },
        "RoleArn": "arn:aws:iam::123456789012:role/training",
        "OutputDataConfig": {"S3OutputPath": "s3://models/e2e"},
        "ResourceConfig": {
            "InstanceType": "ml.g5.xlarge",
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 10,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "HyperParameters": {
            "emulator.duration_s": durations,
            "emulator.stop_delay_s": "1",
        },
    }
    if templated:  # rendered in a worker: the task waits for quota from its execute run
        document["HyperParameters"]["run"] = "{{ run_id }}"
    return document


COMMON: dict[str, Any] = {"job_queue": "gpu-training", "poll_interval": 1.0, "stop_poll_interval": 0.5}

with DAG(dag_id="quota_sm_borrower", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train", quota_share_name="team-b", training_job_config=request(2, "60,2"), **COMMON
    )

with DAG(dag_id="quota_sm_owner", schedule=None, start_date=datetime(2026, 1, 1)):
    QuotaTrainingOperator(
        task_id="train",
        quota_share_name="team-a",
        scheduling_priority=5,
        training_job_config=request(1, "3", templated=False),  # known at parse time
        **COMMON,
    )
