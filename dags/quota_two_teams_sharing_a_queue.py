"""Two teams sharing one job queue: research borrows evaluation's idle GPUs, evaluation takes them back.

In examples/quotas.yaml the ``evaluation`` share (LEND) owns 2 x ml.p4d.24xlarge and lends them while it
has nothing to run; ``research`` (LEND_AND_BORROW, borrowLimit 200) owns 4 and may borrow up to 8 more.

Trigger ``quota_research_sweep`` first: its 6-instance job runs on research's 4 plus 2 borrowed from
evaluation. Then trigger ``quota_evaluation_benchmark``: evaluation's own work has arrived, so the
allocator preempts the borrower (cross-share preemption, whatever the priorities). The sweep's training
job is stopped and waits again at its original place in the queue; the benchmark runs on evaluation's
capacity; when it ends, the sweep is granted again and resumes from its checkpoint. Watch it with
``airflow quota jobs`` or on the quota page of the UI.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG

from airflow_quota.operators.training import QuotaTrainingOperator

ACCOUNT = "123456789012"
REGION = "us-east-1"


def training_request(team: str, image: str, instance_count: int, hours: int) -> dict[str, Any]:
    """A CreateTrainingJob request for one team (its own role, buckets and image)."""
    return {
        "AlgorithmSpecification": {
            "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/{image}",
            "TrainingInputMode": "File",
        },
        "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/{team}-training",
        "OutputDataConfig": {"S3OutputPath": f"s3://{team}-models/output"},
        "ResourceConfig": {
            "InstanceType": "ml.p4d.24xlarge",
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 100,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": hours * 3600},
        "HyperParameters": {"run": "{{ run_id }}"},
        "Tags": [{"Key": "team", "Value": team}],
    }


with DAG(
    dag_id="quota_research_sweep",
    description="Research: a long job that borrows idle capacity",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota", "example"],
):
    QuotaTrainingOperator(
        task_id="pretrain",
        job_queue="gpu-training",
        quota_share_name="research",
        scheduling_priority=10,
        training_job_config=training_request("research", "pretrain:latest", instance_count=6, hours=12),
    )

with DAG(
    dag_id="quota_evaluation_benchmark",
    description="Evaluation: its own work reclaims the capacity it lent",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    tags=["airflow-quota", "example"],
):
    QuotaTrainingOperator(
        task_id="benchmark",
        job_queue="gpu-training",
        quota_share_name="evaluation",
        scheduling_priority=10,
        training_job_config=training_request("evaluation", "benchmark:latest", instance_count=2, hours=2),
    )
