"""A SageMaker SDK ModelTrainer as the job description: built on the worker by a factory, then scheduled.

The SDK talks to AWS when a ModelTrainer is built (a session, a default bucket, a role check), so the
test points it at the moto server (``AWS_ENDPOINT_URL``), skips the IAM role check and opts out of the
SDK's telemetry: nothing leaves the machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.sagemaker.conftest import ROLE_ARN, MotoServer
from tests.sagemaker.task_runtime import TaskInstanceStandIn, TaskRun, monitor_event


@pytest.fixture
def offline_sdk(moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "sagemaker-config.yaml"
    config.write_text(
        "SchemaVersion: '1.0'\nSageMaker:\n  PythonSDK:\n    Modules:\n      TelemetryOptOut: true\n"
    )
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", str(config))
    monkeypatch.setenv("SAGEMAKER_VALIDATE_ROLE", "false")


def build_trainer() -> Any:
    """What a DAG author writes: the ModelTrainer, built when the task runs."""
    from sagemaker.core.training.configs import Compute, OutputDataConfig, StoppingCondition
    from sagemaker.train import ModelTrainer

    return ModelTrainer(
        training_image="123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
        role=ROLE_ARN,
        base_job_name="llm",
        compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=2),
        output_data_config=OutputDataConfig(s3_output_path="s3://team-a-models/llm"),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=3600),
        hyperparameters={"emulator.duration_s": "0.3"},
    )


def test_a_model_trainer_factory_is_compiled_on_the_worker(offline_sdk: None, unique: str) -> None:
    from airflow_quota.operators.training import QuotaTrainingOperator
    from airflow_quota.triggers.admission import QuotaAdmissionTrigger

    calls: list[str] = []

    def factory() -> Any:
        calls.append("built")
        return build_trainer()

    operator = QuotaTrainingOperator(
        task_id="train",
        job_queue="gpu-training",
        quota_share_name="team-a",
        training_job_config=factory,
        poll_interval=0.1,
        settle_seconds=0,
        follow_seconds=0,
    )
    assert calls == []  # nothing is built at DAG parse time
    run = TaskRun(operator, TaskInstanceStandIn(dag_id="team_a_pipeline", run_id=f"run-{unique}"))

    waiting = run.execute()
    assert isinstance(waiting.trigger, QuotaAdmissionTrigger)
    assert (waiting.trigger.capacity_unit, waiting.trigger.instance_count) == ("ml.p4d.24xlarge", 2)

    monitoring = run.resume_deferred(waiting, run.grant(attempt=1))
    name = monitoring.trigger.training_job_name  # type: ignore[attr-defined]
    assert name.endswith("-t1-a1")  # ours, not the SDK's timestamped name
    result = run.resume(monitoring, monitor_event(monitoring))
    assert result["training_job_name"] == name
    assert calls == ["built", "built"]  # once to validate before waiting, once to launch
