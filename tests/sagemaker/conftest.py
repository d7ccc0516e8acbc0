"""The SageMaker tests' set-up: one moto server (with our SageMaker emulator) per test session, and the
Airflow connection to it (the ``moto_server`` fixture, in tests/sagemaker/moto_fixture.py for the whole
suite), training requests, and an offline AWS environment.

The server runs in a subprocess (``python -m tests.sagemaker.moto_sagemaker``: no test here calls AWS
Batch; tests/aws_batch starts its own, with both emulators) on 127.0.0.1 and a free port;
``AIRFLOW_CONN_AWS_DEFAULT`` points the provider's hooks at it through ``endpoint_url``, and
``AWS_ENDPOINT_URL`` and dummy credentials make sure nothing in these tests can reach AWS. ``AIRFLOW_HOME``
is a temporary folder, set before any test module imports Airflow.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.sagemaker.moto_process import (
    FINISH_TAG,
    OFFLINE_AWS_ENVIRONMENT,
    cheaper_aws_clients,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/training"

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="quota-sagemaker-tests-airflow-home-"))
atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)
os.environ.update(OFFLINE_AWS_ENVIRONMENT)


@pytest.fixture(scope="session", autouse=True)
def _cheaper_aws_clients() -> Iterator[None]:
    """New AWS clients without reloading botocore's data or walking the stack (``cheaper_aws_clients``)."""
    with cheaper_aws_clients():
        yield


def training_request(
    *,
    duration_s: float = 1.0,
    outcome: str = "Completed",
    failure_reason: str | None = None,
    instance_type: str = "ml.p4d.24xlarge",
    instance_count: int = 2,
    max_runtime_s: int = 3600,
    stop_delay_s: float = 0.3,
    **extra: Any,
) -> dict[str, Any]:
    """A CreateTrainingJob request whose emulated job runs ``duration_s`` and ends with ``outcome``; once
    asked to stop, it is ``Stopping`` for ``stop_delay_s``."""
    hyper_parameters = {
        "epochs": "3",
        "emulator.duration_s": str(duration_s),
        "emulator.outcome": outcome,
        "emulator.stop_delay_s": str(stop_delay_s),
    }
    if failure_reason is not None:
        hyper_parameters["emulator.failure_reason"] = failure_reason
    return {
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
            "TrainingInputMode": "File",
        },
        "RoleArn": ROLE_ARN,
        "OutputDataConfig": {"S3OutputPath": "s3://team-a-models/llm"},
        "ResourceConfig": {
            "InstanceType": instance_type,
            "InstanceCount": instance_count,
            "VolumeSizeInGB": 100,
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": max_runtime_s},
        "HyperParameters": hyper_parameters,
        **extra,
    }


def finish_training(client: Any, name: str) -> None:
    """End what the emulated training job ``name`` does now: its training, as its duration would have
    (``Completed``, or its ``emulator.outcome``), or its ``Stopping``; for a test that has seen what it
    checks while the job ran. ``client`` is a boto3 SageMaker client of the emulator."""
    arn = client.describe_training_job(TrainingJobName=name)["TrainingJobArn"]
    client.add_tags(ResourceArn=arn, Tags=[{"Key": FINISH_TAG, "Value": "now"}])


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps one test's names apart from every other's (the server is shared)."""
    return uuid.uuid4().hex[:8]
