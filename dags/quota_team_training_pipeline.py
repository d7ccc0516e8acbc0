"""A team's training pipeline: prepare data, train under the team's quota share, register the model.

The research team fine-tunes a model every night on 2 x ml.p4d.24xlarge from the ``research`` share of the
``gpu-training`` job queue (examples/quotas.yaml). The training task waits, deferred and holding no worker
slot, until the quota allocator grants the capacity; if it is preempted (research borrows idle capacity
that its owners may take back), its SageMaker training job is stopped and resumed later from the same
checkpoint prefix, in the same Airflow try.

Replace the image, role and buckets with your own; the training script must save checkpoints under
``/opt/ml/checkpoints`` and load the newest one when it starts (examples/training/train_counter.py does).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from airflow.sdk import DAG, task

from airflow_quota.operators.training import QuotaTrainingOperator

ACCOUNT = "123456789012"
REGION = "us-east-1"

with DAG(
    dag_id="quota_team_training_pipeline",
    description="Nightly fine-tune of the research team, under its quota share",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    tags=["airflow-quota", "example"],
):

    @task
    def prepare_dataset(ds: str | None = None) -> str:
        """Write the day's training data; returns where it is."""
        return f"s3://research-datasets/nightly/{ds}/"

    dataset = prepare_dataset()

    train = QuotaTrainingOperator(
        task_id="fine_tune",
        job_queue="gpu-training",
        quota_share_name="research",
        scheduling_priority=100,
        # Give up after 5 preemptions (AWS Batch's preemptionRetriesBeforeTermination); None: never.
        preemption_retries_before_termination=5,
        # A SageMaker CreateTrainingJob request, templated. ResourceConfig is what the quota counts.
        # TrainingJobName and the quota tags are set by the operator for every attempt; the
        # CheckpointConfig.S3Uri given is used as is, by every attempt and try: one prefix per DAG run.
        training_job_config={
            "AlgorithmSpecification": {
                "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/llm-finetune:latest",
                "TrainingInputMode": "File",
            },
            "RoleArn": f"arn:aws:iam::{ACCOUNT}:role/research-training",
            "InputDataConfig": [
                {
                    "ChannelName": "train",
                    "DataSource": {
                        "S3DataSource": {
                            "S3DataType": "S3Prefix",
                            "S3Uri": "{{ ti.xcom_pull(task_ids='prepare_dataset') }}",
                        }
                    },
                }
            ],
            "OutputDataConfig": {"S3OutputPath": "s3://research-models/nightly"},
            "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 200},
            "StoppingCondition": {"MaxRuntimeInSeconds": 6 * 3600},
            "CheckpointConfig": {"S3Uri": "s3://research-models/checkpoints/{{ run_id }}/"},
            "HyperParameters": {"epochs": "3", "learning_rate": "2e-5", "dataset_date": "{{ ds }}"},
            "Tags": [{"Key": "team", "Value": "research"}],
        },
        aws_conn_id="aws_default",
        retries=1,  # for failures; preemptions do not use retries
    )

    @task
    def register_model(training: dict[str, Any]) -> None:
        """Register what the training job produced (its XCom: name, ARN, model artifacts, attempts)."""
        print(
            f"Registering {training['model_artifacts']} from {training['training_job_name']} "
            f"after {training['attempts']} attempt(s), {training['preemptions']} preemption(s)"
        )

    dataset >> train
    register_model(train.output)
