"""A high-priority job preempting a lower-priority one of the same share.

The ``research`` share of examples/quotas.yaml has ``inSharePreemption: ENABLED``: a job with a higher
``schedulingPriority`` that does not fit stops strictly lower-priority jobs of the same share (lowest
priority first, then the most recently started) until it fits. A share with ``DISABLED`` makes it wait.

Trigger ``quota_research_hyperparameter_sweep`` (four low-priority trials, one instance each, from a
mapped task), then ``quota_research_urgent_fix`` (priority 900, four instances). When research has no
more capacity to use or borrow, the urgent job preempts trials; they go back to waiting at their original
places and resume from their checkpoints when capacity frees up. Each trial may be preempted at most 3
times (``preemption_retries_before_termination``); the fourth preemption fails it with that reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

ACCOUNT = "123456789012"
REGION = "us-east-1"


def research_request(instance_count: int, hyper_parameters: dict[str, str]) -> dict[str, Any]:
    return {
        "AlgorithmSpecification": {
            "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/llm-finetune:latest",
            "TrainingInputMode": "File",
        },
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/research-training",
        "OutputDataConfig": {"S3OutputPath": "s3://research-models/sweeps"},
        "ResourceConfig": {
            "InstanceType": "ml.p4d.24xlarge",
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 100,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 8 * 3600},
        "HyperParameters": hyper_parameters,
    }


with DAG(
    dag_id="quota_research_hyperparameter_sweep",
    description="Low-priority trials that yield to urgent work of the same share",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota", "example"],
):
    # One mapped task instance per learning rate: each is its own job, with its own checkpoint prefix.
    QuotaTrainingOperator.partial(
        task_id="trial",
        job_queue="gpu-training",
        quota_share_name="research",
        scheduling_priority=1,
        preemption_retries_before_termination=3,
    ).expand(
        training_job_config=[
            research_request(1, {"learning_rate": rate, "epochs": "10"})
            for rate in ("1e-5", "3e-5", "1e-4", "3e-4")
        ]
    )

with DAG(
    dag_id="quota_research_urgent_fix",
    description="An urgent fine-tune that preempts lower-priority research jobs",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota", "example"],
):
    QuotaTrainingOperator(
        task_id="urgent_fine_tune",
        job_queue="gpu-training",
        quota_share_name="research",
        scheduling_priority=900,
        training_job_config=research_request(4, {"learning_rate": "2e-5", "epochs": "1"}),
    )
